"""The shared machinery of the transformer rankers: :class:`_TransformerEstimator`.

It holds what every transformer-backed ranker (:class:`~as2rank.transformer.ranker.TransformerRanker`, the cascade,
the distilled and the context rankers) shares: loading the backbone (:mod:`as2rank.neural.backbone`), pair
encoding, the one training loop (:func:`as2rank.neural.train`) with an optional dev set and early stopping,
``partial_fit`` on a stream of chunks, warm starts, reuse of identical fits (:mod:`as2rank.neural.fitcache`),
numeric precision (autocast, or an int8 copy for prediction on the CPU), pickling to a CPU state and
``save_pretrained``/``from_pretrained`` (the directory format of :mod:`as2rank.persistence`). A subclass
writes out its ``__init__`` (its own parameters, then the shared ones, :mod:`as2rank.transformer.parameters`) and
supplies the torch module, its loss and its scoring. Importing this module does not import torch.
"""

from __future__ import annotations

import sys
from abc import ABCMeta, abstractmethod
from numbers import Integral
from pathlib import Path

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import check_is_fitted

from ..base import RankerMixin
from ..data import check_ranking_data, check_X
from ..early_stopping import check_early_stopping, check_eval_set, training_summary
from ..params import CHECKPOINT_ALIASES, MODEL_CONSTRAINTS, TOKENIZER_CONSTRAINTS, Interval, check_param, validated
from .parameters import AUTO_BATCH_TOKENS, TRAINING_CONSTRAINTS
from .train import train_estimator


class _TransformerEstimator(RankerMixin, BaseEstimator, metaclass=ABCMeta):
    """Shared fit/predict/persistence of the transformer rankers (see the module docstring).

    A transformer estimator is this scaffold, a few declared hooks and the components it holds:

    * hooks it must define: :meth:`_prepare_encoder` (cut the loaded encoder, set the fitted attributes that
      depend on it) and :meth:`_build_module` (wrap it in the heads);
    * hooks it may define: :meth:`_outputs` and :meth:`_criterion` (one batch's loss, the calls the training
      loop makes back into the estimator; default: the module's logits and the labels' loss),
      :meth:`_encode_rows` (how rows become token arrays; default: question/candidate pairs),
      :meth:`_check_rules` (cross-parameter rules), :meth:`_row_targets` (per-row training targets),
      :meth:`_init_module` (a module trained in stages), :meth:`_set_trainable`;
    * data: ``_parameter_constraints`` (every parameter's accepted values), ``_saved_attrs`` (the fitted
      attributes written with the weights), ``_prior`` (a :class:`~as2rank.transformer.prior.LexicalPrior` or
      None) and the class attributes below.

    ``predict`` scores every row with the module's logit (:meth:`predictor`); models with several outputs
    per row (exits, heads) define their own.
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
                              "max_length": [Interval(Integral, 8, None)], **TRAINING_CONSTRAINTS}
    #: Whether ``early_stopping="auto"`` holds out validation questions from large enough training data by
    #: itself (:func:`~as2rank.early_stopping.holdout_fraction`): set where the defaults benchmark measured it.
    _auto_holdout = False
    #: ``batch_tokens="auto"`` per device (:data:`AUTO_BATCH_TOKENS`).
    _auto_batch_tokens = AUTO_BATCH_TOKENS
    #: The lexical prior the estimator holds (:class:`~as2rank.transformer.prior.LexicalPrior`), or None.
    _prior = None
    #: Fitted attributes that :meth:`save_pretrained` writes beside the weights (with ``activation_ranges_`` and
    #: the prior's, where fitted) and loading sets back.
    _saved_attrs = ("n_layers_",)
    #: What the saved state names that prediction opens: the similarity prior's pretrained encoder, packaged
    #: weights or a folder of the model directory (:func:`as2rank.persistence.trust.resolve_references`).
    _references = {"similarity_source_": CHECKPOINT_ALIASES}

    # ----------------------------------------------------------------- hooks
    @abstractmethod
    def _prepare_encoder(self, encoder):
        """Cut the loaded encoder to the depth used and set the fitted attributes that depend on it
        (``n_layers_``, ...); return the encoder to build on."""

    @abstractmethod
    def _build_module(self, encoder):
        """The torch module that trains and predicts: ``encoder`` wrapped in the score head(s). Also rebuilds a
        fitted module from its config (unpickling, loading, a reused fit) before its weights are loaded."""

    def _loss(self, module, batch):
        """The training loss of one batch: :meth:`_criterion` of :meth:`_outputs`.

        ``batch`` holds the batch's token tensors, ``labels``, the per-row ``_row_targets`` and two entries
        for losses that vary between batches: ``step``, the batch's number within this ``fit`` or
        ``partial_fit`` call (0, 1, ... over its epochs), and ``draw``, a uniform number in [0, 1) from the
        fit's seeded generator (the same in every process of a distributed fit)."""
        return self._criterion(self._outputs(module, batch), batch)

    def _outputs(self, module, batch):
        """What the loss reads of the module, one row per batch row (the logits; a class with several per row,
        such as exits, returns them as columns). Rows do not see each other here, so the training loop may
        run a batch's rows in parts (:func:`~as2rank.neural.batching.length_chunks`) and join the outputs."""
        return module(batch)

    def _criterion(self, outputs, batch):
        """The scalar loss of a batch's :meth:`_outputs` (default: the labels' loss, ``loss``)."""
        from .losses import label_loss

        return label_loss(outputs, batch, self.loss)

    def _check_rules(self) -> None:
        """Cross-parameter rules, checked by :func:`~as2rank.params.validated` after every parameter passed its
        constraints: those all the transformer estimators share (``validation_fraction`` needs early stopping)
        and the prior's; a class with rules of its own extends this (calling ``super()._check_rules()``)."""
        check_early_stopping(self)
        if self._prior is not None:
            self._prior.check_params(self)

    def _row_targets(self, X, y, index) -> dict:
        """Per-row arrays (first axis = rows of ``X``) that training batches carry beside ``labels``
        (e.g. teacher logits for distillation); sliced to each batch's rows. Called once per ``fit`` or
        ``partial_fit`` call, on its validated data."""
        return {}

    #: Text columns the model reads; they join the key under which identical fits are reused.
    _input_columns = ("question", "candidate")

    def _init_module(self, X, y, groups, eval_set):
        """The module a fresh ``fit`` trains: the backbone loaded, cut and wrapped in the heads.

        Runs inside ``fit``'s seeded block; a class may train parts first (the context ensemble trains
        its two encoders before their joint fine-tuning).
        """
        from ..neural.backbone import load_backbone

        encoder, self.tokenizer_ = load_backbone(self.model, self.tokenizer)
        return self._build_module(self._prepare_encoder(encoder))

    def _set_trainable(self, module) -> None:
        """Choose the parameters the training loop updates (default: all, word embeddings per
        ``freeze_embeddings``)."""
        module.encoder.get_input_embeddings().weight.requires_grad_(not self.freeze_embeddings)

    def _encode_rows(self, module, X) -> dict:
        """The rows of ``X`` as token arrays for ``module`` (default: question/candidate pairs)."""
        from ..neural.backbone import uses_token_types
        from ..neural.tokens import encode_pairs

        return encode_pairs(
            self.tokenizer_,
            X["question"].to_numpy(),
            X["candidate"].to_numpy(),
            max_length=self.max_length,
            token_types=uses_token_types(module.encoder, self.tokenizer_),
        )

    # ----------------------------------------------------------------- shared machinery
    def _fresh_module(self, X, y, groups, eval_set):
        """:meth:`_init_module`, then the prior fitted on the training rows (both in ``fit``'s seeded block), whose
        attributes replace those of an earlier fit."""
        module = self._init_module(X, y, groups, eval_set)
        if self._prior is not None:
            for name in self._prior.attrs:
                self.__dict__.pop(name, None)
            self.__dict__.update(self._prior.fit(self, module, X, y))
        return module

    def _check_continuation(self) -> None:
        """Before training continues from fitted weights (``warm_start``, a ``partial_fit`` on a fitted model):
        refuse parameters that the fitted model cannot continue with."""
        if self._prior is not None:
            self._prior.check_continuation(self)

    def _encode(self, X):
        return self._encode_for(self.model_, X)

    def _encode_for(self, module, X):
        """The rows of ``X`` encoded as ``module`` reads them (the fitted ``model_`` once fit has built it),
        with the prior's inputs."""
        encoded = self._encode_rows(module, X)
        return encoded if self._prior is None else self._prior.add_inputs(self, module, X, encoded)

    def _compute_dtype(self, device, *, training: bool = False):
        """The autocast dtype of ``precision`` on ``device`` (see :func:`as2rank.neural.devices.autocast_dtype`)."""
        from ..neural.devices import autocast_dtype

        return autocast_dtype(self.precision, device, training=training)

    def _batch_tokens(self, device, module=None) -> int:
        """The padded-token budget of a prediction batch on ``device`` (``batch_tokens`` with "auto" resolved)
        for ``module``, the model a :meth:`predictor` holds (None: a torch model)."""
        if isinstance(self.batch_tokens, str) and self.batch_tokens == "auto":
            if device.type != "cpu":
                return self._auto_batch_tokens["other"]
            from ..neural.onnx.runtime import OnnxCascade, OnnxModule

            return self._auto_batch_tokens["cpu-onnx" if isinstance(module, (OnnxModule, OnnxCascade)) else "cpu"]
        check_param("batch_tokens", self.batch_tokens, self._parameter_constraints["batch_tokens"])
        return int(self.batch_tokens)

    def _quantized(self) -> bool:
        """Whether prediction runs the int8 copy of the model."""
        from ..neural import int8_supported

        return self.precision == "int8" and int8_supported()

    def _training_params(self) -> dict:
        params = {k: v for k, v in self.get_params(deep=False).items() if k not in self._inference_params}
        return params if self._prior is None else self._prior.training_params(self, params)

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
                self.model_ = self._fresh_module(X, y, groups, eval_set)
            history, ranges = train_estimator(self, X, y, index, targets, rng, setup, dev=dev)
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
        dtype = self._compute_dtype(device, training=True)
        session = training_session(self.n_threads, device, self.random_state, precision=dtype, call=state.runs)
        with session as (setup, rng):
            if not hasattr(self, "model_"):
                self.model_ = self._fresh_module(X, y, groups, None)
            history, ranges = train_estimator(self, X, y, index, self._row_targets(X, y, index), rng, setup, state=state)
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
        module = self._build_module(AutoModel.from_config(state["config"]))
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

    def save_pretrained(self, path, *, int8: bool = False, card=None, overwrite: bool = False) -> None:
        """Write the fitted model to a pickle-free directory (the format of :mod:`as2rank.persistence`).

        Layout: ``encoder/`` (the fine-tuned encoder and its tokenizer, loadable by
        ``transformers.AutoModel`` and usable as ``model=`` of a new estimator: the TANDA recipe's
        "transfer" output), ``heads.safetensors`` (the score heads), ``as2rank.json`` (format version,
        class, parameters and fitted attributes) and ``README.md`` (a model card: :mod:`as2rank.persistence.card`).
        The directory is written whole and replaces a previous model at ``path`` in one step (see
        :func:`as2rank.save <as2rank.persistence.save>`). Load with :meth:`from_pretrained` or
        :func:`as2rank.load <as2rank.persistence.load>`.
        Under ``accelerate launch``/``torchrun`` every process may call it: the main process writes, the
        others wait until the directory is complete.

        Parameters
        ----------
        path : str or pathlib.Path
        int8 : bool, default=False
            Also write ``onnx/``: the graphs that ``precision="int8"`` runs on ONNX Runtime, exported now
            (:func:`~as2rank.neural.onnx.runtime.write_int8_copy`). A process that loads the directory then
            predicts at int8 without exporting them, which takes seconds per graph. A loaded model uses them only
            if they were exported from its weights by the same as2rank; otherwise it exports again. Needs
            a model calibrated for int8 at fit and ``pip install as2rank[onnx]``.
        card : as2rank.persistence.card.ModelCardData, optional
            Training data and metrics for the model card, ``README.md``.
        overwrite : bool, default=False
            Also write into a non-empty directory that is not an as2rank model (see
            :func:`as2rank.save <as2rank.persistence.save>`).
        """
        from ..neural.distributed import is_main_process, wait_for_everyone
        from ..persistence import INT8_FOLDER, write_model
        from .saving import write_transformer

        check_is_fitted(self, "model_")
        if int8:
            from ..neural.onnx.runtime import onnx_available

            if not hasattr(self, "activation_ranges_"):
                raise ValueError(f"This {type(self).__name__} has no int8 calibration: its model cannot run on ONNX Runtime.")
            if not onnx_available():
                raise ImportError("int8=True exports to ONNX Runtime: pip install as2rank[onnx]")
        def write(folder):
            write_transformer(self, folder)
            if int8:
                from ..neural.onnx.runtime import write_int8_copy

                write_int8_copy(self._int8_copy_to_save(), folder / INT8_FOLDER)

        if is_main_process():
            write_model(self, path, write, card=card, overwrite=overwrite)
        wait_for_everyone()

    def _int8_copy_to_save(self):
        """The model's int8 copy on ONNX Runtime, traced on two made-up rows of the columns it reads (any rows
        give the same graphs), or read from the graphs it was loaded with."""
        import pandas as pd

        from ..neural.onnx.copies import INT8_COPIES

        columns = getattr(self, "_input_columns", ("question", "candidate"))
        rows = pd.DataFrame({"qid": ["q", "q"], **{c: [f"A {c}.", f"Another, longer {c} text."] for c in columns}})
        encoded = self.encode(rows)
        from ..neural import torch_threads

        with torch_threads(self.n_threads):
            return INT8_COPIES.get(self.model_, onnx=True, encoded=encoded, ranges=self.activation_ranges_)

    @classmethod
    def from_pretrained(cls, path, **params):
        """Load an estimator written by :meth:`save_pretrained` (on the CPU; ``device`` applies at prediction).

        Parameters
        ----------
        path : str or pathlib.Path
        **params
            Parameters overriding the saved ones (e.g. ``device="cpu"``, ``alpha=0.3``).

        Returns
        -------
        estimator
            Fitted; its ``model`` parameter names the saved encoder, so ``warm_start`` or a fresh ``fit``
            continue from the adapted weights.
        """
        from .saving import read_transformer

        return read_transformer(cls, path, params)

    def _optional_attrs(self) -> tuple:
        return ("activation_ranges_", *(() if self._prior is None else self._prior.attrs))

    def _export_attrs(self, path) -> dict:
        """The fitted attributes :meth:`save_pretrained` writes into the model directory ``path``: ``_saved_attrs``,
        and the optional ones fitted. A similarity prior's pretrained encoder that is not packaged weights is
        copied into ``path/similarity`` and named so (:func:`~as2rank.transformer.similarity.export_source`)."""
        optional = {k: getattr(self, k) for k in self._optional_attrs() if getattr(self, k, None) is not None}
        source = optional.get("similarity_source_")
        if source is not None and not all(source.get(k) in (None, *CHECKPOINT_ALIASES) for k in ("model", "tokenizer")):
            from .similarity import export_source

            optional["similarity_source_"] = export_source(source, Path(path) / "similarity")
        return {**{k: getattr(self, k) for k in self._saved_attrs}, **optional}

    def _imported_attrs(self, attrs: dict) -> dict:
        """The fitted attributes of a saved model that this class restores (a KeyError when one of
        ``_saved_attrs`` is missing)."""
        return {**{k: attrs[k] for k in self._saved_attrs}, **{k: attrs[k] for k in self._optional_attrs() if k in attrs}}

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
        from ..neural.predict import Predictor

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
                         self._progress)

    def _progress(self, iterable, total, desc):
        from ..neural.distributed import is_main_process

        # Under a launcher every process predicts; one progress bar is enough.
        if not (self.verbose and is_main_process()):
            return iterable
        from tqdm.auto import tqdm

        return tqdm(iterable, total=total, desc=desc, unit="batch")


def _is_learnt(name: str) -> bool:
    """Whether the fitted attribute ``name`` is part of what a fit learns (the state that pickles and the fit
    cache carry): the live module and the cache-hit flag are not."""
    return name.endswith("_") and not name.startswith("_") and name not in ("model_", "fit_cache_hit_")

