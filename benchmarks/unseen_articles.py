"""Defaults on articles the model never saw: train on the questions of one article of the bundled SQuAD sample,
test on the other three.

    python benchmarks/unseen_articles.py [--train-article Huguenot] [--seed 0] [--threads N]

The bundled sample holds four Wikipedia articles; the suite's split is by paragraph, so its train and test
questions share articles. Here the test articles are unseen, as on a user's own documents. The leaderboard
(``as2rank.suite.run_suite``: paired randomisation tests against the best row and against WO+RR) covers the
baselines and the transformer rankers with their library defaults, and the pure transformer
(``lexical_prior=False``) beside them. Writes ``docs/benchmarks/unseen_articles.md``.
"""

from __future__ import annotations

import argparse
import time

from _common import DOCS, log, run_header

from as2rank.suite import ENTRIES, SuiteEntry, format_leaderboard, run_suite

ROWS = ("WO+RR", "WO", "Lexical+LR", "Cosinet+BiRNN", "Transformer", "Cascade a=0")


def pure_transformer(seed):
    from as2rank import TransformerRanker

    return TransformerRanker(lexical_prior=False, random_state=seed)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train-article", default="Huguenot")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    args = parser.parse_args(argv)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    from as2rank.datasets import load_sample

    header = run_header("unseen_articles.py", argv)
    X, y = load_sample()
    train = (X["title"] == args.train_article).to_numpy()
    if not train.any():
        raise SystemExit(f"no article {args.train_article!r}; the sample has {sorted(X['title'].unique())}")
    entries = [e for e in ENTRIES if e.name in ROWS]
    entries.append(SuiteEntry("Transformer, lexical_prior=False", pure_transformer, description="the pure cross-encoder"))
    start = time.perf_counter()
    board = run_suite(entries, X[train], y[train], X[~train], y[~train], random_state=args.seed, progress=False)
    table = format_leaderboard(board)
    log(f"done in {time.perf_counter() - start:.0f}s")
    print(table)
    n_train = X[train]["qid"].nunique()
    tests = ", ".join(sorted(X[~train]["title"].unique()))
    lines = [
        "# The defaults on unseen articles",
        "",
        f"Trained on the {n_train} questions of the article *{args.train_article}* of the bundled SQuAD 2.0 sample, "
        f"tested on the questions of the other three ({tests}): no test question's article was seen in training. "
        "Every model at its library defaults (`random_state="
        f"{args.seed}`), and the transformer without its lexical prior.",
        "",
        table,
        "",
        "## Provenance",
        "",
        f"- `{header['command']}`: {header['date']} on {header['machine']}; torch {header['torch']} with "
        f"{header['torch_threads']} CPU threads; load at start {header['load_average_start']}; "
        f"{time.perf_counter() - start:.0f} s in all.",
        "",
    ]
    DOCS.mkdir(parents=True, exist_ok=True)
    (DOCS / "unseen_articles.md").write_text("\n".join(lines))
    log(f"wrote {DOCS / 'unseen_articles.md'}")


if __name__ == "__main__":
    main()
