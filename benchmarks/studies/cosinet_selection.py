"""Model selection with Cosinet on WikiQA-train: the issue's GridSearchCV, and the batch size chosen on dev.

    python benchmarks/studies/cosinet_selection.py [--seeds 2] [--threads 1]

1. ``GridSearchCV(Cosinet(), {"rnn": [None, "birnn"], "loss": ["pointwise", "listwise"]},
   cv=GroupKFold(3), scoring=get_scorer("map"))`` fitted on the whole WikiQA-train (2,118 questions): the
   cross-validated MAP of every combination and the wall time of the search.
2. ``batch_size`` (questions per step) of the default listwise BiRNN, compared on the dev split held out
   from WikiQA-train (10% of its questions, ``harness.data.wikiqa_splits()``, as in ``benchmarks/cosinet.py``),
   never on test.

Every fit trains with the paper's budget (``benchmarks/papers/cosinet.json``; the batch-size comparison varies
its batch size). Writes ``benchmarks/studies/results/cosinet_selection.json`` and
``docs/studies/cosinet_selection.md`` (from ``benchmarks/studies/pages/cosinet_selection.md.j2``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness

import pandas as pd
import torch
from harness import publish, run_header, wikiqa_splits
from harness.experiment import read_paper
from sklearn.model_selection import GridSearchCV, GroupKFold

from harness.library import Cosinet, evaluate, get_scorer

BATCH_SIZES = (4, 8, 16, 32)
PARAM_GRID = {"rnn": [None, "birnn"], "loss": ["pointwise", "listwise"]}
CV_FOLDS = 3

COSINET_PAPER_BUDGET = read_paper("cosinet.json")["budget"]


def grid_search(X, y):
    search = GridSearchCV(
        Cosinet(random_state=0, **COSINET_PAPER_BUDGET),
        PARAM_GRID,
        cv=GroupKFold(CV_FOLDS),
        scoring=get_scorer("map"),
    )
    t0 = time.perf_counter()
    search.fit(X, y, groups=X["qid"])
    seconds = time.perf_counter() - t0
    cv = pd.DataFrame(search.cv_results_)
    rows = [
        {
            "rnn": p["rnn"],
            "loss": p["loss"],
            "mean_map": float(m),
            "std_map": float(s),
            "mean_fit_s": float(f),
        }
        for p, m, s, f in zip(cv["params"], cv["mean_test_score"], cv["std_test_score"], cv["mean_fit_time"])
    ]
    return {"param_grid": PARAM_GRID, "cv_folds": CV_FOLDS, "rows": rows, "best_params": search.best_params_,
            "best_map": float(search.best_score_), "seconds": seconds}


def batch_size_on_dev(splits, seeds):
    (X_tr, y_tr), (X_dev, y_dev) = splits["train"], splits["dev"]
    rows = []
    for bs in BATCH_SIZES:
        maps = []
        for seed in range(seeds):
            est = Cosinet(**{**COSINET_PAPER_BUDGET, "batch_size": bs}, random_state=seed).fit(X_tr, y_tr)
            maps.append(evaluate(y_dev, est.predict(X_dev), X_dev, metrics=("map",))["map"])
        rows.append({"batch_size": bs, "dev_map": maps})
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (1: robust on a shared machine)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    splits = wikiqa_splits()
    X, y = splits["full"]
    res = {
        **run_header("studies/cosinet_selection.py", argv),
        "budget": COSINET_PAPER_BUDGET,
        "library_default": {k: v for k, v in Cosinet().get_params().items() if k in COSINET_PAPER_BUDGET},
        "train_questions": int(X["qid"].nunique()),
        "train_rows": len(X),
        "batch_size": batch_size_on_dev(splits, args.seeds),
        "grid_search": grid_search(X, y),
    }
    print(publish(res, "cosinet_selection").read_text())


if __name__ == "__main__":
    main()
