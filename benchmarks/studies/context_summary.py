"""What the MWA classifier should read beside the attended views: the question and candidate tokens
(``ContextMWA(summary="pair")``) or the whole sequence, context included (``context_summary.toml``).

    python benchmarks/studies/context_summary.py [--data wikiqa|squad] [--seeds 0 1 2] [--epochs N] [--threads N]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness

from harness import experiment, fitted, log, store
from harness.contexts import config, load_data, make, with_context
from harness.library import compare, evaluate
from harness.measure import seeds_per_question, significance

METRICS = config()["defaults"]["metrics"]


def estimator(summary, epochs: int, seed: int):
    """The row's estimator: MWA with ``summary``, or (None) the no-context ranker."""
    if summary is None:
        return make("No context", epochs, seed)[0]
    return make("MWA", epochs, seed)[0].set_params(summary=summary)


def page(args) -> str:
    """The page of ``--data``: ``context_summary`` (WikiQA), ``context_summary-squad``."""
    return "context_summary" + ("" if args.data == "wikiqa" else f"-{args.data}")


def run(exp, args, res):
    start = time.perf_counter()
    args.epochs = args.epochs or config()["paper_budget"]["epochs"][args.data]
    data = load_data(args.data, quick=False)
    plain = {split: X for split, (X, _) in data.items()}
    cosine = {split: with_context(X, "cosine")[0] for split, X in plain.items()}
    frames = {row: plain if summary is None else cosine for row, summary in res["rows"].items()}  # MWA reads contexts
    (_, y_train), (_, y_dev), (_, y_test) = data["train"], data["dev"], data["test"]
    res.update(data=args.data, epochs=args.epochs, seeds=args.seeds,
               n_test_questions=int(plain["test"]["qid"].nunique()),
               alpha=config()["defaults"]["alpha"], n_resamples=significance()["n_resamples"], runs=[], fits=[])
    scores = {row: [] for row in res["rows"]}
    for seed in args.seeds:
        for row, summary in res["rows"].items():
            X, est = frames[row], estimator(summary, args.epochs, seed)
            model = fitted(est, X["train"], y_train, res["fits"], eval_set=(X["dev"], y_dev))
            scores[row].append(model.predict(X["test"]))
            history, fit = model.history_, res["fits"][-1]
            res["runs"].append({"row": row, "seed": seed,
                                **evaluate(y_test, scores[row][-1], X["test"], metrics=METRICS),
                                "epoch_loss": list(history.epoch_loss), "dev_map": list(history.eval_scores),
                                "fit_seconds": fit.get("fit_seconds"), "cached": fit["cached"]})
            log(f"{row}, seed {seed}: " + " ".join(f"{m} {res['runs'][-1][m]:.4f}" for m in METRICS))
        # Significance over the seeds every row finished: each question's AP and P@1 averaged over them.
        mean = {row: {m: seeds_per_question(y_test, scores[row], frames[row]["test"], m) for m in ("map", "p@1")}
                for row in res["rows"]}
        res["p"] = {f"{a} vs {b}": {m: compare({a: mean[a][m], b: mean[b][m]}, b)[a]["p"] for m in ("map", "p@1")}
                    for a, b in exp.config["pairs"]}
        if seed != args.seeds[-1] and not store.CACHED_ONLY:  # the seeds so far, should the run stop
            res["wall_seconds"] = time.perf_counter() - start
            exp.publish(res)
            log(f"{res['wall_seconds'] / 60:.1f} min so far")


if __name__ == "__main__":
    experiment.main(__file__, run, page=page)
