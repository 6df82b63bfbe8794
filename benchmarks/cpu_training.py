"""CPU training speed of the default ``TransformerRanker``, and which settings make its fit faster on this CPU
without losing MAP (``cpu_training.toml``).

    python benchmarks/cpu_training.py [--questions 60] [--rounds 3] [--threads N] [--map-rows ROW ...]
    python benchmarks/render.py cpu_training     # the page alone, from its saved results
"""

from __future__ import annotations

import filecmp
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

from harness import CACHE, experiment, first_questions, fitted, log, timed_subprocess, wikiqa_splits
from harness.experiment import Experiment
from harness.library import TransformerRanker, compare, devices, load_benchmark_data, per_question, resolve_model
from harness.measure import rotated

CONFIG = Experiment(__file__).config
DEFAULT = CONFIG["default"]


def rows() -> dict:
    """The rows with the other dtype named for this CPU: ``precision='bf16'`` where ``"auto"`` is float32
    (emulated where bfloat16 is not native), else ``precision='fp32'``."""
    native = devices.cpu_bf16_supported()
    out = {}
    for name, spec in CONFIG["rows"].items():
        if spec.get("precision") == "other":  # emulated bfloat16 is an order of magnitude slower: the first round only
            out["precision='fp32'" if native else "precision='bf16' (emulated: no native bfloat16 here)"] = (
                {"precision": "fp32"} if native else {"precision": "bf16", "once": True})
        else:
            out[name] = spec
    return out


def checkpoint(spec: dict) -> str | None:
    """The ``model`` of a row: None (the packaged MiniLM-L6) or a copy of it with the dropouts of
    ``spec["dropout"]`` set to 0 in its config."""
    if not spec.get("dropout"):
        return None
    source = Path(resolve_model("minilm-l6")[0])
    folder = CACHE / ("minilm-l6-" + "-".join(k.split("_")[0] for k in spec["dropout"]) + "-dropout-0")
    config = json.loads((source / "config.json").read_text())
    config.update({k: 0.0 for k in spec["dropout"]})
    # Copied again wherever the packaged checkpoint changed, so the copy never trains other weights.
    for file in (f for f in source.iterdir() if f.is_file() and f.name != "config.json"):
        if not (folder / file.name).exists() or not filecmp.cmp(file, folder / file.name, shallow=False):
            folder.mkdir(parents=True, exist_ok=True)
            shutil.copy2(file, folder / file.name)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return str(folder)


def estimator(spec: dict, threads: int | None, **params):
    """The row's ``TransformerRanker(random_state=0)`` with ``params``."""
    model = checkpoint(spec)
    row = {"precision": spec.get("precision") or "auto", "n_threads": spec.get("threads", threads),
           **({"model": model} if model else {})}
    return TransformerRanker(random_state=0, **row, **params)


def timed_fit(name: str, questions: int, threads: int | None) -> None:
    """One round of row ``name`` (in its subprocess): fit one epoch on the first ``questions`` training
    questions and print a JSON line with the seconds."""
    spec = rows()[name]
    if spec.get("precision") == "bf16" and not devices.cpu_bf16_supported():
        devices.cpu_bf16_supported = lambda: True  # the emulated kernels, as if the library chose bfloat16 here
    X, y = first_questions(*wikiqa_splits()["train"], questions)
    est = estimator(spec, threads, epochs=1, early_stopping=False, reuse_fit=False)
    start = time.perf_counter()
    est.fit(X, y)
    seconds = time.perf_counter() - start
    print(json.dumps({"row": name, "pairs": len(X), "seconds": seconds, "steps": est.history_.n_steps,
                      "loop_seconds": est.history_.seconds}), flush=True)


def summarise(runs: dict) -> dict:
    """Per row: median, min and max seconds, and the median same-round speed-up over the default."""
    ref = {r["round"]: r for r in runs[DEFAULT]}
    return {name: {"median": statistics.median(r["seconds"] for r in rs), "min": min(r["seconds"] for r in rs),
                   "max": max(r["seconds"] for r in rs), "rounds": len(rs),
                   "speedup": statistics.median(ref[r["round"]]["seconds"] / r["seconds"] for r in rs),
                   "loop_median": statistics.median(r["loop_seconds"] for r in rs),
                   "loop_speedup": statistics.median(ref[r["round"]]["loop_seconds"] / r["loop_seconds"] for r in rs),
                   "pairs": rs[0]["pairs"], "steps": rs[0]["steps"]}
            for name, rs in runs.items()}


def accuracy(names: list) -> dict:
    """Each row of ``names`` fitted at the defaults on WikiQA and the sample: test MAP, the paired test
    against the default, and the fit's record (time, when this run trained it)."""
    import numpy as np

    splits = wikiqa_splits()
    data = {f"WikiQA-test ({CONFIG['fit_questions']} training questions)":
            (*first_questions(*splits["train"], CONFIG["fit_questions"]), *splits["test"]),
            "SQuAD sample (its training split)": load_benchmark_data("sample")}
    table = rows()
    out = {}
    for data_name, (Xa, ya, Xt, yt) in data.items():
        per_q, fits = {}, {}
        for name in names:
            fit_log = []
            # torch's default threads, as cpu_inference.py fits its model: the default's fit is shared.
            est = fitted(estimator(table[name], None), Xa, ya, fit_log=fit_log)
            per_q[name], fits[name] = per_question(yt, est.predict(Xt), Xt), fit_log[0]
        tests = compare(per_q, DEFAULT)
        out[data_name] = {name: {"map": float(np.nanmean(ap)), "p_vs_default": None if name == DEFAULT else tests[name]["p"],
                                 "fit_seconds": fits[name].get("fit_seconds"), "fit_date": fits[name].get("date"),
                                 "pairs": len(Xa)}
                          for name, ap in per_q.items()}
        log(f"MAP on {data_name}: " + ", ".join(f"{n} {100 * v['map']:.2f}" for n, v in out[data_name].items()))
    return out


def checks(exp, res) -> list:
    """Whether some row trains ≥ 1.2× as fast as the default with MAP within 0.2 of it on every data set."""
    acc = res.get("accuracy", {})
    return exp.checks(res, acc=acc, gap=lambda name: max(abs(m[name]["map"] - m[DEFAULT]["map"]) for m in acc.values()))


def run(exp, args, res):
    if args.row:
        timed_fit(args.row, args.questions, args.threads)
        return False
    import torch

    table = rows()
    names = list(table)
    res.update(cpu_bf16=devices.cpu_bf16_supported(), threads=args.threads, torch_default_threads=torch.get_num_threads(),
               questions=args.questions, rounds=args.rounds, rows=table, runs={n: [] for n in names})
    for r in range(args.rounds):
        for name in rotated(names, r):
            if r and table[name].get("once"):
                continue
            cmd = [sys.executable, str(Path(__file__).resolve()), "--row", name, "--questions", str(args.questions)]
            run_ = timed_subprocess(name, cmd + (["--threads", str(args.threads)] if args.threads else []), args.threads)
            res["runs"][name].append({**run_, "round": r})
            log(f"[round {r + 1}/{args.rounds}] {name}: {run_['seconds']:.1f} s ({run_['pairs']} pairs, load {run_['load_after'][0]})")
    res["summary"] = summarise(res["runs"])
    map_rows = args.map_rows if args.map_rows is not None else [DEFAULT, "attention dropout 0"]
    if map_rows:
        res["accuracy"] = accuracy([DEFAULT, *[n for n in map_rows if n != DEFAULT]])


if __name__ == "__main__":
    experiment.main(__file__, run, checks=checks)
