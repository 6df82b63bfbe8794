"""CascadeTransformer ``exit_sampling="uniform"`` (the paper's) vs ``"all"`` on the bundled SQuAD sample.

    python benchmarks/exit_sampling.py [--seeds 0 1]

Both fit on ``load_benchmark_data("sample")`` with the training budget the comparison was made at (2 epochs,
learning rate 2e-5, no lexical prior; the cascade's other parameters at their defaults) and score the test
split at α=0 (MAP, pessimistic ties); the p-value is a paired randomisation test of per-question AP (mean over
seeds).
Prints the figures quoted in ``docs/guide/neural.md`` (section "Cascade Transformer").
"""

import argparse
import time

import numpy as np

from as2rank import CascadeTransformer
from as2rank.metrics import mean_average_precision, paired_significance
from as2rank.suite import load_benchmark_data

#: The training budget of the comparison (the cascade's defaults when it was made).
BUDGET = {"epochs": 2, "learning_rate": 2e-5, "lexical_prior": False, "segment_similarity": False, "early_stopping": False}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    args = parser.parse_args(argv)
    X, y, X_test, y_test = load_benchmark_data("sample", random_state=0)
    ap = {}
    for seed in args.seeds:
        for sampling in ("uniform", "all"):
            start = time.perf_counter()
            model = CascadeTransformer(exit_sampling=sampling, random_state=seed, **BUDGET).fit(X, y)
            ap[sampling, seed] = mean_average_precision(
                y_test, model.predict(X_test), X_test["qid"], position=X_test["position"], per_group=True
            )
            print(f"{sampling} seed {seed}: MAP {100 * ap[sampling, seed].mean():.2f} (fit {time.perf_counter() - start:.0f} s)")
    mean = {s: sum(ap[s, k] for k in args.seeds) / len(args.seeds) for s in ("uniform", "all")}
    for s in ("uniform", "all"):
        print(f"{s}: mean MAP {np.mean([100 * ap[s, k].mean() for k in args.seeds]):.2f}")
    print(f"p (paired randomisation over questions, AP averaged over seeds): {paired_significance(mean['all'], mean['uniform']):.4f}")


if __name__ == "__main__":
    main()
