"""The predict loop's overlap of host and device work, and the token cache, on this machine's CPU
(``predict_overlap.toml``, which says how to make the checkout of ``--before``).

    python benchmarks/studies/predict_overlap.py [--pairs 2000] [--rounds 7] [--threads N] [--before path/to/checkout]
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness

import numpy as np
from harness import experiment, first_questions, fitted, log, timed_subprocess, wikiqa_splits
from harness.experiment import Experiment
from harness.measure import rotated
from harness.paths import BENCHMARKS
from harness.predict_round import WARMUP_PAIRS
from harness.store import computing

EXP = Experiment(__file__)
#: The settings, the first the CPU default; the CPU page's rows: name -> (model, precision, cascade alpha or None).
SETTINGS, PAGE_ROWS = EXP.config["settings"], EXP.config["page_rows"]
DEFAULT = SETTINGS[0]


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
    cmd = [sys.executable, str(BENCHMARKS / "harness" / "predict_round.py"), precision,
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
            for row in rotated(list(PAGE_ROWS), r):
                for code in (("before", "current") if r % 2 == 0 else ("current", "before")):
                    out = page_row(row, codes[code], work, threads, work / f"scores-{code}.json")
                    runs[row][code].append(out["seconds"])
                scores = [(work / f"scores-{code}.json").read_text() for code in ("before", "current")]
                same[row] = same.get(row, True) and scores[0] == scores[1]
            log(f"[before/current {r + 1}/{rounds}] " + "; ".join(
                f"{row}: {runs[row]['before'][-1]:.2f} s / {runs[row]['current'][-1]:.2f} s" for row in PAGE_ROWS))
    return {"commit": commit, "changed": changed, "rounds": rounds, "warmup_pairs": WARMUP_PAIRS,
            "rows": {row: {"seconds": runs[row],
                           "pairs_per_s": {c: len(X) / float(np.median(runs[row][c])) for c in codes},
                           "speed_vs_before": float(np.median(np.asarray(runs[row]["before"])
                                                              / np.asarray(runs[row]["current"]))),
                           "same_scores": same[row]}
                     for row in PAGE_ROWS}}


def overlap(models: dict, X, rounds: int) -> dict:
    """Per model and setting: its seconds per round, pairs/s, speed over the default's (same round, median) and
    whether its scores are the default's, bit for bit. After one untimed call of each model (its module and the
    token cache warm), each round runs every setting of every model once, the settings' order rotating."""
    computing("a timing")
    scores = {m: {} for m in models}
    runs = {m: {s: [] for s in SETTINGS} for m in models}
    for model in models.values():
        model.predict(X)
    for r in range(rounds):
        for name, model in models.items():
            for s in rotated(SETTINGS, r):
                with setting(s):
                    t = time.perf_counter()
                    out = model.predict(X)
                    runs[name][s].append(time.perf_counter() - t)
                scores[name][s] = out
        log(f"[round {r + 1}/{rounds}] " + "; ".join(
            f"{m}: " + ", ".join(f"{s} {runs[m][s][-1]:.2f} s" for s in SETTINGS) for m in models))
    return {m: {s: {"seconds": runs[m][s], "pairs_per_s": len(X) / float(np.median(runs[m][s])),
                    "speed_vs_default": float(np.median(np.asarray(runs[m][DEFAULT]) / np.asarray(runs[m][s]))),
                    "same_bits": bool(np.array_equal(scores[m][s], scores[m][DEFAULT], equal_nan=True))}
                for s in SETTINGS}
            for m in models}


def run(exp, args, res):
    import torch

    from harness.library import CascadeTransformer, TransformerRanker

    res.update(rounds=args.rounds, threads=torch.get_num_threads())
    if args.before is not None:  # the pages name no folder of the machine they ran on
        res["command"] = res["command"].replace(str(args.before), "path/to/before")
    splits = wikiqa_splits()
    train = first_questions(*splits["train"], res["fit_questions"])
    models = {"TransformerRanker": fitted(TransformerRanker(random_state=0), *train),
              "CascadeTransformer α=0.3": fitted(CascadeTransformer(alpha=0.3, random_state=0), *train)}
    X = splits["test"][0].head(args.pairs)
    if args.before is not None:  # first: the fresh processes need no warm model in this one
        res["before"] = against_before(models, X, args.before, args.rounds, args.threads)
    res["pairs"] = len(X)
    res["models"] = overlap(models, X, args.rounds)


if __name__ == "__main__":
    experiment.main(__file__, run)
