"""Model selection with Cosinet on WikiQA-train: the issue's GridSearchCV, and the batch size chosen on dev
(``cosinet_selection.toml``).

    python benchmarks/studies/cosinet_selection.py [--seeds 2] [--threads 1]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness

import pandas as pd
from harness import experiment, wikiqa_splits
from harness.library import Cosinet, evaluate, get_scorer
from harness.measure import timed
from harness.store import computing
from sklearn.model_selection import GridSearchCV, GroupKFold


def grid_search(X, y, config, budget):
    search = GridSearchCV(Cosinet(random_state=0, **budget), config["param_grid"], cv=GroupKFold(config["cv_folds"]),
                          scoring=get_scorer("map"))
    _, timing = timed(lambda X: search.fit(X, y, groups=X["qid"]), X)
    cv = pd.DataFrame(search.cv_results_)
    rows = [{"rnn": p["rnn"], "loss": p["loss"], "mean_map": float(m), "std_map": float(s), "mean_fit_s": float(f)}
            for p, m, s, f in zip(cv["params"], cv["mean_test_score"], cv["std_test_score"], cv["mean_fit_time"])]
    return {"param_grid": config["param_grid"], "cv_folds": config["cv_folds"], "rows": rows,
            "best_params": search.best_params_, "best_map": float(search.best_score_), "seconds": timing["seconds"]}


def batch_size_on_dev(splits, batch_sizes, budget, seeds):
    (X_tr, y_tr), (X_dev, y_dev) = splits["train"], splits["dev"]
    rows = []
    for bs in batch_sizes:
        maps = []
        for seed in range(seeds):
            est = Cosinet(**{**budget, "batch_size": bs}, random_state=seed).fit(X_tr, y_tr)
            maps.append(evaluate(y_dev, est.predict(X_dev), X_dev, metrics=("map",))["map"])
        rows.append({"batch_size": bs, "dev_map": maps})
    return rows


def run(exp, args, res):
    computing("a Cosinet fit")
    import torch

    torch.set_num_threads(args.threads)
    res["torch_threads"] = torch.get_num_threads()
    budget, splits = exp.paper["budget"], wikiqa_splits()
    X, y = splits["full"]
    res.update(budget=budget, library_default={k: v for k, v in Cosinet().get_params().items() if k in budget},
               train_questions=int(X["qid"].nunique()), train_rows=len(X),
               batch_size=batch_size_on_dev(splits, exp.config["batch_sizes"], budget, args.seeds),
               grid_search=grid_search(X, y, exp.config, budget))


if __name__ == "__main__":
    experiment.main(__file__, run)
