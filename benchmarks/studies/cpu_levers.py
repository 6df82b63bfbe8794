"""Levers for the speed of the CPU default besides int8: PyTorch's attention implementations, ``torch.compile``
and OpenVINO's bfloat16, timed on the same encoded rows in one process, each with its MAP (``cpu_levers.toml``).

    python benchmarks/studies/cpu_levers.py [--pairs 2000] [--rounds 5] [--threads N]
"""

from __future__ import annotations

import copy
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness

import numpy as np
from harness import RESULTS, experiment, first_questions, fitted, log, tagged, version, wikiqa_splits
from harness.cpu import scored
from harness.experiment import Experiment
from harness.measure import interleaved

EXP = Experiment(__file__)
DEFAULT, REFERENCE, PAGE_ROWS = EXP.config["default"], EXP.config["reference"], EXP.config["page_rows"]


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


def checks(exp, res: dict) -> list:
    """The configuration's check, given the rows within ``map_bound`` MAP of fp32 (``within``: their implied speed
    over the peer's ONNX int8)."""
    speeds = (res["implied"] or {}).get("rows", {})
    return exp.checks(res, within={n: v for n, v in speeds.items()
                                   if abs(res["rows"][n]["map_change"]) <= res["map_bound"]})


def run(exp, args, res):
    import torch
    import torch._inductor.config

    from harness.library import compare, onnx_available, per_question, TransformerRanker

    if not onnx_available():
        # Without it precision="int8" falls back to torch's kernels, which the int8 row and the bridge to
        # cpu_inference.md's ONNX Runtime row would misdescribe.
        raise SystemExit("cpu_levers.py needs ONNX Runtime for its int8 row: pip install as2rank[onnx]")
    threads = torch.get_num_threads()
    # Inductor's freezing (its setting for CPU inference), read when the torch.compile row compiles.
    torch._inductor.config.freezing = True
    res.update(rounds=args.rounds, threads=threads, openvino=version("openvino"))
    splits = wikiqa_splits()
    est = fitted(TransformerRanker(random_state=0), *first_questions(*splits["train"], res["fit_questions"]))
    est.set_params(n_threads=threads)
    X_test, y_test = splits["test"]
    X = X_test.head(args.pairs)
    sets = {"short": est.encode(X),
            **{name: long_pairs(est, X_test, **spec) for name, spec in res["long_pairs"].items()}}
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
        for key in res["long_pairs"]:
            scored(built[name], sets[key])
        per_q[name] = per_question(y_test, scored(built[name], test_encoded), X_test)
        log(f"{name}: first pass {first[name]:.1f} s, MAP {100 * np.nanmean(per_q[name]):.2f} on all of WikiQA-test")
    runs = {key: {name: [] for name in names} for key in sets}

    def each_set(name):  # a round of row name: its seconds on each set of pairs
        def call():
            for key, encoded in sets.items():
                t = time.perf_counter()
                scored(built[name], encoded)
                runs[key][name].append(time.perf_counter() - t)
        return call

    interleaved({name: each_set(name) for name in names}, args.rounds)
    tests = compare(per_q, REFERENCE)
    res.update(pairs=len(X), test_pairs=len(X_test), questions=int(per_q[REFERENCE].notna().sum()),
               mean_tokens={key: float(np.mean(encoded["lengths"])) for key, encoded in sets.items()})

    def speeds(key: str, name: str) -> dict:
        seconds = np.asarray(runs[key][name])
        return {"seconds": runs[key][name], "pairs_per_s": len(sets[key]["lengths"]) / float(np.median(seconds)),
                "speed_vs_default": float(np.median(np.asarray(runs[key][DEFAULT]) / seconds))}

    res["rows"] = {
        name: {**speeds("short", name), "long": {key: speeds(key, name) for key in res["long_pairs"]},
               "setup_seconds": built[name][3] if built[name][3] is not None
               else first[name] - float(np.median(runs["short"][name])),
               "batch_tokens": built[name][2], "map": float(np.nanmean(per_q[name])),
               "map_change": float(100 * (np.nanmean(per_q[name]) - np.nanmean(per_q[REFERENCE]))),
               "p_vs_fp32": None if name == REFERENCE else tests[name]["p"]}
        for name in names
    }
    res["implied"] = implied(res)


if __name__ == "__main__":
    experiment.main(__file__, run, checks=checks)
