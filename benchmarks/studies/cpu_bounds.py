"""What bounds the CPU default: the speed of its matrix products alone against the peer's ONNX int8, and how
closely int8 arithmetic of several kinds follows float32 scores (``cpu_bounds.toml``).

    python benchmarks/studies/cpu_bounds.py [--pairs 2000] [--rounds 5] [--threads N] [--peer-python PATH]
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness

import numpy as np
from harness import ROOT, experiment, first_questions, fitted, log, wikiqa_splits
from harness.cpu import reference, run_row, scored
from harness.experiment import Experiment
from harness.measure import interleaved, medians

EXP = Experiment(__file__)
RECORD, FLOOR, REFERENCE = EXP.config["record"], EXP.config["floor"], reference()
#: Int8 arithmetic emulated in float32: row -> (weights, inputs, SmoothQuant α or None); those int8 kernels compute
#: (int8 weights and inputs), and the bounds (int8 weights, float inputs).
EMULATED = RECORD["emulated"]
KERNEL = [row for row, (weights, inputs, _) in EMULATED.items() if "float" not in (weights, inputs)]
BOUND = [row for row, (_, inputs, _) in EMULATED.items() if inputs == "float"]


# ------------------------------------------------------------------------------------------ speed floor
def product_shapes(module, encoded, tokens: int, dtype) -> list:
    """``[(rows, weight), ...]``: every linear layer's product in one pass of ``module`` over ``encoded``
    batched by ``tokens`` (its input flattened to ``rows`` × in_features), with its weight cast to ``dtype``."""
    import torch

    cast, calls = {}, []

    def hook(layer, inputs):
        if layer not in cast:
            cast[layer] = layer.weight.detach().to(dtype)
        calls.append((inputs[0].numel() // inputs[0].shape[-1], cast[layer]))

    handles = [layer.register_forward_pre_hook(hook) for layer in module.modules()
               if isinstance(layer, torch.nn.Linear)]
    try:
        scored((module, torch.float32, tokens, 0.0), encoded)
    finally:
        for handle in handles:
            handle.remove()
    return calls


def replay(calls: list, inputs: dict) -> None:
    """Run each recorded product on random inputs of its shape."""
    import torch

    with torch.inference_mode():
        for rows, weight in calls:
            torch.nn.functional.linear(inputs[weight.shape[1]][:rows], weight)


def speed(args, est, X, work: Path) -> dict:
    """Interleaved rounds of the peer's ONNX int8 (a subprocess), the default, the floor (tokenisation and the
    default's matrix products alone) and int8, on the same pairs; per row its seconds per round, and the
    multiply-adds of the products."""
    import torch

    cpu = torch.device("cpu")
    encoded = est.encode(X)
    est.set_params(precision="auto")
    auto = est.predictor(cpu)
    default, dtype, tokens = auto.module, auto.dtype, auto.batch_tokens
    calls = product_shapes(default, encoded, tokens, dtype)
    widest = max(rows for rows, _ in calls)
    inputs = {k: torch.randn(widest, k).to(dtype) for k in {w.shape[1] for _, w in calls}}
    est.set_params(precision="int8")
    int8 = est.predictor(cpu, encoded)
    # Every as2rank row tokenises the pairs first, as the peer's timed predict does; the floor's two parts are
    # timed apart too, for the page's rate of multiply-adds.
    parts = {"tokenisation": lambda: est.encode(X), "products": lambda: replay(calls, inputs)}
    split = {part: [] for part in parts}
    timed = {"auto": lambda: scored((default, dtype, tokens, 0.0), est.encode(X)),
             FLOOR: lambda: [split[part].append(_seconds(run)) for part, run in parts.items()],
             "int8": lambda: scored((int8.module, torch.float32, int8.batch_tokens, 0.0), est.encode(X))}
    for run in timed.values():  # warm-up (int8's session, oneDNN's kernels)
        run()
    for times in split.values():
        times.clear()
    (work / "pairs.json").write_text(json.dumps(X[["qid", "question", "candidate"]].to_dict("records")))
    peer = []  # the peer's seconds: those of its own timed predict, not its process's
    timed = {REFERENCE: lambda: peer.append(len(X) / run_row(REFERENCE, args, work, work, None)["pairs_per_s"]),
             **timed}
    seconds = {**interleaved(timed, args.rounds), REFERENCE: peer}
    peer, median = np.asarray(peer), medians(seconds)
    macs = sum(rows * w.shape[0] * w.shape[1] for rows, w in calls)
    return {"dtype": str(dtype).removeprefix("torch."), "batch_tokens": tokens, "products": len(calls),
            "multiply_adds": macs, **{f"{part}_seconds": float(np.median(t)) for part, t in split.items()},
            "padded_tokens": int(sum(len(b) * max(encoded["lengths"][b]) for b in _batches(encoded, tokens))),
            "rows": {name: {"seconds": s, "median_seconds": median[name], "pairs_per_s": len(X) / median[name],
                            "vs_peer": float(np.median(peer / np.asarray(s)))} for name, s in seconds.items()}}


def _seconds(run) -> float:
    """Wall seconds of one call of ``run``."""
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def _batches(encoded, tokens: int) -> list:
    """The default's batches (row indices) of ``encoded``."""
    from harness.library import token_budget_batches

    return token_budget_batches(np.ones(len(encoded["lengths"]), dtype=np.int64), encoded["lengths"], tokens)


# -------------------------------------------------------------------------------------- int8 fidelity
def second_moments(module, encoded, rows) -> dict:
    """``{linear layer name: X^T X}`` of each linear layer's input (float64) over the real tokens of ``rows``."""
    import torch

    from harness.library import batch_tensors

    moments, real = {}, {}

    def record(name):
        def hook(layer, inputs):
            x = inputs[0].detach().float()
            x = (x[real["mask"]] if x.dim() == 3 else x).reshape(-1, x.shape[-1]).double()
            moments[name] = moments.get(name, 0) + x.T @ x

        return hook

    handles = [layer.register_forward_pre_hook(record(name)) for name, layer in module.named_modules()
               if isinstance(layer, torch.nn.Linear)]
    try:
        with torch.inference_mode():
            for part in _batches({"lengths": encoded["lengths"][rows]}, 4096):
                batch = batch_tensors(encoded, rows[part])
                real["mask"] = batch["attention_mask"].bool()
                module(batch)
    finally:
        for handle in handles:
            handle.remove()
    return moments


def gptq(weight, moments):
    """GPTQ's int8 codes (symmetric, one scale per output row, as shipped) of ``weight`` (out, in), float64:
    input columns rounded in order, each rounding error spread over the columns not yet rounded in proportion
    to the inputs' inverse second moments ``moments`` (in, in). Returns (codes, scales)."""
    import torch

    w, h = weight.clone(), moments.clone()
    dead = torch.diag(h) == 0
    h[dead, dead], w[:, dead] = 1.0, 0.0
    h += RECORD["gptq"]["damping"] * torch.diag(h).mean() * torch.eye(len(h), dtype=h.dtype)
    inverse = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(h)), upper=True)
    scale = w.abs().amax(dim=1) / 127
    scale[scale == 0] = 1.0
    codes = torch.zeros_like(w)
    for start in range(0, w.shape[1], RECORD["gptq"]["block"]):
        stop = min(start + RECORD["gptq"]["block"], w.shape[1])
        block, errors = w[:, start:stop].clone(), torch.zeros_like(w[:, start:stop])
        hi = inverse[start:stop, start:stop]
        for i in range(stop - start):
            codes[:, start + i] = torch.clamp(torch.round(block[:, i] / scale), -127, 127)
            errors[:, i] = (block[:, i] - codes[:, start + i] * scale) / hi[i, i]
            block[:, i:] -= errors[:, i, None] * hi[i, i:]
        w[:, stop:] -= errors @ inverse[start:stop, stop:]
    return codes, scale


def _inputs(mod, x, kind: str):
    """The smoothed input of an int8 product as its kind of rounding leaves it."""
    import torch

    x = mod._smoothed(x)
    if kind == "float":
        return x
    if kind == "static":
        codes = torch.clamp(torch.round(x / mod.scale) + mod.zero.float(), 0, 255)
        return (codes - mod.zero.float()) * mod.scale
    low, high = x.amin(-1, keepdim=True).clamp(max=0), x.amax(-1, keepdim=True).clamp(min=0)
    step = torch.where(high > low, (high - low) / 255, torch.ones_like(high))
    zero = torch.round(-low / step)
    return (torch.clamp(torch.round(x / step) + zero, 0, 255) - zero) * step


def emulated(module, ranges: dict, moments: dict, weights: str, inputs: str, alpha):
    """The int8 copy of ``module`` (float32, eager) with ``weights`` and ``inputs`` rounded as named, smoothed
    at ``alpha``."""
    import torch

    from harness.library import onnx_runtime

    default = onnx_runtime.SMOOTHING
    onnx_runtime.SMOOTHING = alpha
    try:
        copied = onnx_runtime.export_copy(module, ranges)
    finally:
        onnx_runtime.SMOOTHING = default
    for name, mod in copied.named_modules():
        if not isinstance(mod, onnx_runtime.Int8Input):
            continue
        fused = isinstance(mod, onnx_runtime.FusedSelfAttention)
        source = module.get_submodule(name)
        w = (torch.cat([source.query.weight, source.key.weight, source.value.weight]) if fused else source.weight)
        smoothing = 1 / mod.inverse.double() if mod.inverse is not None else torch.ones(w.shape[1], dtype=torch.float64)
        w = w.detach().double() * smoothing  # the smoothed weights (out, in)
        if weights == "float":
            product = w.T.float()
        else:
            if weights == "gptq":
                h = moments[f"{name}.query" if fused else name] / smoothing[:, None] / smoothing[None, :]
                codes, scale = gptq(w, h)
            else:
                codes, scale = mod.weight.T.double(), mod.weight_scale.double()
            product = (codes * scale[:, None]).T.float()
        mod._product = types.MethodType(lambda self, x, p=product: _inputs(self, x, inputs) @ p + self.bias, mod)
    return copied


def fidelity(fit_questions: int) -> dict:
    """Per data set (WikiQA-test with the timed model, the SQuAD sample with a model fitted on its training
    split): each row's mean absolute change of a logit from fp32, its MAP and the paired test against fp32."""
    import torch

    from harness.library import TransformerRanker, calibration_rows, compare, load_benchmark_data, per_question

    cpu = torch.device("cpu")
    splits = wikiqa_splits()
    data = {"WikiQA-test": (*first_questions(*splits["train"], fit_questions), *splits["test"]),
            "SQuAD sample": load_benchmark_data("sample")}
    out = {}
    for name, (Xa, ya, Xt, yt) in data.items():
        est = fitted(TransformerRanker(random_state=0), Xa, ya)
        test = est.encode(Xt)
        logits, seconds = {}, {}
        for row, precision in (("fp32", "fp32"), ("auto", "auto"), ("int8 on ONNX Runtime", "int8")):
            est.set_params(precision=precision)
            p = est.predictor(cpu, test if precision == "int8" else None)
            dtype = p.dtype if precision == "auto" else torch.float32
            logits[row] = scored((p.module, dtype, p.batch_tokens, 0.0), test)
        reference = est.set_params(precision="fp32").predictor(cpu).module
        rows = calibration_rows(np.arange(len(Xa)))
        moments = second_moments(reference, est.encode(Xa.iloc[rows]), np.arange(len(rows)))
        for row, (weights, inputs, alpha) in EMULATED.items():
            start = time.perf_counter()
            copied = emulated(reference, est.activation_ranges_, moments, weights, inputs, alpha)
            logits[row] = scored((copied, torch.float32, 4096, 0.0), test)
            seconds[row] = time.perf_counter() - start
            log(f"[fidelity] {name}, {row}: mean change {np.abs(logits[row] - logits['fp32']).mean():.4f} "
                f"({seconds[row]:.0f} s)")
        per_q = {row: per_question(yt, s, Xt) for row, s in logits.items()}
        tests = compare(per_q, "fp32")
        out[name] = {"questions": int(per_q["fp32"].notna().sum()), "pairs": len(Xt), "rows": {
            row: {"map": float(np.nanmean(ap)), "map_change": float(100 * (np.nanmean(ap) - np.nanmean(per_q["fp32"]))),
                  "mean_change": float(np.abs(logits[row] - logits["fp32"]).mean()),
                  "largest_change": float(np.abs(logits[row] - logits["fp32"]).max()),
                  "p_vs_fp32": None if row == "fp32" else tests[row]["p"]}
            for row, ap in per_q.items()}}
    return out


# ------------------------------------------------------------------------------------------------- run
def checks(exp, res: dict) -> list:
    """The configuration's checks, given ``worst`` (a row's largest MAP change over the data sets), ``rest`` (the
    default's seconds over the floor's, same round, median) and the rows of ``kernel`` and ``bound``."""
    rows = res["speed"]["rows"]

    def worst(row):
        return max(abs(d["rows"][row]["map_change"]) for d in res["fidelity"].values())

    rest = float(np.median(np.asarray(rows["auto"]["seconds"]) / np.asarray(rows[FLOOR]["seconds"])))
    return exp.checks(res, worst=worst, rest=rest, kernel=KERNEL + ["int8 on ONNX Runtime"], bound=BOUND)


def run(exp, args, res):
    import torch

    from harness.library import onnx_available, TransformerRanker

    if not onnx_available():
        raise SystemExit("cpu_bounds.py needs ONNX Runtime for its int8 rows: pip install as2rank[onnx]")
    args.peer_python = str(ROOT / args.peer_python)
    if not Path(args.peer_python).exists():
        raise SystemExit(f"no peer environment at {args.peer_python}: see cpu_inference.toml")
    res.update(rounds=args.rounds, threads=torch.get_num_threads())
    splits = wikiqa_splits()
    est = fitted(TransformerRanker(random_state=0), *first_questions(*splits["train"], RECORD["fit_questions"]))
    est.set_params(n_threads=res["threads"])
    X = splits["test"][0].head(args.pairs)
    with tempfile.TemporaryDirectory(prefix="as2rank-cpu-bounds-") as tmp:
        res["speed"] = speed(args, est, X, Path(tmp))
    res["pairs"] = len(X)
    res["fidelity"] = fidelity(RECORD["fit_questions"])
    gaps = [abs(d["rows"][row]["map_change"]) for d in res["fidelity"].values() for row in BOUND]
    res["float_inputs_gaps"] = [min(gaps), max(gaps)]


if __name__ == "__main__":
    experiment.main(__file__, run, checks=checks)
