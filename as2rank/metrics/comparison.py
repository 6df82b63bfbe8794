"""Scoring a model's predictions on a test frame and comparing models question by question: what
``as2rank bench`` and the benchmark scripts of the repository share.

:func:`~as2rank.metrics.evaluate` gives the summary metrics of one run, :func:`~as2rank.metrics.per_question`
one metric per question (the unit of the significance tests), and :func:`~as2rank.metrics.compare` tests every
run against a reference run with :func:`~as2rank.metrics.paired_significance`, a paired randomisation test over
questions. All follow the clean protocol of the ranking measures (questions without a correct answer are
skipped) and rank ties pessimistically unless told otherwise. NumPy only: importable without torch (SciPy
loads when a test runs).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .ranking import mean_average_precision, mean_reciprocal_rank, precision_at_k, ranking_report

__all__ = ["METRICS", "compare", "evaluate", "per_question", "paired_significance"]

#: The summary metrics of :func:`~as2rank.metrics.evaluate`, as fractions.
METRICS = ("map", "mrr", "p@1", "ndcg@10")

_PER_QUESTION = {
    "map": mean_average_precision,
    "mrr": mean_reciprocal_rank,
    "p@1": lambda y, s, g, **kw: precision_at_k(y, s, g, k=1, **kw),
}


def _position(X, use_position):
    return X["position"].to_numpy() if use_position and "position" in X else None


def evaluate(y, scores, X, *, metrics=METRICS, ties="pessimistic", use_position=True) -> dict:
    """The summary metrics of one run on a grouped-candidate test frame.

    Parameters
    ----------
    y : array-like of shape (n_rows,)
        Relevance labels of the rows of ``X``.
    scores : array-like of shape (n_rows,)
        The run's scores, higher is better.
    X : pandas.DataFrame
        Grouped-candidate frame: ``qid``, and ``position`` (the original order, used by ``ties="stable"``
        and ``"trec_eval"``) where there is one.
    metrics : tuple of str, default=METRICS
        Any of ``"map"``, ``"mrr"``, ``"p@k"`` and ``"ndcg@k"``.
    ties : str, default="pessimistic"
        As in :func:`~as2rank.metrics.mean_average_precision`.
    use_position : bool, default=True
        Pass ``X["position"]`` to the metrics.

    Returns
    -------
    dict
        Each metric as a float fraction, and ``n_evaluated``: the questions that entered the means.
    """
    cut = {"p": set(), "ndcg": set()}
    for metric in metrics:
        if "@" in metric:
            name, k = metric.split("@")
            cut[name].add(int(k))
        elif metric not in ("map", "mrr"):
            raise ValueError(f"Unknown metric {metric!r}; use 'map', 'mrr', 'p@k' or 'ndcg@k'.")
    report = ranking_report(y, scores, X["qid"].to_numpy(), ties=ties, position=_position(X, use_position),
                            k=tuple(sorted(cut["p"])), ndcg_k=tuple(sorted(cut["ndcg"])))
    return {m: float(report[m]) for m in metrics} | {"n_evaluated": int(report["n_evaluated"])}


def per_question(y, scores, X, metric="map", *, ties="pessimistic", use_position=True) -> pd.Series:
    """One value of ``metric`` (``"map"``: average precision, ``"mrr"``: reciprocal rank, ``"p@1"``) per
    question, indexed by ``qid`` (NaN for a question without a correct answer, which :func:`compare`
    skips): what :func:`compare` tests."""
    if metric not in _PER_QUESTION:
        raise ValueError(f"per_question takes {sorted(_PER_QUESTION)}, got {metric!r}.")
    return _PER_QUESTION[metric](y, scores, X["qid"].to_numpy(), ties=ties, position=_position(X, use_position),
                                 per_group=True)


def compare(per_q: dict, reference: str, *, alpha: float = 0.05) -> dict:
    """Each run's two-sided p-value against ``reference`` (paired randomisation over the questions both
    scored), ``nan`` for the reference itself; ``per_q`` maps run names to :func:`per_question` series.

    Returns
    -------
    dict
        ``{name: {"p": float, "differs": bool}}`` where ``differs`` is ``p < alpha``.
    """
    if reference not in per_q:
        raise KeyError(f"No run named {reference!r}; runs: {sorted(per_q)}.")
    out = {}
    for name, values in per_q.items():
        p = np.nan if name == reference else paired_significance(values, per_q[reference])
        out[name] = {"p": p, "differs": bool(p < alpha)}
    return out


def paired_significance(a, b, *, method="randomization", n_resamples=9999, random_state=0) -> float:
    """Two-sided p-value that two systems differ, from their per-question scores.

    Parameters
    ----------
    a, b : pandas.Series or array-like
        Per-question values of one metric for two systems (e.g. ``per_group=True`` output); Series are
        aligned on their index and questions missing (NaN) in either are dropped.
    method : {"randomization", "ttest"}, default="randomization"
        Paired randomisation (sign-flip permutation) test, as IR evaluation tools use, or paired t-test.
    n_resamples : int, default=9999
        Permutations for the randomisation test.
    random_state : int, default=0

    Returns
    -------
    float
    """
    from scipy import stats

    if isinstance(a, pd.Series) and isinstance(b, pd.Series):
        a, b = a.align(b, join="inner")
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"a and b must have the same shape, got {a.shape} and {b.shape}.")
    keep = ~(np.isnan(a) | np.isnan(b))
    a, b = a[keep], b[keep]
    if len(a) < 2 or np.allclose(a, b):
        return 1.0
    if method == "ttest":
        return float(stats.ttest_rel(a, b).pvalue)
    if method != "randomization":
        raise ValueError(f"method must be 'randomization' or 'ttest', got {method!r}.")
    result = stats.permutation_test(
        (a - b,),
        np.mean,
        permutation_type="samples",
        n_resamples=n_resamples,
        alternative="two-sided",
        random_state=random_state,
        vectorized=True,
    )
    return float(result.pvalue)
