"""First fit of the packaged BASE encoder (``model="mpnet-base"``, all-mpnet-base-v2: 12 layers, 768 wide) against
the default (``"minilm-l6"``, all-MiniLM-L6-v2: 6 layers, 384 wide) as ``TransformerRanker``'s backbone: what one
fit costs on the CPU, and a first MAP.

    nice -n 10 python benchmarks/studies/mpnet_first_fit.py [--questions 100] [--epochs N] [--threads 1] [--int8]

Each model is fitted at the library's defaults (``random_state=0``, ``n_threads`` = ``--threads``; ``--epochs``
overrides the default epochs, to time one epoch of a fit too long to run whole) on ``--questions`` answered
WikiQA-train questions, the first of a ``np.random.default_rng(0)`` permutation of the answered question ids,
and scored on WikiQA-test, clean protocol (``est.score``: MAP over the 243 answered questions, pessimistic ties).
Writes ``benchmarks/studies/results/mpnet_first_fit.json`` and ``docs/studies/mpnet_first_fit.md`` (from
``benchmarks/studies/pages/mpnet_first_fit.md.j2``): per model MAP, the wall and CPU times of ``fit`` and ``predict`` and their pairs per second
of wall time (training pairs × epochs run, over the fit's time: the prior's pretrained-encoder pass and the int8
calibration included), and the load average before and after: on a shared machine the CPU time of a one-thread
run is the steadier figure. ``--int8`` also scores the fitted model with ``precision="int8"`` (its int8 copy on ONNX
Runtime where installed, else torch's): the first call's time includes building the copy (the export), the second
is the steady prediction.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness

from harness import SHARED_DATA, load_average, publish, run_header


def training_questions(X, y, n: int):
    """The rows of the first ``n`` answered questions of a ``default_rng(0)`` permutation of the answered ids."""
    import numpy as np

    from harness.library import keep_answered

    X, y = keep_answered(X, y)
    chosen = np.random.default_rng(0).permutation(X["qid"].unique())[:n]
    keep = X["qid"].isin(chosen).to_numpy()
    return X[keep].reset_index(drop=True), np.asarray(y)[keep]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=int, default=100, help="answered training questions (default 100)")
    parser.add_argument("--epochs", type=int, default=None, help="override the default epochs (default: none)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--models", nargs="+", default=["mpnet-base", "minilm-l6"])
    parser.add_argument("--int8", action="store_true", help="also predict with precision='int8'")
    args = parser.parse_args(argv)
    folder = SHARED_DATA / "wikiqa"
    if not (folder / "WikiQA-train.tsv").is_file():
        raise SystemExit(f"{folder} has no WikiQA (set AS2RANK_SHARED_DATA)")
    import torch

    torch.set_num_threads(args.threads)
    res = {**run_header("studies/mpnet_first_fit.py", argv), "rows": []}
    from harness.library import keep_answered, load_wikiqa, TransformerRanker

    X, y = training_questions(*load_wikiqa(folder / "WikiQA-train.tsv"), args.questions)
    X_test, y_test = keep_answered(*load_wikiqa(folder / "WikiQA-test.tsv"))
    extra = {} if args.epochs is None else {"epochs": args.epochs}
    for model in args.models:
        est = TransformerRanker(model=model, random_state=0, n_threads=args.threads, **extra)
        load = load_average()
        start, cpu = time.perf_counter(), time.process_time()
        est.fit(X, y)
        fit_s, fit_cpu = time.perf_counter() - start, time.process_time() - cpu
        start, cpu = time.perf_counter(), time.process_time()
        map_ = est.score(X_test, y_test)
        predict_s, predict_cpu = time.perf_counter() - start, time.process_time() - cpu
        epochs = len(est.history_.epoch_loss)
        int8 = {}
        if args.int8:
            est.set_params(precision="int8")
            for call in ("first", "second"):
                start = time.perf_counter()
                int8["int8_map"] = 100 * est.score(X_test, y_test)
                int8[f"int8_{call}_predict_s"] = time.perf_counter() - start
            int8["int8_module"] = type(est.predictor(encoded=est.encode(X_test.head(2))).module).__name__
        res["rows"].append({
            "model": model, "map": 100 * map_, "train_questions": int(X["qid"].nunique()),
            "train_pairs": len(X), "epochs": epochs, "fit_s": fit_s, "fit_cpu_s": fit_cpu,
            "fit_pairs_per_s": len(X) * epochs / fit_s, "fit_pairs_per_cpu_s": len(X) * epochs / fit_cpu,
            "test_questions": int(X_test["qid"].nunique()), "test_pairs": len(X_test), "predict_s": predict_s,
            "predict_cpu_s": predict_cpu, "predict_pairs_per_s": len(X_test) / predict_s,
            "predict_pairs_per_cpu_s": len(X_test) / predict_cpu, "n_layers": est.n_layers_,
            "load_average": [load, load_average()], **int8,
        })
    res["load_average_end"] = load_average()
    publish(res, "mpnet_first_fit", template="mpnet_first_fit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
