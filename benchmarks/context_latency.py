"""Latency of multi-way attention against the concatenation, as the context page measures it, without the
page's accuracy runs: ``ContextMWA`` vs ``ContextConcat`` (Han, Soldaini & Moschitti 2021, Table 2's latency).

    python benchmarks/context_latency.py [--data wikiqa squad] [--train-questions N] [--rows N] [--rounds N]

The Concat and MWA rows of ``benchmarks/context.py`` (same estimators, lengths, contexts and latency
measurement: ``context.latency``, forward passes of ``predict`` alone in batches of 128 test rows, with
dynamic and with fixed padding, median of interleaved rounds), fitted for one epoch on ``--train-questions``
training questions of each data set: a forward pass costs the same whatever the weights' values, so the
accuracy runs of the full page (three seeds, every row) are not needed to time them. Use it to re-measure the
latency after a change, and on a machine where the full page does not fit in the time at hand (a lent GPU).

Writes ``benchmarks/results/context_latency.json`` and ``docs/benchmarks/context_latency.md`` (``-<tag>``
with ``AS2RANK_BENCH_TAG``); ``python benchmarks/render.py context_latency`` renders the page again.
"""

from __future__ import annotations

import argparse
import time

from _common import conclude, fitted, log, run_header
from context import LATENCY_BATCH, MWA_OVER_CONCAT, PAPER, latency, load_data, make, subset_questions, with_context

ROWS = ("Concat", "MWA")


def run_dataset(name, args, fit_log) -> dict:
    data = load_data(name, quick=False)
    X_train, y_train = subset_questions(*data["train"], args.train_questions)
    X_test = data["test"][0]
    models, frames = {}, {}
    for row in ROWS:
        est, method = make(row, 1, 0)
        models[row] = fitted(est, with_context(X_train, method)[0], y_train, fit_log)
        frames[row] = with_context(X_test, method)[0]
    n_rows = min(args.rows, len(X_test))
    return {"n_train_questions": int(X_train["qid"].nunique()), "n_rows": n_rows,
            "latency": latency(models, frames, rounds=args.rounds, n_rows=n_rows)}


def acceptance(res) -> list:
    paper = PAPER["table2"]
    checks = []
    for name, data in res["datasets"].items():
        for mode in ("fixed", "dynamic"):
            lat = {row: v["ms_per_sample"] for row, v in data["latency"][mode].items()}
            ratio = lat["MWA"] / lat["Concat"]
            checks.append({"check": f"{name}, {mode} padding: MWA latency ≤ {MWA_OVER_CONCAT}× Concat (paper "
                                    f"{paper['MWA']['ms_per_sample'] / paper['Concat']['ms_per_sample']:.2f}×)",
                           "measured": f"{ratio:.2f}×", "pass": bool(ratio <= MWA_OVER_CONCAT)})
    return checks


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", nargs="+", choices=("wikiqa", "squad"), default=["wikiqa", "squad"])
    parser.add_argument("--train-questions", type=int, default=200, help="training questions of each fit (default 200)")
    parser.add_argument("--rows", type=int, default=512, help="test rows timed (default 512, as the context page)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    res = {**run_header("context_latency.py", argv), "latency_batch": LATENCY_BATCH, "rows": list(ROWS),
           "train_questions": args.train_questions, "rounds": args.rounds, "paper": PAPER, "datasets": {}}
    fit_log = []
    for name in args.data:
        log(f"== {name}")
        res["datasets"][name] = run_dataset(name, args, fit_log)
    res["fits"] = fit_log
    conclude(res, "context_latency", start, acceptance(res))


if __name__ == "__main__":
    main()
