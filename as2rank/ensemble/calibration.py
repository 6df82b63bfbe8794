"""Calibration: ranking scores turned into log-odds and probabilities of relevance, for every estimator that
needs them.

A ranker's score is not a probability, nor a logit on a common scale (an overlap count, a cross-encoder's
logit and a Cosinet score differ in scale). Three estimators put scores on one scale, all through this module:

* the distilled students' teachers (:func:`~as2rank.ensemble.teachers.teacher_logits`) and the members of a
  :class:`~as2rank.ensemble.linear.LinearEnsemble`: each ranker's scores mapped to log-odds by
  :func:`platt_scaling`;
* :class:`~as2rank.answer.ranker.CalibratedRanker` (and the serving of its probabilities): scores mapped to
  the probability that a candidate answers its question by a calibration map (:func:`fit_calibration`,
  :func:`apply_calibration`).

**Platt scaling** fits ``a · score + b`` minimising the cross-entropy against Platt's smoothed targets
``(N₊ + 1)/(N₊ + 2)`` for positives and ``1/(N₋ + 2)`` for negatives. The map is monotone (a ranker's ranking
is kept), and the smoothed targets keep the slope finite even when the scores separate the classes perfectly
(a teacher scoring its own training data).

**A calibration map** is an array: ``(2,)`` holds the slope and intercept of Platt's sigmoid, ``(2, k)`` the
knots of an isotonic fit (scores increasing, probabilities non-decreasing; linear between knots and constant
beyond them, as :class:`sklearn.isotonic.IsotonicRegression` with ``out_of_bounds="clip"`` predicts). An
array saves pickle-free and applies without scikit-learn.

NumPy, SciPy and scikit-learn only: importing this module does not import torch.
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit

__all__ = ["apply_calibration", "fit_calibration", "platt_scaling"]


def platt_scaling(scores, y) -> tuple:
    """Slope and intercept mapping ``scores`` to calibrated logits of relevance (Platt, 1999).

    Minimises the logistic loss of ``a · score + b`` against Platt's smoothed targets (``(N₊ + 1)/(N₊ + 2)``
    for positives, ``1/(N₋ + 2)`` for negatives), which keep ``a`` finite when the scores separate the
    classes perfectly. Constant scores get slope 0 and the log-odds of the smoothed prior.

    Parameters
    ----------
    scores : array-like of shape (n,)
    y : array-like of shape (n,)
        Labels; > 0 is a positive.

    Returns
    -------
    a, b : float

    Raises
    ------
    ValueError
        If ``y`` holds only positives or only negatives, or a score is not finite.

    Examples
    --------
    >>> from as2rank.ensemble.calibration import platt_scaling
    >>> platt_scaling([1.0, 1.0, 1.0], [1, 0, 0])  # constant scores: the prior, log(2 / 3)
    (0.0, -0.40546510810816444)
    """
    from scipy.optimize import minimize

    scores = np.asarray(scores, dtype=np.float64)
    positive = np.asarray(y) > 0
    if not np.isfinite(scores).all():
        raise ValueError("Teacher scores must be finite numbers.")
    n_pos = int(positive.sum())
    n_neg = len(positive) - n_pos
    if n_pos == 0 or n_neg == 0:
        raise ValueError("Calibrating teacher scores needs positive and negative labels in the data (or fold).")
    target = np.where(positive, (n_pos + 1) / (n_pos + 2), 1 / (n_neg + 2))
    mean, std = scores.mean(), scores.std()
    if std == 0:  # a constant teacher: only the prior is left
        return 0.0, float(np.log((n_pos + 1) / (n_neg + 1)))
    z = (scores - mean) / std  # standardised, so one starting point suits every scale

    def loss(ab):
        logit = ab[0] * z + ab[1]
        residual = expit(logit) - target
        return np.sum(np.logaddexp(0.0, logit) - target * logit), np.array([residual @ z, residual.sum()])

    a, b = minimize(loss, x0=np.zeros(2), jac=True, method="L-BFGS-B").x
    return float(a / std), float(b - a * mean / std)


def fit_calibration(scores, y, method: str) -> np.ndarray:
    """The calibration map (see the module docstring) of ``scores`` against labels ``y`` (> 0: positive).

    Parameters
    ----------
    scores : array-like of shape (n,)
    y : array-like of shape (n,)
    method : {"sigmoid", "isotonic"}
        ``"sigmoid"``: :func:`platt_scaling`, a map of shape ``(2,)``; ``"isotonic"``: an isotonic
        regression, a map of shape ``(2, k)``.

    Returns
    -------
    ndarray of float64

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
    """P(the candidate answers the question) for each score, by the map ``calibration`` (from
    :func:`fit_calibration`): the sigmoid of ``a · score + b``, or the isotonic knots interpolated."""
    scores = np.asarray(scores, dtype=np.float64)
    if calibration.ndim == 1:
        return expit(calibration[0] * scores + calibration[1])
    return np.interp(scores, calibration[0], calibration[1])
