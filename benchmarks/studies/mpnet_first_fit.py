"""First fit of the packaged BASE encoder against the default MiniLM as ``TransformerRanker``'s backbone: what one
fit costs on the CPU, and a first MAP (``mpnet_first_fit.toml``).

    nice -n 10 python benchmarks/studies/mpnet_first_fit.py [--questions 100] [--epochs N] [--threads 1] [--int8]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness

import numpy as np
from harness import experiment, load_average, wikiqa_splits
from harness.library import TransformerRanker, keep_answered
from harness.measure import clocked
from harness.store import computing


def training_questions(X, y, n: int):
    """The rows of the first ``n`` answered questions of a ``default_rng(0)`` permutation of the answered ids."""
    X, y = keep_answered(X, y)
    chosen = np.random.default_rng(0).permutation(X["qid"].unique())[:n]
    keep = X["qid"].isin(chosen).to_numpy()
    return X[keep].reset_index(drop=True), np.asarray(y)[keep]


def int8_scores(est, X_test, y_test) -> dict:
    """MAP of ``est`` at ``precision="int8"``, the times of its first call (the copy built) and second, its module."""
    est.set_params(precision="int8")
    out = {}
    for call in ("first", "second"):
        out["int8_map"], out[f"int8_{call}_predict_s"], _ = clocked(lambda: 100 * est.score(X_test, y_test))
    return {**out, "int8_module": type(est.predictor(encoded=est.encode(X_test.head(2))).module).__name__}


def run(exp, args, res):
    computing("the timed fit of each model")
    import torch

    torch.set_num_threads(args.threads)
    res["torch_threads"] = torch.get_num_threads()
    splits = wikiqa_splits()
    X, y = training_questions(*splits["full"], args.questions)
    X_test, y_test = keep_answered(*splits["test"])
    extra = {} if args.epochs is None else {"epochs": args.epochs}
    res["rows"] = []
    for model in args.models:
        est = TransformerRanker(model=model, random_state=0, n_threads=args.threads, **extra)
        load = load_average()
        _, fit_s, fit_cpu = clocked(lambda: est.fit(X, y))
        map_, predict_s, predict_cpu = clocked(lambda: est.score(X_test, y_test))
        epochs, int8 = len(est.history_.epoch_loss), int8_scores(est, X_test, y_test) if args.int8 else {}
        res["rows"].append({
            "model": model, "map": 100 * map_, "train_questions": int(X["qid"].nunique()),
            "train_pairs": len(X), "epochs": epochs, "fit_s": fit_s, "fit_cpu_s": fit_cpu,
            "fit_pairs_per_s": len(X) * epochs / fit_s, "fit_pairs_per_cpu_s": len(X) * epochs / fit_cpu,
            "test_questions": int(X_test["qid"].nunique()), "test_pairs": len(X_test), "predict_s": predict_s,
            "predict_cpu_s": predict_cpu, "predict_pairs_per_s": len(X_test) / predict_s,
            "predict_pairs_per_cpu_s": len(X_test) / predict_cpu, "n_layers": est.n_layers_,
            "load_average": [load, load_average()], **int8,
        })


if __name__ == "__main__":
    experiment.main(__file__, run)
