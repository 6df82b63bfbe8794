"""The question-level map of :class:`~as2rank.answer.ranker.CalibratedRanker`, as functions of arrays: a
question's candidate probabilities (calibrated by :mod:`as2rank.ensemble.calibration`) to the probability
that its top candidate answers it, through question features (:func:`question_features`) and a small
logistic regression (:func:`fit_trigger`, :func:`trigger_proba`).
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit

from ..data import GroupIndex

__all__ = ["FEATURES", "fit_trigger", "question_features", "trigger_proba"]

#: The question-level features, in the columns of :func:`question_features`.
FEATURES = ("top_logit", "margin", "entropy", "log_candidates")

#: Probabilities are clipped this far from 0 and 1 before their logit is taken (an isotonic map reaches both).
_EPS = 1e-6


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
