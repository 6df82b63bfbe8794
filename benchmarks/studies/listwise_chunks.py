"""Listwise training: each batch's forward pass in parts of similar length (the library, on a CPU) vs the whole
batch padded to its longest row (``listwise_chunks.toml``).

    python benchmarks/studies/listwise_chunks.py [--data sample wikiqa] [--train-questions 300] [--rounds 3]
                                                 [--threads N]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness

import numpy as np
from harness import SHARED_DATA, experiment, log, subset_questions, wikiqa_splits
from harness.library import TransformerRanker, batching, keep_answered, load_benchmark_data, mean_average_precision
from harness.measure import interleaved


def load(data, n_questions):
    """A fixed random subset of ``n_questions`` training questions, and the test split (answered questions)."""
    if data == "wikiqa":
        parts = wikiqa_splits()
        X, y = parts["train"]
        X_test, y_test = keep_answered(*parts["test"])
    else:
        X, y, X_test, y_test = load_benchmark_data("sample", random_state=0)
    X, y = subset_questions(X.reset_index(drop=True), y, n_questions)
    return X, y, X_test.reset_index(drop=True), y_test


def one_fit(X, y, params, chunk_rows, threads):
    """The ranker fitted with ``CHUNK_ROWS = chunk_rows`` (on a GPU too: the two variants differ in the parts
    alone, wherever they run), and the tokens its training batches' parts ran and held: ``{"run", "real"}``."""
    counts = {"run": 0, "real": 0}
    saved = batching.length_chunks, batching.CHUNK_ROWS, batching.CHUNK_DEVICES

    def counting(lengths, rows_per_chunk):  # the parts of each training batch, as the training loop builds them
        parts = saved[0](lengths, rows_per_chunk)
        counts["run"] += sum(int(len(p) * lengths[p].max()) for p in parts)
        counts["real"] += int(lengths.sum())
        return parts

    batching.length_chunks, batching.CHUNK_ROWS, batching.CHUNK_DEVICES = counting, chunk_rows, ("cpu", "cuda")
    try:
        return TransformerRanker(**params, reuse_fit=False, n_threads=threads).fit(X, y), counts
    finally:
        batching.length_chunks, batching.CHUNK_ROWS, batching.CHUNK_DEVICES = saved


def run(exp, args, res):
    if "wikiqa" in args.data and not (SHARED_DATA / "wikiqa" / "WikiQA-train.tsv").exists():
        raise SystemExit(f"WikiQA not found under {SHARED_DATA / 'wikiqa'}: run with --data sample.")
    variants = {"parts": batching.CHUNK_ROWS, "whole": exp.config["whole_chunk_rows"]}
    res.update(chunk_rows=batching.CHUNK_ROWS, rounds=args.rounds, train_questions=args.train_questions, data={})
    for data in args.data:
        X, y, X_test, y_test = load(data, args.train_questions)
        for rows in variants.values():  # warm-up, not recorded: the first fits of a process pay one-time costs
            one_fit(*subset_questions(X, y, exp.config["warmup_questions"]), res["params"], rows, args.threads)
        fits = {v: [] for v in variants}
        calls = {v: lambda v=v: fits[v].append(one_fit(X, y, res["params"], variants[v], args.threads))
                 for v in variants}
        seconds = interleaved(calls, args.rounds, label=data, rotate=False)
        runs = {v: [] for v in variants}
        for v in variants:
            for s, (est, counts) in zip(seconds[v], fits[v]):
                score = mean_average_precision(y_test, est.predict(X_test), X_test["qid"], position=X_test["position"])
                runs[v].append({"seconds": s, "tokens_run": counts["run"], "tokens_real": counts["real"],
                                "map": float(score)})
                log(f"[{data}] {v}: {s:.1f} s, {counts['run'] / counts['real']:.3f} tokens run per real token, "
                    f"MAP {100 * score:.2f}")
        ratios = [w["seconds"] / p["seconds"] for w, p in zip(runs["whole"], runs["parts"])]
        res["data"][data] = {
            "train_questions": int(X["qid"].nunique()), "train_rows": len(X),
            "test_questions": int(X_test["qid"].nunique()),
            "runs": runs, "ratios": ratios, "median_ratio": float(np.median(ratios)),
            "padding": {v: runs[v][0]["tokens_run"] / runs[v][0]["tokens_real"] for v in variants},
        }


if __name__ == "__main__":
    experiment.main(__file__, run)
