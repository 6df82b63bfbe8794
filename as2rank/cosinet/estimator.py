"""Cosinet: the word-relatedness answer-sentence ranker of Bonadiman & Moschitti (2020, §3).

Frozen static word vectors; a word-relatedness encoder (for every word, its highest cosine similarity to a
word of the other text, appended to the word's vector); one convolution per side with global max pooling;
the pair representation ``[q ⊙ c ; q − c]``; optionally a recurrent network over the pair representations
of all the candidates of a question in their retrieval order (``position``; by candidate text when there is
none, never the row order); one linear layer to a score. Trained pointwise (binary cross-entropy) or
listwise (KL divergence between the softmax over a question's candidates and its normalised gold labels)
with Adam and a slanted triangular learning rate.

This module holds the estimator, :class:`Cosinet`: its parameters, the hooks through which it trains in the
training shell of every neural estimator (:class:`~as2rank.neural.shell.NeuralEstimator`: its module, its
batches of whole questions, its loss), prediction and persistence. The encoding of its inputs (word ids,
relatedness features, batches) is in ``as2rank.cosinet.encoding``, its torch network in
:mod:`as2rank.cosinet.network`.
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
from ..data import GroupIndex, check_ranking_data, check_X
from ..neural.callbacks import CONSTRAINTS as CALLBACK_CONSTRAINTS
from ..neural.early_stopping import CONSTRAINTS as EARLY_STOPPING_CONSTRAINTS
from ..neural.shell import NeuralEstimator
from .word_vectors import OOV_POLICIES, WordVectors, _is_keyed_vectors, keyed_vectors, load_word_vectors
from ..metrics import mean_average_precision
from ..params import (DEVICE_CONSTRAINTS, DTYPE_PRECISIONS, LOSSES, RANDOM_STATE_CONSTRAINTS, Boolean, InstanceOf,
                      Interval, Options)
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


class Cosinet(NeuralEstimator, PersistenceMixin, RankerMixin, BaseEstimator):
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
        (``validation_fraction`` of 0.1 when not set). ``False``: never. See :mod:`as2rank.neural.early_stopping`.
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
    callbacks : list of as2rank.neural.Callback, default=None
        Called around the training steps of ``fit`` and ``partial_fit``, after the built-in early stopping, in the
        order given (:class:`~as2rank.neural.callbacks.Callback`): ``on_train_begin(module, history, accelerator)``
        before the first step; ``on_step_end(step)`` after each optimizer step and ``on_epoch_end(step)`` after
        each full epoch, either returning True to stop training there; ``on_train_end(step, stopped)`` after the
        last step. Training time only: not saved (a loaded model has ``callbacks=None``), and copied by
        ``sklearn.base.clone``.

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

    #: The trained network is ``module_``.
    module_attribute = "module_"
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
        "callbacks": CALLBACK_CONSTRAINTS,
    }

    def __init__(
        self, embeddings="minilm-l6-wordpiece", rnn="birnn", loss="listwise", n_filters=300, kernel_size=5,
        rnn_hidden_size=None, dropout=0.0, learning_rate=None, epochs="auto", batch_size=4, warmup=0.1,
        max_grad_norm=None, early_stopping="auto", validation_fraction=None, patience=2, oov="hashed", lowercase=True,
        random_state=None, device="auto", precision="auto", n_threads=None, verbose=False, callbacks=None,
    ):
        self._keep_params(locals())

    # ------------------------------------------------------------------ the training shell's hooks
    def check_training_data(self, X, y, groups) -> tuple:
        """The grouped candidates validated; Cosinet's labels must also be non-negative (0/1 or graded)."""
        X, y, index = check_ranking_data(X, y, groups)
        if (y < 0).any():
            raise ValueError("Cosinet needs non-negative relevance labels (0/1 or graded).")
        return X, y, index

    def prepare_training_data(self, X, y, index, *, fresh, streamed) -> tuple:
        """``(encoded, index, train_groups)``: the rows encoded on the grid of their questions (words numbered in
        the vocabulary, extended by the new words of a ``partial_fit`` chunk), their questions and those that train;
        and the vocabulary's fitted attributes (``vocabulary_``, ``word_vectors_``, ``oov_rate_``), grown from the
        word-vector source. Listwise training leaves out questions without a positive; a ``fit`` needs one."""
        source = load_word_vectors(self.embeddings)
        vocabulary = None if fresh else self.vocabulary_
        encoded = _encode(X, index, self.lowercase, self._conv_padding(), vocabulary=vocabulary)
        fitted = dict(zip(("vocabulary_", "word_vectors_", "oov_rate_"),
                          self._grown_vocabulary(encoded.new_words, source, extend=not fresh)))
        train_groups = self._train_groups(index, y)
        if len(train_groups) == 0 and not streamed:
            raise ValueError(
                "Listwise training needs questions with at least one positive label; none of the "
                f"{index.n_groups} questions has one."
            )
        return (encoded, index, train_groups), fitted

    def initialize_module(self, X, y, groups, eval_set, prepared) -> tuple:
        """A new network (its initialisation is random) over the word vectors' dimension: the module, its
        ``module_config_`` and its number of trained parameters, ``n_params_``."""
        from .network import CosinetNetwork

        config = {
            "dim": int(self.word_vectors_.shape[1]),
            "n_filters": int(self.n_filters),
            "kernel_size": int(self.kernel_size),
            "rnn": self.rnn,
            "rnn_hidden_size": self._rnn_hidden_size(),
            "dropout": float(self.dropout),
        }
        module = CosinetNetwork(**config)
        return module, {"module_config_": config,
                        "n_params_": int(sum(p.numel() for p in module.parameters() if p.requires_grad))}

    def training_inputs(self, module, X, prepared, device) -> tuple:
        """The encoded rows with their relatedness features against the word-vector table, the table on
        ``device`` at the convolution's dtype (``precision``), the questions and those that train."""
        from ..neural import resolve_precision

        encoded, index, train_groups = prepared
        table = _table(self.word_vectors_)
        encoded.relate(table, device)
        return encoded, table.to(device, resolve_precision(self.precision, device)), index, train_groups

    def validation_inputs(self, inputs, validation, device) -> tuple:
        """What :meth:`evaluate` scores: an ``eval_set`` encoded with the fitted vocabulary (its unseen words'
        vectors appended to the table), or the held-out questions of the training encoding; with the questions
        to score, the rows of the encoding and, for held-out questions, their rows among them."""
        if validation.rows is None:
            encoded, table = self._scoring_inputs(validation.X, validation.index, device)
            return encoded, table, np.arange(validation.index.n_groups), validation.index.n_rows, None
        encoded, table, index, _ = inputs
        return encoded, table, np.unique(index.codes[validation.rows]), index.n_rows, validation.rows

    def evaluate(self, module, inputs, y, index, device) -> float:
        """The MAP of the network's scores of the validation questions."""
        encoded, table, groups, n_rows, rows = inputs
        scores = _group_scores(module, encoded, table, groups, n_rows, device, int(self.batch_size))
        return mean_average_precision(y, scores if rows is None else scores[rows], index)

    def get_loss(self):
        """The label loss of ``loss`` (``as2rank.neural.losses.LABEL_LOSSES``)."""
        from ..neural.losses import LABEL_LOSSES

        return LABEL_LOSSES[self.loss]

    def get_batches(self, inputs, y, index, rows, *, loss, rng, shard, device) -> tuple:
        """Batches of ``batch_size`` whole questions among those that train (those of ``rows``), in an order drawn
        from ``rng``; each batch's grid tensors (``_Encoded.batch``) carry its
        ``labels`` and ``table``, the word vectors the network reads."""
        from ..neural import question_batches
        from ..neural.distributed import LocalBatch

        encoded, table, _, train_groups = inputs
        if len(rows) < index.n_rows:  # questions held out for validation do not train
            held = np.setdiff1d(np.arange(index.n_groups), np.unique(index.codes[rows]))
            train_groups = np.setdiff1d(train_groups, held)
            if len(train_groups) == 0:
                raise ValueError("validation_fraction leaves no training question; lower it.")
        labels = y.astype(np.float32)
        listwise = self.loss == "listwise"
        batch_size = int(self.batch_size)

        def batches(epoch):
            for groups_ in question_batches(train_groups, batch_size, rng):
                local, real = shard.split(groups_, groups_, sizes=index.sizes[groups_])
                n_rows = int(index.sizes[local].sum())
                # The loss averages over questions (listwise) or rows (pointwise).
                examples = len(local) if listwise else n_rows
                batch = {**encoded.batch(local, labels), "table": table}
                yield LocalBatch(batch, n_rows if real else 0, examples if real else 0)

        return batches, -(-len(train_groups) // batch_size)

    def forward_outputs(self, module, batch):
        """The network's scores of the batch's questions, read from the batch's word-vector ``table``."""
        return module(batch, batch["table"])

    def training_options(self, steps_per_epoch) -> dict:
        """Adam with the slanted triangular learning rate (Howard & Ruder), the paper's peak rate for the loss
        unless ``learning_rate`` is set, for ``epochs`` (``"auto"``: ``resolve_epochs``)."""
        learning_rate = PAPER_LEARNING_RATES[self.loss] if self.learning_rate is None else self.learning_rate
        return dict(epochs=resolve_epochs(self.epochs, steps_per_epoch), learning_rate=float(learning_rate),
                    schedule="slanted_triangular", warmup=float(self.warmup), max_grad_norm=self.max_grad_norm,
                    desc=f"Cosinet ({self.loss}, rnn={self.rnn})")

    def rebuild_module(self, config, fitted):
        """The network of ``module_config_`` (unpickling, :meth:`from_pretrained`)."""
        from .network import CosinetNetwork

        return CosinetNetwork(**fitted["module_config_"])

    # ------------------------------------------------------------------ predict

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
        state = super().__getstate__()
        if "vocabulary_" in state and _is_keyed_vectors(self.embeddings):
            state["embeddings"] = keyed_vectors(self.vocabulary_, self.word_vectors_)  # the vectors stored once
        return state

    def __setstate__(self, state):
        super().__setstate__(state)
        if self.__dict__.get("embeddings", "") is None and "word_vectors_" in self.__dict__:
            self.embeddings = keyed_vectors(self.vocabulary_, self.word_vectors_)  # saved as the fitted vocabulary's


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
