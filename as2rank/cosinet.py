"""Cosinet: the word-relatedness answer-sentence ranker of Bonadiman & Moschitti (2020, §3).

Frozen static word vectors; a word-relatedness encoder (for every word, its highest cosine similarity to a
word of the other text, appended to the word's vector); one convolution per side with global max pooling;
the pair representation ``[q ⊙ c ; q − c]``; optionally a recurrent network over the pair representations
of all the candidates of a question in their original order; one linear layer to a score. Trained
pointwise (binary cross-entropy) or listwise (KL divergence between the softmax over a question's
candidates and its normalised gold labels) with Adam and a slanted triangular learning rate.
"""

from __future__ import annotations

import warnings
from functools import lru_cache
from numbers import Integral, Real

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from .base import RankerMixin
from .data import GroupIndex, check_ranking_data, check_X, ragged_arange
from .embeddings import OOV_POLICIES, _is_keyed_vectors, load_word_vectors
from .persistence import PersistenceMixin
from .text import tokenize

__all__ = ["Cosinet", "RNN_TYPES", "LOSSES"]

#: Recurrent layers over the candidate list: ``None`` or one of these.
RNN_TYPES = ("rnn", "birnn", "lstm", "bilstm")
#: Training objectives.
LOSSES = ("pointwise", "listwise")
#: Values of ``precision`` (as :data:`as2rank.neural.PRECISIONS`, repeated so that validating parameters
#: does not import torch).
PRECISIONS = ("auto", "fp32", "bf16")
#: The paper's peak learning rates (§4.2), used when ``learning_rate=None``.
PAPER_LEARNING_RATES = {"pointwise": 2e-3, "listwise": 2e-4}


class Cosinet(PersistenceMixin, RankerMixin, BaseEstimator):
    """Cosinet answer-sentence ranker (Bonadiman & Moschitti, 2020), optionally with an RNN over the
    candidate list and listwise training.

    Parameters
    ----------
    embeddings : str, os.PathLike or gensim.models.KeyedVectors, default="minilm-l6-wordpiece"
        Static word vectors, kept frozen; see :mod:`as2rank.embeddings` for the names (``"glove-6b-50d"``,
        ``"minilm-l6-wordpiece"``), file formats and the out-of-vocabulary policy. The default, the
        input wordpiece embeddings of the packaged all-MiniLM-L6-v2 (384d), works offline and ranks
        better than GloVe-50d on WikiQA; the paper used ConceptNet Numberbatch (300d).
    rnn : {None, "rnn", "birnn", "lstm", "bilstm"}, default="birnn"
        Recurrent layer run over the pair representations of a question's candidates in their original
        order (``position``). ``None`` scores each pair on its own (the paper's plain Cosinet). The default
        is the paper's best configuration.
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
    epochs : int, default=3
    batch_size : int, default=8
        Questions per batch (all the candidates of a question go in the same batch).
    warmup : float, default=0.1
        Fraction of the training steps over which the learning rate rises (``cut_frac`` of Howard & Ruder).
    max_grad_norm : float, default=None
        Clip the gradient norm; ``None`` does not clip (as in the paper).
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

    def __init__(
        self,
        embeddings="minilm-l6-wordpiece",
        rnn="birnn",
        loss="listwise",
        n_filters=300,
        kernel_size=5,
        rnn_hidden_size=None,
        dropout=0.0,
        learning_rate=None,
        epochs=3,
        batch_size=8,
        warmup=0.1,
        max_grad_norm=None,
        oov="hashed",
        lowercase=True,
        random_state=None,
        device="auto",
        precision="auto",
        n_threads=None,
        verbose=False,
    ):
        self.embeddings = embeddings
        self.rnn = rnn
        self.loss = loss
        self.n_filters = n_filters
        self.kernel_size = kernel_size
        self.rnn_hidden_size = rnn_hidden_size
        self.dropout = dropout
        self.learning_rate = learning_rate
        self.epochs = epochs
        self.batch_size = batch_size
        self.warmup = warmup
        self.max_grad_norm = max_grad_norm
        self.oov = oov
        self.lowercase = lowercase
        self.random_state = random_state
        self.device = device
        self.precision = precision
        self.n_threads = n_threads
        self.verbose = verbose

    # ------------------------------------------------------------------ fit / predict

    def fit(self, X, y, groups=None):
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

        Returns
        -------
        self
        """
        from .neural import seeded, torch_threads
        from .neural.distributed import setup_training

        X, y, index, device, dtype, source = self._validate(X, y, groups)
        with torch_threads(self.n_threads):
            setup = setup_training(device)
            encoded = _encode(X, index, self.lowercase, self._conv_padding())
            self.vocabulary_ = encoded.new_words
            self.word_vectors_, found = source.embed(list(self.vocabulary_), self.oov)
            self.oov_rate_ = float(1.0 - found.mean()) if len(found) else 0.0
            train_groups = self._train_groups(index, y)
            if len(train_groups) == 0:
                raise ValueError(
                    "Listwise training needs questions with at least one positive label; none of the "
                    f"{index.n_groups} questions has one."
                )
            with seeded(self.random_state, setup.device) as rng:
                self._init_module(source.dim)
                self.history_ = self._train(encoded, index, y, train_groups, rng, setup, dtype)
        # A fit starts afresh: a partial_fit afterwards starts a new schedule from these weights.
        self._train_state = None
        return self

    def partial_fit(self, X, y, groups=None, total_rows=None):
        """Train on one chunk of a stream of whole questions: one pass over it, continuing the optimizer and
        the learning-rate schedule of the previous calls.

        For data larger than memory, call it on the chunks of :func:`~as2rank.datasets.load_asnq` or
        :func:`~as2rank.datasets.load_parquet`. The first call declares ``total_rows``, the rows that all
        calls together will pass (the file's rows times the passes over it): the slanted triangular schedule
        is laid out over them row by row, so a step's rate is the schedule's value at the fraction of the
        data passed before it. ``epochs`` does not apply (make the passes yourself). The first call starts
        from the fitted weights when the estimator is fitted, else from a fresh network; a later ``fit``
        ends the stream. Questions are shuffled within a chunk only.

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
        from .neural import TrainingState, call_seed, seeded, torch_threads
        from .neural.distributed import setup_training

        X, y, index, device, dtype, source = self._validate(X, y, groups)
        state = getattr(self, "_train_state", None)
        if state is None:
            if total_rows is None:
                raise ValueError(
                    "The first call to partial_fit needs total_rows: the number of rows that all calls together "
                    "will pass (the rows of the data times the passes over it); the learning-rate schedule is "
                    "laid out over them."
                )
            state = TrainingState(total_rows)
        fitted = hasattr(self, "module_")
        with torch_threads(self.n_threads):
            setup = setup_training(device)
            encoded = _encode(X, index, self.lowercase, self._conv_padding(), vocabulary=self.vocabulary_ if fitted else None)
            vectors, found = source.embed(list(encoded.new_words), self.oov)
            if fitted:
                n_old = len(self.vocabulary_)
                self.vocabulary_ = np.concatenate([self.vocabulary_, encoded.new_words])
                self.word_vectors_ = np.concatenate([self.word_vectors_, vectors])
                missed = self.oov_rate_ * n_old + float((~found).sum())
                self.oov_rate_ = missed / len(self.vocabulary_) if len(self.vocabulary_) else 0.0
            else:
                self.vocabulary_, self.word_vectors_ = encoded.new_words, vectors
                self.oov_rate_ = float(1.0 - found.mean()) if len(found) else 0.0
            train_groups = self._train_groups(index, y)
            with seeded(call_seed(self.random_state, state.runs), setup.device) as rng:
                if not fitted:
                    self._init_module(source.dim)
                if len(train_groups):
                    history = self._train(encoded, index, y, train_groups, rng, setup, dtype, state=state)
                    self.history_ = history if not hasattr(self, "history_") or state.runs == 1 else self.history_.extend(history)
                else:
                    state.runs += 1
        # Rows of questions listwise training leaves out still count as passed: the schedule follows the data.
        state.rows_done += int(index.n_rows - index.sizes[train_groups].sum())
        self._train_state = state
        return self

    def predict(self, X) -> np.ndarray:
        """One relevance score per row of ``X`` (higher is better), in the row order of ``X``.

        The candidates of each question are scored together, in their original order (``position``), so
        the scores do not depend on how the rows of ``X`` are ordered. ``predict`` leaves the estimator
        unchanged, so one fitted model can score in several threads at once.

        Parameters
        ----------
        X : pandas.DataFrame

        Returns
        -------
        ndarray of float64, shape (n_rows,)
        """
        import torch

        from .neural import question_batches, resolve_device, resolve_precision, to_device, torch_threads

        check_is_fitted(self, "module_")
        X = check_X(X)
        index = GroupIndex.from_frame(X)
        device = resolve_device(self.device)
        scores = np.empty(len(X), dtype=np.float64)
        with torch_threads(self.n_threads):
            encoded = _encode(X, index, self.lowercase, self._conv_padding(), vocabulary=self.vocabulary_)
            table = self.word_vectors_
            if len(encoded.new_words):
                table = np.concatenate([table, self._unseen_vectors(list(encoded.new_words))])
            table = _table(table)
            encoded.relate(table, device)
            module = self.module_.to(device)
            table = table.to(device, resolve_precision(self.precision, device))
            with torch.inference_mode():
                for groups_ in question_batches(np.arange(index.n_groups), max(int(self.batch_size), 64)):
                    batch = encoded.batch(groups_)
                    out = module(to_device(batch, device), table)
                    scores[batch["rows"].numpy()] = out.float().cpu().numpy()
        return scores

    # ------------------------------------------------------------------ helpers

    def _validate(self, X, y, groups):
        """Checked data and parameters, the device, the convolution's dtype and the word-vector source."""
        from .neural import resolve_device, resolve_precision

        self._check_params()
        X, y, index = check_ranking_data(X, y, groups)
        if (y < 0).any():
            raise ValueError("Cosinet needs non-negative relevance labels (0/1 or graded).")
        device = resolve_device(self.device)
        return X, y, index, device, resolve_precision(self.precision, device), load_word_vectors(self.embeddings)

    def _train_groups(self, index, y):
        """The questions training uses: all of them pointwise, those with a positive listwise."""
        if self.loss == "listwise":
            return np.flatnonzero(index.max(y) > 0)
        return np.arange(index.n_groups)

    def _init_module(self, dim):
        """Build the network (inside ``seeded``: its initialisation is random)."""
        self.module_config_ = {
            "dim": dim,
            "n_filters": int(self.n_filters),
            "kernel_size": int(self.kernel_size),
            "rnn": self.rnn,
            "rnn_hidden_size": self._rnn_hidden_size(),
            "dropout": float(self.dropout),
        }
        self.module_ = _make_module(**self.module_config_)
        self.n_params_ = int(sum(p.numel() for p in self.module_.parameters() if p.requires_grad))

    def _train(self, encoded, index, y, train_groups, rng, setup, dtype, state=None):
        """Run the training loop over ``train_groups``: ``fit`` (``state=None``) or one ``partial_fit`` pass."""
        from .neural import question_batches, train
        from .neural.distributed import LocalBatch

        device, shard = setup.device, setup.shard
        learning_rate = PAPER_LEARNING_RATES[self.loss] if self.learning_rate is None else self.learning_rate
        batch_size = int(self.batch_size)
        labels = y.astype(np.float32)
        table = _table(self.word_vectors_)
        encoded.relate(table, device)
        table = table.to(device, dtype)
        listwise = self.loss == "listwise"

        def batches(epoch):
            for groups_ in question_batches(train_groups, batch_size, rng):
                local, real = shard.split(groups_, groups_, sizes=index.sizes[groups_])
                rows = int(index.sizes[local].sum())
                # The loss averages over questions (listwise) or rows (pointwise).
                examples = len(local) if listwise else rows
                yield LocalBatch(encoded.batch(local, labels), rows if real else 0, examples if real else 0)

        return train(
            self.module_,
            batches,
            self._loss_fn(table),
            epochs=int(self.epochs) if state is None else 1,
            steps_per_epoch=-(-len(train_groups) // batch_size),
            learning_rate=float(learning_rate),
            device=device,
            schedule="slanted_triangular",
            warmup=float(self.warmup),
            max_grad_norm=self.max_grad_norm,
            verbose=bool(self.verbose),
            desc=f"Cosinet ({self.loss}, rnn={self.rnn})",
            precision=None,  # the convolution's dtype is the table's; everything else runs in float32
            accelerator=setup.accelerator,
            state=state,
        )

    def _check_params(self):
        if self.rnn is not None and self.rnn not in RNN_TYPES:
            raise ValueError(f"rnn must be None or one of {RNN_TYPES}, got {self.rnn!r}.")
        if self.loss not in LOSSES:
            raise ValueError(f"loss must be one of {LOSSES}, got {self.loss!r}.")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {self.precision!r}.")
        if self.oov not in OOV_POLICIES:
            raise ValueError(f"oov must be one of {OOV_POLICIES}, got {self.oov!r}.")
        for name in ("n_filters", "kernel_size", "epochs", "batch_size"):
            _check_int(name, getattr(self, name))
        if self.n_threads is not None:
            _check_int("n_threads", self.n_threads)
        if self.rnn_hidden_size is not None:
            _check_int("rnn_hidden_size", self.rnn_hidden_size)
        if not isinstance(self.dropout, Real) or not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be a float in [0, 1), got {self.dropout!r}.")
        if not isinstance(self.warmup, Real) or not 0.0 <= self.warmup <= 1.0:
            raise ValueError(f"warmup must be a float in [0, 1], got {self.warmup!r}.")
        for name in ("learning_rate", "max_grad_norm"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, Real) or not value > 0):
                raise ValueError(f"{name} must be a positive float or None, got {value!r}.")

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

    def _loss_fn(self, table):
        import torch

        from .neural import listwise_kl_loss

        if self.loss == "pointwise":

            def pointwise(module, batch):
                scores = module(batch, table)
                return torch.nn.functional.binary_cross_entropy_with_logits(scores, (batch["labels"] > 0).float())

            return pointwise

        def listwise(module, batch):
            scores = module(batch, table)
            grid, mask = _to_grid(scores, batch)
            labels, _ = _to_grid(batch["labels"], batch)
            return listwise_kl_loss(grid, labels, mask)

        return listwise

    def _unseen_vectors(self, words):
        """Vectors of words not seen in ``fit``, from the (re-resolved) source or the OOV policy."""
        from .embeddings import oov_vectors

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
            state["embeddings"] = self._fitted_keyed_vectors()
        return state

    def __setstate__(self, state):
        super().__setstate__(state)
        if isinstance(self.__dict__.get("module_"), dict):
            module = _make_module(**self.module_config_)
            module.load_state_dict(self.module_)
            module.eval()
            self.module_ = module

    def _module_from_state(self, name, state_dict):
        """The network rebuilt from its CPU weights (:meth:`from_pretrained`; ``name`` is ``"module_"``)."""
        module = _make_module(**self.module_config_)
        module.load_state_dict(state_dict)
        return module.eval()

    def _fitted_keyed_vectors(self):
        """A KeyedVectors of the fitted vocabulary that shares ``word_vectors_`` (stored once when pickled)."""
        from gensim.models import KeyedVectors

        kv = KeyedVectors(self.word_vectors_.shape[1])
        kv.index_to_key = list(self.vocabulary_)
        kv.key_to_index = {w: i for i, w in enumerate(kv.index_to_key)}
        kv.vectors = self.word_vectors_
        return kv

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = self.random_state is None
        return tags


def _check_int(name, value):
    if isinstance(value, bool) or not isinstance(value, Integral) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}.")


def _table(vectors: np.ndarray):
    """The lookup table of the network: row 0 is the zero padding vector, row ``i + 1`` is word ``i``."""
    import torch

    dim = vectors.shape[1]
    return torch.from_numpy(np.concatenate([np.zeros((1, dim), dtype=np.float32), vectors.astype(np.float32, copy=False)]))


def _to_grid(values, batch):
    """Scatter per-pair values into a (questions × max candidates) grid, with the mask of real slots."""
    import torch

    sizes = batch["sizes"]
    n_q, width = len(sizes), int(sizes.max())
    grid = values.new_zeros(n_q * width)
    grid[batch["slots"]] = values
    mask = torch.zeros(n_q * width, dtype=torch.bool, device=values.device)
    mask[batch["slots"]] = True
    return grid.view(n_q, width), mask.view(n_q, width)


class _Encoded:
    """Everything about a frame that does not change during training, computed once per ``fit``/``predict``:
    the word ids of every distinct text, the questions' padded row lists and, after :meth:`relate`, the
    word-relatedness features of every (question, candidate) text pair. :meth:`batch` turns a set of
    questions into tensors with whole-array numpy operations (no per-candidate Python loop).

    Attributes
    ----------
    rows : ndarray (n_groups, max_candidates)
        Row numbers of each question's candidates in original order, -1 padded.
    sizes : ndarray (n_groups,)
    q_text, c_text : ndarray (n_rows,)
        Text number of each row's question and candidate.
    text_pair : ndarray (n_rows,)
        Number of each row's distinct (question text, candidate text) pair.
    ids : ndarray (n_texts, max_len)
        Word ids (1-based into the table; 0 pads) of every distinct text.
    lengths : ndarray (n_texts,)
        Words per text (at least 1: an empty text is one padding word).
    new_words : ndarray of str
        Words not in the given vocabulary, with ids ``len(vocabulary) + 1 ...``.
    """

    def __init__(self, rows, sizes, q_text, c_text, ids, lengths, new_words, padding):
        self.rows, self.sizes, self.q_text, self.c_text = rows, sizes, q_text, c_text
        self.ids, self.lengths, self.new_words, self.padding = ids, lengths, new_words, padding
        n_texts = np.int64(len(lengths))
        _, first, self.text_pair = np.unique(q_text * n_texts + c_text, return_index=True, return_inverse=True)
        self.pair_q, self.pair_c = q_text[first], c_text[first]
        # Offsets of each text pair's features in the flat relatedness arrays.
        self.q_offsets = np.concatenate(([0], np.cumsum(lengths[self.pair_q])))
        self.c_offsets = np.concatenate(([0], np.cumsum(lengths[self.pair_c])))

    def relate(self, table, device, budget=1 << 23):
        """Word-relatedness features of every distinct text pair (they depend only on the frozen vectors,
        so they are computed once, not per epoch).

        For each question word, its highest cosine similarity to a word of the candidate; for each
        candidate word, its highest to a word of the question (the paper's ``r_i = max_j r_ij``).

        Parameters
        ----------
        table : Tensor (n_words + 1, dim)
            The word vectors, row 0 the zero padding vector (cosine 0 with everything).
        device : torch.device
        budget : int
            Largest number of floats in one chunk's gathered vectors.
        """
        import torch

        unit = torch.nn.functional.normalize(table.to(device), dim=1)
        self.r_q = np.empty(self.q_offsets[-1], dtype=np.float32)
        self.r_c = np.empty(self.c_offsets[-1], dtype=np.float32)
        q_len, c_len = self.lengths[self.pair_q], self.lengths[self.pair_c]
        # Chunks of pairs with similar candidate lengths keep the padding small.
        order = np.lexsort((q_len, c_len))
        floats_per_word = unit.shape[1]
        cost = (c_len[order] + int(q_len.max())) * floats_per_word  # floats gathered per pair, ascending
        start = 0
        with torch.no_grad():
            while start < len(order):
                # Size the chunk by its longest (last) pair: first guess from the first pair, then shrink.
                stop = min(len(order), start + max(1, budget // int(cost[start])))
                stop = min(stop, start + max(1, budget // int(cost[stop - 1])))
                chunk = order[start:stop]
                self._relate_chunk(chunk, unit, q_len[chunk], c_len[chunk], device)
                start = stop

    def _relate_chunk(self, chunk, unit, q_len, c_len, device):
        import torch

        wq, wc = int(q_len.max()), int(c_len.max())
        q_real = np.arange(wq) < q_len[:, None]
        c_real = np.arange(wc) < c_len[:, None]
        q_ids = torch.from_numpy(self.ids[self.pair_q[chunk], :wq]).to(device)
        c_ids = torch.from_numpy(self.ids[self.pair_c[chunk], :wc]).to(device)
        cosine = torch.bmm(unit[q_ids], unit[c_ids].transpose(1, 2))
        q_mask = torch.from_numpy(q_real).to(device)
        c_mask = torch.from_numpy(c_real).to(device)
        r_q = cosine.masked_fill(~c_mask[:, None, :], float("-inf")).amax(dim=2)
        r_c = cosine.masked_fill(~q_mask[:, :, None], float("-inf")).amax(dim=1)
        self.r_q[(self.q_offsets[chunk][:, None] + np.arange(wq))[q_real]] = r_q.cpu().numpy()[q_real]
        self.r_c[(self.c_offsets[chunk][:, None] + np.arange(wc))[c_real]] = r_c.cpu().numpy()[c_real]

    def batch(self, groups, labels=None) -> dict:
        """Tensors of the questions ``groups``.

        ``slots`` place the pairs (question by question, in position order) in the padded
        (question × candidate) grid; per side, ``stream`` holds the words of the batch's distinct texts
        for the convolution, ``tokens`` the convolution output row of every word of every pair,
        ``windows`` the relatedness values under the kernel at that word, and ``lengths`` the words per
        pair (for the max pooling).
        """
        import torch

        sizes = self.sizes[groups]
        width = int(sizes.max())
        grid = self.rows[groups, :width]
        real = grid >= 0
        rows = grid[real]
        pairs = self.text_pair[rows]
        batch = {"rows": torch.from_numpy(rows), "slots": torch.from_numpy(np.flatnonzero(real.ravel())), "sizes": sizes}
        for side, texts, features, offsets in (
            ("q", self.q_text[rows], self.r_q, self.q_offsets),
            ("c", self.c_text[rows], self.r_c, self.c_offsets),
        ):
            distinct, pair_text = np.unique(texts, return_inverse=True)
            stream, positions = self._stream(distinct)
            lengths = self.lengths[texts]
            token_pair = np.repeat(np.arange(len(rows)), lengths)
            token_at = ragged_arange(lengths)
            values = features[offsets[pairs][token_pair] + token_at]
            batch[f"{side}_stream"] = torch.from_numpy(stream)
            batch[f"{side}_tokens"] = torch.from_numpy(positions[pair_text.ravel()[token_pair], token_at])
            batch[f"{side}_windows"] = torch.from_numpy(self._windows(values, lengths, token_pair, token_at))
            batch[f"{side}_lengths"] = torch.from_numpy(lengths)
        if labels is not None:
            batch["labels"] = torch.from_numpy(labels[rows])
        return batch

    def _stream(self, texts):
        """The words of ``texts`` packed into one stream for the convolution.

        Every text is followed by ``gap`` padding words, as many as the kernel reaches on either side, so
        a window never sees two texts and no compute is spent on padding. ``positions[i, t]`` is the
        convolution output row of word ``t`` of text ``i``.
        """
        left, right = self.padding
        gap = max(left, right)
        lengths = self.lengths[texts]
        width = int(lengths.max())
        real = np.arange(width) < lengths[:, None]
        starts = left + np.concatenate(([0], np.cumsum(lengths + gap)[:-1]))
        where = starts[:, None] + np.arange(width)
        stream = np.zeros(left + int((lengths + gap).sum()), dtype=np.int64)
        stream[where[real]] = self.ids[texts, :width][real]
        return stream, np.where(real, where - left, 0)

    def _windows(self, values, lengths, token_pair, token_at):
        """Relatedness values under the kernel at every word of every pair (zero beyond the text), shape
        (n_words, kernel_size)."""
        left, right = self.padding
        gap = max(left, right)
        starts = left + np.concatenate(([0], np.cumsum(lengths + gap)[:-1]))
        stream = np.zeros(left + int((lengths + gap).sum()), dtype=np.float32)
        at = starts[token_pair] + token_at
        stream[at] = values
        return stream[(at - left)[:, None] + np.arange(left + right + 1)]


def _encode(X, index, lowercase, padding, vocabulary=None) -> _Encoded:
    """Tokenise every distinct text of ``X`` once and map the words to table ids.

    With ``vocabulary`` (the fitted words), known words keep their ids and the others are appended as
    ``new_words``; without it every word is new.
    """
    from .neural import padded_groups

    n = len(X)
    codes, texts = pd.factorize(np.concatenate([X["question"].to_numpy(object), X["candidate"].to_numpy(object)]))
    tokens = tokenize(list(texts), lower=lowercase)
    counts = np.fromiter((len(t) for t in tokens), dtype=np.int64, count=len(tokens))
    flat = pd.Series([w for t in tokens for w in t], dtype=object)
    known = np.asarray(pd.Index(vocabulary if vocabulary is not None else [], dtype=object).get_indexer(flat))
    new_codes, new_words = pd.factorize(flat[known < 0])
    word_ids = known + 1
    word_ids[known < 0] = (0 if vocabulary is None else len(vocabulary)) + 1 + new_codes
    lengths = np.maximum(counts, 1)
    ids = np.zeros((len(tokens), int(lengths.max())), dtype=np.int64)
    text_of_word = np.repeat(np.arange(len(tokens)), counts)
    ids[text_of_word, ragged_arange(counts)] = word_ids
    return _Encoded(
        rows=padded_groups(index.offsets, index.order),
        sizes=index.sizes,
        q_text=codes[:n].astype(np.int64),
        c_text=codes[n:].astype(np.int64),
        ids=ids,
        lengths=lengths,
        new_words=np.asarray(new_words, dtype=object),
        padding=padding,
    )


def _make_module(**config):
    """Build the network from its configuration (``module_config_``)."""
    return _network_class()(**config)


@lru_cache(maxsize=1)
def _network_class():
    """The network class, defined on first use so that importing as2rank does not import torch."""
    import torch
    from torch import nn
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    class CosinetNetwork(nn.Module):
        """Per-side convolution over [word vector ; relatedness] with max pooling, the pair
        representation, an optional RNN over the candidate list and a linear scorer. ``forward`` returns
        one score per pair of the batch."""

        def __init__(self, dim, n_filters, kernel_size, rnn, rnn_hidden_size, dropout):
            super().__init__()
            self.dim = dim
            # One convolution per side over [word vector ; relatedness]: the paper's layers and parameter
            # count. They are applied factorised (see _pool) but stored as ordinary Conv1d weights.
            self.q_conv = nn.Conv1d(dim + 1, n_filters, kernel_size)
            self.c_conv = nn.Conv1d(dim + 1, n_filters, kernel_size)
            self.dropout = nn.Dropout(dropout)
            pair_size = 2 * n_filters
            if rnn is None:
                self.rnn = None
                out_size = pair_size
            else:
                layer = nn.LSTM if rnn.endswith("lstm") else nn.RNN
                bidirectional = rnn.startswith("bi")
                self.rnn = layer(pair_size, rnn_hidden_size, batch_first=True, bidirectional=bidirectional)
                out_size = rnn_hidden_size * (2 if bidirectional else 1)
            self.scorer = nn.Linear(out_size, 1)

        def _pool(self, table, conv, stream, tokens, windows, lengths):
            """Convolution over ``[vector ; relatedness]`` and max pooling, one row per pair.

            The convolution is linear in its input channels, so it is computed as the sum of two parts:
            the word-vector channels once per distinct text of the batch (a question shared by all its
            candidates is convolved once, on a packed stream without padding), the relatedness channel,
            which depends on the pair, at every word of every pair.
            """
            weight = conv.weight  # (filters, dim + 1, kernel)
            filters, _, k = weight.shape
            if table.dtype != torch.float32:
                # oneDNN builds and keeps a bfloat16 kernel for every new matrix shape (about 0.5 MB each, up to
                # its cache sizes): padding the stream with the zero word to one of 8 lengths per octave (at most
                # 1/8 more rows) keeps memory flat over a long stream of batches (benchmarks/scale.py). The
                # padded positions are never read back.
                positions = len(stream) - k + 1
                step = 1 << max(0, positions.bit_length() - 4)
                stream = torch.nn.functional.pad(stream, (0, -positions % step))
            windows_e = table[stream].unfold(0, k, 1)  # (stream positions, dim, kernel)
            word_weight = weight[:, : self.dim, :].reshape(filters, -1).to(table.dtype)
            by_text = (windows_e.reshape(len(windows_e), -1) @ word_weight.T).float()
            # The rows are gathered by embedding(), not by_text[tokens]: a word of a question is read once per
            # candidate, and the backward pass of indexing sums those repeated rows' gradients with atomic
            # adds from several threads (CPU float32, large enough tensors), in an order that depends on
            # thread timing and so on the machine's load. embedding's backward adds them in token order
            # whatever the threads, which keeps fit reproducible bit for bit.
            hidden = torch.nn.functional.embedding(tokens, by_text) + windows @ weight[:, self.dim, :].T
            # ReLU commutes with the max, so it is applied once per pooled value.
            pooled = torch.segment_reduce(hidden, "max", lengths=lengths, axis=0)
            return torch.relu(pooled + conv.bias)

        def forward(self, batch, table):
            """Scores of ``batch``; ``table`` holds the frozen word vectors (row 0 = padding) on the module's
            device, in the precision of the convolution's matrix product. It is an argument, not module
            state, so that one fitted module can score in several threads at once (a Dask worker)."""
            q = self._pool(table, self.q_conv, batch["q_stream"], batch["q_tokens"], batch["q_windows"], batch["q_lengths"])
            c = self._pool(table, self.c_conv, batch["c_stream"], batch["c_tokens"], batch["c_windows"], batch["c_lengths"])
            pairs = self.dropout(torch.cat([q * c, q - c], dim=1))
            if self.rnn is not None:
                sizes = batch["sizes"]
                n_q, width = len(sizes), int(sizes.max())
                grid = pairs.new_zeros(n_q * width, pairs.shape[1])
                grid[batch["slots"]] = pairs
                # Packing keeps padded slots out of the recurrence (the backward direction starts at
                # each question's last real candidate).
                packed = pack_padded_sequence(
                    grid.view(n_q, width, -1), torch.as_tensor(sizes), batch_first=True, enforce_sorted=False
                )
                out, _ = self.rnn(packed)
                out, _ = pad_packed_sequence(out, batch_first=True, total_length=width)
                pairs = out.reshape(n_q * width, -1)[batch["slots"]]
            return self.scorer(pairs).squeeze(1)

    return CosinetNetwork
