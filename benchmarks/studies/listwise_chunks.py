"""Listwise training: each batch's forward pass in parts of similar length (the library, on a CPU) vs the whole
batch padded to its longest row (as before, and on a GPU).

    python benchmarks/studies/listwise_chunks.py [--data sample wikiqa] [--train-questions 300] [--rounds 3]
                                                 [--threads N]

A listwise batch holds whole questions, whose candidates differ in length. ``TransformerRanker(loss="listwise",
epochs=1, early_stopping=False, random_state=0)`` is fitted on each data set's training questions (a fixed random
subset of ``--train-questions``) with the forward pass of every batch in parts of at most
``as2rank.neural.batching.CHUNK_ROWS`` rows (``parts``, the library), and with each batch as one part
(``whole``: ``CHUNK_ROWS`` set above any batch's rows here, the forward pass of before). The two alternate,
``--rounds`` times, after one unrecorded warm-up fit of each on 20 questions; every fit trains (no cache). Per fit: the wall seconds of ``fit``, the tokens its forward
passes ran (rows × each part's longest row, counted where the training batches are built) against the batches'
real tokens, and the test MAP (the two runs draw their dropout masks over different shapes, so their weights
differ slightly; MAP should not). Ratios whole / parts per round. On a GPU (which the library runs whole), both
variants run there, so that the page says whether parts would pay there too.

Writes ``benchmarks/studies/results/listwise_chunks.json`` and ``docs/studies/listwise_chunks.md``
(``-<tag>`` with ``AS2RANK_BENCH_TAG``); ``python benchmarks/render.py listwise_chunks`` renders the page again.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness

import numpy as np
from harness import SHARED_DATA, conclude, log, run_header, subset_questions, wikiqa_splits

#: The fit: the library's listwise ranker, one epoch, the whole budget trained.
PARAMS = {"loss": "listwise", "epochs": 1, "early_stopping": False, "random_state": 0}
#: ``CHUNK_ROWS`` of the ``whole`` runs: above any batch's rows, so each batch runs as one part.
WHOLE = 10**9
#: Training questions of the warm-up fit of each variant before the rounds (not recorded).
WARMUP_QUESTIONS = 20


def load(data, n_questions):
    from harness.library import keep_answered, load_benchmark_data

    if data == "wikiqa":
        parts = wikiqa_splits()
        X, y = parts["train"]
        X_test, y_test = keep_answered(*parts["test"])
    else:
        X, y, X_test, y_test = load_benchmark_data("sample", random_state=0)
    X, y = subset_questions(X.reset_index(drop=True), y, n_questions)
    return X, y, X_test.reset_index(drop=True), y_test


def one_fit(X, y, X_test, y_test, chunk_rows, threads):
    """Fit with ``CHUNK_ROWS = chunk_rows``: (seconds, tokens run, real tokens, test MAP)."""
    from harness.library import batching as train, mean_average_precision, predict_module as predict, TransformerRanker

    counts = {"run": 0, "real": 0}
    original = predict.batch_tensors

    def counting(encoded, rows):
        if sys._getframe(1).f_code.co_filename == train.__file__:  # the training batches' parts
            lengths = encoded["lengths"][rows]
            counts["run"] += int(len(rows) * lengths.max())
            counts["real"] += int(lengths.sum())
        return original(encoded, rows)

    saved = predict.batch_tensors, train.CHUNK_ROWS, train.CHUNK_DEVICES
    # On a GPU too: the two variants differ in the parts alone, wherever they run.
    predict.batch_tensors, train.CHUNK_ROWS, train.CHUNK_DEVICES = counting, chunk_rows, ("cpu", "cuda")
    try:
        est = TransformerRanker(**PARAMS, reuse_fit=False, n_threads=threads)
        start = time.perf_counter()
        est.fit(X, y)
        seconds = time.perf_counter() - start
    finally:
        predict.batch_tensors, train.CHUNK_ROWS, train.CHUNK_DEVICES = saved
    score = mean_average_precision(y_test, est.predict(X_test), X_test["qid"], position=X_test["position"])
    return seconds, counts["run"], counts["real"], float(score)


def main(argv=None):
    from harness.library import batching as train

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", nargs="+", choices=("sample", "wikiqa"), default=["sample", "wikiqa"])
    parser.add_argument("--train-questions", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads of each fit (default: torch's)")
    args = parser.parse_args(argv)
    if "wikiqa" in args.data and not (SHARED_DATA / "wikiqa" / "WikiQA-train.tsv").exists():
        raise SystemExit(f"WikiQA not found under {SHARED_DATA / 'wikiqa'}: run with --data sample.")
    start = time.perf_counter()
    res = {**run_header("studies/listwise_chunks.py", argv), "params": PARAMS, "chunk_rows": train.CHUNK_ROWS,
           "rounds": args.rounds, "train_questions": args.train_questions, "data": {}}
    variants = {"parts": train.CHUNK_ROWS, "whole": WHOLE}
    for data in args.data:
        X, y, X_test, y_test = load(data, args.train_questions)
        runs = {v: [] for v in variants}
        for rows in variants.values():  # warm-up, not recorded: the first fits of a process pay one-time costs
            one_fit(*subset_questions(X, y, WARMUP_QUESTIONS), X_test.iloc[:50], y_test[:50], rows, args.threads)
        for r in range(args.rounds):
            for name, rows in variants.items():
                seconds, run, real, score = one_fit(X, y, X_test, y_test, rows, args.threads)
                runs[name].append({"seconds": seconds, "tokens_run": run, "tokens_real": real, "map": score})
                log(f"[{data}] round {r} {name}: {seconds:.1f} s, {run / real:.3f} tokens run per real token, MAP {100 * score:.2f}")
        ratios = [w["seconds"] / p["seconds"] for w, p in zip(runs["whole"], runs["parts"])]
        res["data"][data] = {
            "train_questions": int(X["qid"].nunique()), "train_rows": len(X), "test_questions": int(X_test["qid"].nunique()),
            "runs": runs, "ratios": ratios, "median_ratio": float(np.median(ratios)),
            "padding": {v: runs[v][0]["tokens_run"] / runs[v][0]["tokens_real"] for v in variants},
        }
    checks = [{"check": f"{data}: a listwise fit with the forward pass in parts is faster than with whole batches "
                        "(median of the per-round ratios whole / parts > 1)",
               "measured": f"{d['median_ratio']:.2f}x (" + ", ".join(f"{x:.2f}" for x in d["ratios"]) + ")",
               "pass": bool(d["median_ratio"] > 1)} for data, d in res["data"].items()]
    conclude(res, "listwise_chunks", start, checks)


if __name__ == "__main__":
    main()
