"""The benchmark suite behind ``as2rank bench``: data splits, the models of the chosen suites, a leaderboard.

The models are the catalogue's (:mod:`as2rank.model_selection.catalogue`), each entry saying which suite it
belongs to. ``"default"`` entries are the cheap ones: they run offline on a CPU on the bundled sample; heavier
suites (``"neural"``, ``"transformers"``, ``"context"``) are opt-in. Models whose optional packages are missing
are reported as skipped, not failed.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd

from ..metrics import METRICS, compare, evaluate, per_question
from ..model_selection.catalogue import ENTRIES, SuiteEntry, get_entry

__all__ = ["select", "load_benchmark_data", "run_suite", "show_fit_progress", "format_leaderboard"]


def select(suites=("default",), models=None) -> list[SuiteEntry]:
    """The catalogue's entries of the given suites (``"all"`` for every suite), or of the given model names
    (case-insensitive, in their order), which override ``suites``."""
    suites = tuple(suites)
    known = {e.suite for e in ENTRIES}
    unknown = [s for s in suites if s != "all" and s not in known]
    if unknown:
        raise ValueError(f"Unknown suite(s) {unknown}; available: {sorted(known)} or 'all'.")
    if models:
        return [get_entry(m) for m in models]
    return [e for e in ENTRIES if "all" in suites or e.suite in suites]


def load_benchmark_data(data="sample", path=None, test_size=0.3, random_state=0):
    """Train and test splits for the suite.

    Parameters
    ----------
    data : {"sample", "squad", "wikiqa"}
        ``"sample"``: the SQuAD 2.0 sample bundled with as2rank; ``"squad"``: a SQuAD JSON at ``path``;
        for both, paragraphs (``doc_id``) are split into train and test so that no paragraph is in both.
        ``"wikiqa"``: the official splits, ``path`` being the folder with ``WikiQA-train.tsv`` and
        ``WikiQA-test.tsv``.
    path : str or os.PathLike, default=None
    test_size : float, default=0.3
        Fraction of paragraphs held out (sample and squad).
    random_state : int, default=0

    Returns
    -------
    X_train, y_train, X_test, y_test

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist, or the WikiQA folder lacks one of its two files.
    ValueError
        If ``path`` is missing or of the wrong kind (a folder for SQuAD, a file for WikiQA), or a file is
        not in the expected format.
    """
    import os

    from sklearn.model_selection import GroupShuffleSplit

    from .. import datasets

    if data == "wikiqa":
        if path is None:
            raise ValueError("--data wikiqa needs --path, the folder holding WikiQA-train.tsv and WikiQA-test.tsv.")
        _check_wikiqa_folder(os.fspath(path))
        X_train, y_train = datasets.load_wikiqa(os.path.join(path, "WikiQA-train.tsv"))
        X_test, y_test = datasets.load_wikiqa(os.path.join(path, "WikiQA-test.tsv"))
        return X_train, y_train, X_test, y_test
    if data == "sample":
        if path is not None:
            raise ValueError(
                f"--data sample reads the bundled sample, not --path {os.fspath(path)!r}; "
                "use --data squad or --data wikiqa to read a file."
            )
        X, y = datasets.load_sample()
    elif data == "squad":
        if path is None:
            raise ValueError("--data squad needs --path, a SQuAD v1.1/v2.0 JSON file.")
        X, y = datasets.load_squad_sent(path)
    else:
        raise ValueError(f"Unknown data {data!r}; use 'sample', 'squad' or 'wikiqa'.")
    split = GroupShuffleSplit(n_splits=1, test_size=test_size, random_state=random_state)
    train, test = next(split.split(X, y, groups=X["doc_id"]))
    return X.iloc[train], y[train], X.iloc[test], y[test]


def show_fit_progress(est) -> None:
    """Turn on the progress bars of ``est`` and of the estimators inside it (a Pipeline's steps), so that
    the leaderboard's bar is not the only sign of life during a long fit."""
    params = est.get_params()
    names = [k for k in params if k.endswith("__verbose")] if hasattr(est, "steps") else ["verbose"]
    names = [k for k in names if k in params and isinstance(params[k], bool)]
    if names:
        est.set_params(**{k: True for k in names})


def _check_wikiqa_folder(folder: str) -> None:
    """Refuse a WikiQA ``--path`` that is not a folder holding both official files, naming what is wrong."""
    import os

    expected = "--data wikiqa needs the folder holding WikiQA-train.tsv and WikiQA-test.tsv"
    if not os.path.exists(folder):
        raise FileNotFoundError(f"No folder at {folder!r}: {expected}.")
    if not os.path.isdir(folder):
        raise ValueError(f"{folder!r} is a file, not a folder: {expected}.")
    names = ("WikiQA-train.tsv", "WikiQA-test.tsv")
    missing = [name for name in names if not os.path.isfile(os.path.join(folder, name))]
    if missing:
        raise FileNotFoundError(f"The folder {folder!r} has no {' and no '.join(missing)}: {expected}.")


def run_suite(
    entries, X_train, y_train, X_test, y_test, *, random_state=0, baseline="WO+RR", progress=True, alpha=0.05
):
    """Fit every entry on the train split and evaluate it on the test split.

    Every row is compared with the best row (highest MAP) and with ``baseline`` by a paired randomisation
    test of per-question average precision (:func:`~as2rank.metrics.paired_significance`).

    Parameters
    ----------
    entries : list of SuiteEntry
    X_train, y_train, X_test, y_test
        Grouped-candidate data.
    random_state : int, default=0
    baseline : str, default="WO+RR"
        Row that the others are also compared with.
    progress : bool, default=True
        Show a progress bar over the models, and the models' own bars (epochs, batches) inside each fit.
    alpha : float, default=0.05
        Significance level: a row whose MAP does not differ from the best row's at this level is marked
        as tied with it (``tied_with_best``).

    Returns
    -------
    pandas.DataFrame
        One row per model: ``map``, ``mrr``, ``p@1``, ``ndcg@10`` (fractions; clean protocol, pessimistic
        ties), ``n_questions`` (test questions scored: those with a correct answer), ``fit_s``,
        ``predict_s``, ``p_value`` (MAP vs ``baseline``), ``p_vs_best`` (MAP vs the best row),
        ``tied_with_best`` (the best row, and every row with ``p_vs_best >= alpha``), ``status``.
    """
    from tqdm.auto import tqdm

    from ..text import tokenize

    tokenize(["Load spaCy now,", "so the first lexical model's time does not include it."])
    rows, per_q = [], {}
    bar = tqdm(entries, desc="as2rank bench", unit="model", disable=not progress)
    for entry in bar:
        bar.set_postfix_str(entry.name)
        missing = entry.missing()
        if missing:
            rows.append({"model": entry.name, "status": f"skipped: pip install {' '.join(missing)}"})
            continue
        est = entry.make(random_state)
        if progress:
            show_fit_progress(est)
        t0 = time.perf_counter()
        est.fit(X_train, y_train)
        t1 = time.perf_counter()
        scores = est.predict(X_test)
        t2 = time.perf_counter()
        report = evaluate(y_test, scores, X_test)
        per_q[entry.name] = per_question(y_test, scores, X_test)
        rows.append(
            {
                "model": entry.name,
                **{k: report[k] for k in METRICS},
                "n_questions": report["n_evaluated"],
                "fit_s": t1 - t0,
                "predict_s": t2 - t1,
                "status": "ok",
            }
        )
    board = pd.DataFrame(rows)
    if not per_q:
        return board

    def p_against(reference):
        tests = compare(per_q, reference, alpha=alpha)
        return [tests[m]["p"] if m in tests else np.nan for m in board["model"]]

    if baseline in per_q:
        board["p_value"] = p_against(baseline)
    best = max(per_q, key=lambda m: board.loc[board["model"] == m, "map"].iloc[0])
    board["p_vs_best"] = p_against(best)
    board["tied_with_best"] = [
        m == best or (m in per_q and p >= alpha) for m, p in zip(board["model"], board["p_vs_best"])
    ]
    return board


def format_leaderboard(board: pd.DataFrame, baseline="WO+RR", alpha=0.05) -> str:
    """The leaderboard of :func:`run_suite` as a Markdown table, best MAP first.

    Metrics are percentages. The ``≈ best`` column marks the best row and the rows whose MAP does not
    differ from it at level ``alpha``; ``*`` marks a MAP that differs from ``baseline``'s. Both use a paired
    randomisation test over questions. A footer says how many test questions were scored.
    """
    ok = board[board["status"] == "ok"].sort_values("map", ascending=False)
    lines = [
        "| model | MAP (%) | MRR (%) | P@1 (%) | nDCG@10 (%) | ≈ best | fit (s) | predict (s) |",
        "| --- | ---: | ---: | ---: | ---: | :---: | ---: | ---: |",
    ]
    for _, r in ok.iterrows():
        mark = "*" if "p_value" in r and r["p_value"] < alpha else ""
        if "tied_with_best" not in r:
            tied = ""
        elif pd.isna(r["p_vs_best"]):
            tied = "best"
        else:
            p = r["p_vs_best"]
            shown = "p<0.001" if p < 0.001 else f"p={p:.3f}"
            tied = f"{'yes' if r['tied_with_best'] else 'no'} ({shown})"
        lines.append(
            f"| {r['model']} | {100 * r['map']:.2f}{mark} | {100 * r['mrr']:.2f} | {100 * r['p@1']:.2f} | "
            f"{100 * r['ndcg@10']:.2f} | {tied} | {r['fit_s']:.2f} | {r['predict_s']:.2f} |"
        )
    for _, r in board[board["status"] != "ok"].iterrows():
        lines.append(f"| {r['model']} | {r['status']} | | | | | | |")
    notes = []
    if len(ok):
        counts = sorted(set(int(n) for n in ok["n_questions"]))
        notes.append(
            f"Scored on {' / '.join(map(str, counts))} test questions with a correct answer "
            "(clean protocol, pessimistic ties)."
        )
    if "tied_with_best" in board:
        notes.append(
            f"≈ best: the best MAP, and every MAP that does not differ from it with p < {alpha:g} "
            "(paired randomisation test over questions)."
        )
    if "p_value" in board:
        notes.append(f"`*`: MAP differs from {baseline} with p < {alpha:g} (same test).")
    if notes:
        lines.append("\n" + "\n".join(notes))
    return "\n".join(lines)
