"""Sequential reranking without torch: :class:`SequentialRanker`, the paper's SR_N, a sequence of independently
trained rankers (any as2rank rankers, PyTerrier-style), each keeping the best candidates of the previous one,
with the drop rule and score convention of :mod:`as2rank.pruning.rules`.

This module imports NumPy, pandas and scikit-learn, never torch: a :class:`SequentialRanker` of lexical rankers
runs without it.
"""

from __future__ import annotations

from numbers import Real

import numpy as np
from sklearn.base import BaseEstimator, clone
from sklearn.utils.validation import check_is_fitted

from ..base import RankerMixin
from ..data import GroupIndex, check_ranking_data, check_X
from ..params import InstanceOf, Interval, ParameterMixin, SequenceOf, validated
from ..persistence import PersistenceMixin
from .rules import drop_lowest, stage_scores

__all__ = ["SequentialRanker"]


class SequentialRanker(ParameterMixin, PersistenceMixin, RankerMixin, BaseEstimator):
    """Sequential reranking SR_N (paper §3.2, §4.2): independently trained rankers applied in turn.

    Every step is fitted on the full training data. At prediction, the first step scores all candidates;
    each later step scores only the survivors of the previous one: a step keeping a fraction ``keep`` of
    the ``k`` survivors of a question drops the ``floor((1 − keep) · k)`` lowest-scoring ones, the same rule
    as :class:`~as2rank.transformer.cascade.CascadeTransformer` with ``alpha = 1 − keep`` (:func:`~as2rank.pruning.rules.drop_lowest`). Scores
    follow the cascade convention of :mod:`as2rank.pruning.sequential` (a row dropped earlier ranks below every row
    that went further). Steps may be any as2rank rankers, e.g.
    ``SequentialRanker([OverlapRankRanker(), Cosinet(), TransformerRanker()])`` (PyTerrier's
    ``bm25 % 100 >> reranker``).

    Parameters
    ----------
    steps : list of estimators, default=None
        Unfitted rankers (cloned in ``fit``), cheapest first; required.
    keep : float or sequence of float, default=0.5
        Fraction in (0, 1] of the survivors kept after each step but the last.
    costs : sequence of float, default=None
        Cost per row of each step, for the cost report; ``None`` takes the number of transformer layers of
        steps that have one (``n_layers_``) and 1 for others.

    Attributes
    ----------
    steps_ : list of estimators
        Fitted clones.

    Notes
    -----
    ``predict(X, return_cost=True)`` also returns the call's cost report, a dict: ``relative_cost`` (sum over
    steps of cost × rows scored, divided by the largest step cost × rows: the paper's SR cost relative to the
    biggest model), ``survivors`` (rows scored by each step), ``rows_per_layer`` (when every step cost is a
    whole number of layers: the rows each layer of each step processed, as the cascade reports; else ``None``),
    ``step_costs``, ``n_rows``, ``n_questions``.
    """

    _parameter_constraints = {
        # Required: None (the default) and steps without fit and predict are refused by ``_check_rules``.
        "steps": [InstanceOf((list, tuple), "a non-empty list of rankers"), None],
        "keep": [Interval(Real, 0, 1, closed="right"), SequenceOf(Interval(Real, 0, 1, closed="right"))],
        "costs": [SequenceOf(Interval(Real, 0, None, closed="neither")), None],
    }

    def __init__(self, steps=None, keep=0.5, costs=None):
        self._keep_params(locals())

    def _check_rules(self):
        self._drops()

    def _drops(self) -> list:
        """The share of each question's rows that each step but the last drops (``1 - keep``), after checking
        that the steps can run and that ``keep`` has one value per pruning step."""
        if not isinstance(self.steps, (list, tuple)) or not self.steps:
            raise ValueError("steps must be a non-empty list of rankers, e.g. [OverlapRankRanker(), TransformerRanker()].")
        bad = [type(s).__name__ for s in self.steps if not (hasattr(s, "fit") and hasattr(s, "predict"))]
        if bad:
            raise ValueError(f"Every step needs fit and predict; got {bad}.")
        n_pruning = len(self.steps) - 1
        keeps = [self.keep] * n_pruning if np.ndim(self.keep) == 0 else list(self.keep)
        if len(keeps) != n_pruning:
            raise ValueError(f"keep must be a scalar or {n_pruning} values (one per step but the last), got {self.keep!r}.")
        return [1.0 - float(k) for k in keeps]

    @validated
    def fit(self, X, y, groups=None):
        """Fit every step on ``(X, y)``.

        Parameters
        ----------
        X : pandas.DataFrame
        y : array-like of shape (n_rows,)
        groups : array-like, default=None
            Question ids overriding ``X["qid"]``, passed to each step.

        Returns
        -------
        self
        """
        check_ranking_data(X, y, groups)
        if self.costs is not None and len(self.costs) != len(self.steps):
            raise ValueError(f"costs needs one value per step ({len(self.steps)}), got {self.costs!r}.")
        self.steps_ = [clone(step).fit(X, y, groups=groups) for step in self.steps]
        return self

    @validated
    def predict(self, X, return_cost: bool = False):
        """One score per row, consistent with the sequence of drops.

        Parameters
        ----------
        X : pandas.DataFrame
            Grouped-candidate frame; each question's rows pass the steps together.
        return_cost : bool, default=False
            Also return the cost report of this call (see the class's Notes).

        Returns
        -------
        scores : ndarray of float64 of shape (n_rows,)
        cost : dict
            Only with ``return_cost=True``.
        """
        check_is_fitted(self, "steps_")
        drops = self._drops()
        X = check_X(X, text_columns=())
        index = GroupIndex.from_frame(X)
        n_steps = len(self.steps_)
        alive = index.order
        raw = np.empty(index.n_rows)
        reached = np.zeros(index.n_rows, dtype=np.int64)
        survivors = []
        for s, step in enumerate(self.steps_):
            scores = np.asarray(step.predict(X.iloc[alive]), dtype=np.float64)
            raw[alive] = scores
            reached[alive] = s
            survivors.append(len(alive))
            if s < n_steps - 1:
                alive = alive[drop_lowest(index.codes[alive], scores, drops[s])]
        costs = np.asarray(
            self.costs if self.costs is not None else [getattr(step, "n_layers_", 1) for step in self.steps_],
            dtype=np.float64,
        )
        whole_layers = np.all(costs == np.round(costs)) and np.all(costs >= 1)
        report = {
            "relative_cost": float(costs @ np.asarray(survivors) / (costs.max() * index.n_rows)),
            "survivors": np.asarray(survivors, dtype=np.int64),
            "rows_per_layer": np.repeat(survivors, costs.astype(np.int64)) if whole_layers else None,
            "step_costs": costs,
            "n_rows": index.n_rows,
            "n_questions": index.n_groups,
        }
        scores = stage_scores(raw, reached, n_steps)
        return (scores, report) if return_cost else scores

    def __sklearn_tags__(self):
        from sklearn.utils import get_tags

        tags = super().__sklearn_tags__()
        # fit fits a clone of every step: as repeatable as its least repeatable step.
        steps = self.steps if isinstance(self.steps, (list, tuple)) else ()
        tags.non_deterministic = any(
            get_tags(step).non_deterministic for step in steps if hasattr(step, "__sklearn_tags__")
        )
        return tags
