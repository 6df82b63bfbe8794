"""CERBERUS (Matsubara, Lind, Soldaini & Moschitti, 2022): an ensemble of heterogeneous rankers distilled into
one multi-head transformer, and the baselines it is measured against.

* :class:`Cerberus`: a shared body of ``body_layers`` transformer blocks and one ranking head per teacher
  (``head_layers`` blocks, initialised as copies of the pretrained blocks above the body, and a classifier);
  head ``i`` learns from teacher ``i`` with the distillation loss of Hinton et al. (the paper's Eq. 1), the
  total loss is ``Σ λ_i L_i`` (Eq. 4), and the score is the mean of the heads' logits (Eq. 5). The body runs
  once per input and the heads run together, from stacked weights
  (:class:`~as2rank.neural.distillation.CerberusEncoder`). Hydra (Tran et al., 2020) is this model with
  teachers of one architecture trained with different seeds.
* :class:`DistilledRanker`: a :class:`~as2rank.transformer.TransformerRanker` (one head) distilled from one
  teacher, or from several by summing their losses (KD_Sum) or switching teacher every mini-batch
  (KD_RR). The same student without a teacher is :class:`~as2rank.transformer.TransformerRanker` itself.
* :class:`LinearEnsemble`: a weighted sum of fitted rankers' calibrated scores, the weights tuned on held-out
  data (the paper's "ensemble of BASE models").
* :func:`teacher_logits`: the teachers' scores turned into calibrated logits, as the students see them.

**Teachers** are fitted as2rank rankers of any family (a transformer of any backbone, ``Cosinet``, a lexical
``PointwiseRanker`` pipeline, ...), the name of a column of ``X`` holding precomputed scores (it travels with
the rows through cross-validation), or an array of precomputed scores (one per row of the ``X`` given to
``fit``). Only ``fit`` reads them; a fitted student predicts without them, and clones of a student share them
(they are not refitted, as with :class:`sklearn.frozen.FrozenEstimator`).

**Calibration.** A ranker's score is not a logit on a common scale (an overlap count is not a probability;
a cross-encoder's logit and a Cosinet score differ in scale), while Eq. 1 compares softened probabilities.
Each teacher's scores are mapped to logits by Platt scaling fitted on the training data: ``a · score + b``
with ``a, b`` minimising the cross-entropy against Platt's smoothed targets ``(N₊ + 1)/(N₊ + 2)`` for
positives and ``1/(N₋ + 2)`` for negatives. The map is monotone (a teacher's ranking is kept) and puts every
teacher on the scale of log-odds of relevance.

**Teachers scoring their own training data.** A teacher fitted on the student's training data scores it
better than it would score new data: a cross-encoder that memorised it separates positives from negatives
almost perfectly, so its soft targets carry little more than the labels. Two things address it. Platt's
smoothed targets keep the slope finite even when a teacher separates the data perfectly. And
``teacher_cv=k`` cross-fits: clones of each teacher are fitted on ``k − 1`` question folds (``GroupKFold``)
and score the held-out fold, each fold calibrated on its own, so every training row gets the score of a
teacher that never saw it (as ``StackingClassifier(cv=...)`` does); this costs ``k`` fits per teacher. With
``teacher_cv=None`` (the default, and the paper's practice) the fitted teachers score the training data
directly. ``benchmarks/cerberus.py`` measures both on WikiQA.
"""

from __future__ import annotations

import copy
import itertools

import numpy as np
from sklearn.base import BaseEstimator, clone
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_is_fitted

from .base import RankerMixin
from .data import check_ranking_data, check_X
from .metrics import get_scorer
from .persistence import PersistenceMixin
from .transformer import TransformerRanker, _check_number, _TransformerEstimator

__all__ = ["Cerberus", "DistilledRanker", "LinearEnsemble", "platt_scaling", "teacher_logits"]

#: Values of ``DistilledRanker(multi_teacher=...)``.
MULTI_TEACHER = ("sum", "round_robin")


# ----------------------------------------------------------------------------------------------- teachers
def platt_scaling(scores, y) -> tuple:
    """Slope and intercept mapping ``scores`` to calibrated logits of relevance (Platt, 1999).

    Minimises the logistic loss of ``a · score + b`` against Platt's smoothed targets (``(N₊ + 1)/(N₊ + 2)``
    for positives, ``1/(N₋ + 2)`` for negatives), which keep ``a`` finite when the scores separate the
    classes perfectly.

    Parameters
    ----------
    scores : array-like of shape (n,)
    y : array-like of shape (n,)
        Labels; > 0 is a positive.

    Returns
    -------
    a, b : float

    Raises
    ------
    ValueError
        If ``y`` holds only positives or only negatives, or a score is not finite.
    """
    from scipy.optimize import minimize
    from scipy.special import expit

    scores = np.asarray(scores, dtype=np.float64)
    positive = np.asarray(y) > 0
    if not np.isfinite(scores).all():
        raise ValueError("Teacher scores must be finite numbers.")
    n_pos = int(positive.sum())
    n_neg = len(positive) - n_pos
    if n_pos == 0 or n_neg == 0:
        raise ValueError("Calibrating teacher scores needs positive and negative labels in the data (or fold).")
    target = np.where(positive, (n_pos + 1) / (n_pos + 2), 1 / (n_neg + 2))
    mean, std = scores.mean(), scores.std()
    if std == 0:  # a constant teacher: only the prior is left
        return 0.0, float(np.log((n_pos + 1) / (n_neg + 1)))
    z = (scores - mean) / std  # standardised, so one starting point suits every scale

    def loss(ab):
        logit = ab[0] * z + ab[1]
        residual = expit(logit) - target
        return np.sum(np.logaddexp(0.0, logit) - target * logit), np.array([residual @ z, residual.sum()])

    a, b = minimize(loss, x0=np.zeros(2), jac=True, method="L-BFGS-B").x
    return float(a / std), float(b - a * mean / std)


def _is_model(teacher) -> bool:
    return hasattr(teacher, "fit") and hasattr(teacher, "predict")


def _check_teachers(teachers) -> None:
    if not isinstance(teachers, (list, tuple)) or not teachers:
        raise ValueError(
            f"teachers must be a non-empty list of fitted rankers, column names of X or score arrays, got {teachers!r}."
        )
    for j, teacher in enumerate(teachers):
        if isinstance(teacher, str) or _is_model(teacher):
            continue
        try:
            ok = np.asarray(teacher, dtype=np.float64).ndim == 1
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise ValueError(
                f"teachers[{j}] must be a fitted ranker, the name of a column of X or a 1-D array of scores, "
                f"got {type(teacher).__name__}."
            )


def _check_cv(cv) -> None:
    if cv is None or hasattr(cv, "split"):
        return
    if isinstance(cv, bool) or not isinstance(cv, (int, np.integer)) or cv < 2:
        raise ValueError(f"teacher_cv must be None, an integer >= 2 or a group splitter, got {cv!r}.")


def _given_scores(j, teacher, X) -> np.ndarray:
    """Precomputed scores of teacher ``j``: a column of ``X`` or an array aligned with its rows."""
    if isinstance(teacher, str):
        if teacher not in X.columns:
            raise ValueError(f"teachers[{j}] names the column {teacher!r}, which X does not have.")
        column = X[teacher]
        if not np.issubdtype(column.dtype, np.number):
            raise ValueError(f"teachers[{j}]: column {teacher!r} of X is not numeric.")
        return column.to_numpy(dtype=np.float64)
    scores = np.asarray(teacher, dtype=np.float64)
    if len(scores) != len(X):
        raise ValueError(
            f"teachers[{j}] has {len(scores)} scores for {len(X)} rows of X; precomputed scores need one per row "
            "(under cross-validation, put them in a column of X and pass its name)."
        )
    return scores


def _fitted_scores(j, teacher, X) -> np.ndarray:
    try:
        check_is_fitted(teacher)
    except NotFittedError as exc:
        raise NotFittedError(
            f"teachers[{j}] ({type(teacher).__name__}) is not fitted: fit it first, or set teacher_cv to fit "
            "clones of it on cross-validation folds."
        ) from exc
    return np.asarray(teacher.predict(X), dtype=np.float64)


def teacher_logits(teachers, X, y, groups=None, cv=None) -> np.ndarray:
    """Each teacher's scores of ``X`` as calibrated logits (Platt scaling, see the module docstring).

    Parameters
    ----------
    teachers : list
        Fitted rankers, names of columns of ``X`` holding precomputed scores, or arrays of one score per row.
    X : pandas.DataFrame
        Grouped-candidate frame.
    y : array-like of shape (n_rows,)
        Labels, for the calibration.
    groups : array-like of shape (n_rows,), default=None
        Question ids overriding ``X["qid"]`` (teachers then see them as ``qid``).
    cv : None, int or group splitter, default=None
        ``None``: the fitted teachers score ``X``. An integer ``k`` (``GroupKFold(k)``) or a splitter whose
        ``split(X, y, groups)`` keeps questions whole: clones of each ranker teacher are fitted on the other
        folds and score each fold (cross-fitting), each fold calibrated on its own. Precomputed scores are used
        as given either way.

    Returns
    -------
    ndarray of float64 of shape (n_rows, n_teachers)
    """
    from sklearn.model_selection import GroupKFold

    X, y, index = check_ranking_data(X, y, groups)
    _check_teachers(teachers)
    _check_cv(cv)
    if groups is not None:
        X = X.assign(qid=np.asarray(groups))
    out = np.empty((len(X), len(teachers)))
    folds = None
    for j, teacher in enumerate(teachers):
        if not _is_model(teacher):
            scores = _given_scores(j, teacher, X)
        elif cv is None:
            scores = _fitted_scores(j, teacher, X)
        else:
            if folds is None:
                splitter = GroupKFold(n_splits=int(cv)) if not hasattr(cv, "split") else cv
                folds = list(splitter.split(X, y, index.codes))
            for train, test in folds:
                fold_scores = np.asarray(clone(teacher).fit(X.iloc[train], y[train]).predict(X.iloc[test]), dtype=np.float64)
                a, b = platt_scaling(fold_scores, y[test])
                out[test, j] = a * fold_scores + b
            continue
        a, b = platt_scaling(scores, y)
        out[:, j] = a * scores + b
    return out


def _clone_sharing(estimator, name):
    """A clone of ``estimator`` whose parameter ``name`` (fitted models that fit only reads) is shared with
    the original instead of being replaced by unfitted copies, as :class:`sklearn.frozen.FrozenEstimator`
    would have it; every other parameter is cloned as :func:`sklearn.base.clone` does."""
    params = {k: v if k == name else clone(v, safe=False) for k, v in estimator.get_params(deep=False).items()}
    new = type(estimator)(**params)
    if hasattr(estimator, "_metadata_request"):
        new._metadata_request = copy.deepcopy(estimator._metadata_request)
    return new


class _Distillation:
    """What the distilled students share: teachers, their calibrated logits as training targets, Eq. 1."""

    # Teacher logits are calibrated on the whole training set: no chunked training.
    _streamable = False

    _unsaved_params = ("model", "tokenizer", "teachers", "teacher_cv")

    def _check_distillation_params(self):
        _check_teachers(self.teachers)
        _check_number("kd_alpha", self.kd_alpha, 0, 1)
        _check_number("temperature", self.temperature, 0, low_open=True)
        _check_cv(self.teacher_cv)

    def fit(self, X, y, groups=None, eval_set=None):
        """Score the training data with the teachers, then train the student (see the class docstring).

        Parameters
        ----------
        X : pandas.DataFrame
            Grouped-candidate frame (with the teachers' score columns, if any teacher names one).
        y : array-like of shape (n_rows,)
            Relevance labels; a label > 0 is a positive.
        groups : array-like of shape (n_rows,), default=None
            Question ids overriding ``X["qid"]``.
        eval_set : tuple (X_dev, y_dev), default=None
            Dev set for early stopping on dev MAP (best weights restored); overrides ``validation_fraction``.

        Returns
        -------
        self
        """
        X, y, _ = check_ranking_data(X, y, groups)
        self._check_params()
        self._teacher_logits = teacher_logits(self.teachers, X, y, groups, self.teacher_cv).astype(np.float32)
        self._batch_counter = itertools.count()
        try:
            return super().fit(X, y, groups=groups, eval_set=eval_set)
        finally:
            del self._teacher_logits, self._batch_counter

    def _row_targets(self, X, y, index):
        return {"teacher_logits": self._teacher_logits}

    def __sklearn_clone__(self):
        return _clone_sharing(self, "teachers")

    def __sklearn_tags__(self):
        from sklearn.utils import get_tags

        tags = super().__sklearn_tags__()
        # With teacher_cv, fit also fits clones of the ranker teachers: as repeatable as the least repeatable one.
        if self.teacher_cv is not None and isinstance(self.teachers, (list, tuple)):
            tags.non_deterministic = tags.non_deterministic or any(
                get_tags(t).non_deterministic for t in self.teachers if _is_model(t) and hasattr(t, "__sklearn_tags__")
            )
        return tags


# ----------------------------------------------------------------------------------------------- Cerberus
class Cerberus(_Distillation, _TransformerEstimator):
    """CERBERUS (Matsubara et al., 2022, §3.3): one transformer with a shared body and one ranking head per
    teacher, each head distilled from its own teacher.

    The first ``body_layers`` blocks of the pretrained encoder (``model``) form the shared body; each of the
    ``k = len(teachers)`` heads starts as a copy of the next ``head_layers`` blocks (deeper blocks are
    dropped) and ends in its own classifier (dropout, dense + tanh, dropout, dense → 1 logit, randomly
    initialised, reading the pooled encoding as :class:`~as2rank.transformer.TransformerRanker` does). The
    paper's notation is B_b kH_h: its best, B11 3H1 of a 12-layer model, is ``body_layers=5, head_layers=1``
    on the 6-layer default backbone (the default: ``head_layers=1``, the body takes the rest).

    Training: head ``i`` gets the distillation loss of Eq. 1 against teacher ``i``'s calibrated logits ``t``
    (see :mod:`as2rank.cerberus`),
    ``L_i = α · BCE(s_i, y) + (1 − α) · τ² · KL(σ(t/τ) ‖ σ(s_i/τ))`` (the two-class softmax of one logit is
    the sigmoid), and the loss is ``Σ λ_i L_i`` (Eq. 4, ``head_weights``): each head is moved by its own loss
    only, the body by all of them. Optimisation as in :class:`~as2rank.transformer.TransformerRanker`
    (AdamW, linear warm-up and decay, the classifiers at ``head_lr_multiplier × learning_rate``; the head
    blocks, copies of pretrained ones, at ``learning_rate``).

    Inference: the body runs once per input; the heads run together as one batched computation over its
    output (stacked weights, :class:`~as2rank.neural.distillation.CerberusEncoder`); the score is the mean of
    the heads' logits (Eq. 5). :meth:`predict_heads` gives each head's logit.

    **Hydra** (Tran et al., 2020; the paper's row 13) is this model with teachers of one architecture trained
    with different seeds, e.g. ``teachers=[TransformerRanker(random_state=s).fit(X, y) for s in range(3)]``.

    Parameters
    ----------
    model : str or transformers.PretrainedConfig, default="minilm-l6"
        A BERT-style encoder (BERT, MiniLM, RoBERTa, XLM-R, CamemBERT, ELECTRA): an alias, a local path, a
        Hugging Face id, or a config for a randomly initialised encoder.
    teachers : list, default=None
        Required: one entry per head, each a fitted as2rank ranker of any family, the name of a column of
        ``X`` with precomputed scores, or an array of one precomputed score per training row (see
        :mod:`as2rank.cerberus`). Only ``fit`` uses them.
    body_layers : int, default=None
        Blocks of the shared body, >= 1; ``None`` takes every block below the heads (``depth − head_layers``).
    head_layers : int, default=1
        Blocks of each head, >= 1; ``body_layers + head_layers`` may not exceed the encoder's depth.
    kd_alpha : float, default=0.5
        α of Eq. 1 in [0, 1]: the weight of the label loss (1 ignores the teachers). The paper tunes it in
        {0, 0.1, 0.5, 0.9}; 0.5 is the middle.
    temperature : float, default=3.0
        τ of Eq. 1, > 0. The paper tunes it in {1, 3, 5}; 3 is the middle.
    head_weights : sequence of float, default=None
        λ_i of Eq. 4, one non-negative weight per head (``None``: all 1, as the paper).
    teacher_cv : None, int or group splitter, default=None
        ``None``: the fitted teachers score the training data. An integer ``k`` or a splitter: each ranker
        teacher is cross-fitted (clones fitted on ``k − 1`` question folds score the held-out fold), so the
        targets come from teachers that did not see the rows; ranker teachers then need not be fitted. See
        :func:`teacher_logits`.
    tokenizer, pooling, max_length, epochs, batch_size, learning_rate, head_lr_multiplier, weight_decay, \
warmup, max_grad_norm, early_stopping, validation_fraction, patience, eval_every, warm_start, freeze_embeddings, batch_tokens, \
device, precision, n_threads, reuse_fit, random_state, verbose
        As in :class:`~as2rank.transformer.TransformerRanker`, but ``epochs=2`` and ``learning_rate=2e-5`` are
        this class's defaults (the defaults benchmark has measured only ``TransformerRanker`` so far); early
        stopping watches the dev MAP of the mean of the heads. With ``precision="int8"`` the body's linear
        layers are quantized and the stacked heads run in float32.

    Attributes
    ----------
    model_ : torch.nn.Module
        A :class:`~as2rank.neural.distillation.CerberusEncoder`: ``model_.encoder`` (the body),
        ``model_.heads`` (stacked blocks), ``model_.classifiers`` (stacked classifiers).
    tokenizer_ : transformers.PreTrainedTokenizerBase
    body_layers_, head_layers_, n_heads_ : int
    n_layers_ : int
        Blocks on the path of one input through one head (``body_layers_ + head_layers_``).
    pooling_ : {"cls", "mean"}
    history_ : as2rank.neural.TrainingHistory
    fit_cache_hit_ : bool
        Whether the last ``fit`` reused an identical earlier fit's weights (``reuse_fit``; the key holds the
        teachers' calibrated logits), as in :class:`~as2rank.transformer.TransformerRanker`.

    Examples
    --------
    >>> from sklearn.linear_model import LogisticRegression
    >>> from sklearn.pipeline import make_pipeline
    >>> from as2rank import Cerberus, Cosinet, LexicalFeatures, PointwiseRanker, TransformerRanker
    >>> teachers = [TransformerRanker(random_state=0).fit(X, y), Cosinet(random_state=0).fit(X, y),
    ...             make_pipeline(LexicalFeatures(), PointwiseRanker(LogisticRegression())).fit(X, y)]  # doctest: +SKIP
    >>> student = Cerberus(teachers=teachers, body_layers=5, head_layers=1, random_state=0).fit(X, y)  # doctest: +SKIP
    >>> student.predict(X_test)  # doctest: +SKIP
    """

    _head_modules = ("classifiers",)

    def __init__(
        self,
        model="minilm-l6",
        teachers=None,
        body_layers=None,
        head_layers=1,
        kd_alpha=0.5,
        temperature=3.0,
        head_weights=None,
        teacher_cv=None,
        tokenizer=None,
        pooling="auto",
        max_length=128,
        epochs=2,
        batch_size=32,
        learning_rate=2e-5,
        head_lr_multiplier=10.0,
        weight_decay=0.01,
        warmup=0.1,
        max_grad_norm=1.0,
        early_stopping="auto",
        validation_fraction=None,
        patience=2,
        eval_every=None,
        warm_start=False,
        freeze_embeddings=False,
        batch_tokens="auto",
        device="auto",
        precision="auto",
        n_threads=None,
        reuse_fit=True,
        random_state=None,
        verbose=False,
    ):
        self.model = model
        self.teachers = teachers
        self.body_layers = body_layers
        self.head_layers = head_layers
        self.kd_alpha = kd_alpha
        self.temperature = temperature
        self.head_weights = head_weights
        self.teacher_cv = teacher_cv
        self.tokenizer = tokenizer
        self.pooling = pooling
        self.max_length = max_length
        self.epochs = epochs
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.head_lr_multiplier = head_lr_multiplier
        self.weight_decay = weight_decay
        self.warmup = warmup
        self.max_grad_norm = max_grad_norm
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.patience = patience
        self.eval_every = eval_every
        self.warm_start = warm_start
        self.freeze_embeddings = freeze_embeddings
        self.batch_tokens = batch_tokens
        self.device = device
        self.precision = precision
        self.n_threads = n_threads
        self.reuse_fit = reuse_fit
        self.random_state = random_state
        self.verbose = verbose

    # ----------------------------------------------------------------- training hooks
    def _check_params(self):
        from .neural.backbone import POOLINGS

        self._check_common_params()
        self._check_distillation_params()
        _check_number("body_layers", self.body_layers, 1, integer=True, allow_none=True)
        _check_number("head_layers", self.head_layers, 1, integer=True)
        if self.pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {self.pooling!r}.")
        if self.warm_start and hasattr(self, "model_") and len(self.teachers) != self.n_heads_:
            raise ValueError(f"warm_start continues a model with {self.n_heads_} heads, but {len(self.teachers)} teachers were given.")
        self._weights()

    def _weights(self) -> np.ndarray:
        """λ of Eq. 4, validated against the number of teachers."""
        k = len(self.teachers)
        if self.head_weights is None:
            return np.ones(k)
        weights = np.asarray(self.head_weights, dtype=np.float64)
        if weights.shape != (k,) or not np.isfinite(weights).all() or (weights < 0).any() or weights.sum() <= 0:
            raise ValueError(
                f"head_weights must be {k} non-negative numbers (one per teacher), not all 0, got {self.head_weights!r}."
            )
        return weights

    def _prepare_encoder(self, encoder):
        from .neural.backbone import layer_list, native_pooling

        depth = len(layer_list(encoder))
        head = int(self.head_layers)
        body = depth - head if self.body_layers is None else int(self.body_layers)
        if body < 1 or body + head > depth:
            raise ValueError(
                f"body_layers={self.body_layers!r} and head_layers={self.head_layers!r} do not fit the encoder's "
                f"{depth} layers: the body needs >= 1 layer and body_layers + head_layers <= {depth}."
            )
        self.body_layers_, self.head_layers_, self.n_heads_ = body, head, len(self.teachers)
        self.n_layers_ = body + head
        self.pooling_ = native_pooling(self.model) if self.pooling == "auto" else self.pooling
        return encoder

    def _build_module(self, encoder):
        from .neural.distillation import CerberusEncoder

        return CerberusEncoder(encoder, self.body_layers_, self.head_layers_, self.n_heads_, self.pooling_)

    def _loss(self, module, batch):
        import torch

        from .neural.distillation import distillation_loss

        logits = module(batch)
        losses = distillation_loss(
            logits, batch["teacher_logits"], batch["labels"].unsqueeze(1), self.kd_alpha, self.temperature
        ).mean(dim=0)
        return (losses * torch.as_tensor(self._weights(), dtype=losses.dtype, device=losses.device)).sum()

    def _dev_scores(self, module, encoded, index, device):
        return self._head_logits(module, encoded, device).mean(axis=1)

    def _export_attrs(self):
        return {"n_layers_": self.n_layers_, "body_layers_": self.body_layers_, "head_layers_": self.head_layers_,
                "n_heads_": self.n_heads_, "pooling_": self.pooling_}

    def _import_attrs(self, attrs):
        for name, value in attrs.items():
            setattr(self, name, value)

    # ----------------------------------------------------------------- inference
    def _head_logits(self, module, encoded, device):
        import torch

        from .neural import autocast, to_device
        from .neural.backbone import batch_tensors, token_budget_batches

        n = len(encoded["lengths"])
        logits = np.empty((n, self.n_heads_), dtype=np.float64)
        batches = token_budget_batches(np.ones(n, dtype=np.int64), encoded["lengths"], self._batch_tokens(device))
        with torch.inference_mode(), autocast(device, self._compute_dtype(device)):
            for rows in self._progress(batches, len(batches), "predict"):
                logits[rows] = module(to_device(batch_tensors(encoded, rows), device)).float().cpu().numpy()
        return logits

    def predict_heads(self, X) -> np.ndarray:
        """The logit of every head for every row (``predict`` is their mean).

        Parameters
        ----------
        X : pandas.DataFrame
            Grouped-candidate frame.

        Returns
        -------
        ndarray of float64 of shape (n_rows, n_heads)
        """
        from .neural import resolve_device

        check_is_fitted(self, "model_")
        X = check_X(X)
        device = resolve_device(self.device)
        return self._head_logits(self._module_on(device), self._encode(X), device)

    def predict(self, X) -> np.ndarray:
        """One score per row: the mean of the heads' logits (Eq. 5), higher is better.

        Parameters
        ----------
        X : pandas.DataFrame
            Grouped-candidate frame.

        Returns
        -------
        ndarray of float64 of shape (n_rows,)
        """
        return self.predict_heads(X).mean(axis=1)


# ----------------------------------------------------------------------------------------------- KD baselines
class DistilledRanker(_Distillation, TransformerRanker):
    """A one-head transformer student distilled from one or several teachers (the KD baselines of the
    CERBERUS paper, §3.2 and §5.2).

    The student is a :class:`~as2rank.transformer.TransformerRanker` (same encoder, pooling and head, same
    parameters), trained with the distillation loss of Eq. 1 (see :class:`Cerberus`) instead of plain binary
    cross-entropy:

    * one teacher: single-teacher knowledge distillation;
    * several, ``multi_teacher="sum"`` (KD_Sum): the sum of the losses against every teacher on every
      mini-batch;
    * several, ``multi_teacher="round_robin"`` (KD_RR): mini-batch ``t`` learns from teacher ``t mod k``.

    The student without a teacher (the paper's "TANDA (no teacher)") is ``TransformerRanker`` with the same
    parameters; ``kd_alpha=1`` trains exactly like it.

    Parameters
    ----------
    model : str or transformers.PretrainedConfig, default="minilm-l6"
        As in :class:`~as2rank.transformer.TransformerRanker`.
    teachers : list, default=None
        Required; as in :class:`Cerberus`.
    multi_teacher : {"sum", "round_robin"}, default="sum"
        How several teachers combine (no effect with one).
    kd_alpha : float, default=0.5
    temperature : float, default=3.0
    teacher_cv : None, int or group splitter, default=None
        As in :class:`Cerberus`.
    tokenizer, num_layers, pooling, max_length, epochs, batch_size, learning_rate, head_lr_multiplier, \
weight_decay, warmup, max_grad_norm, early_stopping, validation_fraction, patience, eval_every, warm_start, freeze_embeddings, \
batch_tokens, device, precision, n_threads, reuse_fit, random_state, verbose
        As in :class:`~as2rank.transformer.TransformerRanker`, except the defaults ``epochs=2`` and
        ``learning_rate=2e-5`` (the defaults benchmark has not measured distillation yet).

    Attributes
    ----------
    model_, tokenizer_, n_layers_, pooling_, history_, fit_cache_hit_
        As in :class:`~as2rank.transformer.TransformerRanker` (the key of ``reuse_fit`` holds the teachers'
        calibrated logits).
    """

    def __init__(
        self,
        model="minilm-l6",
        teachers=None,
        multi_teacher="sum",
        kd_alpha=0.5,
        temperature=3.0,
        teacher_cv=None,
        tokenizer=None,
        num_layers=None,
        pooling="auto",
        max_length=128,
        epochs=2,
        batch_size=32,
        learning_rate=2e-5,
        head_lr_multiplier=10.0,
        weight_decay=0.01,
        warmup=0.1,
        max_grad_norm=1.0,
        early_stopping="auto",
        validation_fraction=None,
        patience=2,
        eval_every=None,
        warm_start=False,
        freeze_embeddings=False,
        batch_tokens="auto",
        device="auto",
        precision="auto",
        n_threads=None,
        reuse_fit=True,
        random_state=None,
        verbose=False,
    ):
        super().__init__(
            model=model, tokenizer=tokenizer, num_layers=num_layers, pooling=pooling, max_length=max_length,
            epochs=epochs, batch_size=batch_size, learning_rate=learning_rate,
            head_lr_multiplier=head_lr_multiplier, weight_decay=weight_decay, warmup=warmup,
            max_grad_norm=max_grad_norm, early_stopping=early_stopping,
            validation_fraction=validation_fraction, patience=patience,
            eval_every=eval_every, warm_start=warm_start, freeze_embeddings=freeze_embeddings,
            batch_tokens=batch_tokens, device=device, precision=precision, n_threads=n_threads, reuse_fit=reuse_fit,
            random_state=random_state, verbose=verbose,
        )
        self.teachers = teachers
        self.multi_teacher = multi_teacher
        self.kd_alpha = kd_alpha
        self.temperature = temperature
        self.teacher_cv = teacher_cv

    #: The student trains without TransformerRanker's lexical prior (distillation with it is unmeasured).
    lexical_prior = False

    def _check_params(self):
        super()._check_params()
        self._check_distillation_params()
        if self.multi_teacher not in MULTI_TEACHER:
            raise ValueError(f"multi_teacher must be one of {MULTI_TEACHER}, got {self.multi_teacher!r}.")

    def _training_batch_extra(self, rng):
        if self.multi_teacher != "round_robin":
            return {}
        return {"teacher": next(self._batch_counter) % self._teacher_logits.shape[1]}

    def _loss(self, module, batch):
        from .neural.distillation import distillation_loss

        logits, teachers, labels = module(batch), batch["teacher_logits"], batch["labels"]
        if "teacher" in batch:
            return distillation_loss(logits, teachers[:, batch["teacher"]], labels, self.kd_alpha, self.temperature).mean()
        losses = distillation_loss(logits.unsqueeze(1), teachers, labels.unsqueeze(1), self.kd_alpha, self.temperature)
        return losses.mean(dim=0).sum()


# ----------------------------------------------------------------------------------------------- ensembles
class LinearEnsemble(PersistenceMixin, RankerMixin, BaseEstimator):
    """A weighted sum of fitted rankers' calibrated scores, the weights tuned on held-out data.

    ``fit(X_dev, y_dev)`` maps each ranker's scores to logits by Platt scaling on ``(X_dev, y_dev)`` (so
    rankers of different families share one scale, see :mod:`as2rank.cerberus`) and picks the weights: the
    point of the simplex grid ``{w : w_i = n_i / resolution, Σ w_i = 1}`` with the best ``metric`` on
    ``(X_dev, y_dev)``, ties going to the weights closest to uniform (the paper tuned its ensembles with
    Optuna; for a handful of rankers an exhaustive grid is as good and deterministic). The rankers are not
    refitted: fit them on the training data and pass held-out data to ``fit``. ``predict`` is
    ``Σ w_i (a_i · score_i + b_i)``.

    Parameters
    ----------
    rankers : list of fitted rankers, default=None
        Required; any fitted estimators with ``predict`` (clones of the ensemble share them).
    weights : sequence of float, default=None
        Fixed non-negative weights (normalised to sum 1) instead of tuned ones.
    metric : str, default="map"
        What the weights maximise: a name accepted by :func:`as2rank.metrics.get_scorer`.
    resolution : int, default=20
        Grid step ``1 / resolution``: ``C(resolution + k − 1, k − 1)`` candidates for ``k`` rankers (231 for
        three).

    Attributes
    ----------
    weights_ : ndarray of shape (n_rankers,)
    calibration_ : ndarray of shape (n_rankers, 2)
        Platt slope and intercept of each ranker.
    dev_score_ : float
        ``metric`` of the chosen weights on the data given to ``fit``.
    """

    def __init__(self, rankers=None, weights=None, metric="map", resolution=20):
        self.rankers = rankers
        self.weights = weights
        self.metric = metric
        self.resolution = resolution

    def _check_params(self):
        if not isinstance(self.rankers, (list, tuple)) or not self.rankers or not all(map(_is_model, self.rankers)):
            raise ValueError(f"rankers must be a non-empty list of fitted rankers, got {self.rankers!r}.")
        for j, ranker in enumerate(self.rankers):
            try:
                check_is_fitted(ranker)
            except NotFittedError as exc:
                name = type(ranker).__name__
                raise NotFittedError(f"rankers[{j}] ({name}) is not fitted; fit it on training data first.") from exc
        _check_number("resolution", self.resolution, 1, integer=True)
        if self.weights is not None:
            w = np.asarray(self.weights, dtype=np.float64)
            if w.shape != (len(self.rankers),) or not np.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
                raise ValueError(
                    f"weights must be {len(self.rankers)} non-negative numbers, not all 0, got {self.weights!r}."
                )

    def _scores(self, X) -> np.ndarray:
        return np.column_stack([np.asarray(r.predict(X), dtype=np.float64) for r in self.rankers])

    def fit(self, X, y, groups=None):
        """Calibrate each ranker and choose the weights on held-out data.

        Parameters
        ----------
        X : pandas.DataFrame
            Held-out grouped candidates (a dev split the rankers were not fitted on).
        y : array-like of shape (n_rows,)
        groups : array-like of shape (n_rows,), default=None
            Question ids overriding ``X["qid"]``.

        Returns
        -------
        self
        """
        X, y, index = check_ranking_data(X, y, groups, text_columns=())
        self._check_params()
        scorer = get_scorer(self.metric)
        scores = self._scores(X)
        self.calibration_ = np.array([platt_scaling(s, y) for s in scores.T])
        logits = scores * self.calibration_[:, 0] + self.calibration_[:, 1]
        k = len(self.rankers)
        if self.weights is not None:
            grid = np.asarray(self.weights, dtype=np.float64)[None] / np.sum(self.weights)
        else:
            grid = _simplex_grid(k, int(self.resolution))
        values = np.array([scorer.metric(y, logits @ w, index, **scorer.kwargs) for w in grid])
        best = np.flatnonzero(values >= values.max() - 1e-12)
        choice = best[np.argmin(np.linalg.norm(grid[best] - 1 / k, axis=1))]
        self.weights_, self.dev_score_ = grid[choice], float(values[choice])
        return self

    def predict(self, X) -> np.ndarray:
        """One score per row: the weighted sum of the rankers' calibrated logits.

        Parameters
        ----------
        X : pandas.DataFrame

        Returns
        -------
        ndarray of float64 of shape (n_rows,)
        """
        check_is_fitted(self, "weights_")
        X = check_X(X, text_columns=())
        return (self._scores(X) * self.calibration_[:, 0] + self.calibration_[:, 1]) @ self.weights_

    def __sklearn_clone__(self):
        return _clone_sharing(self, "rankers")


def _simplex_grid(k: int, resolution: int) -> np.ndarray:
    """Every weight vector of ``k`` multiples of ``1 / resolution`` summing to 1 (stars and bars)."""
    bars = np.array(list(itertools.combinations(range(resolution + k - 1), k - 1)), dtype=np.int64).reshape(-1, k - 1)
    edges = np.hstack([np.full((len(bars), 1), -1), bars, np.full((len(bars), 1), resolution + k - 1)])
    return (np.diff(edges, axis=1) - 1) / resolution
