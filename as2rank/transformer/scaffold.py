"""The shared machinery of the transformer rankers: :class:`_TransformerEstimator`.

It holds what every transformer-backed ranker (:class:`~as2rank.transformer.ranker.TransformerRanker`, the cascade,
the distilled and the context rankers) shares on top of the training shell of every neural estimator
(:class:`~as2rank.neural.shell.NeuralEstimator`: ``fit``, ``partial_fit``, early stopping, ``callbacks``, the fit
cache, the pickled state): loading the backbone (:mod:`as2rank.neural.backbone`), pair encoding, the lexical prior
(:mod:`as2rank.transformer.prior`), the shell's hooks for a transformer module (its batches of token arrays,
:func:`~as2rank.neural.token_batches`, its label loss, its dev MAP), numeric precision (autocast, or an
int8 copy for prediction on the CPU) and prediction; ``save_pretrained``/``from_pretrained`` come from
:class:`~as2rank.transformer.saving.PretrainedIO`. A subclass writes out its ``__init__`` (its own parameters, then
the shared ones, :mod:`as2rank.transformer.parameters`) and supplies the torch module, and where it trains
differently, the hooks it overrides. Importing this module does not import torch.
"""

from __future__ import annotations

from abc import ABCMeta, abstractmethod
from numbers import Integral

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from ..base import RankerMixin
from ..data import check_X
from ..logistic import fit_logistic
from ..metrics import mean_average_precision
from ..neural.shell import NeuralEstimator
from ..params import MODEL_CONSTRAINTS, TOKENIZER_CONSTRAINTS, TRAINING_ONLY_PARAMS, Interval
from .parameters import AUTO_BATCH_TOKENS, TRAINING_CONSTRAINTS, resolve_batch_tokens
from .prior import PRIOR_CONSTRAINTS, check_prior_labels, lexical_columns, lexical_prior_logits
from .saving import PretrainedIO


class _TransformerEstimator(NeuralEstimator, PretrainedIO, RankerMixin, BaseEstimator, metaclass=ABCMeta):
    """Shared fit/predict/persistence of the transformer rankers (see the module docstring).

    A transformer estimator is this scaffold, a few declared hooks and the components it holds:

    * family hooks it must define: :meth:`prepare_encoder` (cut the loaded encoder; return it with the fitted
      attributes that depend on it) and :meth:`build_module` (wrap it in the heads those attributes describe);
    * the training shell's hooks it may override (:class:`~as2rank.neural.shell.NeuralEstimator`), defined here
      for a transformer module: ``get_loss``, ``forward_outputs``, ``get_batches``, ``compute_loss``, ``evaluate``
      and the others the shell lists;
    * family hooks it may define: :meth:`encode_rows` (how rows become token arrays; default: question/candidate
      pairs), :meth:`_check_rules` (cross-parameter rules), :meth:`row_targets` (per-row training targets),
      :meth:`make_module` (a module trained in stages), :meth:`set_trainable`;
    * data: ``_parameter_constraints`` (every parameter's accepted values), ``_saved_attrs`` (the fitted
      attributes written with the weights) and ``_input_columns`` (the text columns it reads) of
      :class:`~as2rank.transformer.saving.PretrainedIO`, and the class attributes below.

    Every transformer estimator holds the lexical prior (:mod:`as2rank.transformer.prior`): its parameters
    ``lexical_prior``, ``similarity_prior`` and ``segment_similarity``, its fitted ``lexical_features_``,
    ``lexical_coef_`` and ``similarity_source_``. ``predict`` scores every row with the module's logit
    (:meth:`predictor`); models with several outputs per row (exits, heads) define their own.
    """

    module_attribute = "model_"
    #: Parameters that act only at prediction time: a fit differing only in these reuses cached weights.
    #: (``n_threads`` changes speed; results differ at most in the last bits of float sums.)
    _inference_params = ("batch_tokens", "verbose", "reuse_fit", "n_threads")
    #: Submodules initialised at random (score heads): they learn at ``head_lr_multiplier × learning_rate``.
    head_modules = ("head",)
    #: Parameters that :meth:`save_pretrained` does not write to ``as2rank.json`` (the encoder is saved beside
    #: it; fit-time inputs such as distillation teachers and callbacks are not part of the model).
    _unsaved_params = ("model", "tokenizer", *TRAINING_ONLY_PARAMS)
    #: Accepted values of the shared parameters (:func:`as2rank.params.validate_params`); each subclass
    #: extends it with its own parameters.
    _parameter_constraints = {"model": MODEL_CONSTRAINTS, "tokenizer": TOKENIZER_CONSTRAINTS,
                              "max_length": [Interval(Integral, 8, None)], **PRIOR_CONSTRAINTS, **TRAINING_CONSTRAINTS}
    #: ``batch_tokens="auto"`` per device (:data:`AUTO_BATCH_TOKENS`).
    _auto_batch_tokens = AUTO_BATCH_TOKENS

    # ----------------------------------------------------------------- family hooks
    @abstractmethod
    def prepare_encoder(self, encoder) -> tuple:
        """Cut the loaded encoder to the depth used: the encoder to build on, and the fitted attributes that
        depend on it (``{"n_layers_": ..., ...}``), which ``fit`` sets."""

    @abstractmethod
    def build_module(self, encoder, fitted):
        """The torch module that trains and predicts: ``encoder`` wrapped in the score head(s) that ``fitted``
        (the fitted attributes, a mapping) describes. Also rebuilds a fitted module from its config (unpickling,
        loading, a reused fit; ``fitted`` is then the estimator's own) before its weights are loaded."""

    def _check_rules(self) -> None:
        """Cross-parameter rules, checked by :func:`~as2rank.params.validated` after every parameter passed its
        constraints: those all the transformer estimators share (the shell's early-stopping rule,
        ``similarity_prior`` needs the lexical prior); a class with rules of its own extends this (calling
        ``super()._check_rules()``)."""
        super()._check_rules()
        if self.similarity_prior and not self.lexical_prior:
            raise ValueError("similarity_prior=True adds a feature to the lexical prior: it needs lexical_prior=True.")

    def row_targets(self, X, y, index) -> dict:
        """Per-row arrays (first axis = rows of ``X``) that training batches carry beside ``labels``
        (e.g. teacher logits for distillation); sliced to each batch's rows. Called once per ``fit`` or
        ``partial_fit`` call, on its validated data."""
        return {}

    def make_module(self, X, y, groups, eval_set) -> tuple:
        """The module a fresh ``fit`` trains, the backbone loaded, cut and wrapped in the heads, and the fitted
        attributes that go with it (``tokenizer_`` and those of :meth:`prepare_encoder`).

        Runs inside ``fit``'s seeded block; a class may train parts first (the context ensemble trains
        its two encoders before their joint fine-tuning).
        """
        from ..neural.backbone import load_backbone

        encoder, tokenizer = load_backbone(self.model, self.tokenizer)
        encoder, fitted = self.prepare_encoder(encoder)
        fitted = {"tokenizer_": tokenizer, **fitted}
        return self.build_module(encoder, fitted), fitted

    def set_trainable(self, module) -> None:
        """Choose the parameters the training loop updates (default: all, word embeddings per
        ``freeze_embeddings``)."""
        module.encoder.get_input_embeddings().weight.requires_grad_(not self.freeze_embeddings)

    def encode_rows(self, module, X, tokenizer) -> dict:
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

    # ----------------------------------------------------------------- the training shell's hooks
    def check_continuation(self) -> None:
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

    def prepare_training_data(self, X, y, index, *, fresh, streamed) -> tuple:
        """The per-row training targets of :meth:`row_targets` (distillation teachers' logits are training data
        too: computed once per call, keyed and trained on); no fitted attribute."""
        return self.row_targets(X, y, index), {}

    def rows_per_step(self) -> int:
        """``batch_size``: a streamed schedule has as many steps as ``fit`` over the same rows, so a single
        ``partial_fit`` call on all the data (``total_rows`` a multiple of ``batch_size``) trains exactly as ``fit``
        with ``epochs=1``."""
        return int(self.batch_size)

    def initial_weights_digest(self):
        """The content of ``model`` and ``tokenizer`` (:func:`~as2rank.neural.fitcache.source_digests`; None for a
        name not on disk, which is not reused)."""
        from ..neural.fitcache import source_digests

        return source_digests(self.model, self.tokenizer)

    def fit_cache_key(self, X, y, index, prepared, dev, device, digest) -> str:
        """The training parameters (the initial weights by content), the text columns the model reads, the
        questions, the labels, the targets and the dev set."""
        from ..neural.fitcache import fit_key

        columns = self._input_columns
        data = (*(X[c].to_numpy() for c in columns), index.codes, index.position_index(), y, prepared)
        dev_data = None if dev is None else (*(dev[0][c].to_numpy() for c in columns), dev[2].codes, dev[1])
        params = {**self._training_params(), "model": digest[0], "tokenizer": digest[1]}
        return fit_key(self, params, str(device), data, dev_data)

    def training_precision(self, device):
        """The autocast dtype of ``precision`` in training on ``device`` (``"int8"`` trains as ``"auto"``)."""
        return self._compute_dtype(device, training=True)

    def initialize_module(self, X, y, groups, eval_set, prepared) -> tuple:
        """:meth:`make_module`, then the prior fitted on the training rows: the module, and the fitted attributes
        of both."""
        module, fitted = self.make_module(X, y, groups, eval_set)
        return module, {**fitted, **self._fit_prior(module, X, y, fitted["tokenizer_"])}

    def training_inputs(self, module, X, prepared, device) -> tuple:
        """The module's trainable parameters chosen (:meth:`set_trainable`) and its int8 copy forgotten (new weights
        need their own); the rows encoded with the prior's logits, and the per-row targets: ``(encoded, targets)``."""
        from ..neural.onnx.copies import INT8_COPIES

        self.set_trainable(module)
        INT8_COPIES.forget(module)
        return self._encode_for(module, X, vars(self)), prepared

    def validation_inputs(self, inputs, validation, device) -> dict:
        """The dev rows encoded: an ``eval_set``'s, or the held-out rows of the training encoding."""
        if validation.rows is None:
            return self._encode_for(self.model_, validation.X, vars(self))
        return {k: v[validation.rows] for k, v in inputs[0].items()}

    def get_loss(self):
        """The loss object of this fit: ``loss(outputs, batch) -> scalar tensor``, the label loss of ``loss``
        (``as2rank.neural.losses.LABEL_LOSSES``). Its ``by_question`` says whether batches hold whole
        questions."""
        from ..neural.losses import LABEL_LOSSES

        return LABEL_LOSSES[self.loss]

    def forward_outputs(self, module, batch):
        """What the loss reads of the module for a batch, one row per batch row (the logits; a class with several
        per row, such as exits, returns them as columns). Rows do not see each other here, so a batch's rows
        may run in parts (:func:`~as2rank.neural.batching.length_chunks`) whose outputs are joined.

        ``batch`` holds the batch's token tensors, ``labels``, the per-row ``row_targets`` and two entries
        for losses that vary between batches: ``step``, the batch's number within this ``fit`` or
        ``partial_fit`` call (0, 1, ... over its epochs), and ``draw``, a uniform number in [0, 1) from the
        fit's seeded generator (the same in every process of a distributed fit)."""
        return module(batch)

    def compute_loss(self, module, batch, loss):
        """The scalar training loss of one batch: ``loss`` (:meth:`get_loss`) of :meth:`forward_outputs`, over
        the parts of a batch that :meth:`get_batches` cut into ``chunks`` put back in the batch's row order."""
        if "chunks" not in batch:
            return loss(self.forward_outputs(module, batch), batch)
        import torch

        outputs = torch.cat([self.forward_outputs(module, chunk) for chunk in batch["chunks"]])
        return loss(outputs[batch["restore"]], batch)

    def get_batches(self, inputs, y, index, rows, *, loss, rng, shard, device) -> tuple:
        """The training batches over ``rows`` of the encoded data, and how many an epoch yields
        (:func:`~as2rank.neural.token_batches`): ``batch_size`` rows of similar length, or whole questions
        with a listwise ``loss``, whose forward pass runs in parts of similar length on the devices of
        :data:`~as2rank.neural.batching.CHUNK_DEVICES`."""
        from ..neural.batching import CHUNK_DEVICES
        from ..neural.training import token_batches

        encoded, targets = inputs
        return token_batches(encoded, y, index.codes, targets, rows, batch_size=self.batch_size,
                             by_question=loss.by_question, rng=rng, shard=shard,
                             chunked=loss.by_question and device.type in CHUNK_DEVICES)

    def evaluate(self, module, inputs, y, index, device) -> float:
        """The validation score of ``module`` during training: the MAP of its output on the encoded dev rows
        (averaged over its heads where it has several), predicted at the estimator's precision and batch size."""
        from ..neural.predict import no_progress, predict_logits

        scores = predict_logits(module, inputs, device, batch_tokens=self._batch_tokens(device),
                                dtype=self._compute_dtype(device), progress=no_progress)
        return mean_average_precision(y, scores.mean(axis=1) if scores.ndim == 2 else scores, index)

    def training_options(self, steps_per_epoch) -> dict:
        """AdamW with decoupled weight decay, linear warm-up then linear decay, gradient clipping, and the heads
        at ``head_lr_multiplier × learning_rate``."""
        return dict(epochs=self.epochs, learning_rate=self.learning_rate, optimizer="adamw",
                    weight_decay=self.weight_decay, schedule="linear", warmup=self.warmup,
                    max_grad_norm=self.max_grad_norm, desc=type(self).__name__,
                    lr_multipliers={name: self.head_lr_multiplier for name in self.head_modules})

    def training_results(self, module, inputs, rows, device, *, streamed) -> dict:
        """The int8 copy's activation ranges from the weights just trained (``activation_ranges_``; a
        ``partial_fit`` call widens those of the calls before it), for a module that exports."""
        if not getattr(module, "onnx_exportable", False):
            return {}
        from ..neural.onnx.calibration import activation_ranges, calibration_rows

        previous = getattr(self, "activation_ranges_", None) if streamed else None
        return {"activation_ranges_": activation_ranges(module, inputs[0], calibration_rows(rows), device,
                                                        previous=previous)}

    def module_config(self, module):
        """The encoder's configuration (the module is rebuilt around a new encoder of it)."""
        return module.encoder.config

    def rebuild_module(self, config, fitted):
        """:meth:`build_module` around an encoder made from ``config`` (its weights loaded afterwards)."""
        from transformers import AutoModel

        return self.build_module(AutoModel.from_config(config), fitted)

    # ----------------------------------------------------------------- shared machinery
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
        encoded = self.encode_rows(module, X, fitted["tokenizer_"])
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
        params = {k: v for k, v in self.get_params(deep=False).items()
                  if k not in self._inference_params and k not in TRAINING_ONLY_PARAMS}
        return {**params, "similarity_source": (self.model, self.tokenizer)} if self.similarity_prior else params

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
        copy on ONNX Runtime when that is installed, else torch's dynamic quantization. At a lower-precision
        autocast dtype on the CPU it is the fitted module's precast copy
        (:data:`~as2rank.neural.precast.PRECAST_COPIES`): its linear weights cast once, the same outputs.

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
        import torch

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
        dtype = self._compute_dtype(device)
        if device.type == "cpu" and dtype != torch.float32 and isinstance(module, torch.nn.Module):
            from ..neural.precast import PRECAST_COPIES

            module = PRECAST_COPIES.get(module, dtype)  # the same outputs, without casting weights every call
        return Predictor(module, device, dtype, self._batch_tokens(device, module), progress_bar(self.verbose))

