"""The shared machinery of the transformer rankers: :class:`_TransformerEstimator`.

It holds what every transformer-backed ranker (:class:`~as2rank.transformer.ranker.TransformerRanker`, the cascade,
the distilled and the context rankers) shares: loading the backbone (:mod:`as2rank.neural.backbone`), pair
encoding, the lexical prior (:mod:`as2rank.transformer.prior`), ``fit`` with an optional dev set and early
stopping through the training steps of :class:`~as2rank.transformer.hooks.TrainingHooks`, ``partial_fit`` on a
stream of chunks, warm starts, reuse of identical fits (:mod:`as2rank.neural.fitcache`), numeric precision
(autocast, or an int8 copy for prediction on the CPU) and pickling to a CPU state; ``save_pretrained``/
``from_pretrained`` come from :class:`~as2rank.transformer.saving.PretrainedIO`. A subclass writes out its
``__init__`` (its own parameters, then the shared ones, :mod:`as2rank.transformer.parameters`) and supplies the
torch module, and where it trains differently, the training steps it overrides. Importing this module does not
import torch.
"""

from __future__ import annotations

import sys
from abc import ABCMeta, abstractmethod
from numbers import Integral

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import check_is_fitted

from ..base import RankerMixin
from ..data import check_ranking_data, check_X
from ..early_stopping import check_early_stopping, check_eval_set, training_summary
from ..logistic import fit_logistic
from ..params import MODEL_CONSTRAINTS, TOKENIZER_CONSTRAINTS, Interval, ParameterMixin, validated
from .hooks import TrainingHooks
from .parameters import AUTO_BATCH_TOKENS, TRAINING_CONSTRAINTS, resolve_batch_tokens
from .prior import PRIOR_ATTRS, PRIOR_CONSTRAINTS, check_prior_labels, lexical_columns, lexical_prior_logits
from .saving import PretrainedIO


class _TransformerEstimator(ParameterMixin, TrainingHooks, PretrainedIO, RankerMixin, BaseEstimator, metaclass=ABCMeta):
    """Shared fit/predict/persistence of the transformer rankers (see the module docstring).

    A transformer estimator is this scaffold, a few declared hooks and the components it holds:

    * hooks it must define: :meth:`_prepare_encoder` (cut the loaded encoder; return it with the fitted
      attributes that depend on it) and :meth:`_build_module` (wrap it in the heads those attributes describe);
    * training steps it may override (:class:`~as2rank.transformer.hooks.TrainingHooks`): ``get_loss``,
      ``forward_outputs``, ``get_batches``, ``compute_loss``, ``evaluate``;
    * hooks it may define: :meth:`_encode_rows` (how rows become token arrays; default: question/candidate
      pairs), :meth:`_check_rules` (cross-parameter rules), :meth:`_row_targets` (per-row training targets),
      :meth:`_init_module` (a module trained in stages), :meth:`_set_trainable`;
    * data: ``_parameter_constraints`` (every parameter's accepted values), ``_saved_attrs`` (the fitted
      attributes written with the weights) and the class attributes below.

    Every transformer estimator holds the lexical prior (:mod:`as2rank.transformer.prior`): its parameters
    ``lexical_prior``, ``similarity_prior`` and ``segment_similarity``, its fitted ``lexical_features_``,
    ``lexical_coef_`` and ``similarity_source_``. ``predict`` scores every row with the module's logit
    (:meth:`predictor`); models with several outputs per row (exits, heads) define their own.
    """

    #: Parameters that act only at prediction time: a fit differing only in these reuses cached weights.
    #: (``n_threads`` changes speed; results differ at most in the last bits of float sums.)
    _inference_params = ("batch_tokens", "verbose", "reuse_fit", "n_threads")
    #: Submodules initialised at random (score heads): they learn at ``head_lr_multiplier × learning_rate``.
    _head_modules = ("head",)
    #: Whether the model trains from a stream of chunks (``partial_fit``); models that need the whole training
    #: set at once (teachers calibrated on it, members fitted before a joint stage) do not offer it.
    _streamable = True
    #: Parameters that :meth:`save_pretrained` does not write to ``as2rank.json`` (the encoder is saved beside
    #: it; fit-time inputs such as distillation teachers are not part of the model).
    _unsaved_params = ("model", "tokenizer")
    #: Accepted values of the shared parameters (:func:`as2rank.params.validate_params`); each subclass
    #: extends it with its own parameters.
    _parameter_constraints = {"model": MODEL_CONSTRAINTS, "tokenizer": TOKENIZER_CONSTRAINTS,
                              "max_length": [Interval(Integral, 8, None)], **PRIOR_CONSTRAINTS, **TRAINING_CONSTRAINTS}
    #: Whether ``early_stopping="auto"`` holds out validation questions from large enough training data by
    #: itself (:func:`~as2rank.early_stopping.holdout_fraction`): set where the defaults benchmark measured it.
    _auto_holdout = False
    #: ``batch_tokens="auto"`` per device (:data:`AUTO_BATCH_TOKENS`).
    _auto_batch_tokens = AUTO_BATCH_TOKENS
    #: Fitted attributes that :meth:`save_pretrained` writes beside the weights (with ``activation_ranges_`` and
    #: the prior's, where fitted) and loading sets back.
    _saved_attrs = ("n_layers_",)

    # ----------------------------------------------------------------- hooks
    @abstractmethod
    def _prepare_encoder(self, encoder) -> tuple:
        """Cut the loaded encoder to the depth used: the encoder to build on, and the fitted attributes that
        depend on it (``{"n_layers_": ..., ...}``), which ``fit`` sets."""

    @abstractmethod
    def _build_module(self, encoder, fitted):
        """The torch module that trains and predicts: ``encoder`` wrapped in the score head(s) that ``fitted``
        (the fitted attributes, a mapping) describes. Also rebuilds a fitted module from its config (unpickling,
        loading, a reused fit; ``fitted`` is then the estimator's own) before its weights are loaded."""

    def _check_rules(self) -> None:
        """Cross-parameter rules, checked by :func:`~as2rank.params.validated` after every parameter passed its
        constraints: those all the transformer estimators share (``validation_fraction`` needs early stopping,
        ``similarity_prior`` the lexical prior); a class with rules of its own extends this (calling
        ``super()._check_rules()``)."""
        super()._check_rules()
        check_early_stopping(self)
        if self.similarity_prior and not self.lexical_prior:
            raise ValueError("similarity_prior=True adds a feature to the lexical prior: it needs lexical_prior=True.")

    def _row_targets(self, X, y, index) -> dict:
        """Per-row arrays (first axis = rows of ``X``) that training batches carry beside ``labels``
        (e.g. teacher logits for distillation); sliced to each batch's rows. Called once per ``fit`` or
        ``partial_fit`` call, on its validated data."""
        return {}

    #: Text columns the model reads; they join the key under which identical fits are reused.
    _input_columns = ("question", "candidate")

    def _init_module(self, X, y, groups, eval_set) -> tuple:
        """The module a fresh ``fit`` trains, the backbone loaded, cut and wrapped in the heads, and the fitted
        attributes that go with it (``tokenizer_`` and those of :meth:`_prepare_encoder`).

        Runs inside ``fit``'s seeded block; a class may train parts first (the context ensemble trains
        its two encoders before their joint fine-tuning).
        """
        from ..neural.backbone import load_backbone

        encoder, tokenizer = load_backbone(self.model, self.tokenizer)
        encoder, fitted = self._prepare_encoder(encoder)
        fitted = {"tokenizer_": tokenizer, **fitted}
        return self._build_module(encoder, fitted), fitted

    def _set_trainable(self, module) -> None:
        """Choose the parameters the training loop updates (default: all, word embeddings per
        ``freeze_embeddings``)."""
        module.encoder.get_input_embeddings().weight.requires_grad_(not self.freeze_embeddings)

    def _encode_rows(self, module, X, tokenizer) -> dict:
        """The rows of ``X`` as token arrays for ``module`` (default: question/candidate pairs)."""
        from ..neural.backbone import uses_token_types
        from ..neural.tokens import encode_pairs

        return encode_pairs(
            tokenizer,
            X["question"].to_numpy(),
            X["candidate"].to_numpy(),
            max_length=self.max_length,
            token_types=uses_token_types(module.encoder, tokenizer),
        )

    # ----------------------------------------------------------------- shared machinery
    def _fresh_module(self, X, y, groups, eval_set) -> tuple:
        """:meth:`_init_module`, then the prior fitted on the training rows (both in ``fit``'s seeded block): the
        module, and the fitted attributes of both, which replace those of an earlier fit."""
        module, fitted = self._init_module(X, y, groups, eval_set)
        return module, {**fitted, **self._fit_prior(module, X, y, fitted["tokenizer_"])}

    def _fit_prior(self, module, X, y, tokenizer) -> dict:
        """Fit the prior of a fresh fit on the training rows: the module's segment-similarity weights are set;
        returns the prior's fitted attributes (among :data:`~as2rank.transformer.prior.PRIOR_ATTRS`).

        The regression's columns are the lexical features, then the similarity feature, then the pretrained
        module's segment cosines, each as its option asks."""
        if not (self.lexical_prior or self.segment_similarity):
            return {}
        check_prior_labels(y)
        features, lexical = lexical_columns(X, self.lexical_prior)
        fitted, columns = {}, [lexical]
        if self.similarity_prior:
            from .similarity import similarity_source

            fitted["similarity_source_"] = similarity_source(self.model, self.tokenizer)
            columns.append(self._similarity(X, fitted["similarity_source_"]))
        if self.segment_similarity:
            from ..neural import resolve_device
            from ..neural.predict import predict_outputs

            device = resolve_device(self.device)
            encoded = self._encode_for(module, X, {**fitted, "tokenizer_": tokenizer})
            # The pretrained module's cosines at a cascade's last exit: the layer the single-exit model would read.
            cosines = predict_outputs(module, module.segment_cosines, encoded, device,
                                      batch_tokens=self._batch_tokens(device), dtype=self._compute_dtype(device))
            columns.append(cosines[:, -1:])
        coef = fit_logistic(np.column_stack(columns), np.asarray(y) > 0)
        if self.segment_similarity:  # its weight goes to the module, which computes the feature itself
            import torch

            from .network import SegmentSimilarity

            with torch.no_grad():  # every term's (a cascade has one per exit)
                for term in module.modules():
                    if isinstance(term, SegmentSimilarity):
                        term.weight.fill_(float(coef[-2]))
            coef = np.delete(coef, -2)
        if self.lexical_prior:
            fitted["lexical_features_"], fitted["lexical_coef_"] = features, coef
        return fitted

    def _similarity(self, X, source) -> np.ndarray:
        """The similarity feature of the rows of ``X``, shape (n_rows, 1) (:mod:`as2rank.transformer.similarity`),
        on the estimator's device and at its prediction dtype, whether fitting or predicting."""
        from ..neural import resolve_device
        from .similarity import pair_similarity

        device = resolve_device(self.device)
        return pair_similarity(source, X["question"].to_numpy(), X["candidate"].to_numpy(), device=device,
                               dtype=self._compute_dtype(device), max_length=self.max_length)[:, None]

    def _check_continuation(self) -> None:
        """Before training continues from fitted weights (``warm_start``, a ``partial_fit`` on a fitted model):
        refuse prior settings that the fitted model was not trained with."""
        checks = [("lexical_prior", hasattr(self, "lexical_coef_"), "a lexical prior"),
                  ("similarity_prior", hasattr(self, "similarity_source_"), "the similarity feature in its prior"),
                  ("segment_similarity", self.model_.similarity is not None, "it")]
        for param, fitted, what in checks:
            if bool(getattr(self, param)) != fitted:
                raise ValueError(
                    f"{param}={getattr(self, param)} but the fitted model was trained {'with' if fitted else 'without'} "
                    f"{what}, and continuing keeps what the network learnt against it; set {param}={fitted}, or fit "
                    "afresh (warm_start=False)."
                )

    def _encode(self, X):
        return self._encode_for(self.model_, X, vars(self))

    def _encode_for(self, module, X, fitted: dict):
        """The rows of ``X`` encoded as ``module`` reads them with the fitted attributes ``fitted`` (its
        ``tokenizer_``, the prior's), with the prior's inputs: the ``question_mask`` of segment similarity and,
        with a fitted lexical prior, its logits."""
        logits = None
        if "lexical_coef_" in fitted:
            source = fitted.get("similarity_source_")
            extra = None if source is None else self._similarity(X, source)
            logits = lexical_prior_logits(fitted["lexical_features_"], fitted["lexical_coef_"], X, extra)
        encoded = self._encode_rows(module, X, fitted["tokenizer_"])
        if module.similarity is not None and "question_mask" not in encoded:
            from ..neural.tokens import question_mask

            encoded["question_mask"] = question_mask(encoded["input_ids"], fitted["tokenizer_"])
        if logits is not None:
            encoded["prior"] = logits
        return encoded

    def _compute_dtype(self, device, *, training: bool = False):
        """The autocast dtype of ``precision`` on ``device`` (see :func:`as2rank.neural.devices.autocast_dtype`)."""
        from ..neural.devices import autocast_dtype

        return autocast_dtype(self.precision, device, training=training)

    def _batch_tokens(self, device, module=None) -> int:
        """The padded-token budget of a prediction batch on ``device`` for ``module``, the model a :meth:`predictor`
        holds (None: a torch model)."""
        from ..neural.onnx.runtime import OnnxCascade, OnnxModule

        return resolve_batch_tokens(self.batch_tokens, device, self._auto_batch_tokens,
                                    onnx=isinstance(module, (OnnxModule, OnnxCascade)))

    def _quantized(self) -> bool:
        """Whether prediction runs the int8 copy of the model."""
        from ..neural import int8_supported

        return self.precision == "int8" and int8_supported()

    def _training_params(self) -> dict:
        """The parameters a fit's weights depend on (what the fit cache keys): the similarity feature reloads the
        initial weights by name, so with it a fit is reused only under the same names."""
        params = {k: v for k, v in self.get_params(deep=False).items() if k not in self._inference_params}
        return {**params, "similarity_source": (self.model, self.tokenizer)} if self.similarity_prior else params

    @validated
    def fit(self, X, y, groups=None, eval_set=None):
        """Fine-tune the backbone and the head(s) on grouped candidates (pointwise binary cross-entropy).

        Run by ``accelerate launch`` or ``torchrun``, the same call trains in every process on its shard of
        each batch (see :mod:`as2rank.neural.distributed`); every process ends with the same model.

        Parameters
        ----------
        X : pandas.DataFrame
            Grouped-candidate frame.
        y : array-like of shape (n_rows,)
            Relevance labels; a label > 0 is a positive.
        groups : array-like of shape (n_rows,), default=None
            Question ids overriding ``X["qid"]``.
        eval_set : tuple (X_dev, y_dev), default=None
            Dev set: early stopping watches its MAP and keeps the best weights. It replaces the
            ``validation_fraction`` hold-out.

        Returns
        -------
        self
        """
        from ..neural import resolve_device
        from ..neural.distributed import training_session
        from ..neural.fitcache import FIT_CACHE, fit_key, source_digests

        X, y, index = check_ranking_data(X, y, groups)
        device = resolve_device(self.device)
        dev = check_eval_set(self, eval_set)
        warm = bool(self.warm_start) and hasattr(self, "model_")
        if warm:
            self._check_continuation()
        # Per-row targets (distillation teachers' logits) are training data too: computed once, keyed and trained on.
        targets = self._row_targets(X, y, index)
        key = sources = None
        if self.reuse_fit and not warm and isinstance(self.random_state, (int, np.integer)):
            # The initial weights enter the key by content (None: a name not on disk, so no reuse).
            sources = source_digests(self.model, self.tokenizer)
        if sources is not None:
            columns = self._input_columns
            data = (*(X[c].to_numpy() for c in columns), index.codes, index.position_index(), y, targets)
            dev_data = None if dev is None else (*(dev[0][c].to_numpy() for c in columns), dev[2].codes, dev[1])
            params = {**self._training_params(), "model": sources[0], "tokenizer": sources[1]}
            key = fit_key(self, params, str(device), data, dev_data)
            cached = FIT_CACHE.get(key)
            if cached is not None:
                self._restore_fitted(cached)
                self._train_state = None
                self.fit_cache_hit_ = True
                self._report_cache_hit()
                return self

        dtype = self._compute_dtype(device, training=True)
        with training_session(self.n_threads, device, self.random_state, precision=dtype) as (setup, rng):
            if not warm:
                self.model_, fitted = self._fresh_module(X, y, groups, eval_set)
                for name in PRIOR_ATTRS:
                    self.__dict__.pop(name, None)
                self.__dict__.update(fitted)
            history, ranges = self.fit_loop(X, y, index, targets, rng, setup, dev=dev)
        self.history_, self.validation_scores_, self.best_iteration_ = training_summary(history)
        if ranges is not None:
            self.activation_ranges_ = ranges
        # A fit starts afresh: a partial_fit afterwards starts a new schedule from these weights.
        self._train_state = None
        self.fit_cache_hit_ = False
        # Stored only if the initial weights did not change on disk while training (they were loaded after
        # the digest was taken).
        if key is not None and source_digests(self.model, self.tokenizer) == sources:
            FIT_CACHE.put(key, self._fitted_state())
        return self

    def _report_cache_hit(self) -> None:
        from ..neural.distributed import is_main_process

        if self.verbose and is_main_process():
            print(f"{type(self).__name__}.fit: weights reused from an identical earlier fit in this process, not "
                  "trained; to train, set reuse_fit=False or call as2rank.neural.fitcache.FIT_CACHE.clear().",
                  file=sys.stderr)

    @available_if(lambda est: est._streamable)
    @validated
    def partial_fit(self, X, y, groups=None, total_rows=None):
        """Train on one chunk of a stream of whole questions: one pass over its rows, continuing the optimizer
        and the learning-rate schedule of the previous calls.

        For data larger than memory (ASNQ), call it on the chunks of :func:`~as2rank.datasets.load_asnq` or
        :func:`~as2rank.datasets.load_parquet`; peak memory then follows the chunk size, not the file. The
        first call declares ``total_rows``, the rows that all calls together will train on (the file's rows
        times the passes over it): the warm-up and decay of the learning rate are laid out over them, so
        that a step's rate is that of ``fit`` at the same fraction of the data. ``epochs``,
        ``validation_fraction``, ``patience`` and ``eval_every`` do not apply (make the passes yourself; score
        a dev set between calls). The first call starts from the fitted weights when the estimator is fitted,
        else from ``model``; a later ``fit`` ends the stream. A single call on all the data (``total_rows`` a
        multiple of ``batch_size``) trains exactly as ``fit`` with ``epochs=1``.

        Batches never mix chunks (each chunk ends with a smaller batch unless its rows are a multiple of
        ``batch_size``), and rows are shuffled within a chunk only: shuffle the file beforehand, by whole
        questions, when its order is not random.

        Parameters
        ----------
        X : pandas.DataFrame
            Grouped-candidate frame: one chunk.
        y : array-like of shape (n_rows,)
            Relevance labels; a label > 0 is a positive.
        groups : array-like of shape (n_rows,), default=None
            Question ids overriding ``X["qid"]``.
        total_rows : int, default=None
            Training rows over all calls; required on the first call, ignored afterwards.

        Returns
        -------
        self

        Examples
        --------
        >>> from as2rank.datasets import load_asnq
        >>> from as2rank.app.scale import count_rows
        >>> model = TransformerRanker(random_state=0)                                   # doctest: +SKIP
        >>> total = count_rows("asnq/train.tsv")                                        # doctest: +SKIP
        >>> for X, y in load_asnq("asnq/train.tsv", chunksize=200_000):                 # doctest: +SKIP
        ...     model.partial_fit(X, y, total_rows=total)
        """
        from ..neural import TrainingState, resolve_device
        from ..neural.distributed import training_session

        X, y, index = check_ranking_data(X, y, groups)
        device = resolve_device(self.device)
        state = TrainingState.resume(getattr(self, "_train_state", None), total_rows, int(self.batch_size))
        if hasattr(self, "model_"):
            self._check_continuation()
        targets = self._row_targets(X, y, index)
        dtype = self._compute_dtype(device, training=True)
        session = training_session(self.n_threads, device, self.random_state, precision=dtype, call=state.runs)
        with session as (setup, rng):
            if not hasattr(self, "model_"):
                self.model_, fitted = self._fresh_module(X, y, groups, None)
                for name in PRIOR_ATTRS:
                    self.__dict__.pop(name, None)
                self.__dict__.update(fitted)
            history, ranges = self.fit_loop(X, y, index, targets, rng, setup, state=state)
        self.history_, self.validation_scores_, self.best_iteration_ = training_summary(
            history if state.runs == 1 else self.history_.extend(history))
        if ranges is not None:
            self.activation_ranges_ = ranges
        self.fit_cache_hit_ = False
        self._train_state = state
        return self

    # ----------------------------------------------------------------- persistence
    def _fitted_state(self) -> dict:
        """Everything fit learned, with the module as config + CPU tensors (no device, no live module)."""
        module = self.model_
        return {
            "config": module.encoder.config,
            "state_dict": {k: v.detach().to("cpu", copy=True) for k, v in module.state_dict().items()},
            "attrs": {k: v for k, v in vars(self).items() if _is_learnt(k)},
        }

    def _restore_fitted(self, state: dict) -> None:
        from transformers import AutoModel

        for k in [k for k in vars(self) if _is_learnt(k) and k not in state["attrs"]]:
            delattr(self, k)  # fitted by an earlier fit, absent from the restored one (e.g. a lexical prior)
        for k, v in state["attrs"].items():
            setattr(self, k, v)
        module = self._build_module(AutoModel.from_config(state["config"]), state["attrs"])
        module.load_state_dict(state["state_dict"])
        self.model_ = module.eval()

    def __getstate__(self):
        state = super().__getstate__()
        if "model_" in state:
            # The live module may sit on a GPU: pickle its config and CPU tensors instead.
            state = {k: v for k, v in state.items() if k != "model_"}
            state["_fitted"] = self._fitted_state()
        return state

    def __setstate__(self, state):
        fitted = state.pop("_fitted", None)
        super().__setstate__(state)
        if fitted is not None:
            self._restore_fitted(fitted)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # Head initialisation, dropout and batch order draw from random_state: None draws fresh entropy per fit.
        tags.non_deterministic = self.random_state is None
        return tags

    # ----------------------------------------------------------------- prediction
    def encode(self, X) -> dict:
        """The token arrays the fitted model reads for the rows of ``X`` (what :meth:`predictor` scores).

        Parameters
        ----------
        X : pandas.DataFrame
            Grouped-candidate frame with the columns the model reads.

        Returns
        -------
        dict of ndarray
            Token arrays of shape (n_rows, width) and ``lengths`` of shape (n_rows,).
        """
        from ..neural import torch_threads

        check_is_fitted(self, "model_")
        X = check_X(X)
        with torch_threads(self.n_threads):
            return self._encode(X)

    def predict(self, X) -> np.ndarray:
        """One score (the head's logit) per row, higher is better.

        Parameters
        ----------
        X : pandas.DataFrame
            Grouped-candidate frame (for the context rankers, with the context columns they read, added
            by :class:`~as2rank.transformer.context.features.ContextExtractor`).

        Returns
        -------
        ndarray of float64 of shape (n_rows,)
        """
        from ..neural import torch_threads

        encoded = self.encode(X)
        with torch_threads(self.n_threads):
            return self.predictor(encoded=encoded).logits(encoded)

    def predictor(self, device=None, encoded=None):
        """What ``predict`` runs on ``device``: the fitted module or its int8 copy, the autocast dtype and the
        batch's token budget, from the fitted state and the current inference parameters.

        With ``precision="int8"`` on the CPU the module is an int8 copy, built once per fitted model and thread
        count and kept beside the model (:data:`~as2rank.neural.onnx.copies.INT8_COPIES`): given the
        ``encoded`` rows to predict, a model calibrated at fit (``activation_ranges_``) gets its static int8
        copy on ONNX Runtime when that is installed, else torch's dynamic quantization.

        Parameters
        ----------
        device : str or torch.device, default=None
            None: the estimator's ``device``.
        encoded : dict of ndarray, default=None
            Rows from :meth:`encode`: the ONNX Runtime copy is traced on a few of them.

        Returns
        -------
        as2rank.neural.predict.Predictor
        """
        from ..neural import resolve_device
        from ..neural.predict import Predictor, progress_bar

        check_is_fitted(self, "model_")
        device = resolve_device(self.device if device is None else device)
        if device.type == "cpu" and self._quantized():
            from ..neural.onnx.copies import INT8_COPIES
            from ..neural.onnx.runtime import onnx_available

            onnx = encoded is not None and hasattr(self, "activation_ranges_") and onnx_available()
            module = INT8_COPIES.get(self.model_, onnx=onnx, encoded=encoded,
                                     ranges=self.activation_ranges_ if onnx else None)
        else:
            module = self.model_.to(device).eval()
        return Predictor(module, device, self._compute_dtype(device), self._batch_tokens(device, module),
                         progress_bar(self.verbose))


def _is_learnt(name: str) -> bool:
    """Whether the fitted attribute ``name`` is part of what a fit learns (the state that pickles and the fit
    cache carry): the live module and the cache-hit flag are not."""
    return name.endswith("_") and not name.startswith("_") and name not in ("model_", "fit_cache_hit_")

