"""CascadeTransformer ``exit_sampling="uniform"`` (the paper's) vs ``"all"`` (the default) on the bundled SQuAD
sample (``exit_sampling.toml``).

    python benchmarks/studies/exit_sampling.py [--seeds 0 1] [--threads N]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness

from harness import experiment, fitted, log
from harness.library import CascadeTransformer, load_benchmark_data, paired_significance, per_question
from harness.measure import seeds_per_question


def run(exp, args, res):
    X, y, X_test, y_test = load_benchmark_data("sample", random_state=0)
    res.update(seeds=args.seeds, runs={}, fits=[], train_questions=int(X["qid"].nunique()),
               test_questions=int(X_test["qid"].nunique()))
    scores = {}
    for sampling in exp.config["samplings"]:
        res["runs"][sampling], scores[sampling] = [], []
        for seed in args.seeds:
            est = CascadeTransformer(exit_sampling=sampling, random_state=seed, **res["budget"])
            scores[sampling].append(fitted(est, X, y, res["fits"]).predict(X_test))
            ap = float(per_question(y_test, scores[sampling][-1], X_test).mean())
            res["runs"][sampling].append({"seed": seed, "map": ap})
            log(f"{sampling} seed {seed}: MAP {100 * ap:.2f}")
    # Each question's AP averaged over the seeds: what the paired test compares.
    mean = {s: seeds_per_question(y_test, scores[s], X_test) for s in scores}
    res["map"] = {s: float(m.mean()) for s, m in mean.items()}
    res["p"] = paired_significance(mean["all"], mean["uniform"])


if __name__ == "__main__":
    experiment.main(__file__, run)
