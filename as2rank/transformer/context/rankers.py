"""Context rankers for answer sentence selection (Han, Soldaini & Moschitti 2021, §2.2).

Transformer estimators like :class:`~as2rank.transformer.ranker.TransformerRanker` (the paper's "no context" row)
that read the ``local_context`` and ``global_context`` columns of
:class:`~as2rank.transformer.context.features.ContextExtractor`:

* :class:`ContextConcat`: one encoder over the concatenation of question, candidate and contexts;
* :class:`ContextEnsemble`: one encoder per context, trained for AS2, then joined and fine-tuned;
* :class:`ContextMWA`: one encoder, multi-way attention from the question and candidate to each context.

Typical use::

    make_pipeline(ContextExtractor(), ContextMWA(random_state=0))

The rankers encode the question, the candidate and the contexts as one token sequence, laid out and
truncated as :mod:`as2rank.transformer.context.segments` describes (``max_pair_length`` tokens for the question and
candidate, the rest of ``max_length`` for the contexts). :class:`~as2rank.transformer.context.features.ContextExtractor`,
:data:`~as2rank.transformer.context.features.CONTEXTS` and :data:`~as2rank.transformer.context.features.GLOBAL_METHODS` can be
imported from here too. Importing this module does not import torch; fitting a ranker does.
"""

from __future__ import annotations

import copy
from numbers import Integral

import numpy as np
import pandas as pd

from .features import CONTEXTS, GLOBAL_METHODS, ContextExtractor, check_contexts
from ...data import check_text_columns, require_columns
from ...params import POOLINGS, SUMMARIES, Interval, Options, SequenceOf, validated
from ..scaffold import _TransformerEstimator

__all__ = ["CONTEXTS", "GLOBAL_METHODS", "ContextConcat", "ContextEnsemble", "ContextExtractor", "ContextMWA"]


# --------------------------------------------------------------------------------------------- rankers
class _ContextRanker(_TransformerEstimator):
    """What the context rankers share: parameters, the segment encoding, scoring and prediction."""

    #: Whether the model reads per-token segment ids (multi-way attention).
    _needs_segments = False
    _saved_attrs = ("n_layers_", "pooling_")
    _parameter_constraints = {
        **_TransformerEstimator._parameter_constraints,
        "num_layers": [Interval(Integral, 1, None), None],
        "max_pair_length": [Interval(Integral, 8, None)],
        "pooling": [Options(POOLINGS)],
    }

    def _contexts(self) -> tuple:
        return check_contexts(self.contexts)

    @property
    def _input_columns(self):
        return ("question", "candidate", *(f"{c}_context" for c in self._contexts()))

    def _check_rules(self):
        super()._check_rules()
        self._contexts()
        if self.max_pair_length >= self.max_length:
            raise ValueError(
                f"max_pair_length ({self.max_pair_length}) must be below max_length ({self.max_length}): the "
                "contexts get what the question and candidate leave of max_length."
            )

    def _check_columns(self, X):
        """The columns this model reads, in a frame: present (the message says how to add them) and text. The rest
        of the table is the data gate's (``check_ranking_data`` in ``fit``, ``check_X`` in ``predict``), which also
        refuses what is not a frame."""
        if not isinstance(X, pd.DataFrame):
            return
        columns = self._input_columns
        name = type(self).__name__
        require_columns(X.columns, columns, lambda missing: (
            f"{name} reads the column(s) {missing}, which ContextExtractor adds: use "
            f"make_pipeline(ContextExtractor(), {name}(...)) or transform X with ContextExtractor first."
        ))
        check_text_columns(X, columns)

    @validated
    def fit(self, X, y, groups=None, eval_set=None):
        """Fine-tune the backbone and the head(s) (the ``loss`` parameter: pointwise or listwise).

        Parameters
        ----------
        X : pandas.DataFrame
            Grouped-candidate frame with the context columns of
            :class:`~as2rank.transformer.context.features.ContextExtractor`.
        y : array-like of shape (n_rows,)
            Relevance labels; a label > 0 is a positive.
        groups : array-like of shape (n_rows,), default=None
            Question ids overriding ``X["qid"]``.
        eval_set : tuple (X_dev, y_dev), default=None
            Dev set for early stopping on dev MAP (best weights restored).

        Returns
        -------
        self
        """
        self._check_columns(X)
        if isinstance(eval_set, (tuple, list)) and len(eval_set) == 2:
            self._check_columns(eval_set[0])
        return super().fit(X, y, groups=groups, eval_set=eval_set)

    def _encode_contexts(self, encoder, tokenizer, X, contexts, segment_masks: bool = False) -> dict:
        """The rows as the concatenated segments; with ``segment_masks``, the ``question_mask`` and
        ``candidate_mask`` of the segment similarity (the tokens of the question's and the candidate's segments,
        not the contexts')."""
        from ...neural.backbone import uses_token_types
        from .network import SEGMENTS
        from .segments import encode_segments

        self._check_columns(X)
        columns = ("question", "candidate", *(f"{c}_context" for c in contexts))
        encoded = encode_segments(
            tokenizer,
            [X[c].to_numpy(dtype=object) for c in columns],
            [SEGMENTS[c.removesuffix("_context")] for c in columns],
            max_length=self.max_length,
            max_pair_length=self.max_pair_length,
            token_types=uses_token_types(encoder, tokenizer),
        )
        if segment_masks:
            for name in ("question", "candidate"):
                encoded[f"{name}_mask"] = (encoded["segments"] == SEGMENTS[name]).astype(np.int64)
        if not self._needs_segments:
            del encoded["segments"]
        else:
            # Tokens of each segment in each row, in host memory: the module sizes its packed segments from them.
            encoded["host_segment_counts"] = np.stack([(encoded["segments"] == s).sum(axis=1) for s in range(len(SEGMENTS))], axis=1)
        return encoded

    def encode_rows(self, module, X, tokenizer):
        return self._encode_contexts(module.encoder, tokenizer, X, self._contexts())

    def prepare_encoder(self, encoder):
        from ...neural.backbone import prepare_encoder as cut_encoder

        encoder, n_layers, pooling = cut_encoder(encoder, self.model, self.num_layers, self.pooling)
        return encoder, {"n_layers_": n_layers, "pooling_": pooling}


class ContextConcat(_ContextRanker):
    """Context concatenation (paper §2.2, Figure 2a): one encoder over the question, the candidate and
    the contexts, joined with the tokenizer's separators; the pooled encoding feeds a feed-forward head
    (as :class:`~as2rank.transformer.ranker.TransformerRanker`'s) trained with its ``loss``.

    ``contexts=("local",)`` and ``("global",)`` give the paper's "Local Context" and "Global Context" rows,
    ``("local", "global")`` its "Context Concat" row; the "No Context" row is
    :class:`~as2rank.transformer.ranker.TransformerRanker`.

    Defaults measured: ``docs/benchmarks/defaults-concat.md`` (the training budget, ``lexical_prior`` and
    ``segment_similarity``, over training sizes and data sets).

    Parameters
    ----------
    model : str or transformers.PretrainedConfig, default="minilm-l6"
        As in :class:`~as2rank.transformer.ranker.TransformerRanker`.
    tokenizer : None, str or tokenizer, default=None
        Required when ``model`` is a config.
    num_layers : int, default=None
        Keep only the first ``num_layers`` transformer blocks.
    pooling : {"auto", "cls", "mean"}, default="auto"
        As in :class:`~as2rank.transformer.ranker.TransformerRanker` (``"auto"``: mean pooling for the default
        sentence-transformers backbone, the first token elsewhere).
    max_length : int, default=256
        Tokens of the whole input, special tokens included.
    max_pair_length : int, default=128
        Tokens reserved for the question and candidate with their special tokens (shortened longest first
        beyond it, as ``TransformerRanker(max_length=128)`` does); the contexts share the rest of
        ``max_length`` (see :mod:`as2rank.transformer.context.segments`).
    epochs, batch_size, loss, learning_rate, head_lr_multiplier, weight_decay, warmup, max_grad_norm, \
early_stopping, validation_fraction, patience, eval_every, warm_start, freeze_embeddings, batch_tokens, device, precision, n_threads, \
reuse_fit, random_state, verbose, callbacks
        As in :class:`~as2rank.transformer.ranker.TransformerRanker` (the same defaults, ``epochs=4`` and
        ``learning_rate=5e-5``, measured for this class too; the paper's TANDA setting is ``epochs=2,
        learning_rate=2e-5``).
    contexts : tuple of {"local", "global"}, default=("local", "global")
        Context columns read (``local_context``, ``global_context``); the local one comes first in the
        input whatever the order given.
    lexical_prior : bool, default=True
        As in :class:`~as2rank.transformer.ranker.TransformerRanker`: the logit of a lexical model of the question and
        candidate (:mod:`as2rank.transformer.prior`) added to the network's, in training and prediction. On by default:
        in the defaults benchmark the best swept setting of every training size of both data sets used it,
        and without it the model falls far below word overlap on small training sets. ``False`` is the
        paper's model.
    similarity_prior : bool, default=False
        As in :class:`~as2rank.transformer.ranker.TransformerRanker`: the prior also reads the similarity of the
        pretrained encoder's sentence embeddings of the question and the candidate.
    segment_similarity : bool, default=True
        As in :class:`~as2rank.transformer.ranker.TransformerRanker`: the logit gains a trained term
        ``w · cos(question mean, candidate mean)``, the means of the question's and the candidate's segments
        (not the contexts') in the row's own encoding, ``w`` started from the pretrained encoder's cosines.
        On by default: in this class's defaults benchmark the model with the term ranked above the one without
        it in every column. ``False`` is the paper's model.

    Attributes
    ----------
    model_ : torch.nn.Module
        :class:`~as2rank.transformer.network.CrossEncoder`: ``model_.encoder``, ``model_.head`` and, with
        ``segment_similarity``, ``model_.similarity``.
    tokenizer_ : transformers.PreTrainedTokenizerBase
    n_layers_ : int
    pooling_ : {"cls", "mean"}
    history_ : as2rank.neural.TrainingHistory
    fit_cache_hit_ : bool
        Whether the last ``fit`` reused an identical earlier fit's weights (``reuse_fit``), as in
        :class:`~as2rank.transformer.ranker.TransformerRanker`.

    Examples
    --------
    >>> from sklearn.pipeline import make_pipeline
    >>> from as2rank.transformer.context.rankers import ContextConcat, ContextExtractor
    >>> model = make_pipeline(ContextExtractor(), ContextConcat(contexts=("local",), random_state=0))
    >>> model.fit(X_train, y_train).predict(X_test)  # doctest: +SKIP
    """

    _parameter_constraints = {**_ContextRanker._parameter_constraints,
                              "contexts": [SequenceOf(Options(CONTEXTS))]}

    def __init__(
        self, model="minilm-l6", tokenizer=None, contexts=("local", "global"), num_layers=None, pooling="auto",
        lexical_prior=True, similarity_prior=False, segment_similarity=True, max_length=256, max_pair_length=128,
        epochs=4, batch_size=32, loss="pointwise", learning_rate=5e-5, head_lr_multiplier=10.0, weight_decay=0.01,
        warmup=0.1, max_grad_norm=1.0, early_stopping="auto", validation_fraction=None, patience=2, eval_every=None,
        warm_start=False, freeze_embeddings=False, batch_tokens="auto", device="auto", precision="auto",
        n_threads=None, reuse_fit=True, random_state=None, verbose=False, callbacks=None,
    ):
        self._keep_params(locals())

    def build_module(self, encoder, fitted):
        from ..network import CrossEncoder

        return CrossEncoder(encoder, fitted["pooling_"], similarity=self.segment_similarity)

    def encode_rows(self, module, X, tokenizer):
        return self._encode_contexts(module.encoder, tokenizer, X, self._contexts(),
                                     segment_masks=module.similarity is not None)


class ContextMWA(_ContextRanker):
    """Multi-way attention over context (paper §2.2, Figure 2c; Tan et al., IJCAI 2018).

    One encoder reads the same concatenation as :class:`ContextConcat`, with the segment of every token
    kept. A :class:`~as2rank.transformer.context.network.MultiwayAttention` layer per context lets the question and
    candidate tokens attend to the local-context tokens and, separately, to the global-context tokens
    with four scoring functions (concat, bilinear, dot, minus), mixed by an attention over the ways. The
    classifier (dense + tanh, dense, with dropout) reads the question and candidate tokens' own encodings
    beside each context's attended views, all averaged over those tokens (``summary="pair"``; Tan et al.
    aggregate each token's encoding with its attended views). Padding, special
    tokens and the other context's tokens never enter a context's attention. The attention adds
    ``O(query tokens × context tokens × attention_dim)`` work per row on top of the one encoder pass, so
    the cost stays close to :class:`ContextConcat`'s, not to :class:`ContextEnsemble`'s two passes.

    The attention layers start at random and learn at ``head_lr_multiplier × learning_rate``, as the
    head does.

    Defaults measured: ``docs/benchmarks/defaults-mwa.md`` (the training budget, ``lexical_prior`` and
    ``segment_similarity``, over training sizes and data sets).

    Parameters
    ----------
    model : str or transformers.PretrainedConfig, default="minilm-l6"
        As in :class:`~as2rank.transformer.ranker.TransformerRanker`.
    tokenizer : None, str or tokenizer, default=None
        Required when ``model`` is a config.
    num_layers : int, default=None
        Keep only the first ``num_layers`` transformer blocks.
    pooling : {"auto", "cls", "mean"}, default="auto"
        As in :class:`~as2rank.transformer.ranker.TransformerRanker` (``"auto"``: mean pooling for the default
        sentence-transformers backbone, the first token elsewhere).
    max_length : int, default=256
        Tokens of the whole input, special tokens included.
    max_pair_length : int, default=128
        Tokens reserved for the question and candidate with their special tokens (shortened longest first
        beyond it, as ``TransformerRanker(max_length=128)`` does); the contexts share the rest of
        ``max_length`` (see :mod:`as2rank.transformer.context.segments`).
    epochs, batch_size, loss, learning_rate, head_lr_multiplier, weight_decay, warmup, max_grad_norm, \
early_stopping, validation_fraction, patience, eval_every, warm_start, freeze_embeddings, batch_tokens, device, precision, n_threads, \
reuse_fit, random_state, verbose, callbacks
        As in :class:`~as2rank.transformer.ranker.TransformerRanker` (the same defaults, ``epochs=4`` and
        ``learning_rate=5e-5``, measured for this class too; the paper's TANDA setting is ``epochs=2,
        learning_rate=2e-5``).
    contexts : tuple of {"local", "global"}, default=("local", "global")
        Contexts attended to (one multi-way attention layer each).
    lexical_prior : bool, default=True
        As in :class:`~as2rank.transformer.ranker.TransformerRanker`: the logit of a lexical model of the question and
        candidate (:mod:`as2rank.transformer.prior`) added to the network's, in training and prediction. On by default:
        in the defaults benchmark the best swept setting of every training size of both data sets used it,
        and without it the model falls far below word overlap on small training sets. ``False`` is the
        paper's model.
    similarity_prior : bool, default=False
        As in :class:`~as2rank.transformer.ranker.TransformerRanker`: the prior also reads the similarity of the
        pretrained encoder's sentence embeddings of the question and the candidate.
    segment_similarity : bool, default=True
        As in :class:`~as2rank.transformer.ranker.TransformerRanker`: the logit gains a trained term
        ``w · cos(question mean, candidate mean)``, the means of the question's and the candidate's segments
        (not the contexts') in the row's own encoding, ``w`` started from the pretrained encoder's cosines.
        On by default: in this class's defaults benchmark the model with the term ranked above the one without
        it in every column. ``False`` is the paper's model.
    attention_dim : int, default=16
        Size of the scoring space of the concat, dot and minus ways (their per-row tensors are
        query tokens × context tokens × ``attention_dim``).
    summary : {"pair", "sequence"}, default="pair"
        What the classifier reads beside the attended views: the mean encoding of the question and
        candidate tokens (``"pair"``), or the whole sequence pooled by ``pooling``, context tokens
        included (``"sequence"``, as :class:`ContextConcat` reads it). On WikiQA ``"pair"`` ranks better
        (``docs/studies/context_summary.md``). ``pooling`` applies to ``"sequence"`` only, so
        ``pooling="cls"`` asks for ``summary="sequence"``.

    Attributes
    ----------
    model_ : torch.nn.Module
        :class:`~as2rank.transformer.context.network.MultiwayContextEncoder`: ``model_.encoder``, ``model_.attention``
        (one layer per context), ``model_.head`` and, with ``segment_similarity``, ``model_.similarity``.
    tokenizer_ : transformers.PreTrainedTokenizerBase
    n_layers_ : int
    pooling_ : {"cls", "mean"}
    history_ : as2rank.neural.TrainingHistory
    fit_cache_hit_ : bool
        Whether the last ``fit`` reused an identical earlier fit's weights (``reuse_fit``), as in
        :class:`~as2rank.transformer.ranker.TransformerRanker`.

    Examples
    --------
    >>> from sklearn.pipeline import make_pipeline
    >>> from as2rank.transformer.context.rankers import ContextExtractor, ContextMWA
    >>> model = make_pipeline(ContextExtractor(), ContextMWA(random_state=0))
    >>> model.fit(X_train, y_train).predict(X_test)  # doctest: +SKIP
    """

    _needs_segments = True
    head_modules = ("head", "attention")
    _parameter_constraints = {
        **_ContextRanker._parameter_constraints,
        "contexts": [SequenceOf(Options(CONTEXTS))],
        "attention_dim": [Interval(Integral, 1, None)],
        "summary": [Options(SUMMARIES)],
    }

    def __init__(
        self, model="minilm-l6", tokenizer=None, contexts=("local", "global"), attention_dim=16, summary="pair",
        num_layers=None, pooling="auto", lexical_prior=True, similarity_prior=False, segment_similarity=True,
        max_length=256, max_pair_length=128,
        epochs=4, batch_size=32, loss="pointwise", learning_rate=5e-5, head_lr_multiplier=10.0, weight_decay=0.01,
        warmup=0.1, max_grad_norm=1.0, early_stopping="auto", validation_fraction=None, patience=2, eval_every=None,
        warm_start=False, freeze_embeddings=False, batch_tokens="auto", device="auto", precision="auto",
        n_threads=None, reuse_fit=True, random_state=None, verbose=False, callbacks=None,
    ):
        self._keep_params(locals())

    def _check_rules(self):
        super()._check_rules()
        if self.summary == "pair" and self.pooling == "cls":
            raise ValueError(
                "pooling='cls' pools the whole sequence, which summary='pair' does not read (it averages the "
                "question and candidate tokens): pass summary='sequence' to read the first token."
            )

    def build_module(self, encoder, fitted):
        from .network import MultiwayContextEncoder

        return MultiwayContextEncoder(encoder, fitted["pooling_"], self._contexts(), int(self.attention_dim),
                                      self.summary, similarity=self.segment_similarity)

    def encode_rows(self, module, X, tokenizer):
        return self._encode_contexts(module.encoder, tokenizer, X, self._contexts(),
                                     segment_masks=module.similarity is not None)


class ContextEnsemble(_ContextRanker):
    """Context ensemble (paper §2.2, Figure 2b): two encoders, one over question + candidate + local
    context and one over question + candidate + global context.

    ``fit`` first trains each encoder for AS2 on its own, as a :class:`ContextConcat` with
    ``contexts=("local",)`` and ``("global",)`` (same parameters, same budget; with ``reuse_fit`` an
    identical earlier fit of those rankers in this process is reused). Their pooled encodings are then
    concatenated into a new feed-forward classifier (dropout, dense 2h → h + tanh, dropout, dense → 1),
    and the whole is fine-tuned for another ``epochs`` with only the top ``unfreeze_layers`` blocks of each
    encoder and the classifier trainable: the paper's gradual unfreezing, whose best setting was the top
    3 layers (we fine-tune with the top ``k`` unfrozen from the start; the paper does not describe a
    layer-by-layer schedule). Prediction runs both encoders: about twice the cost of one. Its ``lexical_prior``
    default is that of its :class:`ContextConcat` encoders, whose fits have the same prior. Its members train at
    the ensemble's own budget and ``segment_similarity``, not at :class:`ContextConcat`'s defaults, without its
    ``callbacks``, which see the joint fine-tuning.

    Defaults measured: ``docs/benchmarks/defaults-ensemble.md`` (the training budget, ``lexical_prior`` and
    ``segment_similarity``, over training sizes and data sets).

    Parameters
    ----------
    model : str or transformers.PretrainedConfig, default="minilm-l6"
        As in :class:`~as2rank.transformer.ranker.TransformerRanker`.
    tokenizer : None, str or tokenizer, default=None
        Required when ``model`` is a config.
    num_layers : int, default=None
        Keep only the first ``num_layers`` transformer blocks.
    pooling : {"auto", "cls", "mean"}, default="auto"
        As in :class:`~as2rank.transformer.ranker.TransformerRanker` (``"auto"``: mean pooling for the default
        sentence-transformers backbone, the first token elsewhere).
    max_length : int, default=256
        Tokens of the whole input, special tokens included.
    max_pair_length : int, default=128
        Tokens reserved for the question and candidate with their special tokens (shortened longest first
        beyond it, as ``TransformerRanker(max_length=128)`` does); the contexts share the rest of
        ``max_length`` (see :mod:`as2rank.transformer.context.segments`).
    epochs, batch_size, loss, learning_rate, head_lr_multiplier, weight_decay, warmup, max_grad_norm, \
early_stopping, validation_fraction, patience, eval_every, warm_start, freeze_embeddings, batch_tokens, device, precision, n_threads, \
reuse_fit, random_state, verbose, callbacks
        As in :class:`~as2rank.transformer.ranker.TransformerRanker`, but ``epochs=2`` and
        ``learning_rate=2e-5`` (the TANDA papers' setting), measured for this class: the other
        context rankers' ``epochs=4, learning_rate=5e-5`` does not rank above it and trains twice
        as many epochs.
    unfreeze_layers : int, default=3
        Top blocks of each encoder fine-tuned in the joint stage (0: the classifier only).
    lexical_prior : bool, default=True
        As in :class:`~as2rank.transformer.ranker.TransformerRanker`: the logit of a lexical model of the question and
        candidate (:mod:`as2rank.transformer.prior`) added to the network's, in training and prediction. On by default:
        in the defaults benchmark the best swept setting of every training size of both data sets used it,
        and without it the model falls far below word overlap on small training sets. ``False`` is the
        paper's model.
    similarity_prior : bool, default=False
        As in :class:`~as2rank.transformer.ranker.TransformerRanker`: the prior also reads the similarity of the
        pretrained encoder's sentence embeddings of the question and the candidate.
    segment_similarity : bool, default=True
        As in :class:`~as2rank.transformer.ranker.TransformerRanker`: the logit gains a trained term
        ``w · cos(question mean, candidate mean)``, the means of the question's and the candidate's segments
        (not the contexts') in the row's own encoding, ``w`` started from the pretrained encoder's cosines.
        On by default: in this class's defaults benchmark the model with the term ranked above the one without
        it in every column. ``False`` is the paper's model.
        In the joint stage the term reads the local encoding; ``w`` starts from the trained local encoder's cosines.

    Attributes
    ----------
    model_ : torch.nn.Module
        :class:`~as2rank.transformer.context.network.ContextEnsembleModule`: ``model_.encoder`` (local),
        ``model_.global_encoder``, ``model_.head`` and, with ``segment_similarity``, ``model_.similarity``.
    tokenizer_ : transformers.PreTrainedTokenizerBase
    n_layers_ : int
    pooling_ : {"cls", "mean"}
    member_histories_ : dict
        ``{"local": TrainingHistory, "global": TrainingHistory}`` of the two encoders' own training.
    history_ : as2rank.neural.TrainingHistory
        The joint fine-tuning.
    fit_cache_hit_ : bool
        Whether the last ``fit`` reused an identical earlier fit's weights (``reuse_fit``), as in
        :class:`~as2rank.transformer.ranker.TransformerRanker`; the two encoders' own fits may be reused while the
        joint stage trains.
    """

    # Its two encoders are fitted on the whole training set before the joint stage: no chunked training.
    streamable = False
    _parameter_constraints = {
        **_ContextRanker._parameter_constraints,
        "unfreeze_layers": [Interval(Integral, 0, None)],
    }
    def __init__(
        self, model="minilm-l6", tokenizer=None, unfreeze_layers=3, num_layers=None, pooling="auto",
        lexical_prior=True, similarity_prior=False, segment_similarity=True, max_length=256, max_pair_length=128,
        epochs=2, batch_size=32, loss="pointwise", learning_rate=2e-5, head_lr_multiplier=10.0, weight_decay=0.01,
        warmup=0.1, max_grad_norm=1.0, early_stopping="auto", validation_fraction=None, patience=2, eval_every=None,
        warm_start=False, freeze_embeddings=False, batch_tokens="auto", device="auto", precision="auto",
        n_threads=None, reuse_fit=True, random_state=None, verbose=False, callbacks=None,
    ):
        self._keep_params(locals())

    def _contexts(self):
        return CONTEXTS

    def make_module(self, X, y, groups, eval_set):
        from .network import ContextEnsembleModule

        params = {k: v for k, v in self.get_params(deep=False).items() if k != "unfreeze_layers"}
        members = {
            c: ContextConcat(**{**params, "contexts": (c,), "warm_start": False, "callbacks": None}).fit(
                X, y, groups=groups, eval_set=eval_set)
            for c in CONTEXTS
        }
        local = members["local"]
        fitted = {"tokenizer_": local.tokenizer_, "n_layers_": local.n_layers_, "pooling_": local.pooling_,
                  "member_histories_": {c: m.history_ for c, m in members.items()}}
        module = ContextEnsembleModule(local.model_.encoder, members["global"].model_.encoder, local.pooling_,
                                       similarity=self.segment_similarity)
        return module, fitted

    def build_module(self, encoder, fitted):
        from .network import ContextEnsembleModule

        # Same architecture for the global encoder; its weights come from the state being restored.
        return ContextEnsembleModule(encoder, copy.deepcopy(encoder), fitted["pooling_"],
                                     similarity=self.segment_similarity)

    def set_trainable(self, module):
        from ...neural.backbone import layer_list

        for encoder in (module.encoder, module.global_encoder):
            encoder.requires_grad_(False)
            layers = layer_list(encoder)
            if self.unfreeze_layers > len(layers):
                raise ValueError(f"unfreeze_layers={self.unfreeze_layers} but the encoders have {len(layers)} layers.")
            for layer in layers[len(layers) - int(self.unfreeze_layers) :]:
                layer.requires_grad_(True)

    def encode_rows(self, module, X, tokenizer):
        local = self._encode_contexts(module.encoder, tokenizer, X, ("local",),
                                      segment_masks=module.similarity is not None)
        glob = self._encode_contexts(module.encoder, tokenizer, X, ("global",))
        encoded = {**local, **{f"global_{k}": v for k, v in glob.items() if k != "lengths"}}
        # Batches are cut to this width; the module then trims each input set to its own longest row.
        encoded["lengths"] = np.maximum(local["lengths"], glob["lengths"])
        return encoded
