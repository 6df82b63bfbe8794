"""The machinery every measure shares: a run sorted inside each question by a tie policy, and per-question inputs.

A *run* is one system's scores for the rows of a grouped-candidate frame. :class:`RankedRun` sorts it once,
inside each question, by descending score under a tie policy (see :mod:`as2rank.metrics`), and then computes
each question's value of a measure on whole arrays (``bincount``/``reduceat``): the ranking measures of
:mod:`~as2rank.metrics.ranking` and the answering measures of :mod:`~as2rank.metrics.answering` both read it.
:func:`question_values` aligns a per-question input (an answer decision, a confidence) with a run's questions.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from ..data import GroupIndex, check_keys, check_labels, plain_scalar, ragged_arange

__all__ = ["TIE_POLICIES", "RankedRun", "question_values", "check_k"]

#: Accepted values of ``ties=``.
TIE_POLICIES = ("pessimistic", "optimistic", "stable", "trec_eval")
_NO_POSITIVE = ("skip", "zero")


class RankedRun:
    """One run (labels and scores) sorted inside each question by a tie policy.

    The arrays below hold the rows in ranked order, each question's rows contiguous in the order of
    ``index``; the methods return one value per question of ``index``.

    Parameters
    ----------
    y_true, y_score, groups, ties, position, docno
        As in :func:`~as2rank.metrics.mean_average_precision`; ``groups`` may also be a
        :class:`~as2rank.data.GroupIndex` already built.

    Attributes
    ----------
    index : GroupIndex
        The questions.
    gain : ndarray of shape (n_rows,)
        Labels in ranked order.
    rel : ndarray of shape (n_rows,)
        1.0 where the label is relevant (> 0), in ranked order.
    group : ndarray of shape (n_rows,)
        Question code of each ranked row.
    rank : ndarray of shape (n_rows,)
        1-based rank of each ranked row inside its question.
    n_rel : ndarray of shape (n_questions,)
        Relevant candidates of each question.
    """

    def __init__(self, y_true, y_score, groups, ties: str, position=None, docno=None):
        if ties not in TIE_POLICIES:
            raise ValueError(f"ties must be one of {TIE_POLICIES}, got {ties!r}.")
        if docno is not None and ties != "trec_eval":
            raise ValueError(
                f"docno is only used by ties='trec_eval' (got ties={ties!r}); drop docno or use that policy."
            )
        if isinstance(groups, GroupIndex):
            index = groups
        else:
            if groups is None:
                raise ValueError("groups is required: the question id of every row.")
            index = GroupIndex(groups, position, name="groups")
        y_true = check_labels(y_true, index.n_rows, name="y_true", reference="groups")
        y_score = np.asarray(y_score, dtype=np.float64)
        if y_score.ndim != 1 or len(y_score) != index.n_rows:
            raise ValueError(
                f"y_score has shape {y_score.shape} but groups has {index.n_rows} entries; one score per row."
            )
        if np.isnan(y_score).any():
            raise ValueError("y_score contains NaN; every row needs a score.")
        if ties == "trec_eval":
            tiebreak = _docno_tiebreak(docno, index)
        else:
            tiebreak = {"pessimistic": y_true, "optimistic": -y_true, "stable": None}[ties]
        order = index.sort(y_score, tiebreak)
        self.index = index
        self.gain = y_true[order]  # labels in ranked order, groups contiguous
        self.rel = (self.gain > 0).astype(np.float64)
        self.group = index.codes[order]
        self.rank = ragged_arange(index.sizes) + 1
        self.n_rel = np.bincount(self.group, weights=self.rel, minlength=index.n_groups)

    def _sum(self, values):
        return np.bincount(self.group, weights=values, minlength=self.index.n_groups)

    def average_precision(self):
        """Average precision of each question (NaN without a relevant candidate)."""
        cum = np.cumsum(self.rel)
        before = np.repeat(cum[self.index.starts] - self.rel[self.index.starts], self.index.sizes)
        prec = (cum - before) / self.rank
        with np.errstate(invalid="ignore", divide="ignore"):
            return self._sum(prec * self.rel) / self.n_rel

    def reciprocal_rank(self):
        """1 / rank of each question's first relevant candidate (0 without one)."""
        first = np.minimum.reduceat(np.where(self.rel > 0, self.rank, np.inf), self.index.starts)
        return 1.0 / first

    def precision(self, k):
        """Relevant candidates among each question's top ``k``, divided by ``k``."""
        return self._sum(self.rel * (self.rank <= k)) / k

    def top_relevant(self):
        """Whether each question's top-ranked candidate is relevant (bool, one per group)."""
        return self.rel[self.index.starts] > 0

    def ndcg(self, k, gain):
        """nDCG@k of each question, ``gain`` ``"linear"`` or ``"exponential"`` (NaN without a positive label)."""
        g = self.gain if gain == "linear" else np.exp2(self.gain) - 1.0
        disc = np.where(self.rank <= k, 1.0 / np.log2(self.rank + 1.0), 0.0)
        dcg = self._sum(g * disc)
        # Ideal ordering: labels sorted descending inside each group.
        ideal = np.lexsort((-self.gain, self.group))
        idcg = self._sum(g[ideal] * disc)
        with np.errstate(invalid="ignore", divide="ignore"):
            return dcg / idcg

    def aggregate(self, per_group, no_positive, per_group_out):
        """The mean of per-question values under a ``no_positive`` policy, or (``per_group_out``) the values
        as a :class:`pandas.Series` indexed by question id, NaN for the questions left out."""
        if no_positive not in _NO_POSITIVE:
            raise ValueError(f"no_positive must be one of {_NO_POSITIVE}, got {no_positive!r}.")
        answered = self.n_rel > 0
        values = np.where(answered, per_group, 0.0 if no_positive == "zero" else np.nan)
        if per_group_out:
            return pd.Series(values, index=pd.Index(self.index.keys, name="qid"))
        if not np.any(~np.isnan(values)):
            warnings.warn(
                "No question has a positive candidate: the metric is undefined (NaN). Pass "
                "no_positive='zero' to count such questions as 0.",
                RuntimeWarning,
                stacklevel=3,
            )
            return float("nan")
        return float(np.nanmean(values))


def _docno_tiebreak(docno, index: GroupIndex) -> np.ndarray:
    """Sort key that puts, among equal scores, the larger candidate id first (trec_eval's order).

    trec_eval sorts a query's documents by ``sim`` descending and breaks ties with ``strcmp(docno2, docno1)``
    (``comp_sim_docno`` in ``form_res_rels.c``): byte order of the UTF-8 ids, larger first. Python compares
    ``str`` by code point, which is the same order as the bytes of their UTF-8 encoding.
    """
    if docno is None:
        raise ValueError(
            "ties='trec_eval' orders equal scores by candidate id, as trec_eval does: pass docno= (the "
            "candidate id of every row, e.g. X['cand_id']); get_scorer takes the column name instead."
        )
    values, kind = check_keys(docno, "docno", what="candidate id")
    if kind == "integer":
        values = values.astype(str)  # an integer id is written to a run file as its decimal text
    elif kind not in ("string", "empty"):
        raise ValueError(
            f"docno must hold strings (or integers, compared as their decimal text, as in a run file), got "
            f"{kind} values."
        )
    if len(values) != index.n_rows:
        raise ValueError(f"docno has {len(values)} entries but groups has {index.n_rows}; one id per row.")
    codes, uniques = pd.factorize(values, sort=True)  # codes rank the ids in string order
    order = np.lexsort((codes, index.codes))
    same = (index.codes[order][1:] == index.codes[order][:-1]) & (codes[order][1:] == codes[order][:-1])
    if same.any():
        row = order[np.flatnonzero(same)[0]]
        raise ValueError(
            f"docno {plain_scalar(uniques[codes[row]])!r} appears more than once in question "
            f"{plain_scalar(index.keys[index.codes[row]])!r}; trec_eval rejects duplicate documents in a run, so "
            "every candidate of a question needs its own id."
        )
    return -codes


def question_values(values, index: GroupIndex, name: str, kind: str) -> np.ndarray:
    """One value per question of ``index``, in its group order, checked.

    Parameters
    ----------
    values : pandas.Series or array-like of shape (n_questions,)
        A Series indexed by question id (aligned on the ids; every question needs a value), or an array
        already in the order of the questions' first appearance.
    index : GroupIndex
        The questions.
    name : str
        The argument's name, for messages.
    kind : {"bool", "float"}
        Answer decisions (booleans) or finite numbers (confidences).

    Returns
    -------
    ndarray of shape (n_questions,)
        Booleans, or float64.
    """
    if isinstance(values, pd.Series):
        if values.index.has_duplicates:
            raise ValueError(f"{name} names a question more than once; give one value per question.")
        missing = ~pd.Index(index.keys).isin(values.index)
        if missing.any():
            raise ValueError(f"{name} has no value for question "
                             f"{plain_scalar(index.keys[np.flatnonzero(missing)[0]])!r} "
                             f"(and {int(missing.sum()) - 1} more); give one value per question of groups.")
        values = values.reindex(pd.Index(index.keys))
    arr = np.asarray(values)
    if arr.shape != (index.n_groups,):
        raise ValueError(
            f"{name} has shape {arr.shape} for {index.n_groups} questions; give one value per question: a Series "
            "indexed by question id, or an array in the order of the questions' first appearance in groups."
        )
    if kind == "bool":
        if arr.dtype.kind != "b":
            raise TypeError(f"{name} must hold booleans (True: the question is answered), got dtype {arr.dtype}.")
        return arr
    if arr.dtype.kind not in "biuf" or not np.isfinite(arr.astype(np.float64)).all():
        raise ValueError(f"{name} must hold one finite number per question.")
    return arr.astype(np.float64)


def check_k(k) -> int:
    """A cut-off ``k`` (of P@k, nDCG@k) as an ``int``; ``ValueError`` unless it is a positive integer."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}.")
    return int(k)
