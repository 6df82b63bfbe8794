"""Ranking measures over questions: MAP, MRR, P@k and nDCG@k, and all of them at once.

Each measure sorts a run once (:class:`~as2rank.metrics.runs.RankedRun`), computes one value per question on
whole arrays, and averages over the questions under the tie and no-positive policies of
:mod:`as2rank.metrics`.
"""

from __future__ import annotations

import numpy as np

from .answering import triggering_from_outcomes
from .runs import RankedRun, check_k, question_values

__all__ = ["mean_average_precision", "mean_reciprocal_rank", "precision_at_k", "ndcg_at_k", "ranking_report"]

_DOC_PARAMS = """
    Parameters
    ----------
    y_true : array-like of shape (n_rows,)
        Relevance labels (0/1; graded values > 0 count as relevant for binary metrics).
    y_score : array-like of shape (n_rows,)
        Scores, higher is better.
    groups : array-like of shape (n_rows,)
        Question id of each row (e.g. ``X["qid"]``); rows of a group need not be contiguous. The ids
        follow :func:`~as2rank.data.check_group_keys`: one kind (all strings, or all integers), none
        missing, never coerced.
    ties : {"pessimistic", "optimistic", "stable", "trec_eval"}, default="pessimistic"
        How candidates with equal scores are ordered (see :mod:`as2rank.metrics`); ``"trec_eval"`` needs
        ``docno``.
    no_positive : {"skip", "zero"}, default="skip"
        Questions without a positive candidate are left out ("clean" protocol) or count as 0.
    position : array-like of shape (n_rows,), default=None
        Original rank inside each group, used by ``ties="stable"``; default the row order.
    per_group : bool, default=False
        Return a :class:`pandas.Series` of per-question values indexed by ``qid`` (NaN for skipped
        questions) instead of the mean.
    docno : array-like of shape (n_rows,), default=None
        Candidate id of each row (strings, or integers read as their decimal text), unique within a
        question; required by, and only accepted with, ``ties="trec_eval"``.
"""


def mean_average_precision(
    y_true, y_score, groups, *, ties="pessimistic", no_positive="skip", position=None, per_group=False, docno=None
):
    run = RankedRun(y_true, y_score, groups, ties, position, docno)
    return run.aggregate(run.average_precision(), no_positive, per_group)


def mean_reciprocal_rank(
    y_true, y_score, groups, *, ties="pessimistic", no_positive="skip", position=None, per_group=False, docno=None
):
    run = RankedRun(y_true, y_score, groups, ties, position, docno)
    return run.aggregate(run.reciprocal_rank(), no_positive, per_group)


def precision_at_k(
    y_true,
    y_score,
    groups,
    *,
    k=1,
    ties="pessimistic",
    no_positive="skip",
    position=None,
    per_group=False,
    docno=None,
):
    run = RankedRun(y_true, y_score, groups, ties, position, docno)
    return run.aggregate(run.precision(check_k(k)), no_positive, per_group)


def ndcg_at_k(
    y_true,
    y_score,
    groups,
    *,
    k=10,
    gain="linear",
    ties="pessimistic",
    no_positive="skip",
    position=None,
    per_group=False,
    docno=None,
):
    if gain not in ("linear", "exponential"):
        raise ValueError(f"gain must be 'linear' or 'exponential', got {gain!r}.")
    run = RankedRun(y_true, y_score, groups, ties, position, docno)
    return run.aggregate(run.ndcg(check_k(k), gain), no_positive, per_group)


mean_average_precision.__doc__ = (
    "Mean average precision (MAP) over questions.\n\n"
    "    AP of a question = mean, over its relevant candidates, of the precision at their rank.\n"
    + _DOC_PARAMS
    + "\n    Returns\n    -------\n    float or pandas.Series\n"
)
mean_reciprocal_rank.__doc__ = (
    "Mean reciprocal rank (MRR): mean over questions of 1 / rank of the first relevant candidate.\n"
    + _DOC_PARAMS
    + "\n    Returns\n    -------\n    float or pandas.Series\n"
)
precision_at_k.__doc__ = (
    "Precision at k (P@k): relevant candidates among the top k, divided by k (as trec_eval does, also\n"
    "    for questions with fewer than k candidates). P@1 is the accuracy of the top answer.\n"
    + _DOC_PARAMS
    + "    k : int, default=1\n        Cut-off.\n"
    + "\n    Returns\n    -------\n    float or pandas.Series\n"
)
ndcg_at_k.__doc__ = (
    "Normalised discounted cumulative gain at k (nDCG@k), with graded gains.\n\n"
    "    DCG@k = sum over the top k of gain(label) / log2(rank + 1), divided by the DCG@k of the ideal order.\n"
    + _DOC_PARAMS
    + "    k : int, default=10\n        Cut-off.\n"
    + "    gain : {'linear', 'exponential'}, default='linear'\n"
    "        ``label`` (as trec_eval and scikit-learn's ``ndcg_score``) or ``2**label - 1``.\n"
    + "\n    Returns\n    -------\n    float or pandas.Series\n"
)


def ranking_report(
    y_true,
    y_score,
    groups,
    *,
    ties="pessimistic",
    no_positive="skip",
    position=None,
    k=(1, 3, 5),
    ndcg_k=(10,),
    docno=None,
    unanswered="skip",
    answered=None,
) -> dict:
    """All the ranking metrics of one run, sharing one sort.

    Parameters
    ----------
    y_true, y_score, groups, ties, no_positive, position, docno
        As in :func:`mean_average_precision`.
    k : tuple of int, default=(1, 3, 5)
        Cut-offs for P@k.
    ndcg_k : tuple of int, default=(10,)
        Cut-offs for nDCG@k.
    unanswered : {"skip", "include"}, default="skip"
        ``"include"`` also scores every question, those without a correct candidate included, by answer
        triggering (:func:`~as2rank.metrics.answer_triggering`): the only measures here that are defined
        for such questions (answering one is a wrong answer). The ranking metrics keep ``no_positive``.
    answered : array-like of bool, default=None
        With ``unanswered="include"``: whether the system answers each question (a Series indexed by question
        id, or an array in the order of the questions' first appearance in ``groups``); default every
        question, a system that never abstains.

    Returns
    -------
    dict
        ``map``, ``mrr``, ``p@k`` for each k, ``ndcg@k`` for each cut-off, ``n_questions`` (all groups)
        and ``n_evaluated`` (groups that entered the means). With ``unanswered="include"`` also
        ``answer_precision``, ``answer_recall``, ``answer_f1``, ``n_answerable`` and ``n_answered``.
    """
    if unanswered not in ("skip", "include"):
        raise ValueError(f"unanswered must be 'skip' or 'include', got {unanswered!r}.")
    if answered is not None and unanswered != "include":
        raise ValueError("answered is only used with unanswered='include' (answer triggering over all questions).")
    run = RankedRun(y_true, y_score, groups, ties, position, docno)
    report = {
        "map": run.aggregate(run.average_precision(), no_positive, False),
        "mrr": run.aggregate(run.reciprocal_rank(), no_positive, False),
    }
    for kk in k:
        report[f"p@{kk}"] = run.aggregate(run.precision(check_k(kk)), no_positive, False)
    for kk in ndcg_k:
        report[f"ndcg@{kk}"] = run.aggregate(run.ndcg(check_k(kk), "linear"), no_positive, False)
    report["n_questions"] = int(run.index.n_groups)
    report["n_evaluated"] = int(run.index.n_groups if no_positive == "zero" else (run.n_rel > 0).sum())
    if unanswered == "include":
        decisions = (np.ones(run.index.n_groups, dtype=bool) if answered is None
                     else question_values(answered, run.index, "answered", "bool"))
        trig = triggering_from_outcomes(run.top_relevant(), run.n_rel > 0, decisions)
        report.update({f"answer_{m}": trig[m] for m in ("precision", "recall", "f1")},
                      n_answerable=trig["n_answerable"], n_answered=trig["n_answered"])
    return report
