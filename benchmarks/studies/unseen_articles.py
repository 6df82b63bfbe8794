"""Defaults on articles the model never saw: train on the questions of one article of the bundled SQuAD sample,
test on the other three.

    python benchmarks/studies/unseen_articles.py [--train-article Huguenot] [--seed 0] [--threads N]

The bundled sample holds four Wikipedia articles; the suite's split is by paragraph, so its train and test
questions share articles. Here the test articles are unseen, as on a user's own documents. The leaderboard
(``as2rank.app.suite.run_suite``: paired randomisation tests against the best row and against WO+RR) covers the
baselines and the transformer rankers with their library defaults, and the transformer without its lexical
prior (``lexical_prior=False``, its segment similarity kept) beside them. Writes ``benchmarks/studies/results/unseen_articles.json`` and
``docs/studies/unseen_articles.md`` (from ``benchmarks/studies/pages/unseen_articles.md.j2``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness

import pandas as pd
from harness import log, publish, run_header

from harness.library import ENTRIES, run_suite, SuiteEntry

ROWS = ("WO+RR", "WO", "Lexical+LR", "Cosinet+BiRNN", "Transformer", "Cascade a=0")
#: The row every other is compared with (``*`` on the page), and the significance level of both comparisons.
BASELINE = "WO+RR"
ALPHA = 0.05


def transformer_without_prior(seed):
    from harness.library import TransformerRanker

    return TransformerRanker(lexical_prior=False, random_state=seed)


def leaderboard(board: pd.DataFrame) -> list:
    """The rows of :func:`run_suite`'s leaderboard as dicts (missing values as None; the count of scored
    questions as an int), with ``differs_from_baseline``: the MAP differs from :data:`BASELINE`'s with
    p < :data:`ALPHA`."""
    rows = [{k: None if pd.isna(v) else v for k, v in r.items()} for r in board.to_dict("records")]
    return [{**r, "n_questions": None if r.get("n_questions") is None else int(r["n_questions"]),
             "differs_from_baseline": r.get("p_value") is not None and bool(r["p_value"] < ALPHA)} for r in rows]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train-article", default="Huguenot")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    args = parser.parse_args(argv)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    from harness.library import load_sample

    header = run_header("studies/unseen_articles.py", argv)
    X, y = load_sample()
    train = (X["title"] == args.train_article).to_numpy()
    if not train.any():
        raise SystemExit(f"no article {args.train_article!r}; the sample has {sorted(X['title'].unique())}")
    entries = [e for e in ENTRIES if e.name in ROWS]
    entries.append(SuiteEntry("Transformer, lexical_prior=False", transformer_without_prior,
                              description="the cross-encoder without its lexical prior"))
    start = time.perf_counter()
    board = run_suite(entries, X[train], y[train], X[~train], y[~train], random_state=args.seed, baseline=BASELINE,
                      progress=False, alpha=ALPHA)
    seconds = time.perf_counter() - start
    log(f"done in {seconds:.0f}s")
    res = {
        **header,
        "train_article": args.train_article,
        "seed": args.seed,
        "n_train_questions": X[train]["qid"].nunique(),
        "test_articles": sorted(X[~train]["title"].unique()),
        "baseline": BASELINE,
        "alpha": ALPHA,
        "board": leaderboard(board),
        "seconds": seconds,
    }
    print(publish(res, "unseen_articles").read_text())


if __name__ == "__main__":
    main()
