"""The lexical prior of a neural ranker: what word overlap and position already say, as a logit.

A logistic regression on :class:`~as2rank.lexical.baselines.LexicalFeatures` (word overlap, IDF-weighted overlap,
reciprocal rank), fitted on the training rows, gives each (question, candidate) pair a logit. A ranker
trained with this prior adds it to its own logit, in training and in prediction, so that the network learns
only what the lexical model misses: from the first step the ranking is at least the lexical one, which
a fine-tuned cross-encoder alone may not reach on little training data (measured by the defaults benchmark
of :class:`~as2rank.transformer.ranker.TransformerRanker`).
With ``similarity_prior=True`` the regression also reads the cosine of the question's and the candidate's
sentence embeddings from the pretrained encoder the ranker starts from (:mod:`as2rank.transformer.similarity`).

NumPy and scikit-learn only (the similarity feature imports torch when it is used).
"""

from __future__ import annotations

import numpy as np

from ..params import Boolean

__all__ = ["LexicalPrior", "fit_lexical_prior", "lexical_prior_logits"]


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
        Weights on the raw feature columns, intercept last (the standardisation is folded in).

    Raises
    ------
    ValueError
        When the labels hold a single class.
    """
    from sklearn.linear_model import LogisticRegression

    from ..lexical.baselines import LexicalFeatures

    positive = np.asarray(y) > 0
    if positive.all() or not positive.any():
        raise ValueError(
            "The prior of a transformer ranker is a logistic regression on lexical and similarity features, which "
            f"needs both correct and wrong candidates; all {len(positive)} training labels are "
            f"{'positive' if positive.any() else 'negative'}. Set lexical_prior=False (and segment_similarity=False, "
            "where the estimator has it) to train without it."
        )
    features = LexicalFeatures().fit(X) if lexical else None
    F = _matrix(features, X, extra)
    mean, scale = F.mean(axis=0), F.std(axis=0)
    scale[scale == 0] = 1.0
    lr = LogisticRegression(C=C, max_iter=1000).fit((F - mean) / scale, positive)
    w = lr.coef_.ravel() / scale
    return features, np.append(w, lr.intercept_[0] - w @ mean)


def lexical_prior_logits(features, coef, X, extra=None) -> np.ndarray:
    """The prior's logit for every row of ``X`` (float32, shape (n_rows,)); ``extra`` as in :func:`fit_lexical_prior`."""
    F = _matrix(features, X, extra)
    if F.shape[1] != len(coef) - 1:
        raise ValueError(f"The prior was fitted on {len(coef) - 1} features, got {F.shape[1]}.")
    return (F @ coef[:-1] + coef[-1]).astype(np.float32)


def _matrix(features, X, extra=None) -> np.ndarray:
    if features is None:
        F = np.empty((len(X), 0))
    else:
        F = features.transform(X)[list(features.feature_names)].to_numpy(dtype=np.float64)
    return F if extra is None else np.column_stack([F, np.asarray(extra, dtype=np.float64)])


class LexicalPrior:
    """The lexical prior of a transformer estimator, held by its class (``_prior``): the ``lexical_prior`` and
    ``similarity_prior`` parameters, and with ``segment_similarity=True`` that parameter too.

    The prior is fitted at the start of a fresh fit (never on a warm start or a continued ``partial_fit``,
    which keep the fitted one) and its logit is the ``prior`` entry of the encoded rows, which the module adds
    to its logits. Its fitted state is the estimator's ``lexical_features_``, ``lexical_coef_`` and
    ``similarity_source_``.

    With segment similarity the module (:class:`~as2rank.transformer.heads.SegmentSimilarity` terms of
    :class:`~as2rank.transformer.ranker.TransformerRanker`, :class:`~as2rank.transformer.cascade.CascadeTransformer`)
    adds ``w × cos(question, candidate)`` to its logit: the cosine of the mean encodings of the pair's question
    and candidate tokens inside its own encoding. A fresh fit runs the pretrained encoder over the training rows
    once, fits the prior's regression on its cosines beside the lexical features, and starts ``w`` (every
    exit's, for a cascade) at the cosine's coefficient there; the network then trains ``w`` with the rest. The
    batches carry the ``question_mask`` the term needs.
    """

    #: The fitted attributes the prior sets on its estimator (those present are saved with the model).
    attrs = ("lexical_features_", "lexical_coef_", "similarity_source_")

    def __init__(self, segment_similarity: bool = False):
        self.segment_similarity = segment_similarity

    @property
    def constraints(self) -> dict:
        """The prior's entries of the estimator's ``_parameter_constraints``."""
        own = {"lexical_prior": [Boolean()], "similarity_prior": [Boolean()]}
        return {**own, "segment_similarity": [Boolean()]} if self.segment_similarity else own

    def check_params(self, est) -> None:
        if est.similarity_prior and not est.lexical_prior:
            raise ValueError("similarity_prior=True adds a feature to the lexical prior: it needs lexical_prior=True.")

    def check_continuation(self, est) -> None:
        """Refuse to continue training a fitted model under prior settings it was not trained with."""
        checks = [("lexical_prior", hasattr(est, "lexical_coef_"), "a lexical prior"),
                  ("similarity_prior", hasattr(est, "similarity_source_"), "the similarity feature in its prior")]
        if self.segment_similarity:
            checks.append(("segment_similarity", est.model_.similarity is not None, "it"))
        for param, fitted, what in checks:
            if bool(getattr(est, param)) != fitted:
                raise ValueError(
                    f"{param}={getattr(est, param)} but the fitted model was trained {'with' if fitted else 'without'} "
                    f"{what}, and continuing keeps what the network learnt against it; set {param}={fitted}, or fit "
                    "afresh (warm_start=False)."
                )

    def training_params(self, est, params: dict) -> dict:
        """``params`` (what the fit cache keys) with what the prior reads beyond them."""
        if est.similarity_prior:
            # The fit cache keys the initial weights by content; the similarity feature reloads them by name, so
            # a fit is reused only under the same names.
            params = {**params, "similarity_source": (est.model, est.tokenizer)}
        return params

    def fit(self, est, module, X, y) -> dict:
        """Fit the prior of a fresh fit on the training rows (in ``fit``, before training): the module's
        segment-similarity weights are set; returns the estimator's prior attributes (among :attr:`attrs`), which
        its ``fit`` sets."""
        fitted, extra = {}, []
        if est.similarity_prior:
            from .similarity import similarity_source

            fitted["similarity_source_"] = similarity_source(est.model, est.tokenizer)
            extra.append(self._similarity(est, X, fitted["similarity_source_"]))
        terms = self._segment_cosines(est, module, X)
        if terms is not None:
            extra.append(terms)
        if est.lexical_prior or terms is not None:
            features, coef = fit_lexical_prior(X, y, extra=np.column_stack(extra) if extra else None,
                                               lexical=est.lexical_prior)
            if terms is not None:  # its weight goes to the module, which computes the feature itself
                _init_segment_weights(module, float(coef[-2]))
                coef = np.delete(coef, -2)
            if est.lexical_prior:
                fitted["lexical_features_"], fitted["lexical_coef_"] = features, coef
        return fitted

    def add_inputs(self, est, module, X, encoded: dict) -> dict:
        """The encoded rows with what the prior adds: the ``question_mask`` of segment similarity and, once
        fitted, the ``prior`` logits."""
        if self.segment_similarity and module.similarity is not None and "question_mask" not in encoded:
            from ..neural.tokens import question_mask

            encoded["question_mask"] = question_mask(encoded["input_ids"], est.tokenizer_)
        if hasattr(est, "lexical_coef_"):
            extra = self._similarity(est, X, est.similarity_source_) if hasattr(est, "similarity_source_") else None
            encoded["prior"] = lexical_prior_logits(est.lexical_features_, est.lexical_coef_, X, extra)
        return encoded

    @staticmethod
    def _similarity(est, X, source) -> np.ndarray:
        """The similarity feature of the rows of ``X``, shape (n_rows, 1) (:mod:`as2rank.transformer.similarity`),
        on the estimator's device and at its prediction dtype, whether fitting or predicting."""
        from ..neural import autocast_dtype, resolve_device
        from .similarity import pair_similarity

        device = resolve_device(est.device)
        return pair_similarity(source, X["question"].to_numpy(), X["candidate"].to_numpy(),
                               device=device, dtype=autocast_dtype(est.precision, device),
                               max_length=est.max_length)[:, None]

    def _segment_cosines(self, est, module, X):
        """The pretrained module's segment cosines of the rows of ``X``, shape (n_rows, 1), or None without
        segment similarity."""
        if not (self.segment_similarity and est.segment_similarity):
            return None
        from ..neural import autocast_dtype, resolve_device
        from ..neural.predict import no_progress, predict_logits

        device = resolve_device(est.device)
        home, training = next(module.parameters()).device, module.training
        module.to(device).eval()
        try:
            cosines = predict_logits(module.segment_cosines, est._encode_for(module, X), device,
                                     batch_tokens=est._batch_tokens(device), dtype=autocast_dtype(est.precision, device),
                                     progress=no_progress)
        finally:
            module.to(home).train(training)
        return cosines[:, -1:]  # a cascade's last exit: the layer the single-exit model would read


def _init_segment_weights(module, weight: float) -> None:
    """Start every segment-similarity weight of ``module`` at ``weight``."""
    import torch

    from .heads import SegmentSimilarity

    with torch.no_grad():
        for term in module.modules():
            if isinstance(term, SegmentSimilarity):
                term.weight.fill_(weight)
