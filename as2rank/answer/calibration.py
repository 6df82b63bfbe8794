"""The two maps of :class:`~as2rank.answer.ranker.CalibratedRanker`, as functions of arrays: ranking scores to
candidate probabilities (sigmoid or isotonic calibration), and a question's candidate probabilities to the
probability that its top candidate answers it (question features and a small logistic regression).

A calibration map is an array: ``(2,)`` holds the slope and intercept of Platt's sigmoid (fitted by
:func:`as2rank.ensemble.teachers.platt_scaling`, with Platt's smoothed targets), ``(2, k)`` the knots of an
isotonic fit (scores increasing, probabilities non-decreasing; linear between knots and constant beyond them,
as :class:`sklearn.isotonic.IsotonicRegression` with ``out_of_bounds="clip"`` predicts).
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit

from ..data import GroupIndex
from ..ensemble.teachers import platt_scaling

__all__ = ["FEATURES", "apply_calibration", "fit_calibration", "fit_trigger", "question_features", "trigger_proba"]

#: The question-level features, in the columns of :func:`question_features`.
FEATURES = ("top_logit", "margin", "entropy", "log_candidates")

#: Probabilities are clipped this far from 0 and 1 before their logit is taken (an isotonic map reaches both).
_EPS = 1e-6


def fit_calibration(scores, y, method: str) -> np.ndarray:
    """The calibration map (see the module docstring) of ``scores`` against labels ``y`` (> 0: positive).

    Raises
    ------
    ValueError
        If ``y`` holds only positives or only negatives: there is nothing to calibrate against.
    """
    positive = np.asarray(y) > 0
    if positive.all() or not positive.any():
        raise ValueError("Calibration needs correct and wrong candidates among the rows it is fitted on (every fold "
                         "of the cross-validation): use fewer folds or more questions.")
    if method == "sigmoid":
        return np.array(platt_scaling(scores, positive))
    from sklearn.isotonic import IsotonicRegression

    iso = IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip").fit(scores, positive.astype(np.float64))
    return np.vstack([iso.X_thresholds_, iso.y_thresholds_]).astype(np.float64)


def apply_calibration(calibration: np.ndarray, scores) -> np.ndarray:
    """P(the candidate answers the question) for each score, by the map ``calibration``."""
    scores = np.asarray(scores, dtype=np.float64)
    if calibration.ndim == 1:
        return expit(calibration[0] * scores + calibration[1])
    return np.interp(scores, calibration[0], calibration[1])


def question_features(index: GroupIndex, scores, proba, tiebreak=None):
    """The features of each question's candidates that say whether its top candidate answers it.

    Columns (:data:`FEATURES`): the logit of the top candidate's probability; the margin between it and the
    second's (0 for one candidate); the entropy of the candidates' probabilities normalised to sum 1, divided
    by its largest value ``log n`` (0 for one candidate: 1 is a flat list, 0 one clear candidate); and the log
    of the number of candidates.

    Parameters
    ----------
    index : GroupIndex
    scores : ndarray of shape (n_rows,)
        Ranking scores: they choose the top candidate (ties by ``tiebreak``, then position, as
        :func:`as2rank.rank <as2rank.base.rank>` does).
    proba : ndarray of shape (n_rows,)
        Calibrated candidate probabilities.
    tiebreak : ndarray of shape (n_rows,), default=None

    Returns
    -------
    features : ndarray of shape (n_questions, 4)
    top : ndarray of int of shape (n_questions,)
        The row of each question's top candidate.
    """
    order = index.sort(scores, tiebreak)
    starts, sizes = index.starts, index.sizes
    p = np.asarray(proba, dtype=np.float64)[order]
    first = p[starts]
    second = np.where(sizes > 1, p[np.minimum(starts + 1, len(p) - 1)], 0.0)
    codes = index.codes[order]
    total = np.repeat(np.bincount(codes, weights=p, minlength=index.n_groups), sizes)
    share = np.where(total > 0, p / np.where(total > 0, total, 1.0), 1.0 / np.repeat(sizes, sizes))
    with np.errstate(divide="ignore", invalid="ignore"):
        plogp = np.where(share > 0, share * np.log(share), 0.0)
        entropy = np.where(sizes > 1, -np.bincount(codes, weights=plogp, minlength=index.n_groups) / np.log(sizes), 0.0)
    top = np.clip(first, _EPS, 1 - _EPS)
    features = np.column_stack([np.log(top / (1 - top)), first - second, entropy, np.log(sizes)])
    return features, order[starts]


def fit_trigger(features, correct) -> tuple:
    """Coefficients and intercept of the logistic regression of ``correct`` (the top candidate answers the
    question) on the question features. With one class only, the coefficients are 0 and the intercept the
    log-odds of the Laplace-smoothed rate, so that every question gets that rate."""
    from sklearn.linear_model import LogisticRegression

    correct = np.asarray(correct, dtype=bool)
    if correct.all() or not correct.any():
        k, n = int(correct.sum()), len(correct)
        return np.zeros(features.shape[1]), float(np.log((k + 1) / (n - k + 1)))
    model = LogisticRegression(C=1.0, max_iter=1000).fit(features, correct)
    return model.coef_[0].astype(np.float64), float(model.intercept_[0])


def trigger_proba(features, coef, intercept) -> np.ndarray:
    """P(the top candidate answers the question) of each question, from its features."""
    return expit(features @ coef + intercept)
