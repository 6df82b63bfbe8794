"""The label losses, ``loss="pointwise"`` and ``loss="listwise"`` of the neural estimators."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .lists import by_question, listwise_kl_loss, question_lists

__all__ = ["LABEL_LOSSES", "ListwiseLoss", "PointwiseLoss"]


class PointwiseLoss:
    """``loss="pointwise"``: binary cross-entropy of each row's logit against its label (> 0 is a positive),
    mean over rows (and over columns, each trained on the same labels).

    Called as ``loss(logits, batch)``: ``logits`` of shape (rows,) or (rows, k) (one column per exit or head),
    ``batch`` with the rows' ``labels``; returns a scalar.
    """

    #: Whether a batch must hold whole questions (and carry ``group``).
    by_question = False

    def __call__(self, logits: torch.Tensor, batch: dict) -> torch.Tensor:
        logits = logits.float()  # low-precision logits would make a coarse loss
        labels = (batch["labels"] > 0).to(logits.dtype)
        if logits.ndim == 2:
            labels = labels.unsqueeze(1).expand_as(logits)
        return F.binary_cross_entropy_with_logits(logits, labels)


class ListwiseLoss:
    """``loss="listwise"``: the KL divergence from each question's normalised labels to the softmax of its
    logits (ListNet's top-one cross-entropy up to a constant, the loss of the Cosinet paper's listwise rows),
    mean over the questions with a positive (and over columns); 0 when the batch has none.

    Called as ``loss(logits, batch)``: ``logits`` of shape (rows,) or (rows, k), ``batch`` with the rows'
    non-negative ``labels`` and ``group`` (each row's question, numbered within the batch); returns a scalar.
    """

    by_question = True

    def __call__(self, logits: torch.Tensor, batch: dict) -> torch.Tensor:
        logits = logits.float()
        labels = batch["labels"].to(logits.dtype)
        if logits.ndim == 1:  # one list per question (and the gradient of the logits laid out as they are)
            (scores, mask), (targets, _) = by_question(logits, batch["group"]), by_question(labels, batch["group"])
            return listwise_kl_loss(scores, targets, mask)
        labels = labels.unsqueeze(1).expand_as(logits)
        (scores, targets), mask = question_lists(batch["group"], logits, labels)
        width = mask.shape[-1]
        return listwise_kl_loss(scores.reshape(-1, width), targets.reshape(-1, width),
                                mask.expand(scores.shape).reshape(-1, width))


#: The label loss of each ``loss`` value.
LABEL_LOSSES = {"pointwise": PointwiseLoss(), "listwise": ListwiseLoss()}
