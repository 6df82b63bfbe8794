"""Defaults on articles the model never saw: train on the questions of one article of the bundled SQuAD sample,
test on the other three (``unseen_articles.toml``).

    python benchmarks/studies/unseen_articles.py [--train-article Huguenot] [--seed 0] [--threads N]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness

import pandas as pd
from harness import experiment
from harness.library import ENTRIES, SuiteEntry, TransformerRanker, load_sample, run_suite
from harness.store import computing


def transformer_without_prior(seed):
    return TransformerRanker(lexical_prior=False, random_state=seed)


def leaderboard(board: pd.DataFrame, alpha: float) -> list:
    """The rows of :func:`run_suite`'s leaderboard as dicts (missing values as None; the count of scored
    questions as an int), with ``differs_from_baseline``: the MAP differs from the baseline's with p < ``alpha``."""
    rows = [{k: None if pd.isna(v) else v for k, v in r.items()} for r in board.to_dict("records")]
    return [{**r, "n_questions": None if r.get("n_questions") is None else int(r["n_questions"]),
             "differs_from_baseline": r.get("p_value") is not None and bool(r["p_value"] < alpha)} for r in rows]


def run(exp, args, res):
    computing("the suite's leaderboard")
    X, y = load_sample()
    train = (X["title"] == args.train_article).to_numpy()
    if not train.any():
        raise SystemExit(f"no article {args.train_article!r}; the sample has {sorted(X['title'].unique())}")
    entries = [e for e in ENTRIES if e.name in exp.config["rows"]]
    entries.append(SuiteEntry("Transformer, lexical_prior=False", transformer_without_prior,
                              description="the cross-encoder without its lexical prior"))
    start = time.perf_counter()
    board = run_suite(entries, X[train], y[train], X[~train], y[~train], random_state=args.seed,
                      baseline=res["baseline"], progress=False, alpha=res["alpha"])
    res.update(seconds=time.perf_counter() - start, train_article=args.train_article, seed=args.seed,
               n_train_questions=X[train]["qid"].nunique(), test_articles=sorted(X[~train]["title"].unique()),
               board=leaderboard(board, res["alpha"]))


if __name__ == "__main__":
    experiment.main(__file__, run)
