"""Model selection on a user's own table: what ``as2rank select`` chooses, on a quiet machine and beside busy
loops, against every candidate on a test split.

    python benchmarks/selection.py [--questions 1000] [--seed 0] [--time-budget 1200] [--loads 0,2]
                                   [--budgets 20,100] [--no-test]

The table is a user's: WikiQA-train's questions (the answered ones first, then unanswered ones in file order,
``--questions`` in all) under column names of its own (``query_id, query, passage, relevant``), without a
position column, written as CSV. ``as2rank select`` runs on it as the README's command does (a process of its own,
its progress lines timed as they come), once per entry of ``--loads``: that many busy loops (processes that
only spin) run beside it on the machine's cores. Each run records when its first line came, how long its plan
took, each candidate's estimated against actual fold time and its latency; the acceptance compares the runs.
The choice under each latency budget of ``--budgets`` (milliseconds per question) comes from the first run's
cross-validation (``as2rank.app.selection_report.choose``). Then (unless ``--no-test``) every candidate the first run
evaluated is fitted on the whole table and scored on WikiQA-test (``as2rank.app.suite.run_suite``: a paired
randomisation test of each row against the best); the choice must not be significantly below the best. Writes
``benchmarks/results/selection.json`` and ``docs/benchmarks/selection.md`` (``AS2RANK_BENCH_TAG`` names a
machine's pages, e.g. ``selection-avx2``), and ``selection.png``: MAP against latency per question.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import pandas as pd
from harness import DOCS, SHARED_DATA, conclude, load_average, log, run_header, save_figure, tagged

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


def busy_loops(n: int) -> list:
    """``n`` processes that spin on a CPU each until killed."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def timed_select(train_csv: Path, output: Path, args, loads: int) -> dict:
    """One ``as2rank select`` run beside ``loads`` busy loops: its lines with the seconds since its start, its
    results (``--output``), the seconds to its first line and to its plan, and the load average before and after."""
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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--time-budget", type=float, default=1200.0)
    parser.add_argument("--loads", default="0,2", help="busy loops beside each run of select, one run per entry")
    parser.add_argument("--budgets", default="20,100", help="latency budgets (ms per question) to choose under")
    parser.add_argument("--no-test", action="store_true", help="only the selections, no fits on the whole table")
    args = parser.parse_args(argv)
    from as2rank.datasets import read_pairs
    from as2rank.app.selection import DEFAULT_CANDIDATES, GPU_CANDIDATES
    from as2rank.app.selection_report import choose
    from as2rank.app.suite import ENTRIES, run_suite

    header = run_header("selection.py", argv)
    start = time.perf_counter()
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
    defaults = [n for n in DEFAULT_CANDIDATES if n != "RR" and n not in GPU_CANDIDATES]
    res = {**header, "questions": X["qid"].nunique(), "pairs": len(X), "answered": int(pd.Series(y).groupby(
               X["qid"].to_numpy()).max().gt(0).sum()), "test_questions": X_test["qid"].nunique(), "seed": args.seed,
           "time_budget": args.time_budget, "runs": runs, "choices": choices, "alpha": ALPHA}
    plot(table, DOCS / tagged("selection.png"), budgets)
    checks = []
    for run in runs:
        name = "quiet" if run["loads"] == 0 else f"beside {run['loads']} busy loops"
        rows = {r["model"]: r for r in run["cv"]}
        ratios = {m: r["fold_estimate_s"] / r["fold_steady_s"] for m, r in rows.items() if r["n_folds"]}
        checks += [
            {"check": f"{name}: the first line within 5 s", "measured": f"{run['first_line_s']:.1f} s",
             "pass": run["first_line_s"] <= 5},
            {"check": f"{name}: the plan within 5 % of the budget",
             "measured": f"{run['plan_s']:.0f} s ({100 * run['plan_s'] / args.time_budget:.1f} %)",
             "pass": run["plan_s"] <= 0.05 * args.time_budget},
            {"check": f"{name}: every default candidate measured within the budget",
             "measured": ", ".join(f"{m}: {int(rows[m]['n_folds'])} fold(s)" for m in defaults),
             "pass": all(rows[m]["n_folds"] > 0 for m in defaults) and run["seconds"] <= args.time_budget + 60},
            {"check": f"{name}: fold time estimates within 2x of the actual",
             "measured": ", ".join(f"{m}: {r:.2f}" for m, r in ratios.items()),
             "pass": all(0.5 <= r <= 2 for r in ratios.values())},
        ]
    for run in runs[1:]:
        checks.append({"check": f"the same choice quiet and beside {run['loads']} busy loops",
                       "measured": f"{first['chosen']} / {run['chosen']}", "pass": first["chosen"] == run["chosen"]})
        quiet = {r["model"]: r["latency_ms"] for r in first["cv"] if r["n_folds"]}
        busy = {r["model"]: r["latency_ms"] for r in run["cv"] if r["n_folds"]}
        both = [m for m in quiet if m in busy]
        checks.append({"check": f"latency quiet and beside {run['loads']} busy loops within 30 %",
                       "measured": ", ".join(f"{m}: {busy[m] / quiet[m]:.2f}" for m in both),
                       "pass": all(abs(busy[m] / quiet[m] - 1) <= 0.3 for m in both)})
    for c in choices[1:]:
        checks.append({"check": f"the choice under {c['budget_ms']:g} ms respects the budget",
                       "measured": f"{c['model']}: {c['latency_ms']:.1f} ms", "pass": bool(c["latency_ms"] <= c["budget_ms"])})
    if not args.no_test:
        evaluated = [r["model"] for r in first["cv"] if r["n_folds"] > 0]
        entries = [e for e in ENTRIES if e.name in evaluated]
        board = run_suite(entries, X, y, X_test, y_test, random_state=args.seed, progress=False, alpha=ALPHA)
        res["test"] = records(board)
        rows = {r["model"]: r for r in res["test"]}
        chosen = rows[first["chosen"]]
        best = max(res["test"], key=lambda r: r["map"] if r["status"] == "ok" else -1)
        checks.append({"check": "the choice's test MAP is not significantly below the best candidate's",
                       "measured": f"{chosen['model']} {100 * chosen['map']:.2f} vs {best['model']} {100 * best['map']:.2f}"
                                   + ("" if chosen is best else f" (p = {chosen['p_vs_best']:.3f})"),
                       "pass": chosen is best or chosen["p_vs_best"] >= ALPHA})
    conclude(res, "selection", start, checks)


if __name__ == "__main__":
    main()
