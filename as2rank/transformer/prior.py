"""The lexical prior of a neural ranker: what word overlap and position already say, as a logit.

A logistic regression on :class:`~as2rank.lexical.baselines.LexicalFeatures` (word overlap, IDF-weighted overlap,
reciprocal rank), fitted on the training rows, gives each (question, candidate) pair a logit. A ranker
trained with this prior adds it to its own logit, in training and in prediction, so that the network learns
only what the lexical model misses: from the first step the ranking is at least the lexical one, which
a fine-tuned cross-encoder alone may not reach on little training data (``docs/benchmarks/defaults.md``).
With ``similarity_prior=True`` the regression also reads the cosine of the question's and the candidate's
sentence embeddings from the pretrained encoder the ranker starts from (:mod:`as2rank.transformer.similarity`).

NumPy and scikit-learn only (the similarity feature imports torch when it is used).
"""

from __future__ import annotations

import numpy as np

from ..params import Boolean

__all__ = ["LexicalPriorMixin", "SegmentSimilarityMixin", "fit_lexical_prior", "lexical_prior_logits"]


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


class LexicalPriorMixin:
    """The ``lexical_prior`` and ``similarity_prior`` parameters of a transformer estimator: the prior is fitted
    at the start of a fresh fit (never on a warm start or a continued ``partial_fit``, which keep the fitted
    one) and its logit is the ``prior`` entry of the encoded rows, which the module adds to its logits."""

    _prior_attrs = ("lexical_features_", "lexical_coef_", "similarity_source_")
    #: The entries of ``lexical_prior`` and ``similarity_prior`` in the estimator's ``_parameter_constraints``.
    _parameter_constraints = {"lexical_prior": [Boolean()], "similarity_prior": [Boolean()]}

    def _check_params(self):
        super()._check_params()
        if self.similarity_prior and not self.lexical_prior:
            raise ValueError("similarity_prior=True adds a feature to the lexical prior: it needs lexical_prior=True.")

    def _check_continuation(self):
        for param, attr, what in (("lexical_prior", "lexical_coef_", "a lexical prior"),
                                  ("similarity_prior", "similarity_source_", "the similarity feature in its prior")):
            fitted = hasattr(self, attr)
            if bool(getattr(self, param)) != fitted:
                raise ValueError(
                    f"{param}={getattr(self, param)} but the fitted model was trained {'with' if fitted else 'without'} "
                    f"{what}, and continuing keeps what the network learnt against it; set {param}={fitted}, or fit "
                    "afresh (warm_start=False)."
                )

    def _init_module(self, X, y, groups, eval_set):
        for name in self._prior_attrs:
            self.__dict__.pop(name, None)
        module = super()._init_module(X, y, groups, eval_set)
        extra = []
        if self.similarity_prior:
            from .similarity import similarity_source

            self.similarity_source_ = similarity_source(self.model, self.tokenizer)
            extra.append(self._similarity(X))
        terms = self._term_features(module, X)
        if terms is not None:
            extra.append(terms)
        if self.lexical_prior or terms is not None:
            features, coef = fit_lexical_prior(X, y, extra=np.column_stack(extra) if extra else None,
                                               lexical=self.lexical_prior)
            if terms is not None:  # its weight goes to the module, which computes the feature itself
                self._init_terms(module, float(coef[-2]))
                coef = np.delete(coef, -2)
            if self.lexical_prior:
                self.lexical_features_, self.lexical_coef_ = features, coef
        return module

    def _term_features(self, module, X):
        """Features of the rows of ``X``, shape (n_rows, 1), that the module computes itself and weighs by a
        parameter that the prior's regression initialises (:meth:`_init_terms`); None: no such term."""
        return None

    def _init_terms(self, module, weight: float) -> None:
        """Set the module's weight on :meth:`_term_features` to the regression's ``weight``."""
        raise NotImplementedError

    def _training_params(self) -> dict:
        params = super()._training_params()
        if self.similarity_prior:
            # The fit cache keys the initial weights by content; the similarity feature reloads them by name, so
            # a fit is reused only under the same names.
            params["similarity_source"] = (self.model, self.tokenizer)
        return params

    def _similarity(self, X) -> np.ndarray:
        """The similarity feature of the rows of ``X``, shape (n_rows, 1) (:mod:`as2rank.transformer.similarity`), on
        the estimator's device and at its prediction dtype, whether fitting or predicting."""
        from ..neural import resolve_device
        from .similarity import pair_similarity

        device = resolve_device(self.device)
        return pair_similarity(self.similarity_source_, X["question"].to_numpy(), X["candidate"].to_numpy(),
                               device=device, dtype=self._compute_dtype(device), max_length=self.max_length)[:, None]

    def _encode(self, X):
        encoded = super()._encode(X)
        if hasattr(self, "lexical_coef_"):
            extra = self._similarity(X) if hasattr(self, "similarity_source_") else None
            encoded["prior"] = lexical_prior_logits(self.lexical_features_, self.lexical_coef_, X, extra)
        return encoded

    def _export_attrs(self):
        return {**super()._export_attrs(), **{k: getattr(self, k) for k in self._prior_attrs if hasattr(self, k)}}

    def _import_attrs(self, attrs):
        super()._import_attrs(attrs)
        for k in self._prior_attrs:
            if k in attrs:
                setattr(self, k, attrs[k])


class SegmentSimilarityMixin(LexicalPriorMixin):
    """The ``segment_similarity`` parameter of a transformer estimator whose module has
    :class:`~as2rank.transformer.heads.SegmentSimilarity` terms (:class:`~as2rank.transformer.ranker.TransformerRanker`,
    :class:`~as2rank.transformer.cascade.CascadeTransformer`): the logit gains ``w × cos(question, candidate)``, the cosine of
    the mean encodings of the pair's question and candidate tokens inside its own encoding. A fresh fit runs the
    pretrained encoder over the training rows once, fits the prior's regression on its cosines beside the
    lexical features, and starts ``w`` (every exit's, for a cascade) at the cosine's coefficient there; the
    network then trains ``w`` with the rest. The batches carry the ``question_mask`` the term needs."""

    _parameter_constraints = {**LexicalPriorMixin._parameter_constraints, "segment_similarity": [Boolean()]}

    def _check_continuation(self):
        super()._check_continuation()
        fitted = self.model_.similarity is not None
        if bool(self.segment_similarity) != fitted:
            raise ValueError(
                f"segment_similarity={self.segment_similarity} but the fitted model was trained "
                f"{'with' if fitted else 'without'} it; set segment_similarity={fitted}, or fit afresh (warm_start=False)."
            )

    def _term_features(self, module, X):
        if not self.segment_similarity:
            return None
        from ..neural import resolve_device
        from ..neural.predict import no_progress, predict_logits

        device = resolve_device(self.device)
        home, training = next(module.parameters()).device, module.training
        module.to(device).eval()
        try:
            cosines = predict_logits(module.segment_cosines, self._encode_for(module, X), device,
                                     batch_tokens=self._batch_tokens(device), dtype=self._compute_dtype(device),
                                     progress=no_progress)
        finally:
            module.to(home).train(training)
        return cosines[:, -1:]  # a cascade's last exit: the layer the single-exit model would read

    def _init_terms(self, module, weight: float) -> None:
        import torch

        from .heads import SegmentSimilarity

        with torch.no_grad():
            for term in module.modules():
                if isinstance(term, SegmentSimilarity):
                    term.weight.fill_(weight)

    def _encode_for(self, module, X):
        encoded = super()._encode_for(module, X)
        if module.similarity is not None:
            from ..neural.backbone import question_mask

            encoded["question_mask"] = question_mask(encoded["input_ids"], self.tokenizer_)
        return encoded
