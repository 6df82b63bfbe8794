"""The training losses of the neural estimators, one object per value of their ``loss`` parameter.

A loss object is called on what the model returned for a batch and on the batch itself, ``loss(outputs,
batch) -> scalar tensor``, as the training loop (:func:`as2rank.neural.train`) calls it:

* ``LABEL_LOSSES`` — ``loss="pointwise"`` (binary cross-entropy per pair) and ``loss="listwise"`` (the KL
  divergence from each question's normalised labels to the softmax of its scores), for every estimator that
  learns from labels;
* ``DISTILLATION_LOSSES`` — Eq. 1 of the CERBERUS paper per pair or over each question's candidates, for
  the students of :mod:`as2rank.transformer.cerberus`, and the two ways they combine teachers
  (:class:`HeadDistillation`, :class:`TeacherDistillation`).

A listwise loss reads each row's question from the batch's ``group`` (numbered within the batch,
:func:`by_question`).
"""

from .distillation import (
    DISTILLATION_LOSSES,
    HeadDistillation,
    ListwiseDistillation,
    PointwiseDistillation,
    TeacherDistillation,
    pointwise_distillation,
)
from .labels import LABEL_LOSSES, ListwiseLoss, PointwiseLoss
from .lists import by_question, listwise_kl_loss, question_lists

__all__ = [
    "DISTILLATION_LOSSES",
    "HeadDistillation",
    "LABEL_LOSSES",
    "ListwiseDistillation",
    "ListwiseLoss",
    "PointwiseDistillation",
    "PointwiseLoss",
    "TeacherDistillation",
    "by_question",
    "listwise_kl_loss",
    "pointwise_distillation",
    "question_lists",
]
