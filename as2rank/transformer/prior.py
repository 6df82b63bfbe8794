"""The lexical prior of a neural ranker: what word overlap and position already say, as a logit.

A logistic regression on :class:`~as2rank.lexical.baselines.LexicalFeatures` (word overlap, IDF-weighted overlap,
reciprocal rank), fitted on the training rows, gives each (question, candidate) pair a logit. A ranker
trained with this prior adds it to its own logit, in training and in prediction, so that the network learns
only what the lexical model misses: from the first step the ranking is at least the lexical one, which
a fine-tuned cross-encoder alone may not reach on little training data (measured by the defaults benchmark
of :class:`~as2rank.transformer.ranker.TransformerRanker`).
With ``similarity_prior=True`` the regression also reads the cosine of the question's and the candidate's
sentence embeddings from the pretrained encoder the ranker starts from (:mod:`as2rank.transformer.similarity`).

With ``segment_similarity=True`` the module (:class:`~as2rank.transformer.network.SegmentSimilarity`) adds
``w × cos(question, candidate)`` to its logit: the cosine of the mean encodings of the pair's question and
candidate tokens inside its own encoding. A fresh fit runs the pretrained encoder over the training rows once
(its ``segment_cosines``), fits the prior's regression on its cosines beside the lexical features, and starts
``w`` (every exit's, for a cascade) at the cosine's coefficient there; the network then trains ``w`` with the
rest. Every transformer estimator holds the prior (its ``lexical_prior``, ``similarity_prior`` and
``segment_similarity``): it is fitted at the start of a fresh fit, never on a warm start or a continued
``partial_fit``, which keep the fitted one.

NumPy and scikit-learn only (the similarity feature imports torch when it is used).
"""

from __future__ import annotations

import numpy as np

from ..logistic import fit_logistic, logistic_logits
from ..params import Boolean

__all__ = [
    "PRIOR_ATTRS",
    "PRIOR_CONSTRAINTS",
    "check_prior_labels",
    "fit_lexical_prior",
    "lexical_columns",
    "lexical_prior_logits",
]


def check_prior_labels(
    y,
    what: str = "The prior of a transformer ranker is a logistic regression on lexical and similarity features",
    remedy: str = "Set lexical_prior=False (and segment_similarity=False, where the estimator has it) to train "
                  "without it.",
) -> None:
    """Refuse training labels of a single class, on which the prior's regression cannot be fitted; the message is
    ``what`` (the regression the caller fits), why it cannot, then ``remedy`` (the caller's parameters)."""
    positive = np.asarray(y) > 0
    if positive.all() or not positive.any():
        raise ValueError(
            f"{what}, which needs both correct and wrong candidates; all {len(positive)} training labels are "
            f"{'positive' if positive.any() else 'negative'}. {remedy}"
        )


def lexical_columns(X, lexical: bool = True) -> tuple:
    """The lexical columns of the prior's regression on the training rows.

    Parameters
    ----------
    X : pandas.DataFrame
        Validated grouped-candidate frame.
    lexical : bool, default=True
        Whether the regression reads the lexical features; without them it reads other columns only.

    Returns
    -------
    features : LexicalFeatures or None
        Fitted on ``X`` (its IDF comes from the training candidates); None without ``lexical``.
    F : ndarray of float64 of shape (n_rows, n_features)
        Their values on ``X`` (no column without ``lexical``).
    """
    from ..lexical.baselines import LexicalFeatures

    features = LexicalFeatures().fit(X) if lexical else None
    return features, _matrix(features, X)


def fit_lexical_prior(X, y, *, C: float = 1.0, extra=None, lexical: bool = True) -> tuple:
    """Fit the lexical prior on the training rows.

    Parameters
    ----------
    X : pandas.DataFrame
        Validated grouped-candidate frame.
    y : ndarray of shape (n_rows,)
        Relevance labels; a label > 0 is a positive.
    C : float, default=1.0
        Inverse L2 strength of the logistic regression (on standardised features).
    extra : ndarray of shape (n_rows, n_extra), default=None
        More feature columns of the rows (the similarity features), after the lexical ones.
    lexical : bool, default=True
        Whether the regression reads the lexical features; without them it reads ``extra`` only.

    Returns
    -------
    features : LexicalFeatures or None
        Fitted (its IDF comes from the training candidates); None without ``lexical``.
    coef : ndarray of float64 of shape (n_features + n_extra + 1,)
        Weights on the raw feature columns, intercept last (the standardisation is folded in,
        :func:`as2rank.logistic.fit_logistic`).

    Raises
    ------
    ValueError
        When the labels hold a single class.
    """
    check_prior_labels(y)
    features, F = lexical_columns(X, lexical)
    columns = F if extra is None else np.column_stack([F, np.asarray(extra, dtype=np.float64)])
    return features, fit_logistic(columns, np.asarray(y) > 0, C=C)


def lexical_prior_logits(features, coef, X, extra=None) -> np.ndarray:
    """The prior's logit for every row of ``X`` (float32, shape (n_rows,)); ``extra`` as in :func:`fit_lexical_prior`."""
    F = _matrix(features, X, extra)
    return logistic_logits(F, coef)


def _matrix(features, X, extra=None) -> np.ndarray:
    if features is None:
        F = np.empty((len(X), 0))
    else:
        F = features.transform(X)[list(features.feature_names)].to_numpy(dtype=np.float64)
    return F if extra is None else np.column_stack([F, np.asarray(extra, dtype=np.float64)])


#: The fitted attributes of a transformer estimator's prior (those present are saved with the model).
PRIOR_ATTRS = ("lexical_features_", "lexical_coef_", "similarity_source_")

#: The prior's parameters, entries of every transformer estimator's ``_parameter_constraints``.
PRIOR_CONSTRAINTS = {"lexical_prior": [Boolean()], "similarity_prior": [Boolean()], "segment_similarity": [Boolean()]}
