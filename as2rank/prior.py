"""The lexical prior of a neural ranker: what word overlap and position already say, as a logit.

A logistic regression on :class:`~as2rank.baselines.LexicalFeatures` (word overlap, IDF-weighted overlap,
reciprocal rank), fitted on the training rows, gives each (question, candidate) pair a logit. A ranker
trained with this prior adds it to its own logit, in training and in prediction, so that the network learns
only what the lexical model misses: from the first step the ranking is at least the lexical one, which
a fine-tuned cross-encoder alone may not reach on little training data (``docs/benchmarks/defaults.md``).

NumPy and scikit-learn only.
"""

from __future__ import annotations

import numpy as np

from .params import Boolean

__all__ = ["LexicalPriorMixin", "fit_lexical_prior", "lexical_prior_logits"]


def fit_lexical_prior(X, y, *, C: float = 1.0) -> tuple:
    """Fit the lexical prior on the training rows.

    Parameters
    ----------
    X : pandas.DataFrame
        Validated grouped-candidate frame.
    y : ndarray of shape (n_rows,)
        Relevance labels; a label > 0 is a positive.
    C : float, default=1.0
        Inverse L2 strength of the logistic regression (on standardised features).

    Returns
    -------
    features : LexicalFeatures
        Fitted (its IDF comes from the training candidates).
    coef : ndarray of float64 of shape (n_features + 1,)
        Weights on the raw feature columns, intercept last (the standardisation is folded in).

    Raises
    ------
    ValueError
        When the labels hold a single class.
    """
    from sklearn.linear_model import LogisticRegression

    from .baselines import LexicalFeatures

    positive = np.asarray(y) > 0
    if positive.all() or not positive.any():
        raise ValueError(
            "lexical_prior fits a logistic regression on lexical features, which needs both correct and wrong "
            f"candidates; all {len(positive)} training labels are {'positive' if positive.any() else 'negative'}. "
            "Set lexical_prior=False to train without it."
        )
    features = LexicalFeatures().fit(X)
    F = _matrix(features, X)
    mean, scale = F.mean(axis=0), F.std(axis=0)
    scale[scale == 0] = 1.0
    lr = LogisticRegression(C=C, max_iter=1000).fit((F - mean) / scale, positive)
    w = lr.coef_.ravel() / scale
    return features, np.append(w, lr.intercept_[0] - w @ mean)


def lexical_prior_logits(features, coef, X) -> np.ndarray:
    """The prior's logit for every row of ``X`` (float32, shape (n_rows,))."""
    return (_matrix(features, X) @ coef[:-1] + coef[-1]).astype(np.float32)


def _matrix(features, X) -> np.ndarray:
    return features.transform(X)[list(features.feature_names)].to_numpy(dtype=np.float64)


class LexicalPriorMixin:
    """The ``lexical_prior`` parameter of a transformer estimator: the prior is fitted at the start of a fresh
    fit (never on a warm start or a continued ``partial_fit``, which keep the fitted one) and its logit is
    the ``prior`` entry of the encoded rows, which the module adds to its logits."""

    _prior_attrs = ("lexical_features_", "lexical_coef_")
    #: The entry of ``lexical_prior`` in the estimator's ``_parameter_constraints``.
    _parameter_constraints = {"lexical_prior": [Boolean()]}

    def _check_continuation(self):
        fitted = hasattr(self, "lexical_coef_")
        if bool(self.lexical_prior) != fitted:
            raise ValueError(
                f"lexical_prior={self.lexical_prior} but the fitted model was trained {'with' if fitted else 'without'} "
                "a lexical prior, and continuing keeps what the network learnt against it; set "
                f"lexical_prior={fitted}, or fit afresh (warm_start=False)."
            )

    def _init_module(self, X, y, groups, eval_set):
        for name in self._prior_attrs:
            self.__dict__.pop(name, None)
        if self.lexical_prior:
            self.lexical_features_, self.lexical_coef_ = fit_lexical_prior(X, y)
        return super()._init_module(X, y, groups, eval_set)

    def _encode(self, X):
        encoded = super()._encode(X)
        if hasattr(self, "lexical_coef_"):
            encoded["prior"] = lexical_prior_logits(self.lexical_features_, self.lexical_coef_, X)
        return encoded

    def _export_attrs(self):
        return {**super()._export_attrs(), **{k: getattr(self, k) for k in self._prior_attrs if hasattr(self, k)}}

    def _import_attrs(self, attrs):
        super()._import_attrs(attrs)
        for k in self._prior_attrs:
            if k in attrs:
                setattr(self, k, attrs[k])
