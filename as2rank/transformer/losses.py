"""The training losses of the transformer estimators over a batch's rows: pointwise (binary cross-entropy per
pair) or listwise (over each question's candidates), for labels and for distillation from teachers.

A listwise batch holds whole questions (:func:`as2rank.neural.batching.question_bucket_batches`) and carries
``group``, each row's question numbered within the batch. The listwise label loss is the KL divergence from the
question's normalised labels to the softmax of its scores (ListNet's top-one cross-entropy up to a constant,
the loss of the Cosinet paper's listwise rows); the listwise distillation loss puts the same KL divergence in
place of each term of the CERBERUS paper's Eq. 1: ``α · KL(y ‖ softmax(S)) + (1 − α) · τ² ·
KL(softmax(T/τ) ‖ softmax(S/τ))`` over a question's candidates.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..neural.training import listwise_kl_loss

__all__ = ["by_question", "distillation_loss", "label_loss", "pointwise_distillation"]

def by_question(values: torch.Tensor, group: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows laid out as a padded matrix of questions.

    Parameters
    ----------
    values : Tensor of shape (rows, ...)
    group : Tensor of int64, shape (rows,)
        Each row's question, numbered 0, 1, ... within the batch (any row order).

    Returns
    -------
    grid : Tensor of shape (n_questions, max_candidates, ...)
        ``values`` of question ``g``'s rows in row order along its second axis; zeros pad.
    mask : Tensor of bool, shape (n_questions, max_candidates)
        True where a row is.
    """
    group = group.to(values.device)
    sizes = torch.bincount(group)
    order = torch.argsort(group, stable=True)
    starts = torch.cumsum(sizes, 0) - sizes
    slot = torch.empty_like(group)
    slot[order] = torch.arange(len(group), device=group.device) - starts[group[order]]
    grid = values.new_zeros((len(sizes), int(sizes.max()), *values.shape[1:]))
    grid[group, slot] = values
    mask = torch.zeros(grid.shape[:2], dtype=torch.bool, device=values.device)
    mask[group, slot] = True
    return grid, mask


def _question_lists(group: torch.Tensor, *values: torch.Tensor) -> tuple:
    """Columns of per-row values (each of shape (rows, k)) as lists of candidates: one tensor of shape
    (k, n_questions, max_candidates) per value, and the mask of real candidates (n_questions, max_candidates)."""
    grid, mask = by_question(torch.stack(values, dim=-1), group)  # (questions, candidates, k, values)
    grid = grid.permute(3, 2, 0, 1)
    return [grid[i] for i in range(len(values))], mask


def label_loss(logits: torch.Tensor, batch: dict, loss: str) -> torch.Tensor:
    """The loss of ``logits`` against the batch's 0/1 ``labels``: a scalar.

    Parameters
    ----------
    logits : Tensor of shape (rows,) or (rows, k)
        One logit per row, or one per row and exit/head (each column is trained on the same labels).
    batch : dict of Tensor
        ``labels`` (rows,) and, for ``loss="listwise"``, ``group`` (rows,).
    loss : {"pointwise", "listwise"}
        ``"pointwise"``: binary cross-entropy, mean over rows (and columns). ``"listwise"``: the KL divergence
        from each question's normalised labels to the softmax of its logits, mean over the questions with a
        positive (and columns); 0 when the batch has none.
    """
    logits = logits.float()  # low-precision logits would make a coarse loss
    labels = batch["labels"].to(logits.dtype)
    if logits.ndim == 2:
        labels = labels.unsqueeze(1).expand_as(logits)
    if loss == "pointwise":
        return F.binary_cross_entropy_with_logits(logits, labels)
    if logits.ndim == 1:
        logits, labels = logits[:, None], labels[:, None]
    (scores, targets), mask = _question_lists(batch["group"], logits, labels)
    width = mask.shape[-1]
    return listwise_kl_loss(scores.reshape(-1, width), targets.reshape(-1, width),
                            mask.expand(scores.shape).reshape(-1, width))


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


def _listwise_distillation(student, teacher, labels, group, alpha: float, temperature: float):
    """The listwise Eq. 1 of each column, shape (k,): both terms are :func:`~as2rank.neural.training.listwise_kl_loss`
    over each question's candidates, the hard one to the normalised labels (questions with a positive), the soft
    one to the softened teacher's distribution (every question)."""
    (s, t, y), mask = _question_lists(group, student, teacher, labels)
    soft_targets = torch.softmax(t.masked_fill(~mask, float("-inf")) / temperature, dim=-1)
    return torch.stack([alpha * listwise_kl_loss(s[j], y[j], mask)
                        + (1 - alpha) * temperature**2 * listwise_kl_loss(s[j] / temperature, soft_targets[j], mask)
                        for j in range(len(s))])


def distillation_loss(student, teacher, batch: dict, alpha: float, temperature: float, loss: str):
    """The distillation loss of each column of ``student`` (its mean over rows or questions).

    Parameters
    ----------
    student : Tensor of shape (rows, k)
        Student logits, one column per head.
    teacher : Tensor of shape (rows, k)
        Teacher logits (calibrated, see :func:`as2rank.ensemble.teachers.teacher_logits`) of the column each
        head learns from.
    batch : dict of Tensor
        ``labels`` (rows,) and, for ``loss="listwise"``, ``group`` (rows,).
    alpha : float
        Weight of the hard (label) term.
    temperature : float
        τ > 0.
    loss : {"pointwise", "listwise"}
        Eq. 1 of the CERBERUS paper per pair (binary classes), or over each question's candidates.

    Returns
    -------
    Tensor of shape (k,)
    """
    student = student.float()  # low-precision logits would make a coarse loss
    teacher = teacher.to(student.dtype).expand_as(student)
    labels = batch["labels"].to(student.dtype).unsqueeze(1).expand_as(student)
    if loss == "pointwise":
        return pointwise_distillation(student, teacher, labels, alpha, temperature).mean(dim=0)
    return _listwise_distillation(student, teacher, labels, batch["group"], alpha, temperature)
