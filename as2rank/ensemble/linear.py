"""Linear ensembles of fitted rankers: :class:`LinearEnsemble`, a weighted sum of their calibrated scores
with the weights tuned on held-out data (the CERBERUS paper's "ensemble of BASE models", which its distilled
students are measured against), and ``_simplex_grid``, the weight vectors it searches.

NumPy, SciPy and scikit-learn only: importing this module does not import torch.
"""

from __future__ import annotations

import itertools
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_is_fitted

from ..base import RankerMixin
from ..data import check_ranking_data, check_X
from ..metrics import get_scorer
from ..params import InstanceOf, Interval, ParameterMixin, SequenceOf, validated
from ..persistence import PersistenceMixin
from .calibration import platt_scaling
from .teachers import clone_sharing, is_model

__all__ = ["LinearEnsemble"]


class LinearEnsemble(ParameterMixin, PersistenceMixin, RankerMixin, BaseEstimator):
    """A weighted sum of fitted rankers' calibrated scores, the weights tuned on held-out data.

    ``fit(X_dev, y_dev)`` maps each ranker's scores to logits by Platt scaling on ``(X_dev, y_dev)`` (so
    rankers of different families share one scale, see :mod:`as2rank.ensemble.calibration`) and picks the
    weights: the point of the simplex grid ``{w : w_i = n_i / resolution, Σ w_i = 1}`` with the best
    ``metric`` on ``(X_dev, y_dev)``, ties going to the weights closest to uniform (the paper tuned its
    ensembles with Optuna; for a handful of rankers an exhaustive grid is as good and deterministic). The
    rankers are not refitted: fit them on the training data and pass held-out data to ``fit``. ``predict`` is
    ``Σ w_i (a_i · score_i + b_i)``.

    Parameters
    ----------
    rankers : list of fitted rankers, default=None
        Required; any fitted estimators with ``predict`` (clones of the ensemble share them).
    weights : sequence of float, default=None
        Fixed non-negative weights (normalised to sum 1) instead of tuned ones.
    metric : str, default="map"
        What the weights maximise: a name accepted by :func:`as2rank.metrics.get_scorer`.
    resolution : int, default=20
        Grid step ``1 / resolution``: ``C(resolution + k − 1, k − 1)`` candidates for ``k`` rankers (231 for
        three).

    Attributes
    ----------
    weights_ : ndarray of shape (n_rankers,)
    calibration_ : ndarray of shape (n_rankers, 2)
        Platt slope and intercept of each ranker.
    dev_score_ : float
        ``metric`` of the chosen weights on the data given to ``fit``.
    """

    _parameter_constraints = {
        # Required: None (the default) and rankers that are not fitted models are refused by ``_check_rules``.
        "rankers": [InstanceOf((list, tuple), "a non-empty list of fitted rankers"), None],
        "weights": [SequenceOf(Interval(Real, 0, None)), None],
        "metric": [InstanceOf(str, "a metric name accepted by as2rank.metrics.get_scorer")],
        "resolution": [Interval(Integral, 1, None)],
    }

    def __init__(self, rankers=None, weights=None, metric="map", resolution=20):
        self._keep_params(locals())

    def _check_rules(self):
        if not isinstance(self.rankers, (list, tuple)) or not self.rankers or not all(map(is_model, self.rankers)):
            raise ValueError(f"rankers must be a non-empty list of fitted rankers, got {self.rankers!r}.")
        for j, ranker in enumerate(self.rankers):
            try:
                check_is_fitted(ranker)
            except NotFittedError as exc:
                name = type(ranker).__name__
                raise NotFittedError(f"rankers[{j}] ({name}) is not fitted; fit it on training data first.") from exc
        if self.weights is not None:
            w = np.asarray(self.weights, dtype=np.float64)
            if w.shape != (len(self.rankers),) or not np.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
                raise ValueError(
                    f"weights must be {len(self.rankers)} non-negative numbers, not all 0, got {self.weights!r}."
                )

    def _scores(self, X) -> np.ndarray:
        return np.column_stack([np.asarray(r.predict(X), dtype=np.float64) for r in self.rankers])

    @validated
    def fit(self, X, y, groups=None):
        """Calibrate each ranker and choose the weights on held-out data.

        Parameters
        ----------
        X : pandas.DataFrame
            Held-out grouped candidates (a dev split the rankers were not fitted on).
        y : array-like of shape (n_rows,)
        groups : array-like of shape (n_rows,), default=None
            Question ids overriding ``X["qid"]``.

        Returns
        -------
        self
        """
        X, y, index = check_ranking_data(X, y, groups, text_columns=())
        scorer = get_scorer(self.metric)
        scores = self._scores(X)
        self.calibration_ = np.array([platt_scaling(s, y) for s in scores.T])
        logits = scores * self.calibration_[:, 0] + self.calibration_[:, 1]
        k = len(self.rankers)
        if self.weights is not None:
            grid = np.asarray(self.weights, dtype=np.float64)[None] / np.sum(self.weights)
        else:
            grid = _simplex_grid(k, int(self.resolution))
        values = np.array([scorer.metric(y, logits @ w, index, **scorer.kwargs) for w in grid])
        best = np.flatnonzero(values >= values.max() - 1e-12)
        choice = best[np.argmin(np.linalg.norm(grid[best] - 1 / k, axis=1))]
        self.weights_, self.dev_score_ = grid[choice], float(values[choice])
        return self

    def predict(self, X) -> np.ndarray:
        """One score per row: the weighted sum of the rankers' calibrated logits.

        Parameters
        ----------
        X : pandas.DataFrame
            Grouped-candidate frame with the columns every ranker reads.

        Returns
        -------
        ndarray of float64 of shape (n_rows,)
        """
        check_is_fitted(self, "weights_")
        X = check_X(X, text_columns=())
        return (self._scores(X) * self.calibration_[:, 0] + self.calibration_[:, 1]) @ self.weights_

    def __sklearn_clone__(self):
        return clone_sharing(self, "rankers")


def _simplex_grid(k: int, resolution: int) -> np.ndarray:
    """Every weight vector of ``k`` multiples of ``1 / resolution`` summing to 1 (stars and bars)."""
    bars = np.array(list(itertools.combinations(range(resolution + k - 1), k - 1)), dtype=np.int64).reshape(-1, k - 1)
    edges = np.hstack([np.full((len(bars), 1), -1), bars, np.full((len(bars), 1), resolution + k - 1)])
    return (np.diff(edges, axis=1) - 1) / resolution
