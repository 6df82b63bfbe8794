"""How :class:`~as2rank.model_selection.selector.RankerSelector` chooses from its results and shows them: the choice
(:func:`choose`), a Markdown table and a plot of MAP against latency. NumPy/pandas only; the plot imports
matplotlib when called."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

__all__ = ["choose", "format_selection", "plot_selection"]


def format_selection(table: pd.DataFrame, *, alpha: float = 0.05, max_latency_ms=None, reason=None) -> str:
    """The selector's results (``RankerSelector.results_table()``) as a Markdown table with a footer.

    MAP columns are percentages: ``MAP`` over every question the candidate scored out of fold (± the
    standard deviation across folds), ``shared`` over the questions every evaluated candidate scored (what
    the best is chosen on). ``≈ best`` is ``yes`` when the paired randomisation test does not separate the
    candidate from the best at level ``alpha``. ``reason`` (the selector's ``choice_reason_``) ends the text
    with one line, ``Chosen: ...``.
    """
    lines = [
        "| model | MAP (%) | shared (%) | ≈ best | folds | trained on (questions/fold) | fit (s/fold) "
        "| latency (ms/question) | ECE | answer F1 (%) | chosen |",
        "| --- | ---: | ---: | :---: | ---: | ---: | ---: | ---: | ---: | ---: | :---: |",
    ]
    skipped = []
    for _, r in table.iterrows():
        if r["n_folds"] == 0:
            skipped.append(f"{r['model']}: {r['status']}")
            continue
        spread = f" ± {100 * r['map_std']:.2f}" if np.isfinite(r["map_std"]) else ""
        if pd.isna(r["p_vs_best"]):
            tied = "best"
        else:
            shown = "p<0.001" if r["p_vs_best"] < 0.001 else f"p={r['p_vs_best']:.3f}"
            tied = f"{'yes' if r['tied_with_best'] else 'no'} ({shown})"
        latency = f"{r['latency_ms']:.1f}" + ("" if r["within_budget"] else " (over budget)")
        lines.append(
            f"| {r['model']} | {100 * r['map']:.2f}{spread} | {100 * r['map_shared']:.2f} | {tied} | {int(r['n_folds'])} | "
            f"{_number(r.get('train_questions', np.nan), '.0f')} | "
            f"{r['fit_s']:.1f} | {latency} | {_number(r.get('ece'), '.3f')} | {_number(100 * r.get('answer_f1', np.nan))} | "
            f"{'**yes**' if r['chosen'] else ''} |"
        )
    evaluated = table[table["n_folds"] > 0]
    notes = [
        f"MAP over the questions each model scored out of fold (± across folds); shared: over the "
        f"{int(evaluated['n_questions'].min()) if len(evaluated) else 0} questions every model scored. ≈ best: not "
        f"significantly below the best (paired randomisation test over questions, p ≥ {alpha:g}). Latency: median "
        "over questions of the CPU time to rank one question's candidates on one thread of this machine (the least "
        "over at least 3 rounds of calls). ECE (calibration error of the candidate "
        "probabilities) and answer F1 (answering a question only when its top candidate is likely correct, over "
        "every question, those without a correct candidate included): each fold judged by a calibration and a "
        "threshold learned on the other folds; – with fewer than 3 folds."
    ]
    if max_latency_ms is not None:
        notes.append(f"Latency budget: {max_latency_ms:g} ms per question.")
    stopped = [f"{r['model']}: {r['status']}" for _, r in evaluated.iterrows() if "stopped" in str(r["status"])]
    if stopped or skipped:
        notes.append("Not run in full: " + "; ".join(stopped + skipped) + ".")
    if reason is not None:
        notes.append(f"\nChosen: {reason}")
    excluded = [f"{r['model']} ({r['status'].removeprefix('excluded: ')})" for _, r in table.iterrows()
                if str(r["status"]).startswith("excluded")]
    if excluded:
        notes.append("Not measured, so not in the choice: " + "; ".join(excluded) + ".")
    return "\n".join(lines) + "\n\n" + "\n".join(notes)


def _number(value, spec: str = ".2f") -> str:
    return "–" if value is None or not np.isfinite(value) else format(value, spec)


def plot_selection(table: pd.DataFrame, *, max_latency_ms=None, ax=None):
    """MAP (%) against the latency per question (log scale), one point per evaluated candidate with its
    spread across folds as an error bar; the choice is circled and the latency budget drawn.

    Returns
    -------
    matplotlib.axes.Axes
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4))
    shown = table[table["n_folds"] > 0]
    spread = np.nan_to_num(100 * shown["map_std"].to_numpy(dtype=float))
    ax.errorbar(shown["latency_ms"], 100 * shown["map"], yerr=spread, fmt="o", capsize=3)
    for _, r in shown.iterrows():
        ax.annotate(r["model"], (r["latency_ms"], 100 * r["map"]), textcoords="offset points", xytext=(5, 5))
    chosen = shown[shown["chosen"].astype(bool)]
    ax.scatter(chosen["latency_ms"], 100 * chosen["map"], s=250, facecolors="none", edgecolors="red", label="chosen")
    if max_latency_ms is not None:
        ax.axvline(max_latency_ms, linestyle="--", color="grey", label="latency budget")
    ax.set_xscale("log")
    ax.set_xlabel("latency per question (ms, log scale)")
    ax.set_ylabel("out-of-fold MAP (%)")
    ax.legend(loc="lower right")
    return ax


def choose(table: pd.DataFrame, *, max_latency_ms=None) -> tuple[int, str]:
    """The choice of :class:`~as2rank.model_selection.selector.RankerSelector` from its results: the candidate
    with the lowest latency among those within ``max_latency_ms`` that are not significantly below the best (``tied_with_best``).

    When no candidate within the budget is tied with the best, the one with the best shared MAP within the
    budget is chosen; when none is within it, the fastest; both with a warning. A pure function of the
    results, so that the choice under another budget needs no new cross-validation.

    Parameters
    ----------
    table : pandas.DataFrame
        ``RankerSelector.cv_results_`` as a frame (``results_table()``).
    max_latency_ms : float, default=None

    Returns
    -------
    index : int
        The row of ``table`` chosen.
    reason : str
        Why, in words.
    """
    evaluated = table[table["n_folds"] > 0]
    if evaluated.empty:
        raise ValueError("No candidate was evaluated: " + "; ".join(f"{m} {s}" for m, s in zip(table["model"],
                                                                                              table["status"])))
    best = evaluated.loc[evaluated["p_vs_best"].isna()].iloc[0]
    eligible = evaluated if max_latency_ms is None else evaluated[evaluated["latency_ms"] <= max_latency_ms]
    tied = eligible[eligible["tied_with_best"]]
    if len(tied):
        pick = tied.sort_values(["latency_ms", "fit_s"]).iloc[0]
        if pick["model"] == best["model"]:
            why = "the best MAP"
        else:
            why = (f"not significantly below the best ({best['model']}, MAP {100 * best['map_shared']:.2f}; "
                   f"p = {pick['p_vs_best']:.3f})")
        reason = (f"{pick['model']}: MAP {100 * pick['map_shared']:.2f} on the shared questions, {why}, "
                  f"{pick['latency_ms']:.1f} ms per question")
    elif len(eligible):
        pick = eligible.sort_values("map_shared", ascending=False).iloc[0]
        reason = (f"{pick['model']}: the best MAP within {max_latency_ms:g} ms per question "
                  f"({100 * pick['map_shared']:.2f}), significantly below {best['model']} "
                  f"({100 * best['map_shared']:.2f}, {best['latency_ms']:.1f} ms)")
        warnings.warn(f"No model within the latency budget matches the best; chose {reason}.", stacklevel=3)
    else:
        pick = evaluated.sort_values("latency_ms").iloc[0]
        reason = f"{pick['model']}: the fastest ({pick['latency_ms']:.1f} ms), none is within {max_latency_ms:g} ms"
        warnings.warn(f"No candidate meets max_latency_ms={max_latency_ms:g}; chose {reason}.", stacklevel=3)
    return int(pick.name), reason
