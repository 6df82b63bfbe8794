"""What the MWA classifier should read beside the attended views: the question and candidate tokens
(``ContextMWA(summary="pair")``) or the whole sequence, context included (``summary="sequence"``).

    python benchmarks/studies/context_summary.py [--data wikiqa|squad] [--seeds 0 1 2] [--epochs N] [--threads N]

The splits, contexts (cosine global context), backbone and training budget of ``benchmarks/context.py``
(``harness.contexts.make``: batch 32, learning rate 1e-4, the epochs of the data set; early stopping on the dev split),
one fit per (row, seed): No context (``TransformerRanker``), MWA with each summary. Reports test P@1, MAP and
MRR per seed and as mean ± std, the paired per-seed Δ of the two summaries, and a paired randomisation test
(9,999 sign flips) of per-question AP and P@1 averaged over the seeds. Results are written after every seed,
so an interrupted run leaves the seeds it finished.

Writes ``benchmarks/studies/results/context_summary.json`` and ``docs/studies/context_summary.md`` (``-squad``
before the extension for the SQuAD sample), from ``benchmarks/studies/pages/context_summary.md.j2``; ``python
benchmarks/render.py context_summary`` renders the page again from the JSON.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness

import pandas as pd
import torch
from harness import fitted, log, publish, run_header
from harness.contexts import config, load_data, make, with_context
from harness.library import compare, evaluate, per_question
from harness.measure import significance

ALPHA, METRICS, EPOCHS = config()["defaults"]["alpha"], config()["defaults"]["metrics"], config()["paper_budget"]["epochs"]

#: The rows: each MWA row's ``summary`` (None: the no-context ``TransformerRanker``).
ROWS = {"No context": None, "MWA, pair summary": "pair", "MWA, sequence summary": "sequence"}
#: The significance tests: (row, reference row).
PAIRS = (("MWA, pair summary", "MWA, sequence summary"), ("MWA, pair summary", "No context"),
         ("MWA, sequence summary", "No context"))


def output_name(data: str) -> str:
    return f"context_summary{'' if data == 'wikiqa' else '-' + data}"


def estimator(row: str, epochs: int, seed: int):
    if ROWS[row] is None:
        return make("No context", epochs, seed)[0]
    return make("MWA", epochs, seed)[0].set_params(summary=ROWS[row])


def run(args, res, write) -> None:
    data = load_data(args.data, quick=False)
    frames = {split: with_context(X, "cosine")[0] for split, (X, _) in data.items()}
    (_, y_train), (_, y_dev), (_, y_test) = data["train"], data["dev"], data["test"]
    per_q = {row: {m: [] for m in ("map", "p@1")} for row in ROWS}
    for seed in args.seeds:
        for row in ROWS:
            X = {split: data[split][0] for split in data} if ROWS[row] is None else frames
            model = fitted(estimator(row, args.epochs, seed), X["train"], y_train, res["fits"], eval_set=(X["dev"], y_dev))
            scores = model.predict(X["test"])
            run_ = {"row": row, "seed": seed, **evaluate(y_test, scores, X["test"], metrics=METRICS),
                    "epoch_loss": list(model.history_.epoch_loss), "dev_map": list(model.history_.eval_scores),
                    "fit_seconds": res["fits"][-1].get("fit_seconds"), "cached": res["fits"][-1]["cached"]}
            res["runs"].append(run_)
            for m in per_q[row]:
                per_q[row][m].append(per_question(y_test, scores, X["test"], m))
            log(f"{row}, seed {seed}: " + " ".join(f"{m} {run_[m]:.4f}" for m in METRICS))
        # Significance over the seeds every row finished.
        mean = {row: {m: pd.concat(v, axis=1).mean(axis=1) for m, v in per_q[row].items()} for row in ROWS}
        res["p"] = {
            f"{a} vs {b}": {m: compare({a: mean[a][m], b: mean[b][m]}, b)[a]["p"] for m in ("map", "p@1")}
            for a, b in PAIRS
        }
        write(res)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", choices=("wikiqa", "squad"), default="wikiqa")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=None, help="training epochs (default: those of benchmarks/context.toml)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    args = parser.parse_args(argv)
    args.epochs = args.epochs or EPOCHS[args.data]
    if args.threads:
        torch.set_num_threads(args.threads)
    start = time.perf_counter()
    n_test = load_data(args.data, quick=False)["test"][0]["qid"].nunique()
    res = {**run_header("studies/context_summary.py", argv), "data": args.data, "epochs": args.epochs, "seeds": args.seeds,
           "n_test_questions": int(n_test), "rows": ROWS, "alpha": ALPHA, "n_resamples": significance()["n_resamples"], "runs": [], "fits": []}

    def write(res):
        res["wall_seconds"] = time.perf_counter() - start
        publish(res, output_name(args.data), template="context_summary")
        log(f"{res['wall_seconds'] / 60:.1f} min so far")

    run(args, res, write)


if __name__ == "__main__":
    main()
