"""Model selection on a user's own table: what ``as2rank select`` chooses, on a quiet machine and beside busy
loops, against every candidate on a test split (``selection.toml``).

    python benchmarks/selection.py [--questions 1000] [--seed 0] [--time-budget 1200] [--loads 0,2]
                                   [--budgets 20,100] [--no-test]

``AS2RANK_BENCH_TAG`` names a machine's pages, e.g. ``selection-avx2``; ``selection.png``: MAP against latency.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import pandas as pd
from harness import SHARED_DATA, experiment, figure_path, load_average, log, pyplot, save_figure
from harness.experiment import Experiment
from harness.library import DEFAULT_CANDIDATES, ENTRIES, GPU_CANDIDATES, choose, plot_selection, read_pairs, run_suite
from harness.store import computing

COLUMNS = Experiment(__file__).config["columns"]


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
    pyplot()
    ax = plot_selection(table)
    for budget in budgets:
        ax.axvline(budget, linestyle=":", color="grey")
    ax.set_title("Cross-validated MAP against latency (WikiQA-train as a user's table)", fontsize=9)
    save_figure(ax.figure, path)


def busy_loops(n: int) -> list:
    """``n`` processes that spin on a CPU each until killed."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def timed_select(train_csv: Path, output: Path, args, loads: int) -> dict:
    """One ``as2rank select`` run beside ``loads`` busy loops: its lines with the seconds since its start, its
    results (``--output``), the seconds to its first line and to its plan, and the load average before and after."""
    computing("a run of as2rank select")
    cmd = [sys.executable, "-m", "as2rank", "select", str(train_csv), "--qid", COLUMNS["qid"], "--question",
           COLUMNS["question"], "--candidate", COLUMNS["candidate"], "--label", COLUMNS["label"], "--seed",
           str(args.seed), "--time-budget", str(args.time_budget), "--output", str(output)]
    loops = busy_loops(loads)
    try:
        time.sleep(5 if loads else 0)  # the loops running before select starts
        load_before = load_average()
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines = []
        for line in proc.stdout:
            lines.append((round(time.perf_counter() - start, 1), line.rstrip("\n")))
            log(f"[{lines[-1][0]:7.1f} s] {lines[-1][1]}")
        seconds = time.perf_counter() - start
        if proc.wait() != 0:
            raise SystemExit(f"as2rank select failed:\n" + "\n".join(text for _, text in lines[-30:]))
    finally:
        for loop in loops:
            loop.kill()
    result = json.loads(output.read_text())
    plan = next(t for t, text in lines if text.startswith("Timing took"))
    return {"loads": loads, "load_average_before": load_before, "load_average_after": load_average(),
            "seconds": seconds, "first_line_s": lines[0][0], "plan_s": plan, "lines": lines,
            "chosen": result["chosen"], "reason": result["reason"], "cv": result["rows"]}


def checks(exp, res) -> list:
    """The checks of ``selection.toml``, with what they compare computed here: each run's estimated over actual
    fold times, the latencies of two runs' common candidates, the default candidates."""
    defaults = [n for n in DEFAULT_CANDIDATES if n != "RR" and n not in GPU_CANDIDATES]
    latency = lambda run: {r["model"]: r["latency_ms"] for r in run["cv"] if r["n_folds"]}  # noqa: E731
    return exp.checks(
        res, defaults=defaults,
        fold_ratios=lambda run: {r["model"]: r["fold_estimate_s"] / r["fold_steady_s"] for r in run["cv"] if r["n_folds"]},
        latencies=lambda quiet, busy: {m: latency(busy)[m] / q for m, q in latency(quiet).items() if m in latency(busy)},
        all_measured=lambda rows: all(rows[m]["n_folds"] > 0 for m in defaults),
        close_to_one=lambda ratios, tolerance: all(abs(r - 1) <= tolerance for r in ratios.values()),
        best_test=lambda rows: max(rows, key=lambda r: r["map"] if r["status"] == "ok" else -1))


def run(exp, args, res):
    budgets = [float(b) for b in args.budgets.split(",") if b]
    with tempfile.TemporaryDirectory() as folder:
        train_csv, test_csv = user_tables(args.questions, Path(folder))
        X, y = read_pairs(train_csv, **COLUMNS)
        X_test, y_test = read_pairs(test_csv, **COLUMNS)
        runs = [timed_select(train_csv, Path(folder) / f"select-{i}.json", args, int(n))
                for i, n in enumerate(args.loads.split(","))]
    first = runs[0]
    table = pd.DataFrame(first["cv"])
    choices = [{"budget_ms": None, "model": first["chosen"], "reason": first["reason"]}]
    for budget in budgets:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a budget that no tied model meets warns; the page says so
            index, reason = choose(table, max_latency_ms=budget)
        choices.append({"budget_ms": budget, "model": table.loc[index, "model"], "reason": reason,
                        "latency_ms": table.loc[index, "latency_ms"]})
    res.update(questions=X["qid"].nunique(), pairs=len(X),
               answered=int(pd.Series(y).groupby(X["qid"].to_numpy()).max().gt(0).sum()),
               test_questions=X_test["qid"].nunique(), seed=args.seed, time_budget=args.time_budget, runs=runs,
               choices=choices)
    plot(table, figure_path("selection", "selection.png"), budgets)
    if not args.no_test:
        evaluated = [r["model"] for r in first["cv"] if r["n_folds"] > 0]
        board = run_suite([e for e in ENTRIES if e.name in evaluated], X, y, X_test, y_test, random_state=args.seed,
                          progress=False, alpha=res["alpha"])
        res["test"] = records(board)


if __name__ == "__main__":
    experiment.main(__file__, run, checks=checks)
