"""Cosinet: the word-relatedness answer-sentence ranker of Bonadiman & Moschitti (2020, §3).

Frozen static word vectors; a word-relatedness encoder (for every word, its highest cosine similarity to a
word of the other text, appended to the word's vector); one convolution per side with global max pooling;
the pair representation ``[q ⊙ c ; q − c]``; optionally a recurrent network over the pair representations
of all the candidates of a question in their retrieval order (``position``; by candidate text when there is
none, never the row order); one linear layer to a score. Trained pointwise (binary cross-entropy) or
listwise (KL divergence between the softmax over a question's candidates and its normalised gold labels)
with Adam and a slanted triangular learning rate.

This module holds the estimator, :class:`Cosinet`: its parameters, training, prediction and persistence. The
encoding of its inputs (word ids, relatedness features, batches) is in ``as2rank.cosinet.encoding``, its
torch network in :mod:`as2rank.cosinet.network`.
"""

from __future__ import annotations

import os
import warnings
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from ..base import RankerMixin
from .encoding import _encode, _table
from ..data import GroupIndex, check_ranking_data, check_X, holdout_questions
from ..early_stopping import (CONSTRAINTS as EARLY_STOPPING_CONSTRAINTS, check_early_stopping, check_eval_set,
                              holdout_fraction, training_summary)
from .word_vectors import OOV_POLICIES, WordVectors, _is_keyed_vectors, keyed_vectors, load_word_vectors
from ..metrics import mean_average_precision
from ..params import (DEVICE_CONSTRAINTS, DTYPE_PRECISIONS, LOSSES, RANDOM_STATE_CONSTRAINTS, Boolean, InstanceOf,
                      Interval, Options, ParameterMixin, validated)
from ..persistence import PersistenceMixin

__all__ = ["Cosinet", "RNN_TYPES"]

#: Recurrent layers over the candidate list: ``None`` or one of these.
RNN_TYPES = ("rnn", "birnn", "lstm", "bilstm")
#: The paper's peak learning rates (§4.2), used when ``learning_rate=None``.
PAPER_LEARNING_RATES = {"pointwise": 2e-3, "listwise": 2e-4}
#: ``epochs="auto"``: at least this many epochs, and as many more as reach this many optimizer steps.
AUTO_MIN_EPOCHS, AUTO_MIN_STEPS = 3, 200


def resolve_epochs(epochs, steps_per_epoch: int) -> int:
    """Epochs of a ``fit``: ``epochs``, or for ``"auto"`` the fewest epochs, at least ``AUTO_MIN_EPOCHS``, that
    make ``AUTO_MIN_STEPS`` optimizer steps of ``steps_per_epoch`` each."""
    if epochs != "auto":
        return int(epochs)
    return max(AUTO_MIN_EPOCHS, -(-AUTO_MIN_STEPS // max(int(steps_per_epoch), 1)))


class Cosinet(ParameterMixin, PersistenceMixin, RankerMixin, BaseEstimator):
    """Cosinet answer-sentence ranker (Bonadiman & Moschitti, 2020), optionally with an RNN over the
    candidate list and listwise training.

    Defaults measured: ``docs/benchmarks/defaults-cosinet.md`` (the training budget over training sizes and
    data sets); ``docs/benchmarks/cosinet.md`` compares the word vectors.

    Parameters
    ----------
    embeddings : str, os.PathLike or gensim.models.KeyedVectors, default="minilm-l6-wordpiece"
        Static word vectors, kept frozen; see :mod:`as2rank.cosinet.word_vectors` for the names (``"glove-6b-50d"``,
        ``"minilm-l6-wordpiece"``), file formats and the out-of-vocabulary policy. The default, the
        input wordpiece embeddings of the packaged all-MiniLM-L6-v2 (384d), works offline and ranked
        better than GloVe-50d; the paper used ConceptNet Numberbatch (300d).
    rnn : {None, "rnn", "birnn", "lstm", "bilstm"}, default="birnn"
        Recurrent layer run over the pair representations of a question's candidates in their retrieval
        order (``position``). Without a ``position`` column it reads them sorted by candidate text, so that no
        row order is taken for a rank and the scores do not depend on how the rows are laid out. ``None``
        scores each pair on its own (the paper's plain Cosinet). The default is the paper's best configuration.
    loss : {"pointwise", "listwise"}, default="listwise"
        Binary cross-entropy over pairs (labels > 0 are positives), or the KL divergence from a question's
        normalised gold labels to the softmax of its scores; listwise training leaves out questions with
        no positive label.
    n_filters : int, default=300
        Convolution filters per side; the pair representation has ``2 * n_filters`` dimensions.
    kernel_size : int, default=5
        Convolution width in words (zero padding keeps one output per word).
    rnn_hidden_size : int, default=None
        Hidden units of the RNN per direction. ``None`` follows the paper's text: the input size
        (``2 * n_filters``), split in half per direction for the bidirectional layers.
    dropout : float, default=0.0
        Dropout on the pair representations during training (the paper does not use any).
    learning_rate : float, default=None
        Peak learning rate of the slanted triangular schedule; ``None`` takes the paper's value for the
        loss: 2e-3 pointwise, 2e-4 listwise.
    epochs : int or "auto", default="auto"
        Passes over the training questions. ``"auto"`` adapts the budget to the data: at least 3 epochs, and
        enough for 200 optimizer steps (``ceil(200 / ceil(n_questions / batch_size))`` when that is more),
        so 100 training questions get 8 epochs and 300 or more get 3: short schedules left small training
        sets far below the lexical baselines. The paper trains 3 epochs (``epochs=3, batch_size=8``).
    batch_size : int, default=4
        Questions per batch (all the candidates of a question go in the same batch).
    warmup : float, default=0.1
        Fraction of the training steps over which the learning rate rises (``cut_frac`` of Howard & Ruder).
    max_grad_norm : float, default=None
        Clip the gradient norm; ``None`` does not clip (as in the paper).
    early_stopping : "auto" or bool, default="auto"
        Evaluate the validation MAP after each epoch, stop when it has not improved for ``patience``
        epochs and keep the weights of the best one; ``epochs`` is then a budget. The validation set is
        ``fit``'s ``eval_set`` or, without one, a held-out share of the answered training questions (whole
        questions, drawn with ``random_state``; they do not train). ``"auto"``: early stopping when there is
        a validation set (an ``eval_set``, or ``validation_fraction`` set), none otherwise. ``True``: always
        (``validation_fraction`` of 0.1 when not set). ``False``: never. See :mod:`as2rank.early_stopping`.
    validation_fraction : float, default=None
        Fraction of the answered training questions held out for early stopping when ``fit`` gets no
        ``eval_set`` (at least one question).
    patience : int, default=2
        Epochs without a better validation MAP before training stops (scikit-learn's ``n_iter_no_change``).
    oov : {"hashed", "zero"}, default="hashed"
        Vectors of words the embeddings do not know: a fixed pseudo-random vector per word string (so
        repeated unknown words still match), or zeros.
    lowercase : bool, default=True
        Lower-case the text before spaCy tokenisation (as in the paper).
    random_state : int, RandomState instance or None, default=None
        Seeds parameter initialisation, dropout and the batch order. With an integer, fitting again on the
        same CPU (same torch build, precision and number of threads) gives the same model bit for bit, in
        the same process or another, whatever the machine's load.
    device : str or torch.device, default="auto"
        ``"auto"`` trains and predicts on CUDA when available, else the CPU.
    precision : {"auto", "fp32", "bf16"}, default="auto"
        Precision of the convolution over the word vectors, which is most of the compute: bfloat16
        inputs with float32 accumulation where the device supports it natively (``"auto"``: recent
        x86 CPUs and GPUs), else float32. Everything else (relatedness, RNN, loss, optimizer) is float32.
    n_threads : int, default=None
        torch CPU threads used by ``fit``, ``partial_fit`` and ``predict`` (restored afterwards). ``None``
        keeps torch's setting, which already avoids oversubscription in joblib and Dask workers (see
        :func:`as2rank.neural.torch_threads`).
    verbose : bool, default=False
        Show a progress bar while training.

    Attributes
    ----------
    vocabulary_ : ndarray of str
        The words seen in ``fit``; row ``i`` of ``word_vectors_`` is the vector of ``vocabulary_[i]``.
    word_vectors_ : ndarray of float32, shape (n_words, dim)
        Their vectors (out-of-vocabulary words already resolved by ``oov``). Only this subset of the
        source table is kept and pickled.
    oov_rate_ : float
        Fraction of ``vocabulary_`` that the source did not know.
    module_ : torch.nn.Module
        The trained network.
    n_params_ : int
        Number of trainable parameters (the frozen word vectors are not trainable).
    history_ : as2rank.neural.TrainingHistory
        Per-step losses and learning rates, and the training time in seconds.
    validation_scores_ : ndarray of float
        Validation MAP of each evaluation (empty without early stopping).
    best_iteration_ : int
        The optimizer step whose weights were kept (the last step without early stopping).

    Notes
    -----
    Pickling (``pickle``/``joblib``) stores the network's weights as CPU tensors (a model trained on a
    GPU loads on a machine without one) and the word vectors of ``vocabulary_`` only, never the whole
    source table. At ``predict`` time, words not in ``vocabulary_`` are looked up again in the source:
    a name or a path is re-resolved (once per process); when that fails (the package is not installed
    where the model was unpickled) a warning is issued and the ``oov`` policy applies. A ``KeyedVectors``
    passed as ``embeddings`` is not pickled whole either: the pickle replaces it by a ``KeyedVectors`` of
    the fitted vocabulary, sharing the stored vectors, so after unpickling ``embeddings`` holds that
    subset and unseen words follow the ``oov`` policy.

    References
    ----------
    D. Bonadiman and A. Moschitti. "A Study on Efficiency, Accuracy and Document Structure for Answer
    Sentence Selection". COLING 2020.

    Examples
    --------
    >>> from as2rank import Cosinet
    >>> from as2rank.datasets import load_wikiqa
    >>> X, y = load_wikiqa("WikiQA-train.tsv")                             # doctest: +SKIP
    >>> model = Cosinet(rnn="birnn", loss="listwise", random_state=0).fit(X, y)  # doctest: +SKIP
    >>> model.rank("who wrote hamlet ?", ["Paris is big .", "Hamlet is a play by Shakespeare ."])  # doctest: +SKIP
    """

    _parameter_constraints = {
        "embeddings": [InstanceOf((str, os.PathLike, WordVectors, "gensim.models.KeyedVectors"),
                                  "a word-vector name or file path, or a gensim KeyedVectors")],
        "rnn": [None, Options(RNN_TYPES)],
        "rnn_hidden_size": [Interval(Integral, 1, None), None],
        "n_filters": [Interval(Integral, 1, None)],
        "kernel_size": [Interval(Integral, 1, None)],
        "dropout": [Interval(Real, 0, 1, closed="left")],
        "loss": [Options(LOSSES)],
        "oov": [Options(OOV_POLICIES)],
        "lowercase": [Boolean()],
        "epochs": [Interval(Integral, 1, None), Options(("auto",))],
        "batch_size": [Interval(Integral, 1, None)],
        "learning_rate": [Interval(Real, 0, None, closed="neither"), None],
        "warmup": [Interval(Real, 0, 1)],
        "max_grad_norm": [Interval(Real, 0, None, closed="neither"), None],
        **EARLY_STOPPING_CONSTRAINTS,
        "random_state": RANDOM_STATE_CONSTRAINTS,
        "device": DEVICE_CONSTRAINTS,
        "precision": [Options(DTYPE_PRECISIONS)],
        "n_threads": [Interval(Integral, 1, None), None],
        "verbose": [Boolean()],
    }

    def __init__(
        self, embeddings="minilm-l6-wordpiece", rnn="birnn", loss="listwise", n_filters=300, kernel_size=5,
        rnn_hidden_size=None, dropout=0.0, learning_rate=None, epochs="auto", batch_size=4, warmup=0.1,
        max_grad_norm=None, early_stopping="auto", validation_fraction=None, patience=2, oov="hashed", lowercase=True,
        random_state=None, device="auto", precision="auto", n_threads=None, verbose=False,
    ):
        self._keep_params(locals())

    # ------------------------------------------------------------------ fit / predict

    @validated
    def fit(self, X, y, groups=None, eval_set=None):
        """Train on grouped candidates.

        Run by ``accelerate launch`` or ``torchrun``, the same call trains in every process on its share of
        the questions of each batch (see :mod:`as2rank.neural.distributed`); every process ends with the
        same model.

        Parameters
        ----------
        X : pandas.DataFrame
            Grouped-candidate frame (``qid``, ``question``, ``candidate``, optional ``position``).
        y : array-like of shape (n_rows,)
            Relevance labels (0/1, or graded non-negative values for the listwise loss).
        groups : array-like of shape (n_rows,), default=None
            Question ids overriding ``X["qid"]``.
        eval_set : tuple (X_dev, y_dev), default=None
            Validation set for early stopping on its MAP (best weights restored); overrides
            ``validation_fraction``.

        Returns
        -------
        self
        """
        from ..neural.distributed import training_session

        X, y, index, device, dtype, source = self._validate(X, y, groups)
        dev = check_eval_set(self, eval_set)
        encoded = _encode(X, index, self.lowercase, self._conv_padding())
        self.vocabulary_, self.word_vectors_, self.oov_rate_ = self._grown_vocabulary(encoded.new_words, source,
                                                                                     extend=False)
        train_groups = self._train_groups(index, y)
        if len(train_groups) == 0:
            raise ValueError(
                "Listwise training needs questions with at least one positive label; none of the "
                f"{index.n_groups} questions has one."
            )
        with training_session(self.n_threads, device, self.random_state) as (setup, rng):
            self.module_config_, self.module_, self.n_params_ = self._new_module(source.dim)
            history = self._train(encoded, index, y, train_groups, rng, setup, dtype, dev=dev)
        self.history_, self.validation_scores_, self.best_iteration_ = training_summary(history)
        # A fit starts afresh: a partial_fit afterwards starts a new schedule from these weights.
        self._train_state = None
        return self

    @validated
    def partial_fit(self, X, y, groups=None, total_rows=None):
        """Train on one chunk of a stream of whole questions: one pass over it, continuing the optimizer and
        the learning-rate schedule of the previous calls.

        For data larger than memory, call it on the chunks of :func:`~as2rank.datasets.load_asnq` or
        :func:`~as2rank.datasets.load_parquet`. The first call declares ``total_rows``, the rows that all
        calls together will pass (the file's rows times the passes over it): the slanted triangular schedule
        is laid out over them row by row, so a step's rate is the schedule's value at the fraction of the
        data passed before it. ``epochs`` and early stopping do not apply (make the passes yourself). The
        first call starts from the fitted weights when the estimator is fitted, else from a fresh network; a
        later ``fit`` ends the stream. Questions are shuffled within a chunk only.

        Memory follows the chunk size, plus the vectors of the distinct words seen so far
        (``vocabulary_``/``word_vectors_`` grow with the vocabulary of the stream, not with its rows).

        Parameters
        ----------
        X : pandas.DataFrame
            Grouped-candidate frame: one chunk.
        y : array-like of shape (n_rows,)
        groups : array-like of shape (n_rows,), default=None
            Question ids overriding ``X["qid"]``.
        total_rows : int, default=None
            Rows over all calls; required on the first call, ignored afterwards.

        Returns
        -------
        self
        """
        from ..neural import TrainingState
        from ..neural.distributed import training_session

        X, y, index, device, dtype, source = self._validate(X, y, groups)
        # Batches are whole questions: the schedule moves row by row.
        state = TrainingState.resume(getattr(self, "_train_state", None), total_rows)
        fitted = hasattr(self, "module_")
        encoded = _encode(X, index, self.lowercase, self._conv_padding(), vocabulary=self.vocabulary_ if fitted else None)
        self.vocabulary_, self.word_vectors_, self.oov_rate_ = self._grown_vocabulary(encoded.new_words, source,
                                                                                     extend=fitted)
        train_groups = self._train_groups(index, y)
        with training_session(self.n_threads, device, self.random_state, call=state.runs) as (setup, rng):
            if not fitted:
                self.module_config_, self.module_, self.n_params_ = self._new_module(source.dim)
            if len(train_groups):
                new = self._train(encoded, index, y, train_groups, rng, setup, dtype, state=state)
                history = new if not hasattr(self, "history_") or state.runs == 1 else self.history_.extend(new)
                self.history_, self.validation_scores_, self.best_iteration_ = training_summary(history)
            else:
                state.runs += 1
        # Rows of questions listwise training leaves out still count as passed: the schedule follows the data.
        state.rows_done += int(index.n_rows - index.sizes[train_groups].sum())
        self._train_state = state
        return self

    def predict(self, X) -> np.ndarray:
        """One relevance score per row of ``X`` (higher is better), in the row order of ``X``.

        The candidates of each question are scored together, in their retrieval order (``position``, or by
        candidate text when ``X`` has none), so the scores do not depend on how the rows of ``X`` are
        ordered. ``predict`` leaves the estimator unchanged, so one fitted model can score in several threads
        at once.

        Parameters
        ----------
        X : pandas.DataFrame

        Returns
        -------
        ndarray of float64, shape (n_rows,)
        """
        from ..neural import resolve_device, torch_threads

        check_is_fitted(self, "module_")
        X = check_X(X)
        index = GroupIndex.from_frame(X)
        device = resolve_device(self.device)
        with torch_threads(self.n_threads):
            encoded, table = self._scoring_inputs(X, index, device)
            return _group_scores(self.module_.to(device), encoded, table, np.arange(index.n_groups), index.n_rows,
                                 device, int(self.batch_size))

    # ------------------------------------------------------------------ helpers

    def _validate(self, X, y, groups):
        """Checked data and parameters, the device, the convolution's dtype and the word-vector source."""
        from ..neural import resolve_device, resolve_precision

        X, y, index = check_ranking_data(X, y, groups)
        if (y < 0).any():
            raise ValueError("Cosinet needs non-negative relevance labels (0/1 or graded).")
        device = resolve_device(self.device)
        return X, y, index, device, resolve_precision(self.precision, device), load_word_vectors(self.embeddings)

    def _scoring_inputs(self, X, index, device):
        """``X`` encoded with the fitted vocabulary and the word-vector table on ``device`` (the vectors of words
        not seen in ``fit`` appended), ready for :func:`_group_scores`."""
        from ..neural import resolve_precision

        encoded = _encode(X, index, self.lowercase, self._conv_padding(), vocabulary=self.vocabulary_)
        table = self.word_vectors_
        if len(encoded.new_words):
            table = np.concatenate([table, self._unseen_vectors(list(encoded.new_words))])
        table = _table(table)
        encoded.relate(table, device)
        return encoded, table.to(device, resolve_precision(self.precision, device))

    def _grown_vocabulary(self, words, source, extend) -> tuple:
        """``vocabulary_``, ``word_vectors_`` and ``oov_rate_`` of ``words``, or of the fitted ones with ``words``
        appended.

        Parameters
        ----------
        words : ndarray of str
            Words not in ``vocabulary_`` (all the words of the data when ``extend`` is false).
        source : as2rank.cosinet.word_vectors.WordVectors
            Where their vectors come from (unknown words follow ``oov``).
        extend : bool
            Append to the fitted vocabulary (``partial_fit``) rather than start a new one.
        """
        vectors, found = source.embed(list(words), self.oov)
        if not extend:
            return words, vectors, float(1.0 - found.mean()) if len(found) else 0.0
        vocabulary = np.concatenate([self.vocabulary_, words])
        missed = self.oov_rate_ * len(self.vocabulary_) + float((~found).sum())
        return (vocabulary, np.concatenate([self.word_vectors_, vectors]),
                missed / len(vocabulary) if len(vocabulary) else 0.0)

    def _train_groups(self, index, y):
        """The questions training uses: all of them pointwise, those with a positive listwise."""
        return np.flatnonzero(index.max(y) > 0) if self.loss == "listwise" else np.arange(index.n_groups)

    def _new_module(self, dim) -> tuple:
        """A new network (inside ``seeded``: its initialisation is random): its ``module_config_``, the module and
        its number of trained parameters (``n_params_``)."""
        config = {
            "dim": dim,
            "n_filters": int(self.n_filters),
            "kernel_size": int(self.kernel_size),
            "rnn": self.rnn,
            "rnn_hidden_size": self._rnn_hidden_size(),
            "dropout": float(self.dropout),
        }
        from .network import CosinetNetwork

        module = CosinetNetwork(**config)
        return config, module, int(sum(p.numel() for p in module.parameters() if p.requires_grad))

    def _train(self, encoded, index, y, train_groups, rng, setup, dtype, state=None, dev=None):
        """Run the training loop over ``train_groups``: ``fit`` (``state=None``; ``dev``: the checked
        ``eval_set``) or one ``partial_fit`` pass."""
        from ..neural import EarlyStopping, question_batches, train
        from ..neural.distributed import LocalBatch
        from ..neural.losses import LABEL_LOSSES

        device, shard = setup.device, setup.shard
        learning_rate = PAPER_LEARNING_RATES[self.loss] if self.learning_rate is None else self.learning_rate
        batch_size = int(self.batch_size)
        labels = y.astype(np.float32)
        table = _table(self.word_vectors_)
        encoded.relate(table, device)
        table = table.to(device, dtype)
        listwise = self.loss == "listwise"
        evaluate = None
        fraction = holdout_fraction(index, y, validation_fraction=self.validation_fraction,
                                    early_stopping=self.early_stopping, auto=False)
        if state is None and dev is None and fraction is not None:
            held = holdout_questions(index, y, fraction, rng)
            dev_groups, dev_rows = np.unique(index.codes[held]), np.flatnonzero(held)
            train_groups = np.setdiff1d(train_groups, dev_groups)
            if len(train_groups) == 0:
                raise ValueError("validation_fraction leaves no training question; lower it.")
            dev_y, dev_index = y[dev_rows], index.take(dev_rows)

            def evaluate(module):
                scores = _group_scores(module, encoded, table, dev_groups, index.n_rows, device, batch_size)
                return mean_average_precision(dev_y, scores[dev_rows], dev_index)
        elif state is None and dev is not None:
            dev_encoded, dev_table = self._scoring_inputs(dev[0], dev[2], device)

            def evaluate(module):
                scores = _group_scores(module, dev_encoded, dev_table, np.arange(dev[2].n_groups), dev[2].n_rows,
                                       device, batch_size)
                return mean_average_precision(dev[1], scores, dev[2])
        steps_per_epoch = -(-len(train_groups) // batch_size)

        def batches(epoch):
            for groups_ in question_batches(train_groups, batch_size, rng):
                local, real = shard.split(groups_, groups_, sizes=index.sizes[groups_])
                rows = int(index.sizes[local].sum())
                # The loss averages over questions (listwise) or rows (pointwise).
                examples = len(local) if listwise else rows
                yield LocalBatch(encoded.batch(local, labels), rows if real else 0, examples if real else 0)

        loss = LABEL_LOSSES[self.loss]

        def compute_loss(module, batch):
            return loss(module(batch, table), batch)

        callbacks = [] if evaluate is None else [EarlyStopping(evaluate, self.patience)]
        return train(
            self.module_,
            batches,
            compute_loss,
            epochs=resolve_epochs(self.epochs, steps_per_epoch) if state is None else 1,
            steps_per_epoch=steps_per_epoch,
            learning_rate=float(learning_rate),
            device=device,
            schedule="slanted_triangular",
            warmup=float(self.warmup),
            max_grad_norm=self.max_grad_norm,
            callbacks=callbacks,
            verbose=bool(self.verbose),
            desc=f"Cosinet ({self.loss}, rnn={self.rnn})",
            precision=None,  # the convolution's dtype is the table's; everything else runs in float32
            accelerator=setup.accelerator,
            state=state,
        )

    def _check_rules(self):
        check_early_stopping(self)

    def _rnn_hidden_size(self):
        if self.rnn is None:
            return None
        if self.rnn_hidden_size is not None:
            return int(self.rnn_hidden_size)
        input_size = 2 * int(self.n_filters)
        return input_size // 2 if self.rnn.startswith("bi") else input_size

    def _conv_padding(self):
        k = int(self.kernel_size)
        return (k - 1) // 2, k // 2

    def _unseen_vectors(self, words):
        """Vectors of words not seen in ``fit``, from the (re-resolved) source or the OOV policy."""
        from .word_vectors import oov_vectors

        try:
            source = load_word_vectors(self.embeddings)
        except (OSError, ImportError, ValueError) as exc:
            warnings.warn(
                f"Word vectors {self.embeddings!r} cannot be loaded here ({exc}); the {len(words)} word(s) "
                f"not seen in fit get the oov={self.oov!r} policy.",
                RuntimeWarning,
                stacklevel=3,
            )
            if self.oov == "zero":
                return np.zeros((len(words), self.word_vectors_.shape[1]), dtype=np.float32)
            return oov_vectors(words, self.word_vectors_.shape[1], float(np.std(self.word_vectors_)))
        return source.embed(words, self.oov)[0]

    def __getstate__(self):
        state = dict(super().__getstate__())
        if "module_" in state:
            # CPU tensors, so a model trained on a GPU unpickles on a machine without one.
            state["module_"] = {k: v.detach().cpu() for k, v in self.module_.state_dict().items()}
        if "vocabulary_" in state and _is_keyed_vectors(self.embeddings):
            state["embeddings"] = keyed_vectors(self.vocabulary_, self.word_vectors_)  # the vectors stored once
        return state

    def __setstate__(self, state):
        super().__setstate__(state)
        if isinstance(self.__dict__.get("module_"), dict):
            self.module_ = self._module_from_state(self.module_)
        if self.__dict__.get("embeddings", "") is None and "word_vectors_" in self.__dict__:
            self.embeddings = keyed_vectors(self.vocabulary_, self.word_vectors_)  # saved as the fitted vocabulary's

    def _module_from_state(self, state_dict):
        """The network rebuilt from its CPU weights (unpickling, :meth:`from_pretrained`)."""
        from .network import CosinetNetwork

        module = CosinetNetwork(**self.module_config_)
        module.load_state_dict(state_dict)
        return module.eval()

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = self.random_state is None
        return tags


def _group_scores(module, encoded, table, groups, n_rows, device, batch_size: int):
    """Scores of the rows of the questions ``groups`` (codes of ``encoded``'s index), NaN elsewhere: each
    question's candidates scored together, in reading order, in batches of at least 64 questions."""
    import torch

    from ..neural import question_batches, to_device
    from ..neural.predict import no_progress, predict_batches

    def run(groups_):
        batch = encoded.batch(groups_)
        return batch["rows"].numpy(), module(to_device(batch, device), table)

    # The convolution's dtype is the table's; everything else runs in float32 (no autocast).
    return predict_batches(question_batches(groups, max(batch_size, 64)), run, n_rows, device=device,
                           dtype=torch.float32, progress=no_progress)
