"""What bounds the CPU default: the speed of its matrix products alone against the peer's ONNX int8, and how
closely int8 arithmetic of several kinds follows float32 scores.

    python benchmarks/studies/cpu_bounds.py [--pairs N] [--rounds N] [--threads N] [--peer-python PATH]

Two questions decide whether the default, ``precision="auto"`` (bfloat16 on CPUs with bfloat16 instructions),
can reach 1.5x the pairs/s of the peer's fastest CPU path (sentence-transformers' ``CrossEncoder`` on its int8
ONNX export) while staying within 0.2 MAP of float32:

- **Speed floor.** The model (``TransformerRanker(random_state=0)`` of ``benchmarks/cpu_inference.py``, from the
  same fit cache) tokenises and scores the first ``--pairs`` WikiQA-test pairs through as2rank's predict loop.
  Beside it, *tokenisation and matrix products alone* tokenises them and replays just the model's linear
  layers' products on the same batches: the shapes one pass recorded, on random inputs in the default's compute
  dtype, weights cast once. Everything else the model computes (attention, normalisation, activations, casts) is
  left out, so no path that tokenises as as2rank does and keeps these products on torch's kernels in that dtype
  can beat it. The peer's ONNX int8 runs on the same pairs in each round, in its own virtual
  environment (the CPU page's round, ``harness/cpu.py``), and ``precision="int8"`` runs beside them.
- **Int8 fidelity.** The int8 copy's arithmetic (:mod:`as2rank.neural.onnx.runtime`) emulated in float32, and
  variants of it, on all of WikiQA-test and the SQuAD sample: the shipped static int8 (inputs on a grid
  fixed at fit, SmoothQuant smoothing), inputs rounded per token instead, weights rounded by GPTQ (Frantar et
  al., 2023, https://arxiv.org/abs/2210.17323) instead of to the nearest step, and, as bounds that no int8
  kernel computes, int8 weights with float inputs (with and without smoothing, nearest or GPTQ). Each row: the
  mean change of a logit from float32 and the MAP change.

Writes ``benchmarks/studies/results/cpu_bounds.json`` and ``docs/studies/cpu_bounds.md`` (``-<tag>`` with
``AS2RANK_BENCH_TAG``); ``python benchmarks/render.py cpu_bounds`` renders the page again.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness

import numpy as np
from harness import ROOT, conclude, fitted, log, run_header, wikiqa_splits
from harness import first_questions as fit_subset
from harness.cpu import reference, run_row, scored

REFERENCE = reference()

#: Training questions of the WikiQA fit (those of ``cpu_inference.py``).
FIT_QUESTIONS = 300
#: The issue's targets: the default's pairs/s over the peer's ONNX int8, and the MAP the default may lose.
TARGET, MAP_BOUND = 1.5, 0.2
#: Rows of the speed table, timed in this process (the peer's runs in its own).
FLOOR = "tokenisation and matrix products alone"
SPEED_ROWS = ("auto", FLOOR, "int8")
#: Int8 arithmetic emulated in float32: row -> (weights, inputs, SmoothQuant α or None). Weights: "nearest"
#: (each step rounded to the nearest, as shipped), "gptq" or "float"; inputs: "static" (as shipped),
#: "token" (each token's own uint8 grid) or "float".
EMULATED = {
    "static inputs, nearest weights (as shipped)": ("nearest", "static", 0.8),
    "static inputs, float weights": ("float", "static", 0.8),
    "per-token inputs, nearest weights": ("nearest", "token", 0.8),
    "static inputs, GPTQ weights": ("gptq", "static", 0.8),
    "per-token inputs, GPTQ weights": ("gptq", "token", 0.8),
    "float inputs, nearest weights": ("nearest", "float", 0.8),
    "float inputs, nearest weights, no smoothing": ("nearest", "float", None),
    "float inputs, GPTQ weights, no smoothing": ("gptq", "float", None),
}
#: GPTQ's damping (a share of the mean diagonal of the inputs' second moments) and its column block.
GPTQ_DAMPING, GPTQ_BLOCK = 0.01, 128


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

    handles = [layer.register_forward_pre_hook(hook) for layer in module.modules() if isinstance(layer, torch.nn.Linear)]
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
    names = [REFERENCE, *SPEED_ROWS]
    seconds = {name: [] for name in names}
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            if name == REFERENCE:
                seconds[name].append(len(X) / run_row(name, args, work, work, None)["pairs_per_s"])
                continue
            seconds[name].append(_seconds(timed[name]))
        log(f"[round {r + 1}/{args.rounds}] " + ", ".join(f"{n}: {seconds[n][-1]:.3f} s" for n in names))
    peer = np.asarray(seconds[REFERENCE])
    macs = sum(rows * w.shape[0] * w.shape[1] for rows, w in calls)
    return {"dtype": str(dtype).removeprefix("torch."), "batch_tokens": tokens, "products": len(calls),
            "multiply_adds": macs, **{f"{part}_seconds": float(np.median(t)) for part, t in split.items()},
            "padded_tokens": int(sum(len(b) * max(encoded["lengths"][b]) for b in _batches(encoded, tokens))),
            "rows": {name: {"seconds": s, "median_seconds": float(np.median(s)), "pairs_per_s": len(X) / float(np.median(s)),
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
    h += GPTQ_DAMPING * torch.diag(h).mean() * torch.eye(len(h), dtype=h.dtype)
    inverse = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(h)), upper=True)
    scale = w.abs().amax(dim=1) / 127
    scale[scale == 0] = 1.0
    codes = torch.zeros_like(w)
    for start in range(0, w.shape[1], GPTQ_BLOCK):
        stop = min(start + GPTQ_BLOCK, w.shape[1])
        block, errors, hi = w[:, start:stop].clone(), torch.zeros_like(w[:, start:stop]), inverse[start:stop, start:stop]
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

    from harness.library import calibration_rows, compare, load_benchmark_data, per_question, TransformerRanker

    cpu = torch.device("cpu")
    splits = wikiqa_splits()
    data = {"WikiQA-test": (*fit_subset(*splits["train"], fit_questions), *splits["test"]),
            "SQuAD sample": load_benchmark_data("sample")}
    out = {}
    for name, (Xa, ya, Xt, yt) in data.items():
        est = fitted(TransformerRanker(random_state=0), Xa, ya)
        test = est.encode(Xt)
        logits, seconds = {}, {}
        for row, precision in (("fp32", "fp32"), ("auto", "auto"), ("int8 on ONNX Runtime", "int8")):
            est.set_params(precision=precision)
            p = est.predictor(cpu, test if precision == "int8" else None)
            logits[row] = scored((p.module, p.dtype if precision == "auto" else torch.float32, p.batch_tokens, 0.0), test)
        reference = est.set_params(precision="fp32").predictor(cpu).module
        rows = calibration_rows(np.arange(len(Xa)))
        moments = second_moments(reference, est.encode(Xa.iloc[rows]), np.arange(len(rows)))
        for row, (weights, inputs, alpha) in EMULATED.items():
            start = time.perf_counter()
            copied = emulated(reference, est.activation_ranges_, moments, weights, inputs, alpha)
            logits[row] = scored((copied, torch.float32, 4096, 0.0), test)
            seconds[row] = time.perf_counter() - start
            log(f"[fidelity] {name}, {row}: mean change {np.abs(logits[row] - logits['fp32']).mean():.4f} ({seconds[row]:.0f} s)")
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
def checks(res: dict) -> list:
    """The floor against the target, and whether int8 arithmetic keeps MAP within the bound on every data set:
    the forms int8 kernels compute (int8 weights and int8 inputs), and int8 weights with float inputs (a bound)."""
    rows = res["speed"]["rows"]
    floor = rows[FLOOR]["vs_peer"]
    rest = float(np.median(np.asarray(rows["auto"]["seconds"]) / np.asarray(rows[FLOOR]["seconds"])))

    def worst(row):
        return max(abs(d["rows"][row]["map_change"]) for d in res["fidelity"].values())

    kernel = [row for row, (weights, inputs, _) in EMULATED.items() if "float" not in (weights, inputs)]
    best_kernel = min(kernel + ["int8 on ONNX Runtime"], key=worst)
    best_any = min([row for row, (weights, inputs, _) in EMULATED.items() if inputs == "float"], key=worst)
    return [
        {"check": f"tokenisation and the default's matrix products alone ({res['speed']['dtype']}) leave room for "
                  f"{TARGET}× the peer's ONNX int8",
         "measured": f"{floor:.2f}×: at {TARGET}× the rest of the default could take {100 * (floor / TARGET - 1):.0f} % "
                     f"of their time (it takes {100 * (rest - 1):.0f} %)", "pass": bool(floor >= TARGET)},
        {"check": f"an int8 arithmetic that int8 kernels compute keeps MAP within {MAP_BOUND} of fp32 on every data set",
         "measured": f"best: {best_kernel}, largest gap {worst(best_kernel):.2f}", "pass": bool(worst(best_kernel) <= MAP_BOUND)},
        {"check": f"int8 weights with float inputs (a bound: no int8 kernel computes them) keep MAP within {MAP_BOUND} "
                  "of fp32 on every data set",
         "measured": f"best: {best_any}, largest gap {worst(best_any):.2f}", "pass": bool(worst(best_any) <= MAP_BOUND)},
    ]


def main(argv=None):
    import torch

    from harness.library import onnx_available, TransformerRanker

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=2000, help="WikiQA-test pairs timed (default 2000, as cpu_inference.py)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--threads", type=int, default=None, help="threads of torch and ONNX Runtime (default: torch's)")
    parser.add_argument("--peer-python", default=str(ROOT / ".venv-peer" / "bin" / "python"),
                        help="the peer's virtual environment (see cpu_inference.py)")
    args = parser.parse_args(argv)
    if not onnx_available():
        raise SystemExit("cpu_bounds.py needs ONNX Runtime for its int8 rows: pip install as2rank[onnx]")
    if not Path(args.peer_python).exists():
        raise SystemExit(f"no peer environment at {args.peer_python}: see cpu_inference.py's docstring")
    if args.threads:
        torch.set_num_threads(args.threads)
    start = time.perf_counter()
    res = {**run_header("studies/cpu_bounds.py", argv), "rounds": args.rounds, "fit_questions": FIT_QUESTIONS,
           "threads": torch.get_num_threads(), "target": TARGET, "map_bound": MAP_BOUND, "emulated": EMULATED,
           "gptq": {"damping": GPTQ_DAMPING, "block": GPTQ_BLOCK}}
    splits = wikiqa_splits()
    est = fitted(TransformerRanker(random_state=0), *fit_subset(*splits["train"], FIT_QUESTIONS))
    est.set_params(n_threads=res["threads"])
    X = splits["test"][0].head(args.pairs)
    with tempfile.TemporaryDirectory(prefix="as2rank-cpu-bounds-") as tmp:
        res["speed"] = speed(args, est, X, Path(tmp))
    res["pairs"] = len(X)
    res["fidelity"] = fidelity(FIT_QUESTIONS)
    gaps = [abs(d["rows"][row]["map_change"]) for d in res["fidelity"].values()
            for row, (_, inputs, _) in EMULATED.items() if inputs == "float"]
    res["float_inputs_gaps"] = [min(gaps), max(gaps)]
    conclude(res, "cpu_bounds", start, checks(res))


if __name__ == "__main__":
    main()
