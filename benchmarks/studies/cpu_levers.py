"""Levers for the speed of the CPU default besides int8: PyTorch's attention implementations, ``torch.compile``
and OpenVINO's bfloat16, against the default (torch, bfloat16 autocast) and the int8 graph, timed on the same
encoded rows in one process, each with its MAP on all of WikiQA-test.

    python benchmarks/studies/cpu_levers.py [--pairs N] [--rounds N] [--threads N]

The model is the one of ``benchmarks/cpu_inference.py`` (``TransformerRanker(random_state=0)`` fitted on the
first 300 training questions, shared through the fit cache). Every row scores the same encoded rows (tokenisation
and the lexical prior done once, outside the timing) through as2rank's predict loop
(:func:`as2rank.neural.predict.predict_logits`), batched by the token budget its path uses, on the first
``--pairs`` WikiQA-test pairs (about 40 tokens each) and on the longer pairs of :data:`LONG_PAIRS`, where the
attention's share of the work is larger (timed only):

- **auto**: the default: torch, bfloat16 autocast on CPUs that have bfloat16 instructions, PyTorch's
  scaled-dot-product attention (transformers' ``"sdpa"``);
- **eager attention**: the same module with transformers' ``"eager"`` attention (matrix products and softmax);
- **torch.compile**: the default module compiled by inductor with dynamic shapes (one graph for every batch
  shape) and inductor's ``freezing`` on (the weights folded into the graph as constants, so that they are cast
  and laid out for the CPU's matrix kernels once: inductor's setting for inference on CPUs); its first pass
  over the timed rows compiles, and its setup is that pass less the median timed one;
- **OpenVINO bfloat16**: the float32 module exported to ONNX (as the int8 copy's float32 graph is) and compiled by
  OpenVINO's CPU plugin with ``INFERENCE_PRECISION_HINT="bf16"``, where ``openvino`` is installed (it is not a
  dependency of as2rank: ``pip install openvino`` to measure it);
- **int8**: ``precision="int8"``, the static int8 graph on ONNX Runtime;
- **fp32**: the float32 module, the reference of the MAP column.

Writes ``benchmarks/studies/results/cpu_levers.json`` and ``docs/studies/cpu_levers.md`` (``-<tag>`` with
``AS2RANK_BENCH_TAG``); ``python benchmarks/render.py cpu_levers`` renders the page again.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness

import numpy as np
from harness import RESULTS, conclude, fitted, log, run_header, tagged, wikiqa_splits
from harness import first_questions as fit_subset
from harness import version as _version
from harness.cpu import scored

#: Training questions of the fit (those of ``cpu_inference.py``).
FIT_QUESTIONS = 300
#: The row every speed is divided by, and the one every MAP is compared with.
DEFAULT, REFERENCE = "auto", "fp32"
#: How much MAP the default may lose against fp32 (the issue's bound).
MAP_BOUND = 0.2
#: The speed the default should reach, as a multiple of the peer's ONNX int8 (the issue's target).
TARGET = 1.5
#: Longer pairs, timed beside the WikiQA pairs: ``{name: (rows, candidates joined into one, max_length)}``, each
#: WikiQA-test candidate followed by the ones after it, truncated at ``max_length`` (the default's 128, and 512).
#: The rows hold about as many tokens as the 2,000 WikiQA pairs.
LONG_PAIRS = {"128 tokens": (600, 6, 128), "384 tokens": (200, 20, 384)}
#: ``cpu_inference.py``'s rows for the default and for int8 (their pairs/s are given there over the peer's ONNX int8).
PAGE_ROWS = {"auto": "TransformerRanker precision='auto'", "int8": "TransformerRanker precision='int8'"}


class _OpenVino:
    """An OpenVINO compiled model called like the torch module: a batch dict of CPU tensors in, the logits
    tensor out."""

    def __init__(self, module, example: dict, threads: int):
        import openvino as ov

        from harness.library import export_graph, padded, quiet

        with tempfile.TemporaryDirectory(prefix="as2rank-openvino-") as tmp, quiet():
            path = Path(tmp) / "model.onnx"
            export_graph(module, padded(example, 1), path)
            model = ov.Core().read_model(str(path))
        self.names = tuple(example)
        self.request = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "bf16",
                                                              "INFERENCE_NUM_THREADS": threads,
                                                              "PERFORMANCE_HINT": "LATENCY"}).create_infer_request()

    def __call__(self, batch: dict):
        import torch

        out = self.request.infer({name: batch[name].numpy() for name in self.names})
        return torch.from_numpy(np.array(out[0]))


def rows(est, encoded, threads: int, openvino: bool) -> dict:
    """``{row: (module, autocast dtype, batch tokens, setup seconds)}``: what each row predicts with. Setup is
    the time to build the row's module from the fitted one (an export and a compilation); ``torch.compile``
    compiles on its first pass (None here, measured there)."""
    import torch

    from harness.library import batch_tensors

    cpu = torch.device("cpu")
    est.set_params(precision="auto")
    auto = est.predictor(cpu)
    default, dtype, tokens = auto.module, auto.dtype, auto.batch_tokens
    eager = copy.deepcopy(default)
    eager.encoder.set_attn_implementation("eager")
    out = {DEFAULT: (default, dtype, tokens, 0.0), "eager attention": (eager, dtype, tokens, 0.0),
           "torch.compile": (torch.compile(copy.deepcopy(default), dynamic=True), dtype, tokens, None)}
    if openvino:
        start = time.perf_counter()
        example = batch_tensors(encoded, np.arange(4))
        out["OpenVINO bfloat16"] = (_OpenVino(default, example, threads), torch.float32, tokens,
                                    time.perf_counter() - start)
    est.set_params(precision="int8")
    start = time.perf_counter()
    int8 = est.predictor(cpu, encoded)
    out["int8"] = (int8.module, torch.float32, int8.batch_tokens, time.perf_counter() - start)
    est.set_params(precision="fp32")
    out[REFERENCE] = (est.predictor(cpu).module, torch.float32, tokens, 0.0)
    return out


def implied(res: dict) -> dict | None:
    """From ``cpu_inference.json`` (another run, on the machine of this run's tag): the default's and int8's
    pairs/s over the peer's ONNX int8 there, and what each row of this run would give against the peer, taking
    the int8 row as the bridge between the runs; None without that page's results."""
    path = RESULTS / tagged("cpu_inference.json")
    if not path.exists():
        return None
    page_res = json.loads(path.read_text())
    page = {key: page_res["summary"][name]["vs_reference"] for key, name in PAGE_ROWS.items()}
    int8_here = res["rows"]["int8"]["speed_vs_default"]
    return {"page": page, "date": page_res["date"],
            "rows": {name: page["int8"] * r["speed_vs_default"] / int8_here for name, r in res["rows"].items()}}


def long_pairs(est, X, rows: int, join: int, max_length: int) -> dict:
    """The encoded first ``rows`` rows of ``X``, each candidate joined with the ``join - 1`` candidates after it
    in ``X``, truncated at ``max_length`` tokens."""
    candidates = X["candidate"].tolist()
    joined = X.head(rows).assign(candidate=[" ".join(candidates[i:i + join]) for i in range(rows)])
    default = est.max_length
    try:
        return est.set_params(max_length=max_length).encode(joined)
    finally:
        est.set_params(max_length=default)


def main(argv=None):
    import torch
    import torch._inductor.config

    from harness.library import compare, onnx_available, per_question, TransformerRanker

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=2000, help="WikiQA-test pairs timed (default 2000, as cpu_inference.py)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--threads", type=int, default=None, help="threads of torch, ONNX Runtime and OpenVINO (default: torch's)")
    args = parser.parse_args(argv)
    if not onnx_available():
        # Without it precision="int8" falls back to torch's kernels, which the int8 row and the bridge to
        # cpu_inference.md's ONNX Runtime row would misdescribe.
        raise SystemExit("cpu_levers.py needs ONNX Runtime for its int8 row: pip install as2rank[onnx]")
    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    # Inductor's freezing (its setting for CPU inference), read when the torch.compile row compiles.
    torch._inductor.config.freezing = True
    start = time.perf_counter()
    res = {**run_header("studies/cpu_levers.py", argv), "rounds": args.rounds, "fit_questions": FIT_QUESTIONS, "threads": threads,
           "openvino": _version("openvino"), "map_bound": MAP_BOUND, "target": TARGET}
    splits = wikiqa_splits()
    est = fitted(TransformerRanker(random_state=0), *fit_subset(*splits["train"], FIT_QUESTIONS))
    est.set_params(n_threads=threads)
    X_test, y_test = splits["test"]
    X = X_test.head(args.pairs)
    sets = {"short": est.encode(X), **{name: long_pairs(est, X_test, *spec) for name, spec in LONG_PAIRS.items()}}
    test_encoded = est.encode(X_test)
    built = rows(est, sets["short"], threads, openvino=res["openvino"] is not None)
    names = list(built)
    # A first pass of every row over the timed rows (torch.compile compiles in it) and over the longer ones,
    # then each row on all of WikiQA-test, untimed, for its MAP.
    first, per_q = {}, {}
    for name in names:
        t = time.perf_counter()
        scored(built[name], sets["short"])
        first[name] = time.perf_counter() - t
        for key in LONG_PAIRS:
            scored(built[name], sets[key])
        per_q[name] = per_question(y_test, scored(built[name], test_encoded), X_test)
        log(f"{name}: first pass {first[name]:.1f} s, MAP {100 * np.nanmean(per_q[name]):.2f} on all of WikiQA-test")
    runs = {key: {name: [] for name in names} for key in sets}
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            for key, encoded in sets.items():
                t = time.perf_counter()
                scored(built[name], encoded)
                runs[key][name].append(time.perf_counter() - t)
        log(f"[round {r + 1}/{args.rounds}] " + ", ".join(f"{n}: {runs['short'][n][-1]:.3f} s" for n in names))
    tests = compare(per_q, REFERENCE)
    res.update(pairs=len(X), test_pairs=len(X_test), questions=int(per_q[REFERENCE].notna().sum()),
               long_pairs={name: dict(zip(("rows", "join", "max_length"), spec)) for name, spec in LONG_PAIRS.items()},
               mean_tokens={key: float(np.mean(encoded["lengths"])) for key, encoded in sets.items()})

    def speeds(key: str, name: str) -> dict:
        seconds = np.asarray(runs[key][name])
        return {"seconds": runs[key][name], "pairs_per_s": len(sets[key]["lengths"]) / float(np.median(seconds)),
                "speed_vs_default": float(np.median(np.asarray(runs[key][DEFAULT]) / seconds))}

    res["rows"] = {
        name: {**speeds("short", name), "long": {key: speeds(key, name) for key in LONG_PAIRS},
               "setup_seconds": built[name][3] if built[name][3] is not None
               else first[name] - float(np.median(runs["short"][name])),
               "batch_tokens": built[name][2], "map": float(np.nanmean(per_q[name])),
               "map_change": float(100 * (np.nanmean(per_q[name]) - np.nanmean(per_q[REFERENCE]))),
               "p_vs_fp32": None if name == REFERENCE else tests[name]["p"]}
        for name in names
    }
    res["implied"] = implied(res)
    checks = []
    if res["implied"] is not None:
        within = {n: v for n, v in res["implied"]["rows"].items() if abs(res["rows"][n]["map_change"]) <= MAP_BOUND}
        best = max(within, key=within.get)
        checks.append({"check": f"a row within {MAP_BOUND} MAP of fp32 reaches {TARGET}× the peer's ONNX int8 "
                                "(implied through the int8 row of cpu_inference.md)",
                       "measured": f"best: {best}, {within[best]:.2f}×", "pass": bool(within[best] >= TARGET)})
    conclude(res, "cpu_levers", start, checks)


if __name__ == "__main__":
    main()
