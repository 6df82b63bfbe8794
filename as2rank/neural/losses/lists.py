"""Rows of a batch as lists of candidates, and the KL divergence over a list that the listwise losses share."""

from __future__ import annotations

import torch

__all__ = ["by_question", "listwise_kl_loss", "question_lists"]


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


def question_lists(group: torch.Tensor, *values: torch.Tensor) -> tuple:
    """Columns of per-row values (each of shape (rows, k)) as lists of candidates: one tensor of shape
    (k, n_questions, max_candidates) per value, and the mask of real candidates (n_questions, max_candidates)."""
    grid, mask = by_question(torch.stack(values, dim=-1), group)  # (questions, candidates, k, values)
    grid = grid.permute(3, 2, 0, 1)
    return [grid[i] for i in range(len(values))], mask


def listwise_kl_loss(scores: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """KL divergence from the normalised gold labels to the softmax of the scores, mean over questions.

    ``KL(p || q) = sum_i p_i (log p_i - log q_i)`` with ``p = labels / sum(labels)`` and
    ``q = softmax(scores)`` over the candidates of a question (Bian et al., 2017; Bonadiman & Moschitti,
    2020). Questions without a positive label have no target distribution and are left out.

    Parameters
    ----------
    scores : Tensor of shape (n_questions, max_candidates)
    labels : Tensor of shape (n_questions, max_candidates)
        Non-negative relevance labels; padding slots are ignored.
    mask : Tensor of bool, shape (n_questions, max_candidates)
        True for real candidates.

    Returns
    -------
    Tensor
        Scalar loss (0 if no question has a positive).
    """
    labels = labels.to(scores.dtype).masked_fill(~mask, 0.0)
    total = labels.sum(dim=1, keepdim=True)
    answered = total.squeeze(1) > 0
    if not answered.any():
        return scores.sum() * 0.0
    p = labels[answered] / total[answered]
    log_q = torch.log_softmax(scores[answered].masked_fill(~mask[answered], float("-inf")), dim=1)
    kl = torch.xlogy(p, p) - p * log_q.masked_fill(~mask[answered], 0.0)
    return kl.sum(dim=1).mean()
