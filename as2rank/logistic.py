"""Logistic regression on arrays, for the library's small linear models (the lexical prior of the neural rankers,
:mod:`as2rank.transformer.prior`): L2-regularised on standardised columns, its weights folded back onto the raw
columns, so that a row's logit is one dot product with its raw features.

It takes arrays and returns arrays, and sits below every estimator: NumPy, and scikit-learn when fitting.
"""

from __future__ import annotations

import numpy as np

__all__ = ["fit_logistic", "logistic_logits"]


def fit_logistic(F, positive, *, C: float = 1.0) -> np.ndarray:
    """Fit a logistic regression of ``positive`` on the columns of ``F``, each standardised first.

    Parameters
    ----------
    F : ndarray of shape (n_rows, n_features)
        Raw feature columns; a constant column gets scale 1.
    positive : ndarray of bool of shape (n_rows,)
        The class of each row; both classes must occur.
    C : float, default=1.0
        Inverse L2 strength, on the standardised columns.

    Returns
    -------
    coef : ndarray of float64 of shape (n_features + 1,)
        Weights on the raw columns, intercept last.
    """
    from sklearn.linear_model import LogisticRegression

    F = np.asarray(F, dtype=np.float64)
    mean, scale = F.mean(axis=0), F.std(axis=0)
    scale[scale == 0] = 1.0
    lr = LogisticRegression(C=C, max_iter=1000).fit((F - mean) / scale, positive)
    w = lr.coef_.ravel() / scale
    return np.append(w, lr.intercept_[0] - w @ mean)


def logistic_logits(F, coef) -> np.ndarray:
    """The logit of every row of ``F`` under ``coef`` (from :func:`fit_logistic`), as float32 of shape (n_rows,).

    Raises
    ------
    ValueError
        When ``F`` has not the columns ``coef`` was fitted on.
    """
    if F.shape[1] != len(coef) - 1:
        raise ValueError(f"The regression was fitted on {len(coef) - 1} features, got {F.shape[1]}.")
    return (F @ coef[:-1] + coef[-1]).astype(np.float32)
