"""Ranking before training: :class:`ZeroShotRanker`, a pretrained model's own relevance score.

Two kinds of checkpoint rank as they are:

* a sentence encoder (the default, the packaged all-MiniLM-L6-v2): the cosine of the question's and the
  candidate's sentence embeddings, each the mean of the encoder's token encodings;
* a cross-encoder (a checkpoint with a sequence-classification head, such as an MS MARCO cross-encoder): the
  checkpoint's own logit for the (question, candidate) pair.

With labels, ``lexical=True`` adds the lexical prior of the transformer rankers (:mod:`as2rank.transformer.prior`): a
logistic regression on :class:`~as2rank.lexical.baselines.LexicalFeatures` and the zero-shot score. Importing this
module does not import torch; fitting does.
"""

from __future__ import annotations

from numbers import Integral

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from ..base import RankerMixin
from ..data import check_ranking_data, check_X
from ..logistic import fit_logistic
from ..params import (DEVICE_CONSTRAINTS, DTYPE_PRECISIONS, MODEL_CONSTRAINTS, TOKENIZER_CONSTRAINTS, Boolean,
                      Interval, Options, ParameterMixin, validated)
from ..persistence import PersistenceMixin
from .prior import check_prior_labels, lexical_columns, lexical_prior_logits
from .parameters import BATCH_TOKENS_CONSTRAINTS, resolve_batch_tokens

__all__ = ["MODES", "ZeroShotRanker"]

#: Values of ``ZeroShotRanker(mode=...)``.
MODES = ("auto", "bi-encoder", "cross-encoder")


class ZeroShotRanker(ParameterMixin, PersistenceMixin, RankerMixin, BaseEstimator):
    """Rank with a pretrained model as it is: no training.

    * **Bi-encoder** (a sentence encoder, such as the default all-MiniLM-L6-v2): the score of a pair is the
      cosine of the question's and the candidate's embeddings, each the mean of the encoder's final token
      encodings (padding excluded), as sentence-transformers checkpoints were trained to compare sentences.
      Each distinct text is encoded once, however many rows repeat it (a question repeats over its candidates).
    * **Cross-encoder** (a checkpoint with a sequence-classification head, e.g. an MS MARCO cross-encoder):
      the score is the checkpoint's own logit for the pair, read by its own head
      (:func:`~as2rank.transformer.network.classifier_scores`): the logit of a one-label head, ``logit[1] - logit[0]``
      of a two-label one (the log-odds of the positive class, label 1).

    ``fit`` loads the model and validates the data; it trains nothing unless it is given labels (and
    ``lexical`` is on). So ``ZeroShotRanker().fit(X)`` ranks any questions, without a single label. The weights are
    loaded once, in ``fit`` (``predict`` before ``fit`` raises ``NotFittedError``). To fine-tune from the same
    checkpoint, use :class:`~as2rank.transformer.ranker.TransformerRanker` with the same ``model``: from a
    cross-encoder it starts from this very score.

    Parameters
    ----------
    model : str or transformers.PretrainedConfig, default="minilm-l6"
        ``"minilm-l6"`` (the packaged all-MiniLM-L6-v2, offline), a local path or Hugging Face id of a
        sentence-transformers or Hugging Face encoder or cross-encoder checkpoint
        (:func:`~as2rank.neural.backbone.load_backbone`), or a config for a randomly initialised encoder
        (tests).
    tokenizer : None, str or tokenizer, default=None
        ``None`` uses the model's tokenizer; required when ``model`` is a config.
    mode : {"auto", "bi-encoder", "cross-encoder"}, default="auto"
        ``"auto"``: ``"cross-encoder"`` when the checkpoint has a sequence-classification head (its config's
        ``architectures`` end in ``"ForSequenceClassification"``), else ``"bi-encoder"``. ``"bi-encoder"``
        on a cross-encoder compares mean encodings of its encoder and ignores its head; ``"cross-encoder"``
        on a checkpoint without a head is an error (a random head would rank at random).
    lexical : bool, default=True
        With labels in ``fit``: score with a logistic regression on the zero-shot score and the
        :class:`~as2rank.lexical.baselines.LexicalFeatures` (word overlap, IDF-weighted overlap, position), fitted on
        those rows (:func:`as2rank.transformer.prior.fit_lexical_prior`, the lexical prior of the transformer rankers).
        Without labels it has no effect; ``False`` ignores the labels. On by default: with the default encoder
        it ranked ahead of the zero-shot score alone on both data sets of the measurement that chose the
        default, the bundled sample (significantly) and WikiQA (not significantly).
    max_length : int, default=128
        Texts (bi-encoder) or pairs (cross-encoder, truncated longest first) are cut to this many tokens.
    batch_tokens : int or "auto", default="auto"
        Padded tokens per batch (texts or pairs sorted by length). ``"auto"``: 2048 on the CPU, 16384 on other
        devices, as the transformer rankers.
    device : str, default="auto"
        ``"auto"`` (CUDA when present, else CPU), ``"cpu"``, ``"cuda"``, ... (:func:`as2rank.neural.resolve_device`).
    precision : {"auto", "fp32", "bf16"}, default="auto"
        Autocast dtype of the encoder: ``"auto"`` is bfloat16 where the device computes it natively, else
        float32. Means, cosines and the head's logits are computed in float32 whatever it is.
    n_threads : int, default=None
        torch CPU threads of ``fit`` and ``predict`` (restored afterwards); ``None`` keeps torch's setting
        (:func:`as2rank.neural.torch_threads`).
    verbose : bool, default=False
        Progress bars over the batches.

    Attributes
    ----------
    mode_ : {"bi-encoder", "cross-encoder"}
        The mode used (``mode`` with ``"auto"`` resolved).
    model_ : torch.nn.Module
        The loaded weights: the encoder (bi-encoder), or a :class:`~as2rank.transformer.network.CrossEncoder` that
        scores with the checkpoint's own head (cross-encoder; the checkpoint is ``model_.encoder``).
    tokenizer_ : transformers.PreTrainedTokenizerBase
    config_ : transformers.PretrainedConfig
        The checkpoint's config (it rebuilds ``model_`` from saved weights).
    lexical_features_ : LexicalFeatures
        With ``lexical`` and labels: the fitted features.
    lexical_coef_ : ndarray of shape (8,)
        With ``lexical`` and labels: the regression's weights on the six ``lexical_features_`` columns and
        the zero-shot score, intercept last.

    Examples
    --------
    >>> from as2rank import ZeroShotRanker
    >>> ranker = ZeroShotRanker().fit(X)                                     # doctest: +SKIP
    >>> ranker.rank("who wrote hamlet ?", ["Paris is big .", "Hamlet is a play by Shakespeare ."])  # doctest: +SKIP
    >>> ZeroShotRanker(model="path/to/cross-encoder").fit(X).predict(X)     # doctest: +SKIP
    """

    _parameter_constraints = {
        "model": MODEL_CONSTRAINTS,
        "tokenizer": TOKENIZER_CONSTRAINTS,
        "mode": [Options(MODES)],
        "lexical": [Boolean()],
        "max_length": [Interval(Integral, 8, None)],
        "batch_tokens": BATCH_TOKENS_CONSTRAINTS,
        "device": DEVICE_CONSTRAINTS,
        "precision": [Options(DTYPE_PRECISIONS)],
        "n_threads": [Interval(Integral, 1, None), None],
        "verbose": [Boolean()],
    }
    _lexical_attrs = ("lexical_features_", "lexical_coef_")

    def __init__(
        self, model="minilm-l6", tokenizer=None, mode="auto", lexical=True, max_length=128, batch_tokens="auto",
        device="auto", precision="auto", n_threads=None, verbose=False,
    ):
        self._keep_params(locals())

    @validated
    def fit(self, X, y=None, groups=None):
        """Load the model and validate the data; with ``lexical`` and labels, fit the lexical regression.

        Parameters
        ----------
        X : pandas.DataFrame
            Grouped-candidate frame.
        y : array-like of shape (n_rows,), default=None
            Relevance labels (a label > 0 is a positive); used only with ``lexical=True``, validated always.
        groups : array-like of shape (n_rows,), default=None
            Question ids overriding ``X["qid"]`` (validated).

        Returns
        -------
        self

        Raises
        ------
        ValueError
            For invalid parameters or data, ``mode="cross-encoder"`` on a checkpoint without a
            sequence-classification head, a head whose logits as2rank cannot read, or, with ``lexical``, labels
            of a single class.
        """
        from ..neural import resolve_device, torch_threads
        from ..neural.backbone import is_sequence_classifier, load_backbone

        X, y, _ = check_ranking_data(X, y, groups, require_y=False)
        learn = bool(self.lexical) and y is not None
        if learn:
            check_prior_labels(y, "lexical=True fits a logistic regression",
                               "Fit without labels (or with lexical=False) to rank zero-shot.")
        device = resolve_device(self.device)
        with torch_threads(self.n_threads):
            model, tokenizer = load_backbone(self.model, self.tokenizer)
            mode = self.mode
            if mode == "auto":
                mode = "cross-encoder" if is_sequence_classifier(model) else "bi-encoder"
            elif mode == "cross-encoder" and not is_sequence_classifier(model):
                raise ValueError(
                    "mode='cross-encoder' scores with a checkpoint's sequence-classification head, and model= "
                    f"loads as a {type(model).__name__}, without one (its config's architectures do not end in "
                    "'ForSequenceClassification'). Use mode='bi-encoder' (or 'auto') to rank with its sentence "
                    "embeddings, or train a head with TransformerRanker."
                )
            module = self._scoring_module(mode, model)
            lexical = None
            if learn:  # the prior's regression, on the zero-shot score as its last column
                features, columns = lexical_columns(X)
                scores = self._scores(module, tokenizer, mode, X, device)
                lexical = features, fit_logistic(np.column_stack([columns, scores]), y > 0)
        self.mode_, self.model_, self.tokenizer_, self.config_ = mode, module, tokenizer, model.config
        for name in self._lexical_attrs:
            self.__dict__.pop(name, None)
        if lexical is not None:
            self.lexical_features_, self.lexical_coef_ = lexical
        return self

    def predict(self, X) -> np.ndarray:
        """The zero-shot score of each row (with ``lexical_coef_``, the lexical regression's logit), higher is
        better.

        Parameters
        ----------
        X : pandas.DataFrame
            Grouped-candidate frame.

        Returns
        -------
        ndarray of float64 of shape (n_rows,)
        """
        from ..neural import resolve_device, torch_threads

        check_is_fitted(self, "model_")
        X = check_X(X)
        device = resolve_device(self.device)
        with torch_threads(self.n_threads):
            scores = self._scores(self.model_, self.tokenizer_, self.mode_, X, device)
        if not hasattr(self, "lexical_coef_"):
            return scores
        return lexical_prior_logits(self.lexical_features_, self.lexical_coef_, X, scores[:, None]).astype(np.float64)

    # ----------------------------------------------------------------- scoring
    @staticmethod
    def _scoring_module(mode: str, model):
        """What scores the pairs: the encoder itself (bi-encoder), or a cross-encoder module reading the
        checkpoint's own head (which checks that it can)."""
        if mode == "bi-encoder":
            return model
        from .network import CrossEncoder

        return CrossEncoder(model, "classifier").eval()

    def _scores(self, module, tokenizer, mode: str, X, device) -> np.ndarray:
        """The zero-shot score of every row of ``X`` from ``module`` (see :meth:`_scoring_module`), float64."""
        from ..neural.backbone import uses_token_types
        from ..neural.devices import autocast_dtype
        from ..neural.predict import predict_logits, progress_bar, sentence_embeddings
        from ..neural.tokens import encode_pairs

        module = module.to(device).eval()
        dtype = autocast_dtype(self.precision, device, options=DTYPE_PRECISIONS)
        batch_tokens = resolve_batch_tokens(self.batch_tokens, device)
        progress = progress_bar(self.verbose, f"{type(self).__name__} ")
        questions, candidates = X["question"].to_numpy(dtype=object), X["candidate"].to_numpy(dtype=object)
        if mode == "cross-encoder":
            encoded = encode_pairs(tokenizer, questions, candidates, max_length=self.max_length,
                                   token_types=uses_token_types(module.encoder, tokenizer))
            return predict_logits(module, encoded, device, batch_tokens=batch_tokens, dtype=dtype,
                                  progress=progress)
        # Each distinct text once: the questions repeat over their candidates, and a text may be both.
        codes, texts = pd.factorize(np.concatenate([questions, candidates]))
        embeddings = sentence_embeddings(module, tokenizer, list(texts), device=device, dtype=dtype,
                                         max_length=self.max_length, batch_tokens=batch_tokens, progress=progress)
        n = len(X)
        return np.einsum("ij,ij->i", embeddings[codes[:n]], embeddings[codes[n:]])

    # ----------------------------------------------------------------- persistence
    def _module_from_state(self, state_dict):
        """``model_`` rebuilt from its weights (unpickling, :meth:`from_pretrained`): the checkpoint's class from
        ``config_``, wrapped as in ``fit``."""
        from transformers import AutoModel, AutoModelForSequenceClassification

        from ..neural.backbone import is_sequence_classifier

        auto = AutoModelForSequenceClassification if is_sequence_classifier(self.config_) else AutoModel
        module = self._scoring_module(self.mode_, auto.from_config(self.config_, trust_remote_code=False))
        module.load_state_dict(state_dict)
        return module.eval()

    def __getstate__(self):
        state = dict(super().__getstate__())
        if "model_" in state:
            # CPU tensors, so a model used on a GPU unpickles on a machine without one.
            state["model_"] = {k: v.detach().to("cpu", copy=True) for k, v in self.model_.state_dict().items()}
        return state

    def __setstate__(self, state):
        super().__setstate__(state)
        if isinstance(self.__dict__.get("model_"), dict):
            self.model_ = self._module_from_state(self.model_)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # Labels are optional (only lexical=True learns from them); fit is still needed: it loads the weights.
        tags.target_tags.required = False
        return tags
