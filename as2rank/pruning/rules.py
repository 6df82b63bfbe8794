"""Candidate pruning without torch: the drop rule, the scores of dropped rows, the cost model, α tuning.

* :func:`drop_lowest`: the per-question drop rule of the Cascade Transformer (Soldaini & Moschitti, 2020)
  and of :class:`~as2rank.pruning.sequential.SequentialRanker`.
* :func:`simulate_cascade`: the scores and cost of :class:`~as2rank.transformer.cascade.CascadeTransformer` for given
  drop ratios, from the logits of all its exits.
* :func:`tune_alpha`: per-exit drop ratios maximising a dev metric under a relative-cost budget, from one
  pass of the encoder (α acts only at inference).
* What the cascade's torch code shares with them: :func:`stage_scores` (the scores of dropped rows),
  :func:`cost_report` (the cost model), :func:`check_drop_ratios` and :data:`DROP_RATIO_CONSTRAINTS` (α).

**Scores of dropped rows.** A row that stopped at exit (or step) ``e`` of ``n`` gets
``clip(logit_e) − (n − 1 − e) · EXIT_GAP`` with ``EXIT_GAP = 1e4`` and logits clipped to
``[−EXIT_GAP/2, EXIT_GAP/2)``: rows that reached the last exit keep their raw score (so α=0 gives exactly
the final classifier's logits), and any row dropped earlier scores below every row that went further, so
``predict`` and ``predict_rank`` agree.

**Cost.** The relative cost is the paper's, per batch: the sum over layers of the rows each layer processed,
divided by ``layers × initial rows`` (1.0 = the monolithic model).

This module imports NumPy, pandas and scikit-learn, never torch.
"""

from __future__ import annotations

import itertools
from numbers import Real

import numpy as np
import pandas as pd
from sklearn.utils.validation import check_is_fitted

from ..data import GroupIndex, check_ranking_data, ragged_arange
from ..metrics import get_scorer
from ..params import Interval, SequenceOf, check_param

__all__ = ["DROP_RATIO_CONSTRAINTS", "EXIT_GAP", "check_drop_ratios", "cost_report", "drop_lowest", "n_dropped",
           "simulate_cascade", "stage_scores", "tune_alpha"]

#: Score gap between consecutive exits (see the module docstring).
EXIT_GAP = 1e4

#: Accepted values of a drop ratio α (``alpha`` of the cascade, the ``grid`` of :func:`tune_alpha`): one value
#: in [0, 1) for every pruning stage, or one per stage.
DROP_RATIO_CONSTRAINTS = [Interval(Real, 0, 1, closed="left"), SequenceOf(Interval(Real, 0, 1, closed="left"))]


def n_dropped(counts, alpha: float) -> np.ndarray:
    """How many rows a drop of ratio ``alpha`` removes from groups of ``counts`` rows: ``floor(alpha · k)``."""
    # The small epsilon keeps products such as 0.29 * 100 = 28.999999999999996 at their exact floor.
    return np.floor(alpha * np.asarray(counts) + 1e-9).astype(np.int64)


def drop_lowest(codes: np.ndarray, scores: np.ndarray, alpha: float) -> np.ndarray:
    """Which rows survive dropping the ``floor(alpha · k)`` lowest-scoring rows of each group of ``k``.

    Rows must be listed in their original order inside each group: among equal scores the later row is
    dropped first, as :meth:`~as2rank.data.GroupIndex.rank` ranks it lower.

    Parameters
    ----------
    codes : ndarray of int, shape (n,)
        Group of each row.
    scores : ndarray of shape (n,)
    alpha : float in [0, 1)

    Returns
    -------
    ndarray of bool, shape (n,)
    """
    n = len(codes)
    order = np.lexsort((-np.arange(n), scores, codes))  # worst first inside each group
    _, counts = np.unique(codes[order], return_counts=True)
    n_drop = n_dropped(counts, alpha)
    dropped = ragged_arange(counts) < np.repeat(n_drop, counts)
    keep = np.ones(n, dtype=bool)
    keep[order[dropped]] = False
    return keep


def stage_scores(scores, reached, n_stages):
    """Scores of rows that stopped at stage ``reached`` of ``n_stages`` (see the module docstring): clipped,
    then lowered by ``EXIT_GAP`` per stage they did not reach, so that a row dropped earlier ranks below every
    row that went further.

    Parameters
    ----------
    scores : ndarray of shape (n,)
        Each row's score at the stage where it stopped.
    reached : ndarray of int of shape (n,)
        That stage, ``0`` to ``n_stages - 1``.
    n_stages : int

    Returns
    -------
    ndarray of shape (n,)
    """
    return np.clip(scores, -EXIT_GAP / 2, np.nextafter(EXIT_GAP / 2, 0)) - (n_stages - 1 - reached) * EXIT_GAP


def check_drop_ratios(value, n_pruning: int, name: str) -> list:
    """The drop ratio of each of ``n_pruning`` stages, from a scalar (the same for every stage) or one value per
    stage, each in [0, 1).

    Parameters
    ----------
    value : float or sequence of float
    n_pruning : int
        Stages that drop rows (every exit but the last).
    name : str
        The parameter's name, for the error message.

    Returns
    -------
    list of float

    Raises
    ------
    ValueError
        If a value is outside [0, 1) or the sequence has not ``n_pruning`` values.
    """
    check_param(name, value, DROP_RATIO_CONSTRAINTS)
    values = [value] * n_pruning if np.ndim(value) == 0 else list(value)
    if len(values) != n_pruning:
        raise ValueError(f"{name} must be a scalar or {n_pruning} values (one per stage but the last), got {value!r}.")
    return [float(v) for v in values]


def cost_report(rows_per_layer, survivors, n_rows, n_groups) -> dict:
    """The cost report of a cascade (see the module docstring): relative cost, rows through each layer, rows
    scored by each exit.

    Parameters
    ----------
    rows_per_layer : array-like of int of shape (n_layers,)
    survivors : array-like of int of shape (n_exits,)
        Rows that reached each exit.
    n_rows, n_groups : int
        Rows and questions of the batch.

    Returns
    -------
    dict
        ``relative_cost``, ``rows_per_layer``, ``survivors``, ``n_rows``, ``n_questions``.
    """
    rows_per_layer = np.asarray(rows_per_layer, dtype=np.int64)
    return {
        "relative_cost": float(rows_per_layer.sum() / (len(rows_per_layer) * n_rows)) if n_rows else 0.0,
        "rows_per_layer": rows_per_layer,
        "survivors": np.asarray(survivors, dtype=np.int64),
        "n_rows": int(n_rows),
        "n_questions": int(n_groups),
    }


def simulate_cascade(exit_logits, groups, alpha, exits, position=None):
    """The cascade's scores and cost for given drop ratios, from the logits of every exit for every row.

    Exit logits do not depend on which other rows are in the batch, so in float32 this reproduces
    :meth:`CascadeTransformer.predict <as2rank.transformer.cascade.CascadeTransformer.predict>` (to rounding) from one
    :meth:`~as2rank.transformer.cascade.CascadeTransformer.predict_exits` pass. Under bfloat16 autocast a logit moves
    slightly with the padding of its batch, and a row on a question's drop boundary may then stop at a
    different exit than in ``predict``.

    Parameters
    ----------
    exit_logits : ndarray of shape (n_rows, n_exits)
    groups : array-like of shape (n_rows,) or GroupIndex
        Question of each row.
    alpha : float or sequence of float
        Drop ratio after each exit but the last.
    exits : sequence of int
        Exit layers (``exits_`` of a fitted cascade).
    position : array-like, default=None
        Original position of each row in its question (tie-break), when ``groups`` is not a GroupIndex.

    Returns
    -------
    scores : ndarray of shape (n_rows,)
    report : dict
        ``relative_cost``, ``rows_per_layer``, ``survivors``, ``n_rows``, ``n_questions``.
    """
    logits = np.asarray(exit_logits, dtype=np.float64)
    index = groups if isinstance(groups, GroupIndex) else GroupIndex(groups, position)
    n, n_exits = logits.shape
    alphas = check_drop_ratios(alpha, n_exits - 1, "alpha")
    alive = index.order
    reached = np.zeros(n, dtype=np.int64)
    rows_per_layer = np.zeros(exits[-1], dtype=np.int64)
    start = 0
    for e in range(n_exits):
        rows_per_layer[start : exits[e]] = len(alive)
        start = exits[e]
        reached[alive] = e
        if e < n_exits - 1:
            alive = alive[drop_lowest(index.codes[alive], logits[alive, e], alphas[e])]
    scores = stage_scores(logits[np.arange(n), reached], reached, n_exits)
    survivors = np.bincount(reached, minlength=n_exits)[::-1].cumsum()[::-1]
    return scores, cost_report(rows_per_layer, survivors, n, index.n_groups)


def tune_alpha(
    estimator,
    X,
    y,
    *,
    grid=(0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6),
    max_relative_cost=None,
    metric="p@1",
    groups=None,
):
    """Per-exit drop ratios maximising a dev metric under a relative-cost budget (no retraining).

    The encoder runs once (:meth:`~as2rank.transformer.cascade.CascadeTransformer.predict_exits`); every combination of
    ``grid`` values for the pruning exits is then simulated exactly (:func:`simulate_cascade`). Among the
    combinations whose relative cost is at most ``max_relative_cost``, the one with the best metric wins;
    ties go to the cheaper one, then to the earlier combination.

    Parameters
    ----------
    estimator : CascadeTransformer
        Fitted.
    X : pandas.DataFrame
        Dev set.
    y : array-like of shape (n_rows,)
    grid : sequence of float, default=(0, 0.1, ..., 0.6)
        Candidate values of each exit's α (the paper's Figure 2 grid).
    max_relative_cost : float, default=None
        Budget; ``None`` means no limit.
    metric : str, default="p@1"
        A name accepted by :func:`as2rank.metrics.get_scorer`.
    groups : array-like, default=None
        Question ids overriding ``X["qid"]``.

    Returns
    -------
    best_alpha : tuple of float
        One value per pruning exit; use with ``estimator.set_params(alpha=list(best_alpha))``.
    table : pandas.DataFrame
        Every combination: ``alpha``, ``relative_cost`` and the metric, best first (cost vs accuracy, as the
        paper's Figure 2).

    Raises
    ------
    ValueError
        If no combination fits the budget.
    """
    check_is_fitted(estimator, "exits_")
    X, y, index = check_ranking_data(X, y, groups)
    scorer = get_scorer(metric)
    values = check_drop_ratios(list(grid), len(grid), "grid")
    logits = estimator.predict_exits(X)
    rows = []
    for combo in itertools.product(values, repeat=len(estimator.exits_) - 1):
        scores, report = simulate_cascade(logits, index, combo, estimator.exits_)
        rows.append((combo, report["relative_cost"], scorer.metric(y, scores, index, **scorer.kwargs)))
    table = pd.DataFrame(rows, columns=["alpha", "relative_cost", scorer.name])
    table = table.sort_values([scorer.name, "relative_cost"], ascending=[False, True], kind="stable")
    feasible = table if max_relative_cost is None else table[table["relative_cost"] <= max_relative_cost + 1e-12]
    if feasible.empty:
        raise ValueError(
            f"No α combination has a relative cost <= {max_relative_cost}; the cheapest costs "
            f"{table['relative_cost'].min():.3f}. Raise the budget or add larger values to grid."
        )
    return tuple(feasible["alpha"].iloc[0]), table.reset_index(drop=True)
