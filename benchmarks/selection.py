"""Model selection on a user's own table: what ``as2rank select`` chooses, against every candidate on a test split.

    python benchmarks/selection.py [--questions 1000] [--seed 0] [--threads N] [--time-budget 1200]
                                   [--budgets 20,100] [--no-test]

The table is a user's: WikiQA-train's questions (the answered ones first, then unanswered ones in file order,
``--questions`` in all) under column names of its own (``query_id, query, passage, relevant``), without a
position column, written as CSV and read back with ``as2rank.datasets.read_pairs`` as the README's own-data
commands do. ``RankerSelector`` with its default candidates cross-validates them and chooses (timed from the
start of the probe to the choice: what ``as2rank select`` takes). Then every evaluated candidate is fitted on
the whole table and scored on WikiQA-test (``as2rank.app.suite.run_suite``: a paired randomisation test of each
row against the best); the choice must not be significantly below the best. The choice under each latency
budget of ``--budgets`` (milliseconds per question) comes from the same cross-validation
(``as2rank.app.selection.choose``). Writes ``benchmarks/results/selection.json`` and ``docs/benchmarks/selection.md``
(``AS2RANK_BENCH_TAG`` names a machine's pages, e.g. ``selection-avx2``), and ``selection.png``: MAP against
latency per question.
"""

from __future__ import annotations

import argparse
import csv
import tempfile
import time
import warnings
from pathlib import Path

import pandas as pd
from _common import DOCS, SHARED_DATA, conclude, log, run_header, save_figure, tagged

COLUMNS = {"qid": "query_id", "question": "query", "candidate": "passage", "label": "relevant"}
ALPHA = 0.05


def user_tables(n_questions: int, folder: Path) -> tuple[Path, Path]:
    """WikiQA-train (``n_questions`` questions) and WikiQA-test as a user's CSV files under :data:`COLUMNS`. A
    candidate repeated inside a test question (8 rows of WikiQA-test) is kept once, as ``read_pairs`` asks."""
    def read(name):
        return pd.read_csv(SHARED_DATA / "wikiqa" / name, sep="\t", quoting=csv.QUOTE_NONE, dtype=str,
                           keep_default_na=False)

    train, test = read("WikiQA-train.tsv"), read("WikiQA-test.tsv")
    answered = train.groupby("QuestionID", sort=False)["Label"].agg(lambda s: (s == "1").any())
    keep = list(answered[answered].index) + list(answered[~answered].index)
    train = train[train["QuestionID"].isin(keep[:n_questions])]
    names = {"QuestionID": COLUMNS["qid"], "Question": COLUMNS["question"], "Sentence": COLUMNS["candidate"],
             "Label": COLUMNS["label"]}
    paths = folder / "train.csv", folder / "test.csv"
    for table, path in zip((train, test), paths):
        table = table.rename(columns=names)[list(names.values())]
        table.drop_duplicates([COLUMNS["qid"], COLUMNS["candidate"]]).to_csv(path, index=False)
    return paths


def records(table: pd.DataFrame) -> list:
    """The rows of a results table as dicts, missing values as None."""
    return [{k: None if pd.isna(v) else v for k, v in r.items()} for r in table.to_dict("records")]


def plot(table: pd.DataFrame, path: Path, budgets) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from as2rank.app.selection_report import plot_selection

    ax = plot_selection(table)
    for budget in budgets:
        ax.axvline(budget, linestyle=":", color="grey")
    ax.set_title("Cross-validated MAP against latency (WikiQA-train as a user's table)", fontsize=9)
    save_figure(ax.figure, path)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--time-budget", type=float, default=1200.0)
    parser.add_argument("--budgets", default="20,100", help="latency budgets (ms per question) to choose under")
    parser.add_argument("--no-test", action="store_true", help="only the selection, no fits on the whole table")
    args = parser.parse_args(argv)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    from as2rank import RankerSelector
    from as2rank.datasets import read_pairs
    from as2rank.app.selection import choose
    from as2rank.app.suite import ENTRIES, run_suite

    header = run_header("selection.py", argv)
    start = time.perf_counter()
    budgets = [float(b) for b in args.budgets.split(",") if b]
    with tempfile.TemporaryDirectory() as folder:
        train_csv, test_csv = user_tables(args.questions, Path(folder))
        X, y = read_pairs(train_csv, **COLUMNS)
        X_test, y_test = read_pairs(test_csv, **COLUMNS)
    t0 = time.perf_counter()
    selector = RankerSelector(time_budget=args.time_budget, refit=False, random_state=args.seed).fit(X, y)
    select_s = time.perf_counter() - t0
    table = selector.results_table()
    choices = [{"budget_ms": None, "model": selector.best_name_, "reason": selector.choice_reason_}]
    for budget in budgets:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a budget that no tied model meets warns; the page says so
            index, reason = choose(table, max_latency_ms=budget)
        choices.append({"budget_ms": budget, "model": table.loc[index, "model"], "reason": reason,
                        "latency_ms": table.loc[index, "latency_ms"]})
    res = {**header, "questions": X["qid"].nunique(), "pairs": len(X), "answered": selector.n_questions_,
           "test_questions": X_test["qid"].nunique(), "seed": args.seed, "time_budget": args.time_budget,
           "select_seconds": select_s, "cv": records(table), "choices": choices, "alpha": ALPHA}
    plot(table, DOCS / tagged("selection.png"), budgets)
    checks = [{"check": "as2rank select on about 1,000 questions takes at most 20 minutes",
               "measured": f"{select_s / 60:.1f} min for {res['questions']:,} questions", "pass": select_s <= 1200}]
    for c in choices[1:]:
        checks.append({"check": f"the choice under {c['budget_ms']:g} ms respects the budget",
                       "measured": f"{c['model']}: {c['latency_ms']:.1f} ms", "pass": bool(c["latency_ms"] <= c["budget_ms"])})
    if not args.no_test:
        evaluated = [r["model"] for r in res["cv"] if r["n_folds"] > 0]
        entries = [e for e in ENTRIES if e.name in evaluated]
        board = run_suite(entries, X, y, X_test, y_test, random_state=args.seed, progress=False, alpha=ALPHA)
        res["test"] = records(board)
        rows = {r["model"]: r for r in res["test"]}
        chosen = rows[selector.best_name_]
        best = max(res["test"], key=lambda r: r["map"] if r["status"] == "ok" else -1)
        checks.append({"check": "the choice's test MAP is not significantly below the best candidate's",
                       "measured": f"{chosen['model']} {100 * chosen['map']:.2f} vs {best['model']} {100 * best['map']:.2f}"
                                   + ("" if chosen is best else f" (p = {chosen['p_vs_best']:.3f})"),
                       "pass": chosen is best or chosen["p_vs_best"] >= ALPHA})
    conclude(res, "selection", start, checks)
    log(selector.format_table())


if __name__ == "__main__":
    main()
