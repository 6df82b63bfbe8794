"""The one training shell of the neural estimators: :class:`NeuralEstimator`, the base of
:class:`~as2rank.cosinet.estimator.Cosinet` and of every transformer estimator.

skorch's shape. ``fit`` checks the data, starts from a fresh state (or takes the weights of an identical earlier
fit from the fit cache, :mod:`as2rank.neural.fitcache`), then runs the step loop; ``partial_fit`` runs the same
step loop on one chunk of a stream, continuing the optimizer and the learning-rate schedule of the calls before it
(:class:`~as2rank.neural.TrainingState`). The shell owns what every neural estimator shares: the seeded training
session (threads, seeds, processes: :func:`~as2rank.neural.distributed.training_session`), the device and the
training precision, the hold-out split and early stopping (:mod:`as2rank.neural.early_stopping`), the
``callbacks`` parameter (:class:`~as2rank.neural.Callback`), the fit cache, the call of the one training loop
(:func:`~as2rank.neural.train`) and the state that pickles (the module as CPU tensors). A family supplies its
module, its batches and its loss through the public hooks of :class:`NeuralEstimator`; the shell reads nothing
else of it but its parameters. Importing this module does not import torch.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np
from sklearn.utils.metaestimators import available_if

from ..data import GroupIndex, check_ranking_data, holdout_questions
from ..params import ParameterMixin, validated
from .early_stopping import check_early_stopping, check_eval_set, holdout_fraction, training_summary

__all__ = ["NeuralEstimator", "ValidationSet"]


@dataclass(frozen=True)
class ValidationSet:
    """The questions early stopping scores a fit on, as the shell hands them to
    :meth:`NeuralEstimator.validation_inputs`.

    Attributes
    ----------
    X : pandas.DataFrame or None
        The ``eval_set``'s frame; None for questions held out of the training data.
    y : ndarray of shape (n_dev_rows,)
        Their labels.
    index : as2rank.data.GroupIndex
        Their questions.
    rows : ndarray of int or None
        For held-out questions, their rows in the training data (None for an ``eval_set``).
    """

    X: object
    y: np.ndarray
    index: GroupIndex
    rows: np.ndarray | None


class NeuralEstimator(ParameterMixin):
    """The training shell of a neural estimator: ``fit``, ``partial_fit``, their early stopping and callbacks, and
    the pickled state (see the module docstring).

    The shell reads these parameters of the estimator: ``device``, ``n_threads``, ``random_state``, ``verbose``,
    ``early_stopping``, ``validation_fraction``, ``patience`` and ``callbacks``; and where the estimator has them,
    ``warm_start`` (``fit`` continues from the fitted weights), ``eval_every`` (early stopping evaluates every that
    many steps) and ``reuse_fit`` (identical fits are reused, :mod:`as2rank.neural.fitcache`; a fit with
    ``callbacks`` always trains, so that they see it).

    A class built on the shell sets three class attributes:

    * ``module_attribute``: the fitted attribute that holds the trained ``torch.nn.Module``;
    * ``auto_holdout``: whether ``early_stopping="auto"`` holds out validation questions by itself from large
      enough training data (:func:`~as2rank.neural.early_stopping.holdout_fraction`);
    * ``streamable``: whether it offers ``partial_fit`` (a model that needs the whole training set at once does not).

    and defines its hooks, public methods that the shell calls in this order (each documented below):

    1. before training: :meth:`check_training_data`, :meth:`check_continuation` (when it continues from
       fitted weights), :meth:`prepare_training_data`, :meth:`rows_per_step` (``partial_fit``),
       :meth:`initial_weights_digest` and :meth:`fit_cache_key` (the fit cache), :meth:`training_precision`;
    2. in the seeded training session: :meth:`initialize_module` (a fresh state only: the one place a new module
       is built, for ``fit`` and ``partial_fit``), :meth:`training_inputs`, :meth:`validation_inputs` (with a
       validation set), :meth:`get_loss`, :meth:`get_batches`, :meth:`training_options`, then during the steps
       :meth:`compute_loss` (:meth:`forward_outputs` by default) and :meth:`evaluate`, and last
       :meth:`training_results`;
    3. in the state protocol (pickling, the fit cache): :meth:`module_config` and :meth:`rebuild_module`.

    Hooks receive what they need as arguments and return what they compute; the fitted attributes they return
    are set by ``fit`` and ``partial_fit``, never by a hook.
    """

    #: The fitted attribute holding the trained module.
    module_attribute = "module_"
    #: Whether ``early_stopping="auto"`` holds out validation questions by itself (see the class docstring).
    auto_holdout = False
    #: Whether the estimator trains from a stream of chunks (``partial_fit``).
    streamable = True

    # ------------------------------------------------------------------ hooks
    def check_training_data(self, X, y, groups) -> tuple:
        """The training data of a ``fit`` or ``partial_fit`` call, validated: ``(X, y, index)`` as
        :func:`~as2rank.data.check_ranking_data` returns them (a class with rules of its own on its labels extends
        it)."""
        return check_ranking_data(X, y, groups)

    def check_continuation(self) -> None:
        """Before training continues from fitted weights (``warm_start``, ``partial_fit`` on a fitted model):
        refuse parameters that the fitted model cannot continue with. Nothing by default."""

    def prepare_training_data(self, X, y, index, *, fresh: bool, streamed: bool) -> tuple:
        """What this call computes from its validated data before the seeded session.

        Parameters
        ----------
        X, y, index
            From :meth:`check_training_data`.
        fresh : bool
            Whether training starts from a new module (:meth:`initialize_module`), not from fitted weights.
        streamed : bool
            Whether this is a ``partial_fit`` call.

        Returns
        -------
        prepared : object
            Handed to the later hooks as it is (None by default); it also enters the fit cache's key.
        fitted : dict
            Fitted attributes that the call sets now (a vocabulary grown from the data); empty by default.
        """
        return None, {}

    def rows_per_step(self) -> int:
        """Rows of a full batch, over which a streamed learning-rate schedule counts its steps
        (:class:`~as2rank.neural.TrainingState`): 1 (the schedule moves row by row) by default."""
        return 1

    def initial_weights_digest(self):
        """The content of what a fresh module starts from (its pretrained weights), compared before and after a
        fit to decide whether its weights may be reused; None (the default) when it cannot be told: no reuse."""
        return None

    def fit_cache_key(self, X, y, index, prepared, dev, device, digest) -> str:
        """The key of this fit in the fit cache (:func:`~as2rank.neural.fitcache.fit_key`): everything its weights
        depend on, the data (``X``, ``y``, ``index``, ``prepared``), the checked ``eval_set`` ``dev``, the device
        and the :meth:`initial_weights_digest` ``digest``. Called only for an estimator with ``reuse_fit``."""
        raise NotImplementedError(f"{type(self).__name__} does not reuse fits.")

    def training_precision(self, device):
        """The autocast dtype of training on ``device`` (``torch.bfloat16``, ``torch.float16``), or None for
        float32 without autocast (the default)."""
        return None

    def initialize_module(self, X, y, groups, eval_set, prepared) -> tuple:
        """A fresh module, inside the seeded session (its initialisation is random), and the fitted attributes
        that go with it: ``(module, fitted)``. They replace every attribute an earlier fit learned (but those
        that :meth:`prepare_training_data` returned for this call). ``groups`` and ``eval_set`` are the call's
        own, for a model that trains parts of itself first."""
        raise NotImplementedError

    def training_inputs(self, module, X, prepared, device):
        """What the batches and the validation on held-out questions read, made once the module to train is set
        (the encoded rows); the module may be set up for training here (its trainable parameters). Default:
        ``prepared``."""
        return prepared

    def validation_inputs(self, inputs, validation: ValidationSet, device):
        """What :meth:`evaluate` reads of the validation questions ``validation``: an ``eval_set``'s frame
        encoded, or the held-out rows taken from the training ``inputs``."""
        raise NotImplementedError

    def evaluate(self, module, inputs, y, index, device) -> float:
        """The validation score of ``module`` during training, higher is better: what early stopping watches
        (the MAP of its scores of the validation ``inputs``, whose labels are ``y`` and questions ``index``)."""
        raise NotImplementedError

    def get_loss(self):
        """The loss object of this fit: ``loss(outputs, batch) -> scalar tensor``; its ``by_question`` says whether
        batches hold whole questions (:mod:`as2rank.neural.losses`)."""
        raise NotImplementedError

    def get_batches(self, inputs, y, index, rows, *, loss, rng, shard, device) -> tuple:
        """The training batches over ``rows`` (the training rows left after a hold-out) and how many an epoch
        yields: ``(epoch -> iterator of batches, steps)``. The order is drawn from ``rng``; each batch is this
        process's part of the global batch (``shard``), a :class:`~as2rank.neural.distributed.LocalBatch`; ``loss``
        is :meth:`get_loss`'s. An epoch with no batch (a chunk of a stream with nothing to learn from) trains
        nothing."""
        raise NotImplementedError

    def forward_outputs(self, module, batch):
        """What the loss reads of ``module`` for a batch (by default ``module(batch)``, the logits)."""
        return module(batch)

    def compute_loss(self, module, batch, loss):
        """The scalar training loss of one batch: ``loss`` of :meth:`forward_outputs` by default."""
        return loss(self.forward_outputs(module, batch), batch)

    def training_options(self, steps_per_epoch: int) -> dict:
        """The optimisation of this fit, keyword arguments of :func:`~as2rank.neural.train`: ``epochs`` (a
        ``partial_fit`` call passes once), ``learning_rate``, ``optimizer``, ``weight_decay``, ``schedule``,
        ``warmup``, ``max_grad_norm``, ``lr_multipliers``, ``desc``."""
        raise NotImplementedError

    def training_results(self, module, inputs, rows, device, *, streamed: bool) -> dict:
        """Fitted attributes learned from the trained ``module`` beyond its weights (an int8 copy's activation
        ranges); empty by default."""
        return {}

    def module_config(self, module):
        """What :meth:`rebuild_module` needs beyond the fitted attributes to build ``module`` again (None by
        default); it pickles with the module's weights."""
        return None

    def rebuild_module(self, config, fitted):
        """The module of a fitted estimator, built again from ``config`` (:meth:`module_config`) and the fitted
        attributes ``fitted`` (a mapping), before its weights are loaded: unpickling, the fit cache, loading."""
        raise NotImplementedError

    # ------------------------------------------------------------------ fit / partial_fit
    def _check_rules(self) -> None:
        super()._check_rules()
        check_early_stopping(self)

    @validated
    def fit(self, X, y, groups=None, eval_set=None):
        """Train on grouped candidates: afresh, or from the fitted weights with ``warm_start``.

        Run by ``accelerate launch`` or ``torchrun``, the same call trains in every process on its share of each
        batch (see :mod:`as2rank.neural.distributed`); every process ends with the same model.

        Parameters
        ----------
        X : pandas.DataFrame
            Grouped-candidate frame (the columns the model reads).
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
        from .devices import resolve_device
        from .distributed import training_session
        from .fitcache import FIT_CACHE

        X, y, index = self.check_training_data(X, y, groups)
        device = resolve_device(self.device)
        dev = check_eval_set(self, eval_set)
        fresh = not (getattr(self, "warm_start", False) and self._is_fitted())
        if not fresh:
            self.check_continuation()
        prepared, early = self.prepare_training_data(X, y, index, fresh=fresh, streamed=False)
        key = digest = None
        reuse = bool(getattr(self, "reuse_fit", False)) and not self.callbacks
        if fresh and reuse and isinstance(self.random_state, (int, np.integer)):
            digest = self.initial_weights_digest()
        if digest is not None:
            key = self.fit_cache_key(X, y, index, prepared, dev, device, digest)
            cached = FIT_CACHE.get(key)
            if cached is not None:
                self._restore_fitted(cached)
                self._train_state = None
                self.fit_cache_hit_ = True
                self._report_cache_hit()
                return self
        self.__dict__.update(early)
        dtype = self.training_precision(device)
        with training_session(self.n_threads, device, self.random_state, precision=dtype) as (setup, rng):
            if fresh:
                self._start_fresh(X, y, groups, eval_set, prepared, kept=early)
            history, results = self._run_steps(X, y, index, prepared, setup, rng, dtype, dev=dev)
        self.history_, self.validation_scores_, self.best_iteration_ = training_summary(history)
        self.__dict__.update(results)
        # A fit starts afresh: a partial_fit afterwards starts a new schedule from these weights.
        self._train_state = None
        if self._has_fit_cache():
            self.fit_cache_hit_ = False
        # Stored only if the initial weights did not change while training (they were read after the digest).
        if key is not None and self.initial_weights_digest() == digest:
            FIT_CACHE.put(key, self._fitted_state())
        return self

    @available_if(lambda est: est.streamable)
    @validated
    def partial_fit(self, X, y, groups=None, total_rows=None):
        """Train on one chunk of a stream of whole questions: one pass over its rows, continuing the optimizer
        and the learning-rate schedule of the previous calls.

        For data larger than memory (ASNQ), call it on the chunks of :func:`~as2rank.datasets.load_asnq` or
        :func:`~as2rank.datasets.load_parquet`; peak memory then follows the chunk size, not the file. The
        first call declares ``total_rows``, the rows that all calls together will train on (the file's rows
        times the passes over it): the warm-up and decay of the learning rate are laid out over them, so that a
        step's rate is the schedule's value at the fraction of the data passed before it (rows a model leaves
        out, such as questions without a positive under a listwise loss, count as passed). ``epochs``, early
        stopping and ``eval_every`` do not apply (make the passes yourself; score a dev set between calls);
        ``callbacks`` see each call's pass. The first call starts from the fitted weights when the estimator is
        fitted, else from a fresh module; a later ``fit`` ends the stream.

        Batches never mix chunks, and rows are shuffled within a chunk only: shuffle the file beforehand, by
        whole questions, when its order is not random.

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
        >>> from as2rank import TransformerRanker
        >>> from as2rank.datasets import load_asnq
        >>> from as2rank.app.scale import count_rows
        >>> model = TransformerRanker(random_state=0)                                   # doctest: +SKIP
        >>> total = count_rows("asnq/train.tsv")                                        # doctest: +SKIP
        >>> for X, y in load_asnq("asnq/train.tsv", chunksize=200_000):                 # doctest: +SKIP
        ...     model.partial_fit(X, y, total_rows=total)
        """
        from .devices import resolve_device
        from .distributed import training_session
        from .training import TrainingState

        X, y, index = self.check_training_data(X, y, groups)
        device = resolve_device(self.device)
        state = TrainingState.resume(getattr(self, "_train_state", None), total_rows, self.rows_per_step())
        fresh = not self._is_fitted()
        if not fresh:
            self.check_continuation()
        prepared, early = self.prepare_training_data(X, y, index, fresh=fresh, streamed=True)
        self.__dict__.update(early)
        dtype = self.training_precision(device)
        rows_before = state.rows_done
        with training_session(self.n_threads, device, self.random_state, precision=dtype, call=state.runs) as (
                setup, rng):
            if fresh:
                self._start_fresh(X, y, groups, None, prepared, kept=early)
            history, results = self._run_steps(X, y, index, prepared, setup, rng, dtype, state=state)
        if history is not None:
            first = state.runs == 1 or not hasattr(self, "history_")
            self.history_, self.validation_scores_, self.best_iteration_ = training_summary(
                history if first else self.history_.extend(history))
        self.__dict__.update(results)
        # Every row of the chunk counts as passed, those the batches left out too: the schedule follows the data.
        state.rows_done = rows_before + index.n_rows
        if self._has_fit_cache():
            self.fit_cache_hit_ = False
        self._train_state = state
        return self

    def _start_fresh(self, X, y, groups, eval_set, prepared, kept) -> None:
        """The one place a new module is built, for ``fit`` and ``partial_fit`` alike (inside their seeded session,
        on their behalf): :meth:`initialize_module`'s module and fitted attributes replace every attribute an earlier
        fit learned, but those in ``kept`` (this call's own, from :meth:`prepare_training_data`)."""
        module, fitted = self.initialize_module(X, y, groups, eval_set, prepared)
        fitted = {**fitted, self.module_attribute: module}
        for name in [k for k in vars(self) if self._is_learnt(k) and k not in kept and k not in fitted]:
            delattr(self, name)
        self.__dict__.update(fitted)

    def _run_steps(self, X, y, index, prepared, setup, rng, dtype, dev=None, state=None) -> tuple:
        """The step loop: the inputs, the hold-out split, early stopping and the callbacks around
        :func:`~as2rank.neural.train` of the fitted module. ``fit`` (``state=None``; ``dev``, the checked
        ``eval_set``, or a held-out share of the training questions) or one ``partial_fit`` pass (continuing
        ``state``).

        Returns
        -------
        history : TrainingHistory or None
            None when a streamed chunk had nothing to train on.
        results : dict
            :meth:`training_results`.
        """
        from .early_stopping import EarlyStopping
        from .training import train

        device = setup.device
        module = getattr(self, self.module_attribute)
        inputs = self.training_inputs(module, X, prepared, device)
        rows = np.arange(len(y))
        validation = None
        if state is None:
            fraction = holdout_fraction(index, y, validation_fraction=self.validation_fraction,
                                        early_stopping=self.early_stopping, auto=self.auto_holdout)
            if dev is not None:
                validation = ValidationSet(dev[0], dev[1], dev[2], None)
            elif fraction is not None:
                is_dev = holdout_questions(index, y, fraction, rng)
                if is_dev.all():
                    raise ValueError("validation_fraction leaves no training question; lower it.")
                dev_rows = np.flatnonzero(is_dev)
                rows = np.flatnonzero(~is_dev)
                validation = ValidationSet(None, y[dev_rows], index.take(dev_rows), dev_rows)
        callbacks = []
        if validation is not None:
            dev_inputs = self.validation_inputs(inputs, validation, device)

            def evaluate(m):
                return self.evaluate(m, dev_inputs, validation.y, validation.index, device)

            every = self.get_params(deep=False).get("eval_every")
            callbacks.append(EarlyStopping(evaluate, self.patience, every=every))
        callbacks += list(self.callbacks or ())
        loss = self.get_loss()
        batches, steps = self.get_batches(inputs, y, index, rows, loss=loss, rng=rng, shard=setup.shard, device=device)
        options = self.training_options(steps)
        if state is not None:
            if steps == 0:
                state.runs += 1
                return None, {}
            options["epochs"] = 1

        def compute_loss(m, batch):
            return self.compute_loss(m, batch, loss)

        history = train(module, batches, compute_loss, steps_per_epoch=steps, device=device, verbose=self.verbose,
                        callbacks=callbacks, precision=dtype, accelerator=setup.accelerator, state=state, **options)
        return history, self.training_results(module, inputs, rows, device, streamed=state is not None)

    # ------------------------------------------------------------------ state
    def _is_fitted(self) -> bool:
        return self.module_attribute in vars(self)

    def _is_learnt(self, name: str) -> bool:
        """Whether the fitted attribute ``name`` is part of what a fit learns (the state that the fit cache
        carries): the live module and the cache-hit flag are not."""
        return name.endswith("_") and not name.startswith("_") and name not in (self.module_attribute, "fit_cache_hit_")

    def _has_fit_cache(self) -> bool:
        """Whether the estimator takes ``reuse_fit`` (and says with ``fit_cache_hit_`` whether a fit was reused)."""
        return "reuse_fit" in self.get_params(deep=False)

    def _fitted_state(self) -> dict:
        """Everything a fit learned, with the module as its config and CPU tensors (no device, no live module):
        what the fit cache keeps."""
        module = getattr(self, self.module_attribute)
        return {
            "config": self.module_config(module),
            "state_dict": {k: v.detach().to("cpu", copy=True) for k, v in module.state_dict().items()},
            "attrs": {k: v for k, v in vars(self).items() if self._is_learnt(k)},
        }

    def _restore_fitted(self, state: dict) -> None:
        for name in [k for k in vars(self) if self._is_learnt(k) and k not in state["attrs"]]:
            delattr(self, name)  # learnt by an earlier fit, absent from the restored one (e.g. a lexical prior)
        for name, value in state["attrs"].items():
            setattr(self, name, value)
        import torch

        # Building the module initialises weights that the stored ones replace: in a random stream of its own, so
        # that a fit served from the cache leaves the process's torch generator as a trained fit does (a trained
        # fit draws in its seeded session). What trains after it (an ensemble around cached members) is then the
        # same, cached or not.
        with torch.random.fork_rng(devices=[]):
            module = self.rebuild_module(state["config"], state["attrs"])
        module.load_state_dict(state["state_dict"])
        setattr(self, self.module_attribute, module.eval())

    def _report_cache_hit(self) -> None:
        from .distributed import is_main_process

        if self.verbose and is_main_process():
            print(f"{type(self).__name__}.fit: weights reused from an identical earlier fit in this process, not "
                  "trained; to train, set reuse_fit=False or call as2rank.neural.fitcache.FIT_CACHE.clear().",
                  file=sys.stderr)

    def __getstate__(self):
        state = super().__getstate__()
        name = self.module_attribute
        if name in state and not isinstance(state[name], dict):
            # The live module may sit on a GPU: its weights pickle as CPU tensors, with what rebuilds it.
            module = state[name]
            state = {**state, name: {k: v.detach().to("cpu", copy=True) for k, v in module.state_dict().items()},
                     "_module_config": self.module_config(module)}
        return state

    def __setstate__(self, state):
        state = dict(state)
        config = state.pop("_module_config", None)
        super().__setstate__(state)
        weights = vars(self).get(self.module_attribute)
        if isinstance(weights, dict):
            module = self.rebuild_module(config, vars(self))
            module.load_state_dict(weights)
            setattr(self, self.module_attribute, module.eval())

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # Initialisation, dropout and batch order draw from random_state: None draws fresh entropy per fit.
        tags.non_deterministic = self.random_state is None
        return tags
