"""CascadeTransformer ``exit_sampling="uniform"`` (the paper's) vs ``"all"`` (the default) on the bundled SQuAD
sample.

    python benchmarks/studies/exit_sampling.py [--seeds 0 1]

Both fit on ``load_benchmark_data("sample")`` with the training budget the comparison was made at (2 epochs,
learning rate 2e-5, no lexical prior, no segment similarity, no early stopping; the cascade's other parameters at
their defaults) and score the test split at α=0 (the last exit: MAP, pessimistic ties). The p-value is a paired
randomisation test of per-question AP, averaged over the seeds.

Writes ``benchmarks/studies/results/exit_sampling.json`` and ``docs/studies/exit_sampling.md`` (``-<tag>`` with
``AS2RANK_BENCH_TAG``); ``python benchmarks/render.py exit_sampling`` renders the page again.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness

from harness import conclude, fitted, log, run_header

#: The training budget of the comparison (the cascade's defaults when it was made).
BUDGET = {"epochs": 2, "learning_rate": 2e-5, "lexical_prior": False, "segment_similarity": False, "early_stopping": False}
SAMPLINGS = ("uniform", "all")


def main(argv=None):
    from harness.library import CascadeTransformer, load_benchmark_data, mean_average_precision, paired_significance

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    args = parser.parse_args(argv)
    start = time.perf_counter()
    res = {**run_header("studies/exit_sampling.py", argv), "budget": BUDGET, "seeds": args.seeds, "runs": {}, "fits": []}
    X, y, X_test, y_test = load_benchmark_data("sample", random_state=0)
    res.update(train_questions=int(X["qid"].nunique()), test_questions=int(X_test["qid"].nunique()))
    ap = {}
    for sampling in SAMPLINGS:
        res["runs"][sampling] = []
        for seed in args.seeds:
            model = fitted(CascadeTransformer(exit_sampling=sampling, random_state=seed, **BUDGET), X, y, res["fits"])
            ap[sampling, seed] = mean_average_precision(
                y_test, model.predict(X_test), X_test["qid"], position=X_test["position"], per_group=True
            )
            res["runs"][sampling].append({"seed": seed, "map": float(ap[sampling, seed].mean())})
            log(f"{sampling} seed {seed}: MAP {100 * ap[sampling, seed].mean():.2f}")
    mean = {s: sum(ap[s, k] for k in args.seeds) / len(args.seeds) for s in SAMPLINGS}
    res["map"] = {s: float(mean[s].mean()) for s in SAMPLINGS}
    res["p"] = paired_significance(mean["all"], mean["uniform"])
    checks = [{"check": 'exit_sampling="all" (the default) above "uniform", paired randomisation test p < 0.05',
               "measured": f"{100 * res['map']['all']:.2f} vs {100 * res['map']['uniform']:.2f}, p = {res['p']:.4f}",
               "pass": bool(res["map"]["all"] > res["map"]["uniform"] and res["p"] < 0.05)}]
    conclude(res, "exit_sampling", start, checks)


if __name__ == "__main__":
    main()
