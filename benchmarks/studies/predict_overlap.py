"""The predict loop's overlap of host and device work, and the token cache, on this machine's CPU: whole
``predict`` calls on WikiQA-test pairs with the batches laid out in turn (the CPU default), laid out ahead in a
background thread (the GPU default), and with the token cache emptied before every call (every call tokenises,
as before the cache).

    python benchmarks/studies/predict_overlap.py [--pairs N] [--rounds N] [--threads N] [--before path/to/checkout]

Models: ``TransformerRanker(random_state=0)`` and ``CascadeTransformer(alpha=0.3, random_state=0)`` fitted on the
first 300 WikiQA training questions (``benchmarks/cpu_inference.py``'s training rows; cached fits). Each round
runs every setting of every model once, in a rotating order; a setting's speed is the median over rounds of the
default's time over its own in the same round. The scores of every setting are compared bit for bit with the
default's.

With ``--before``, a checkout of this code with the overlap and the token cache taken out (a saved model of
today's code does not load in the code of their time, which lacked later parameters)::

    git worktree add --detach path/to/before HEAD
    git -C path/to/before revert --no-commit 061d720 2823544      # stops on a conflict in predict.py:
    git -C path/to/before checkout 9a5ef1a -- as2rank/neural/predict.py

the CPU page's rows (``benchmarks/cpu_inference.py``: a fresh process loads the model
saved by ``save_pretrained``, predicts 64 pairs to warm up, then times one ``predict`` of all the pairs) run in
each round with that code and with this one, in turn; a row's speed is the median over rounds of the earlier
code's time over this code's in the same round, and the scores of the two are compared bit for bit.

Writes ``benchmarks/studies/results/predict_overlap.json`` and ``docs/studies/predict_overlap.md`` (``-<tag>``
with ``AS2RANK_BENCH_TAG``); ``python benchmarks/render.py predict_overlap`` renders the page again.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness

import numpy as np
from harness import conclude, fitted, log, run_header, timed_subprocess, wikiqa_splits
from harness import first_questions as fit_subset
from harness.predict_round import WARMUP_PAIRS

HERE = Path(__file__).resolve().parents[1]

FIT_QUESTIONS = 300
#: Batches laid out ahead in the "prefetch" setting (the GPU default, :data:`as2rank.neural.predict.PREFETCH`).
DEFAULT, SETTINGS = "in turn", ("in turn", "prefetch", "tokens uncached")
#: The CPU page's rows timed against the earlier code: name -> (model, precision, cascade alpha or None).
PAGE_ROWS = {"TransformerRanker precision='auto'": ("TransformerRanker", "auto", None),
             "TransformerRanker precision='int8'": ("TransformerRanker", "int8", None),
             "TransformerRanker precision='fp32'": ("TransformerRanker", "fp32", None),
             "CascadeTransformer α=0.3, precision='auto'": ("CascadeTransformer α=0.3", "auto", 0.3)}


@contextlib.contextmanager
def setting(name: str):
    """The library set to predict as the setting ``name`` does, for the duration."""
    from harness.library import predict_module as predict, TOKEN_CACHE

    default = predict.default_prefetch
    if name == "prefetch":
        predict.default_prefetch = lambda device: predict.PREFETCH
    if name == "tokens uncached":
        TOKEN_CACHE.clear()
    try:
        yield
    finally:
        predict.default_prefetch = default


def page_row(row: str, code: Path, work: Path, threads: int | None, scores: Path) -> dict:
    """One fresh-process round of the CPU page's row ``row`` with the library at ``code`` (a repository root)."""
    model, precision, alpha = PAGE_ROWS[row]
    cmd = [sys.executable, str(HERE / "harness" / "predict_round.py"), precision,
           "--model-dir", str(work / model), "--pairs-file", str(work / "pairs.json"), "--scores", str(scores)]
    cmd += ([] if alpha is None else ["--alpha", str(alpha)]) + (["--threads", str(threads)] if threads else [])
    out = timed_subprocess(row, cmd, threads, env={"PYTHONPATH": str(code)})
    if Path(out["library"]) != code / "as2rank":
        raise SystemExit(f"{row}: the subprocess imported {out['library']}, not {code / 'as2rank'}")
    return out


def against_before(models: dict, X, before: Path, rounds: int, threads: int | None) -> dict:
    """The CPU page's rows with the library at ``before`` and with this one, interleaved over ``rounds``."""
    from harness.library import as2rank

    codes = {"before": before.resolve(), "current": Path(as2rank.__file__).resolve().parents[1]}
    def git(*args) -> str:
        return subprocess.run(["git", "-C", str(before), *args], capture_output=True, text=True).stdout

    commit, changed = git("rev-parse", "HEAD").strip(), git("diff", "HEAD", "--name-only", "--", "as2rank").split()
    runs = {r: {c: [] for c in codes} for r in PAGE_ROWS}
    same = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "pairs.json").write_text(json.dumps(X[["qid", "question", "candidate"]].to_dict("records")))
        for name, model in models.items():
            model.save_pretrained(work / name, **({"int8": True} if name == "TransformerRanker" else {}))
        for r in range(rounds):
            for row in list(PAGE_ROWS)[r % len(PAGE_ROWS):] + list(PAGE_ROWS)[: r % len(PAGE_ROWS)]:
                for code in (("before", "current") if r % 2 == 0 else ("current", "before")):
                    out = page_row(row, codes[code], work, threads, work / f"scores-{code}.json")
                    runs[row][code].append(out["seconds"])
                same[row] = same.get(row, True) and (work / "scores-before.json").read_text() == (work / "scores-current.json").read_text()
            log(f"[before/current {r + 1}/{rounds}] " + "; ".join(
                f"{row}: {runs[row]['before'][-1]:.2f} s / {runs[row]['current'][-1]:.2f} s" for row in PAGE_ROWS))
    return {"commit": commit, "changed": changed, "rounds": rounds, "warmup_pairs": WARMUP_PAIRS,
            "rows": {row: {"seconds": runs[row], "pairs_per_s": {c: len(X) / float(np.median(runs[row][c])) for c in codes},
                           "speed_vs_before": float(np.median(np.asarray(runs[row]["before"]) / np.asarray(runs[row]["current"]))),
                           "same_scores": same[row]}
                     for row in PAGE_ROWS}}


def main(argv=None):
    import torch

    from harness.library import CascadeTransformer, TransformerRanker

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=2000, help="WikiQA-test pairs per call (default 2000, as cpu_inference.py)")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds (default 7)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--before", type=Path, default=None,
                        help="a checkout of the library before the overlap: time the CPU page's rows against it")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    start = time.perf_counter()
    res = {**run_header("studies/predict_overlap.py", argv), "rounds": args.rounds, "fit_questions": FIT_QUESTIONS,
           "threads": torch.get_num_threads()}
    if args.before is not None:  # the pages name no folder of the machine they ran on
        res["command"] = res["command"].replace(str(args.before), "path/to/before")
    splits = wikiqa_splits()
    train = fit_subset(*splits["train"], FIT_QUESTIONS)
    models = {"TransformerRanker": fitted(TransformerRanker(random_state=0), *train),
              "CascadeTransformer α=0.3": fitted(CascadeTransformer(alpha=0.3, random_state=0), *train)}
    X = splits["test"][0].head(args.pairs)
    if args.before is not None:  # first: the fresh processes need no warm model in this one
        res["before"] = against_before(models, X, args.before, args.rounds, args.threads)
    scores = {m: {s: None for s in SETTINGS} for m in models}
    runs = {m: {s: [] for s in SETTINGS} for m in models}
    for model in models.values():
        model.predict(X)  # a first, untimed call of each model (its module and the token cache warm)
    for r in range(args.rounds):
        for name, model in models.items():
            for s in SETTINGS[r % len(SETTINGS):] + SETTINGS[: r % len(SETTINGS)]:
                with setting(s):
                    t = time.perf_counter()
                    out = model.predict(X)
                    runs[name][s].append(time.perf_counter() - t)
                scores[name][s] = out
        log(f"[round {r + 1}/{args.rounds}] " + "; ".join(f"{m}: " + ", ".join(f"{s} {runs[m][s][-1]:.2f} s" for s in SETTINGS) for m in models))
    res["pairs"] = len(X)
    res["models"] = {
        m: {s: {"seconds": runs[m][s], "pairs_per_s": len(X) / float(np.median(runs[m][s])),
                "speed_vs_default": float(np.median(np.asarray(runs[m][DEFAULT]) / np.asarray(runs[m][s]))),
                "same_bits": bool(np.array_equal(scores[m][s], scores[m][DEFAULT], equal_nan=True))}
            for s in SETTINGS}
        for m in models
    }
    checks = []
    if args.before is not None:
        rows = res["before"]["rows"]
        checks.append({"check": "The CPU page's rows: the same scores as the earlier code, and not slower than it "
                                "(speed vs the earlier code ≥ 0.98)",
                       "measured": ", ".join(f"{row}: {r['speed_vs_before']:.3f}×, {'same' if r['same_scores'] else 'different'} scores"
                                             for row, r in rows.items()),
                       "pass": all(r["same_scores"] and r["speed_vs_before"] >= 0.98 for r in rows.values())})
    for m, rows in res["models"].items():
        checks.append({"check": f"{m}: the same scores, bit for bit, in every setting",
                       "measured": ", ".join(f"{s}: {'same' if r['same_bits'] else 'different'}" for s, r in rows.items()),
                       "pass": all(r["same_bits"] for r in rows.values())})
        checks.append({"check": f"{m}: the CPU default (in turn, tokens cached) is not slower than prefetch or "
                                "than tokenising every call (speed vs the default ≤ 1.02)",
                       "measured": ", ".join(f"{s}: {r['speed_vs_default']:.3f}×" for s, r in rows.items() if s != DEFAULT),
                       "pass": all(r["speed_vs_default"] <= 1.02 for s, r in rows.items() if s != DEFAULT)})
    conclude(res, "predict_overlap", start, checks)


if __name__ == "__main__":
    main()
