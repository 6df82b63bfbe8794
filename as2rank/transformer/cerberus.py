"""CERBERUS (Matsubara, Lind, Soldaini & Moschitti, 2022): an ensemble of heterogeneous rankers distilled into
one multi-head transformer, and the one-head distilled students it is measured against.

* :class:`Cerberus`: a shared body of ``body_layers`` transformer blocks and one ranking head per teacher
  (``head_layers`` blocks, initialised as copies of the pretrained blocks above the body, and a classifier);
  head ``i`` learns from teacher ``i`` with the distillation loss of Hinton et al. (the paper's Eq. 1), the
  total loss is ``Σ λ_i L_i`` (Eq. 4), and the score is the mean of the heads' logits (Eq. 5). The body runs
  once per input and the heads run together, from stacked weights
  (:class:`~as2rank.transformer.distillation.CerberusEncoder`). Hydra (Tran et al., 2020) is this model with
  teachers of one architecture trained with different seeds.
* :class:`DistilledRanker`: a one-head cross-encoder (the student of
  :class:`~as2rank.transformer.ranker.TransformerRanker`: same encoder, pooling and head) distilled from one
  teacher, or from several by summing their losses (KD_Sum) or switching teacher every mini-batch (KD_RR).
  The same student without a teacher is :class:`~as2rank.transformer.ranker.TransformerRanker` itself.
* ``_Student``: the base of the two: the teachers, their calibrated logits as training targets, Eq. 1
  and the lexical prior.

The teachers (fitted rankers of any family, columns of ``X`` or arrays of precomputed scores) and how their
scores become calibrated logits (optionally cross-fitted with ``teacher_cv``) are in
:mod:`as2rank.ensemble.teachers` (:func:`~as2rank.ensemble.teachers.teacher_logits`), their Platt scaling in
:mod:`as2rank.ensemble.calibration` (:func:`~as2rank.ensemble.calibration.platt_scaling`); the paper's
"ensemble of BASE models" is :class:`~as2rank.ensemble.linear.LinearEnsemble`.

**Training targets.** The ``row_targets`` hook computes the teachers' calibrated logits once per ``fit``,
before training, so every training batch carries its rows' ``teacher_logits`` beside their labels; KD_RR
picks the teacher of a batch from the batch's number (its ``step``).
"""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np

from ..ensemble.teachers import CV_CONSTRAINTS, check_teachers, clone_sharing, is_model, teacher_logits
from ..params import POOLINGS, InstanceOf, Interval, Options, SequenceOf
from .scaffold import _TransformerEstimator

__all__ = ["Cerberus", "DistilledRanker"]

#: Values of ``DistilledRanker(multi_teacher=...)``.
MULTI_TEACHER = ("sum", "round_robin")

#: The distillation entries of the students' ``_parameter_constraints``.
_DISTILLATION_CONSTRAINTS = {
    # Required: None (the default) is refused by the teachers' own check (``_check_rules``), as are bad items.
    "teachers": [InstanceOf((list, tuple), "a non-empty list of fitted rankers, column names of X or score arrays"),
                 None],
    "kd_alpha": [Interval(Real, 0, 1)],
    "temperature": [Interval(Real, 0, None, closed="neither")],
    "teacher_cv": CV_CONSTRAINTS,
}


class _Student(_TransformerEstimator):
    """What the distilled students share: teachers, their calibrated logits as training targets, Eq. 1."""

    # Teacher logits are calibrated on the whole training set: no chunked training.
    streamable = False

    _unsaved_params = (*_TransformerEstimator._unsaved_params, "teachers", "teacher_cv")

    def _check_rules(self):
        super()._check_rules()
        check_teachers(self.teachers)

    def row_targets(self, X, y, index):
        """The teachers' calibrated logits of the training rows (teachers fitted on them first, or
        cross-fitted with ``teacher_cv``).

        Returns
        -------
        dict
            ``{"teacher_logits": ndarray of float32 of shape (n_rows, n_teachers)}``.
        """
        qid = np.asarray(index.keys)[index.codes]  # the question keys fit validated (``groups`` or ``X["qid"]``)
        return {"teacher_logits": teacher_logits(self.teachers, X, y, qid, self.teacher_cv).astype(np.float32)}

    def __sklearn_clone__(self):
        return clone_sharing(self, "teachers")

    def __sklearn_tags__(self):
        from sklearn.utils import get_tags

        tags = super().__sklearn_tags__()
        # With teacher_cv, fit also fits clones of the ranker teachers: as repeatable as the least repeatable one.
        if self.teacher_cv is not None and isinstance(self.teachers, (list, tuple)):
            tags.non_deterministic = tags.non_deterministic or any(
                get_tags(t).non_deterministic for t in self.teachers if is_model(t) and hasattr(t, "__sklearn_tags__")
            )
        return tags


# ----------------------------------------------------------------------------------------------- Cerberus
class Cerberus(_Student):
    """CERBERUS (Matsubara et al., 2022, §3.3): one transformer with a shared body and one ranking head per
    teacher, each head distilled from its own teacher.

    The first ``body_layers`` blocks of the pretrained encoder (``model``) form the shared body; each of the
    ``k = len(teachers)`` heads starts as a copy of the next ``head_layers`` blocks (deeper blocks are
    dropped) and ends in its own classifier (dropout, dense + tanh, dropout, dense → 1 logit, randomly
    initialised, reading the pooled encoding as :class:`~as2rank.transformer.ranker.TransformerRanker` does). The
    paper's notation is B_b kH_h: its best, B11 3H1 of a 12-layer model, is ``body_layers=5, head_layers=1``
    on the 6-layer default backbone (the default: ``head_layers=1``, the body takes the rest).

    Training: head ``i`` gets the distillation loss of Eq. 1 against teacher ``i``'s calibrated logits ``t``
    (see :mod:`as2rank.ensemble.teachers`),
    ``L_i = α · BCE(s_i, y) + (1 − α) · τ² · KL(σ(t/τ) ‖ σ(s_i/τ))`` (the two-class softmax of one logit is
    the sigmoid), and the loss is ``Σ λ_i L_i`` (Eq. 4, ``head_weights``): each head is moved by its own loss
    only, the body by all of them. Optimisation as in :class:`~as2rank.transformer.ranker.TransformerRanker`
    (AdamW, linear warm-up and decay, the classifiers at ``head_lr_multiplier × learning_rate``; the head
    blocks, copies of pretrained ones, at ``learning_rate``).

    Inference: the body runs once per input; the heads run together as one batched computation over its
    output (stacked weights, :class:`~as2rank.transformer.distillation.CerberusEncoder`); the score is the mean of
    the heads' logits (Eq. 5). :meth:`predict_heads` gives each head's logit.

    **Hydra** (Tran et al., 2020; the paper's row 13) is this model with teachers of one architecture trained
    with different seeds, e.g. ``teachers=[TransformerRanker(random_state=s).fit(X, y) for s in range(3)]``.

    Defaults measured: ``docs/benchmarks/defaults-cerberus.md`` (the training budget, ``lexical_prior`` and
    ``segment_similarity``, over training sizes and data sets). ``docs/benchmarks/cerberus.md`` reproduces the
    paper's models, with their prediction latency and cross-fitted teachers (``teacher_cv``).

    Parameters
    ----------
    model : str or transformers.PretrainedConfig, default="minilm-l6"
        A BERT-style encoder (BERT, MiniLM, RoBERTa, XLM-R, CamemBERT, ELECTRA) or MPNet (``"mpnet-base"``): an
        alias, a local path, a Hugging Face id, or a config for a randomly initialised encoder.
    teachers : list, default=None
        Required: one entry per head, each a fitted as2rank ranker of any family, the name of a column of
        ``X`` with precomputed scores, or an array of one precomputed score per training row (see
        :mod:`as2rank.ensemble.teachers`). Only ``fit`` uses them.
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
        :func:`~as2rank.ensemble.teachers.teacher_logits`.
    lexical_prior : bool, default=True
        Add the logit of the lexical model of :class:`~as2rank.transformer.ranker.TransformerRanker`'s
        ``lexical_prior`` (:mod:`as2rank.transformer.prior`, fitted on the training rows) to every head's logit, in
        training and prediction, so that each head learns what the lexical model misses. The paper has no
        prior (``lexical_prior=False``).
    similarity_prior : bool, default=False
        As in :class:`~as2rank.transformer.ranker.TransformerRanker`: the prior also reads the similarity of the
        pretrained encoder's sentence embeddings.
    segment_similarity : bool, default=True
        As in :class:`~as2rank.transformer.ranker.TransformerRanker`, for each head: its logit gains a trained
        term ``w_i · cos(question mean, candidate mean)`` of its last block's encodings, every ``w_i`` started
        from the pretrained encoder's cosines. On by default: in this class's defaults benchmark the model
        with the terms ranked above the one without them in every column. ``False`` is the paper's model.
    tokenizer, pooling, max_length, epochs, batch_size, loss, learning_rate, head_lr_multiplier, weight_decay, \
warmup, max_grad_norm, early_stopping, validation_fraction, patience, eval_every, warm_start, freeze_embeddings, batch_tokens, \
device, precision, n_threads, reuse_fit, random_state, verbose, callbacks
        As in :class:`~as2rank.transformer.ranker.TransformerRanker`, with the same defaults (``epochs=4``,
        ``learning_rate=5e-5``), chosen for this class with ``lexical_prior`` by its defaults benchmark;
        the paper's setting is ``epochs=2, learning_rate=2e-5, lexical_prior=False``. Early stopping watches
        the dev MAP of the mean of the heads. With ``precision="int8"`` the body's linear layers are quantized
        and the stacked heads run in float32.

    Attributes
    ----------
    model_ : torch.nn.Module
        A :class:`~as2rank.transformer.distillation.CerberusEncoder`: ``model_.encoder`` (the body),
        ``model_.heads`` (stacked blocks), ``model_.classifiers`` (stacked classifiers).
    tokenizer_ : transformers.PreTrainedTokenizerBase
    body_layers_, head_layers_, n_heads_ : int
    n_layers_ : int
        Blocks on the path of one input through one head (``body_layers_ + head_layers_``).
    pooling_ : {"cls", "mean"}
    history_ : as2rank.neural.TrainingHistory
    fit_cache_hit_ : bool
        Whether the last ``fit`` reused an identical earlier fit's weights (``reuse_fit``; the key holds the
        teachers' calibrated logits), as in :class:`~as2rank.transformer.ranker.TransformerRanker`.

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

    head_modules = ("classifiers",)
    _saved_attrs = ("n_layers_", "body_layers_", "head_layers_", "n_heads_", "pooling_")
    _parameter_constraints = {
        **_TransformerEstimator._parameter_constraints,
        **_DISTILLATION_CONSTRAINTS,
        "body_layers": [Interval(Integral, 1, None), None],
        "head_layers": [Interval(Integral, 1, None)],
        "head_weights": [SequenceOf(Interval(Real, 0, None)), None],
        "pooling": [Options(POOLINGS)],
    }

    def __init__(
        self, model="minilm-l6", teachers=None, body_layers=None, head_layers=1, kd_alpha=0.5, temperature=3.0,
        head_weights=None, teacher_cv=None, tokenizer=None, pooling="auto", lexical_prior=True,
        similarity_prior=False, segment_similarity=True, max_length=128,
        epochs=4, batch_size=32, loss="pointwise", learning_rate=5e-5, head_lr_multiplier=10.0, weight_decay=0.01,
        warmup=0.1, max_grad_norm=1.0, early_stopping="auto", validation_fraction=None, patience=2, eval_every=None,
        warm_start=False, freeze_embeddings=False, batch_tokens="auto", device="auto", precision="auto",
        n_threads=None, reuse_fit=True, random_state=None, verbose=False, callbacks=None,
    ):
        self._keep_params(locals())

    # ----------------------------------------------------------------- training hooks
    def _check_rules(self):
        super()._check_rules()
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

    def prepare_encoder(self, encoder):
        from ..neural.backbone import layer_list, native_pooling

        depth = len(layer_list(encoder))
        head = int(self.head_layers)
        body = depth - head if self.body_layers is None else int(self.body_layers)
        if body < 1 or body + head > depth:
            raise ValueError(
                f"body_layers={self.body_layers!r} and head_layers={self.head_layers!r} do not fit the encoder's "
                f"{depth} layers: the body needs >= 1 layer and body_layers + head_layers <= {depth}."
            )
        pooling = native_pooling(self.model) if self.pooling == "auto" else self.pooling
        return encoder, {"body_layers_": body, "head_layers_": head, "n_heads_": len(self.teachers),
                         "n_layers_": body + head, "pooling_": pooling}

    def build_module(self, encoder, fitted):
        from .distillation import CerberusEncoder

        return CerberusEncoder(encoder, fitted["body_layers_"], fitted["head_layers_"], fitted["n_heads_"],
                               fitted["pooling_"], similarity=self.segment_similarity)

    def get_loss(self):
        """Eq. 4: each head's distillation loss (Eq. 1) against its teacher, weighted by ``head_weights``."""
        from ..neural.losses import HeadDistillation

        return HeadDistillation(self.loss, self.kd_alpha, self.temperature, self._weights())

    # ----------------------------------------------------------------- inference
    def predict_heads(self, X) -> np.ndarray:
        """The logit of every head for every row (``predict`` is their mean).

        Parameters
        ----------
        X : pandas.DataFrame
            Grouped-candidate frame; every row is scored on its own, by all heads in one encoder pass.

        Returns
        -------
        ndarray of float64 of shape (n_rows, n_heads)
        """
        return self.predictor().logits(self.encode(X))

    def predict(self, X) -> np.ndarray:
        """One score per row: the mean of the heads' logits (Eq. 5), higher is better.

        Parameters
        ----------
        X : pandas.DataFrame
            Grouped-candidate frame, as for :meth:`predict_heads`.

        Returns
        -------
        ndarray of float64 of shape (n_rows,)
        """
        return self.predict_heads(X).mean(axis=1)



# ----------------------------------------------------------------------------------------------- KD baselines
class DistilledRanker(_Student):
    """A one-head transformer student distilled from one or several teachers (the KD baselines of the
    CERBERUS paper, §3.2 and §5.2).

    The student is the cross-encoder of :class:`~as2rank.transformer.ranker.TransformerRanker` (same encoder,
    pooling and head, same parameters but its lexical prior), trained with the distillation loss of Eq. 1
    (see :class:`Cerberus`) instead of plain binary cross-entropy:

    * one teacher: single-teacher knowledge distillation;
    * several, ``multi_teacher="sum"`` (KD_Sum): the sum of the losses against every teacher on every
      mini-batch;
    * several, ``multi_teacher="round_robin"`` (KD_RR): mini-batch ``t`` learns from teacher ``t mod k``.

    The student without a teacher (the paper's "TANDA (no teacher)") is ``TransformerRanker`` with the same
    parameters; ``kd_alpha=1`` trains exactly like it.

    Defaults measured: ``docs/benchmarks/defaults-distilled.md`` (the training budget, ``lexical_prior`` and
    ``segment_similarity``, over training sizes and data sets).

    Parameters
    ----------
    model : str or transformers.PretrainedConfig, default="minilm-l6"
        As in :class:`~as2rank.transformer.ranker.TransformerRanker`.
    teachers : list, default=None
        Required; as in :class:`Cerberus`.
    multi_teacher : {"sum", "round_robin"}, default="sum"
        How several teachers combine (no effect with one).
    kd_alpha : float, default=0.5
    temperature : float, default=3.0
    teacher_cv : None, int or group splitter, default=None
        As in :class:`Cerberus`.
    tokenizer, num_layers, pooling, max_length, epochs, batch_size, loss, learning_rate, head_lr_multiplier, \
weight_decay, warmup, max_grad_norm, early_stopping, validation_fraction, patience, eval_every, warm_start, freeze_embeddings, \
batch_tokens, device, precision, n_threads, reuse_fit, random_state, verbose, callbacks
        As in :class:`~as2rank.transformer.ranker.TransformerRanker`, with the same defaults (``epochs=4``,
        ``learning_rate=5e-5``), chosen for this class with ``lexical_prior`` by its defaults benchmark.
        The paper's setting is ``epochs=2, learning_rate=2e-5, lexical_prior=False``.
    lexical_prior : bool, default=True
        As in :class:`~as2rank.transformer.ranker.TransformerRanker`: the lexical model's logit is added to the
        student's, in training and prediction, so the student learns what the lexical model misses.
    similarity_prior : bool, default=False
        As in :class:`~as2rank.transformer.ranker.TransformerRanker`: the prior also reads the similarity of the
        pretrained encoder's sentence embeddings.
    segment_similarity : bool, default=True
        As in :class:`~as2rank.transformer.ranker.TransformerRanker`: the student's logit gains a trained term
        ``w · cos(question mean, candidate mean)`` of its own encodings, ``w`` started from the pretrained
        encoder's cosines. On by default: in this class's defaults benchmark the student with the term
        ranked above the one without it in every column. ``False`` is the paper's student.

    Attributes
    ----------
    model_, tokenizer_, n_layers_, pooling_, history_, fit_cache_hit_
        As in :class:`~as2rank.transformer.ranker.TransformerRanker` (the key of ``reuse_fit`` holds the teachers'
        calibrated logits).
    """

    _saved_attrs = ("n_layers_", "pooling_")
    _parameter_constraints = {
        **_TransformerEstimator._parameter_constraints,
        **_DISTILLATION_CONSTRAINTS,
        "num_layers": [Interval(Integral, 1, None), None],
        "pooling": [Options(POOLINGS)],
        "multi_teacher": [Options(MULTI_TEACHER)],
    }

    def __init__(
        self, model="minilm-l6", teachers=None, multi_teacher="sum", kd_alpha=0.5, temperature=3.0, teacher_cv=None,
        tokenizer=None, num_layers=None, pooling="auto", lexical_prior=True, similarity_prior=False,
        segment_similarity=True, max_length=128,
        epochs=4, batch_size=32, loss="pointwise", learning_rate=5e-5, head_lr_multiplier=10.0, weight_decay=0.01,
        warmup=0.1, max_grad_norm=1.0, early_stopping="auto", validation_fraction=None, patience=2, eval_every=None,
        warm_start=False, freeze_embeddings=False, batch_tokens="auto", device="auto", precision="auto",
        n_threads=None, reuse_fit=True, random_state=None, verbose=False, callbacks=None,
    ):
        self._keep_params(locals())

    # ----------------------------------------------------------------- training hooks
    def prepare_encoder(self, encoder):
        from ..neural.backbone import prepare_encoder as cut_encoder

        encoder, n_layers, pooling = cut_encoder(encoder, self.model, self.num_layers, self.pooling)
        return encoder, {"n_layers_": n_layers, "pooling_": pooling}

    def build_module(self, encoder, fitted):
        from .network import CrossEncoder

        return CrossEncoder(encoder, fitted["pooling_"], similarity=self.segment_similarity)

    def get_loss(self):
        """The distillation loss (Eq. 1) against every teacher, summed (KD_Sum) or one per batch (KD_RR)."""
        from ..neural.losses import TeacherDistillation

        return TeacherDistillation(self.loss, self.kd_alpha, self.temperature, self.multi_teacher)

