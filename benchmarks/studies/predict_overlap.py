"""The predict loop's overlap of host and device work, and the token cache, on this machine's CPU: whole
``predict`` calls on WikiQA-test pairs with the batches laid out in turn (the CPU default), laid out ahead in a
background thread (the GPU default), and with the token cache emptied before every call (every call tokenises,
as before the cache).

    python benchmarks/studies/predict_overlap.py [--pairs N] [--rounds N] [--threads N]

Models: ``TransformerRanker(random_state=0)`` and ``CascadeTransformer(alpha=0.3, random_state=0)`` fitted on the
first 300 WikiQA training questions (``benchmarks/cpu_inference.py``'s training rows; cached fits). Each round
runs every setting of every model once, in a rotating order; a setting's speed is the median over rounds of the
default's time over its own in the same round. The scores of every setting are compared bit for bit with the
default's.

Writes ``benchmarks/studies/results/predict_overlap.json`` and ``docs/studies/predict_overlap.md`` (``-<tag>``
with ``AS2RANK_BENCH_TAG``); ``python benchmarks/render.py predict_overlap`` renders the page again.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common and the scripts studies reuse

import numpy as np
from _common import conclude, fitted, log, run_header, wikiqa_splits
from cpu_inference import fit_subset

FIT_QUESTIONS = 300
#: Batches laid out ahead in the "prefetch" setting (the GPU default, :data:`as2rank.neural.predict.PREFETCH`).
DEFAULT, SETTINGS = "in turn", ("in turn", "prefetch", "tokens uncached")


@contextlib.contextmanager
def setting(name: str):
    """The library set to predict as the setting ``name`` does, for the duration."""
    from as2rank.neural import predict
    from as2rank.neural.tokens import TOKEN_CACHE

    default = predict.default_prefetch
    if name == "prefetch":
        predict.default_prefetch = lambda device: predict.PREFETCH
    if name == "tokens uncached":
        TOKEN_CACHE.clear()
    try:
        yield
    finally:
        predict.default_prefetch = default


def main(argv=None):
    import torch

    from as2rank.transformer.cascade import CascadeTransformer
    from as2rank.transformer.ranker import TransformerRanker

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=2000, help="WikiQA-test pairs per call (default 2000, as cpu_inference.py)")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds (default 7)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    start = time.perf_counter()
    res = {**run_header("studies/predict_overlap.py", argv), "rounds": args.rounds, "fit_questions": FIT_QUESTIONS,
           "threads": torch.get_num_threads()}
    splits = wikiqa_splits()
    train = fit_subset(*splits["train"], FIT_QUESTIONS)
    models = {"TransformerRanker": fitted(TransformerRanker(random_state=0), *train),
              "CascadeTransformer α=0.3": fitted(CascadeTransformer(alpha=0.3, random_state=0), *train)}
    X = splits["test"][0].head(args.pairs)
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
