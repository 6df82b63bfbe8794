"""The distillation losses of the CERBERUS paper's students (:mod:`as2rank.transformer.cerberus`).

Eq. 1 of the paper, ``α · CE(S, y) + (1 − α) · τ² · KL(softmax(T/τ) ‖ softmax(S/τ))``, per pair over the two
classes {wrong, right} (``loss="pointwise"``), or with the KL divergence over each question's candidates in
place of each term (``loss="listwise"``): ``α · KL(y ‖ softmax(S)) + (1 − α) · τ² · KL(softmax(T/τ) ‖
softmax(S/τ))``. A CERBERUS model sums each head's loss against its teacher with weights λ (Eq. 4,
:class:`HeadDistillation`); a single student sums its losses against every teacher or takes one teacher per
batch (:class:`TeacherDistillation`).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from .lists import listwise_kl_loss, question_lists

__all__ = ["DISTILLATION_LOSSES", "HeadDistillation", "ListwiseDistillation", "PointwiseDistillation",
           "TeacherDistillation", "pointwise_distillation"]


def pointwise_distillation(student, teacher, labels, alpha: float, temperature: float):
    """Eq. 1 of the CERBERUS paper for binary relevance, element by element: ``α · CE(S, y) + (1 − α) · τ² ·
    KL(softmax(T/τ) ‖ softmax(S/τ))`` over the two classes {wrong, right}.

    A pointwise ranker's logit ``s`` is the two-class logit vector ``(0, s)``, whose softmax is
    ``(1 − σ(s), σ(s))``: the cross-entropy is binary cross-entropy and the KL term the binary KL divergence
    between ``σ(t/τ)`` and ``σ(s/τ)``. ``student``, ``teacher`` and the 0/1 ``labels`` are broadcastable
    tensors of one float dtype; returns the loss of every element of their broadcast shape."""
    hard = -(labels * F.logsigmoid(student) + (1 - labels) * F.logsigmoid(-student))
    s, t = student / temperature, teacher / temperature
    p = torch.sigmoid(t)
    kl = p * (F.logsigmoid(t) - F.logsigmoid(s)) + (1 - p) * (F.logsigmoid(-t) - F.logsigmoid(-s))
    return alpha * hard + (1 - alpha) * temperature**2 * kl


class _Distillation:
    """Eq. 1 of each column of a student's logits against the teacher logits of that column.

    Called as ``loss(student, teacher, batch)``: ``student`` of shape (rows, k), one column per head;
    ``teacher`` (rows, k), the calibrated teacher logits each column learns from
    (:func:`as2rank.ensemble.teachers.teacher_logits`); ``batch`` with the rows' 0/1 ``labels`` (and ``group``
    for the listwise loss). Returns the loss of each column, shape (k,).

    Parameters
    ----------
    alpha : float
        Weight of the hard (label) term.
    temperature : float
        τ > 0.
    """

    by_question = False

    def __init__(self, alpha: float, temperature: float):
        self.alpha, self.temperature = alpha, temperature

    def __call__(self, student, teacher, batch: dict) -> torch.Tensor:
        student = student.float()  # low-precision logits would make a coarse loss
        teacher = teacher.to(student.dtype).expand_as(student)
        labels = batch["labels"].to(student.dtype).unsqueeze(1).expand_as(student)
        return self._columns(student, teacher, labels, batch)


class PointwiseDistillation(_Distillation):
    """``loss="pointwise"``: :func:`pointwise_distillation` of every pair, mean over rows, per column."""

    def _columns(self, student, teacher, labels, batch):
        return pointwise_distillation(student, teacher, labels, self.alpha, self.temperature).mean(dim=0)


class ListwiseDistillation(_Distillation):
    """``loss="listwise"``: both terms are :func:`~as2rank.neural.losses.listwise_kl_loss` over each question's
    candidates, the hard one to the normalised labels (questions with a positive), the soft one to the softened
    teacher's distribution (every question), per column."""

    by_question = True

    def _columns(self, student, teacher, labels, batch):
        tau, alpha = self.temperature, self.alpha
        (s, t, y), mask = question_lists(batch["group"], student, teacher, labels)
        soft_targets = torch.softmax(t.masked_fill(~mask, float("-inf")) / tau, dim=-1)
        return torch.stack([alpha * listwise_kl_loss(s[j], y[j], mask)
                            + (1 - alpha) * tau**2 * listwise_kl_loss(s[j] / tau, soft_targets[j], mask)
                            for j in range(len(s))])


#: The distillation loss of each ``loss`` value.
DISTILLATION_LOSSES = {"pointwise": PointwiseDistillation, "listwise": ListwiseDistillation}


class HeadDistillation:
    """The loss of a CERBERUS model (Eq. 4): ``Σ λ_i L_i``, head ``i``'s Eq. 1 against teacher ``i``.

    Called as ``loss(logits, batch)``: ``logits`` of shape (rows, k), one column per head; ``batch`` with
    ``labels``, ``teacher_logits`` of shape (rows, k) (and ``group`` for the listwise loss).

    Parameters
    ----------
    loss : {"pointwise", "listwise"}
    alpha, temperature : float
        α and τ of Eq. 1.
    weights : array-like of shape (k,)
        λ of Eq. 4.
    """

    def __init__(self, loss: str, alpha: float, temperature: float, weights):
        self.per_head = DISTILLATION_LOSSES[loss](alpha, temperature)
        self.by_question = self.per_head.by_question
        self.weights = np.asarray(weights, dtype=np.float64)

    def __call__(self, logits, batch: dict) -> torch.Tensor:
        losses = self.per_head(logits, batch["teacher_logits"], batch)
        return (losses * torch.as_tensor(self.weights, dtype=losses.dtype, device=losses.device)).sum()


class TeacherDistillation:
    """The loss of a single-head student of several teachers: the sum of its Eq. 1 against every teacher
    (``multi_teacher="sum"``, KD_Sum), or against teacher ``t mod k`` at the batch numbered ``t``
    (``"round_robin"``, KD_RR).

    Called as ``loss(logits, batch)``: ``logits`` of shape (rows,); ``batch`` with ``labels``, ``step``,
    ``teacher_logits`` of shape (rows, k) (and ``group`` for the listwise loss).

    Parameters
    ----------
    loss : {"pointwise", "listwise"}
    alpha, temperature : float
        α and τ of Eq. 1.
    multi_teacher : {"sum", "round_robin"}
    """

    def __init__(self, loss: str, alpha: float, temperature: float, multi_teacher: str):
        self.per_teacher = DISTILLATION_LOSSES[loss](alpha, temperature)
        self.by_question = self.per_teacher.by_question
        self.multi_teacher = multi_teacher

    def __call__(self, logits, batch: dict) -> torch.Tensor:
        logits, teachers = logits.unsqueeze(1), batch["teacher_logits"]
        if self.multi_teacher == "round_robin":  # KD_RR: batch t learns from teacher t mod k
            teacher = batch["step"] % teachers.shape[1]
            teachers = teachers[:, teacher : teacher + 1]
        return self.per_teacher(logits.expand(-1, teachers.shape[1]), teachers, batch).sum()
