"""CPU training speed of the default ``TransformerRanker``, and which settings make its fit faster on this CPU
without losing MAP.

    python benchmarks/cpu_training.py [--questions 60] [--rounds 3] [--threads N] [--map-rows ROW ...]
    python benchmarks/render.py cpu_training     # the page alone, from its saved results

**Rows.** Variants of ``TransformerRanker(random_state=0)``'s fit (:data:`ROWS`): the default
(``precision="auto"``: bfloat16 where the CPU computes it natively, else float32); the other compute dtype (on a
CPU without native bfloat16 its emulation, which the library never picks there: the row tells the library the
CPU has it, and, an order of magnitude slower, is timed in the first round only); the packaged checkpoint with its attention dropout off (transformers' SDPA attention then runs
PyTorch's fused CPU kernel in training too, instead of the unfused path that draws a dropout mask over every
attention weight), or with every dropout of the encoder off; and one intra-op thread instead of torch's default.
The dropout rows train from a copy of the packaged checkpoint whose ``config.json`` says so
(``benchmarks/cache/minilm-l6-<row>/``).

**Timing.** Every round fits every row once, each in a fresh subprocess, on the first ``--questions``
questions of ``_common.wikiqa_splits()["train"]`` for one epoch without early stopping (the same steps for
every row), and records the fit's seconds (the whole ``fit``: the lexical prior, the segment similarity's
start, the training loop and the int8 calibration); the order of the rows rotates by one each round.
``--threads`` sets ``OMP_NUM_THREADS`` and ``n_threads`` of every row but the one-thread row. Reported per row:
the median seconds, the min-max, and the median over the rounds of the default's seconds over the row's in the
same round (the speed-up); the same for the training loop alone (``history_.seconds``).

**MAP** (``--map-rows``, default: the default and ``"attention dropout 0"``): each row's fit at the library's
defaults otherwise (4 epochs, early stopping where it applies) on WikiQA (the first 300 training questions,
as ``cpu_inference.py``; all of WikiQA-test) and on the bundled sample (its training split; its test split),
through the fit cache of ``_common.fitted``; the paired randomisation test of each row against the default,
and each full fit's time when this run trained it.

Writes ``benchmarks/results/cpu_training.json`` and ``docs/benchmarks/cpu_training.md`` (``-<tag>`` with
``AS2RANK_BENCH_TAG``).
"""

from __future__ import annotations

import argparse
import filecmp
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

from harness import CACHE, conclude, fitted, log, run_header, timed_subprocess, wikiqa_splits
from cpu_inference import fit_subset

HERE = Path(__file__).resolve().parent
DEFAULT = "default"
#: Row name -> what it changes: ``precision``, ``dropout`` (the encoder config's dropout probabilities set
#: to 0) or ``threads`` (``n_threads``). ``"other dtype"`` is filled in per CPU by :func:`rows`.
ROWS = {
    DEFAULT: {},
    "other dtype": {"precision": None},
    "attention dropout 0": {"dropout": ("attention_probs_dropout_prob",)},
    "no dropout": {"dropout": ("attention_probs_dropout_prob", "hidden_dropout_prob")},
    "n_threads=1": {"threads": 1},
}
#: Training questions of the MAP section's WikiQA fits (those of ``cpu_inference.py``).
FIT_QUESTIONS = 300


def rows() -> dict:
    """:data:`ROWS` with the other dtype named for this CPU: ``precision='bf16'`` where ``"auto"`` is float32
    (emulated where bfloat16 is not native), else ``precision='fp32'``."""
    from as2rank.neural import cpu_bf16_supported

    native = cpu_bf16_supported()
    out = {}
    for name, spec in ROWS.items():
        if name == "other dtype":  # emulated bfloat16 is an order of magnitude slower: timed in the first round only
            out["precision='fp32'" if native else "precision='bf16' (emulated: no native bfloat16 here)"] = (
                {"precision": "fp32"} if native else {"precision": "bf16", "once": True})
        else:
            out[name] = spec
    return out


def checkpoint(spec: dict) -> str | None:
    """The ``model`` of a row: None (the packaged MiniLM-L6) or a copy of it with the dropouts of
    ``spec["dropout"]`` set to 0 in its config."""
    from as2rank.neural.models import resolve_model

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
    from as2rank.transformer.ranker import TransformerRanker

    model = checkpoint(spec)
    row = {"precision": spec.get("precision") or "auto", "n_threads": spec.get("threads", threads),
           **({"model": model} if model else {})}
    return TransformerRanker(random_state=0, **row, **params)


def timed_fit(name: str, questions: int, threads: int | None) -> None:
    """One round of row ``name`` (in its subprocess): fit one epoch on the first ``questions`` training
    questions and print a JSON line with the seconds."""
    spec = rows()[name]
    if spec.get("precision") == "bf16":
        from as2rank.neural import devices

        if not devices.cpu_bf16_supported():  # the emulated kernels, as if the library chose bfloat16 here
            devices.cpu_bf16_supported = lambda: True
    X, y = wikiqa_splits()["train"]
    X, y = fit_subset(X, y, questions)
    est = estimator(spec, threads, epochs=1, early_stopping=False, reuse_fit=False)
    start = time.perf_counter()
    est.fit(X, y)
    seconds = time.perf_counter() - start
    print(json.dumps({"row": name, "pairs": len(X), "seconds": seconds, "steps": est.history_.n_steps,
                      "loop_seconds": est.history_.seconds}), flush=True)


def run_round(name: str, args) -> dict:
    """Row ``name``'s fit in a fresh subprocess: its JSON line, the process's wall time and the load."""
    cmd = [sys.executable, str(HERE / "cpu_training.py"), "--row", name, "--questions", str(args.questions)]
    cmd += ["--threads", str(args.threads)] if args.threads else []
    return timed_subprocess(name, cmd, args.threads)


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

    from as2rank.evaluation import compare, per_question
    from as2rank.app.suite import load_benchmark_data

    splits = wikiqa_splits()
    data = {f"WikiQA-test ({FIT_QUESTIONS} training questions)": (*fit_subset(*splits["train"], FIT_QUESTIONS), *splits["test"]),
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


def checks(res: dict) -> list:
    """Whether some row trains ≥ 1.2× as fast as the default with MAP within 0.2 of it on every data set."""
    s, acc = res["summary"], res.get("accuracy", {})
    out = []
    for name, v in s.items():
        if name == DEFAULT or not acc or name not in next(iter(acc.values())):
            continue
        gap = max(abs(maps[name]["map"] - maps[DEFAULT]["map"]) for maps in acc.values())
        out.append({"check": f"{name}: ≥ 1.2× the default's training speed, MAP within 0.2 of it on every data set",
                    "measured": f"{v['speedup']:.2f}×, largest MAP gap {100 * gap:.2f}",
                    "pass": v["speedup"] >= 1.2 and 100 * gap <= 0.2})
    return out


def main(argv=None) -> None:
    """Parse the command line; run the rounds (or one subprocess round) and the MAP section, then publish."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=int, default=60, help="WikiQA training questions of a timed fit (default 60)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="threads of every row but n_threads=1 (default: torch's)")
    parser.add_argument("--map-rows", nargs="*", default=None,
                        help="rows fitted at the defaults for the MAP table (default: the default and 'attention dropout 0')")
    parser.add_argument("--row", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.row:
        timed_fit(args.row, args.questions, args.threads)
        return
    import torch

    from as2rank.neural import cpu_bf16_supported

    start = time.perf_counter()
    table = rows()
    names = list(table)
    res = {**run_header("cpu_training.py", argv), "cpu_bf16": cpu_bf16_supported(), "threads": args.threads,
           "torch_default_threads": torch.get_num_threads(), "questions": args.questions, "rounds": args.rounds,
           "rows": table, "runs": {n: [] for n in names}}
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            if r and table[name].get("once"):
                continue
            run = run_round(name, args)
            res["runs"][name].append({**run, "round": r})
            log(f"[round {r + 1}/{args.rounds}] {name}: {run['seconds']:.1f} s ({run['pairs']} pairs, load {run['load_after'][0]})")
    res["summary"] = summarise(res["runs"])
    map_rows = args.map_rows if args.map_rows is not None else [DEFAULT, "attention dropout 0"]
    if map_rows:
        res["accuracy"] = accuracy([DEFAULT, *[n for n in map_rows if n != DEFAULT]])
    conclude(res, "cpu_training", start, checks(res))


if __name__ == "__main__":
    main()
