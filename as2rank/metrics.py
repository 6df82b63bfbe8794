"""Ranking metrics over groups of candidates, and scorers for scikit-learn model selection.

Every metric sorts the rows once, inside each group, by descending score, and then works on whole arrays
(``bincount``/``reduceat``), so evaluating thousands of questions costs a few array passes.

Tie policies (``ties=``), for candidates of one question with equal scores:

* ``"pessimistic"`` (default): less relevant candidates are ranked first among ties, so a model cannot
  gain from ties; a constant scorer gets the worst score it could get.
* ``"optimistic"``: more relevant candidates first among ties (an upper bound).
* ``"stable"``: ties keep the original order (``position``, or the row order inside the group).
* ``"trec_eval"``: ties ordered by candidate id (``docno=``) in descending string order, exactly as
  trec_eval sorts a run (score descending, then ``strcmp`` of the docnos, larger first); with
  ``no_positive="zero"`` the per-question values equal trec_eval's (and pytrec_eval's, and so ir_measures'
  for these measures). Candidate ids must be unique within a question, as trec_eval requires.

Questions with no positive candidate (``no_positive=``): ``"skip"`` (default) leaves them out of the mean
(the "clean" protocol of the AS2 literature); ``"zero"`` counts them as 0. ``ranking_report(...,
unanswered="include")`` adds answer triggering over all questions; the other measures of answering or
abstaining are in :mod:`as2rank.triggering`.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from .data import GroupIndex, _check_keys, _plain, check_labels, ragged_arange

__all__ = [
    "mean_average_precision",
    "mean_reciprocal_rank",
    "precision_at_k",
    "ndcg_at_k",
    "ranking_report",
    "get_scorer",
    "RankingScorer",
    "paired_significance",
    "TIE_POLICIES",
]

#: Accepted values of ``ties=``.
TIE_POLICIES = ("pessimistic", "optimistic", "stable", "trec_eval")
_NO_POSITIVE = ("skip", "zero")


class _RankedRun:
    """One run (labels + scores) sorted inside each group according to a tie policy."""

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
        cum = np.cumsum(self.rel)
        before = np.repeat(cum[self.index.starts] - self.rel[self.index.starts], self.index.sizes)
        prec = (cum - before) / self.rank
        with np.errstate(invalid="ignore", divide="ignore"):
            return self._sum(prec * self.rel) / self.n_rel

    def reciprocal_rank(self):
        first = np.minimum.reduceat(np.where(self.rel > 0, self.rank, np.inf), self.index.starts)
        return 1.0 / first

    def precision(self, k):
        return self._sum(self.rel * (self.rank <= k)) / k

    def top_relevant(self):
        """Whether each question's top-ranked candidate is relevant (bool, one per group)."""
        return self.rel[self.index.starts] > 0

    def ndcg(self, k, gain):
        g = self.gain if gain == "linear" else np.exp2(self.gain) - 1.0
        disc = np.where(self.rank <= k, 1.0 / np.log2(self.rank + 1.0), 0.0)
        dcg = self._sum(g * disc)
        # Ideal ordering: labels sorted descending inside each group.
        ideal = np.lexsort((-self.gain, self.group))
        idcg = self._sum(g[ideal] * disc)
        with np.errstate(invalid="ignore", divide="ignore"):
            return dcg / idcg

    def aggregate(self, per_group, no_positive, per_group_out):
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
    values, kind = _check_keys(docno, "docno", what="candidate id")
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
            f"docno {_plain(uniques[codes[row]])!r} appears more than once in question "
            f"{_plain(index.keys[index.codes[row]])!r}; trec_eval rejects duplicate documents in a run, so every "
            "candidate of a question needs its own id."
        )
    return -codes


def _per_question(values, index: GroupIndex, name: str, kind: str) -> np.ndarray:
    """One value per question of ``index`` (in its group order): a :class:`pandas.Series` indexed by question id,
    aligned on the ids, or an array already in the order of the questions' first appearance. ``kind``:
    ``"bool"`` (answer decisions) or ``"float"`` (finite confidences)."""
    if isinstance(values, pd.Series):
        if values.index.has_duplicates:
            raise ValueError(f"{name} names a question more than once; give one value per question.")
        missing = ~pd.Index(index.keys).isin(values.index)
        if missing.any():
            raise ValueError(f"{name} has no value for question {_plain(index.keys[np.flatnonzero(missing)[0]])!r} "
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


def _triggering(correct, answerable, answered) -> dict:
    """Answer triggering (Yang, Yih & Meek 2015) from per-question arrays: ``correct`` (the top candidate is
    relevant), ``answerable`` (the question has a relevant candidate) and ``answered`` (the system answers)."""
    n_correct = int(np.sum(answered & correct))
    n_answered, n_answerable = int(np.sum(answered)), int(np.sum(answerable))
    precision = n_correct / n_answered if n_answered else 0.0
    recall = n_correct / n_answerable if n_answerable else 0.0
    f1 = 2 * n_correct / (n_answered + n_answerable) if n_answered + n_answerable else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "n_questions": len(correct),
            "n_answerable": n_answerable, "n_answered": n_answered, "n_correct": n_correct}


def _check_k(k):
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}.")
    return int(k)


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
        How candidates with equal scores are ordered (see the module docstring); ``"trec_eval"`` needs
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
    run = _RankedRun(y_true, y_score, groups, ties, position, docno)
    return run.aggregate(run.average_precision(), no_positive, per_group)


def mean_reciprocal_rank(
    y_true, y_score, groups, *, ties="pessimistic", no_positive="skip", position=None, per_group=False, docno=None
):
    run = _RankedRun(y_true, y_score, groups, ties, position, docno)
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
    run = _RankedRun(y_true, y_score, groups, ties, position, docno)
    return run.aggregate(run.precision(_check_k(k)), no_positive, per_group)


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
    run = _RankedRun(y_true, y_score, groups, ties, position, docno)
    return run.aggregate(run.ndcg(_check_k(k), gain), no_positive, per_group)


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
        triggering (:func:`as2rank.triggering.answer_triggering`): the only measures here that are defined
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
    run = _RankedRun(y_true, y_score, groups, ties, position, docno)
    report = {
        "map": run.aggregate(run.average_precision(), no_positive, False),
        "mrr": run.aggregate(run.reciprocal_rank(), no_positive, False),
    }
    for kk in k:
        report[f"p@{kk}"] = run.aggregate(run.precision(_check_k(kk)), no_positive, False)
    for kk in ndcg_k:
        report[f"ndcg@{kk}"] = run.aggregate(run.ndcg(_check_k(kk), "linear"), no_positive, False)
    report["n_questions"] = int(run.index.n_groups)
    report["n_evaluated"] = int(run.index.n_groups if no_positive == "zero" else (run.n_rel > 0).sum())
    if unanswered == "include":
        decisions = (np.ones(run.index.n_groups, dtype=bool) if answered is None
                     else _per_question(answered, run.index, "answered", "bool"))
        trig = _triggering(run.top_relevant(), run.n_rel > 0, decisions)
        report.update({f"answer_{m}": trig[m] for m in ("precision", "recall", "f1")},
                      n_answerable=trig["n_answerable"], n_answered=trig["n_answered"])
    return report


class RankingScorer:
    """A scorer ``(estimator, X, y) -> float`` for ``GridSearchCV(scoring=...)`` and ``cross_validate``.

    The groups are read from ``X["qid"]`` (and ``X["position"]`` when present), so any row subset
    scikit-learn takes (a CV fold) is scored per question. Build one with :func:`get_scorer`.

    Parameters
    ----------
    metric : callable
        One of the metric functions of this module.
    name : str
        Name shown in reprs.
    **kwargs
        Passed to ``metric`` (``k``, ``ties``, ``no_positive``), except ``docno``: the name of the column
        of ``X`` whose values are passed as the metric's ``docno``.
    """

    def __init__(self, metric, name, **kwargs):
        self.metric = metric
        self.name = name
        self.kwargs = kwargs

    def __call__(self, estimator, X, y_true, sample_weight=None):
        if sample_weight is not None:
            raise ValueError("Ranking scorers do not support sample_weight.")
        if not isinstance(X, pd.DataFrame) or "qid" not in X.columns:
            raise ValueError("Ranking scorers need X as a grouped-candidate DataFrame with a 'qid' column.")
        kwargs = dict(self.kwargs)
        column = kwargs.pop("docno", None)
        if column is not None:
            if column not in X.columns:
                raise ValueError(f"{self!r} reads candidate ids from column {column!r}, which X does not have.")
            kwargs["docno"] = X[column]
        y_score = estimator.predict(X)
        return self.metric(y_true, y_score, GroupIndex.from_frame(X), **kwargs)

    def __repr__(self):
        extra = "".join(f", {k}={v!r}" for k, v in self.kwargs.items())
        return f"get_scorer({self.name!r}{extra})"


def get_scorer(
    name: str, *, ties: str = "pessimistic", no_positive: str = "skip", docno: str | None = None
) -> RankingScorer:
    """A ranking scorer by name: ``"map"``, ``"mrr"``, ``"p@k"`` and ``"ndcg@k"`` for any k (``"p@1"``,
    ``"ndcg@10"``, ...).

    Parameters
    ----------
    name : str
        Metric name, case-insensitive.
    ties, no_positive : str
        As in the metric functions.
    docno : str, default=None
        Name of the column of ``X`` that holds the candidate ids; required by, and only accepted with,
        ``ties="trec_eval"``.

    Returns
    -------
    RankingScorer

    Examples
    --------
    >>> from as2rank.metrics import get_scorer
    >>> get_scorer("p@1")
    get_scorer('p@1', k=1, ties='pessimistic', no_positive='skip')
    """
    key = name.strip().lower()
    if ties not in TIE_POLICIES:
        raise ValueError(f"ties must be one of {TIE_POLICIES}, got {ties!r}.")
    if (ties == "trec_eval") != (docno is not None):
        raise ValueError(
            "get_scorer(ties='trec_eval') needs docno=<name of the column of X holding candidate ids>, and docno "
            f"is only accepted with that policy (got ties={ties!r}, docno={docno!r})."
        )
    if docno is not None and not isinstance(docno, str):
        raise TypeError(f"docno must be the name of a column of X, got {type(docno).__name__}.")
    common = {"ties": ties, "no_positive": no_positive}
    if docno is not None:
        common["docno"] = docno
    if key == "map":
        return RankingScorer(mean_average_precision, key, **common)
    if key == "mrr":
        return RankingScorer(mean_reciprocal_rank, key, **common)
    for prefix, metric in (("p@", precision_at_k), ("ndcg@", ndcg_at_k)):
        if key.startswith(prefix):
            try:
                k = int(key[len(prefix) :])
            except ValueError:
                break
            return RankingScorer(metric, key, k=_check_k(k), **common)
    raise ValueError(f"Unknown ranking scorer {name!r}; use 'map', 'mrr', 'p@k' or 'ndcg@k' (e.g. 'p@1', 'ndcg@10').")


def paired_significance(a, b, *, method="randomization", n_resamples=9999, random_state=0) -> float:
    """Two-sided p-value that two systems differ, from their per-question scores.

    Parameters
    ----------
    a, b : pandas.Series or array-like
        Per-question values of one metric for two systems (e.g. ``per_group=True`` output); Series are
        aligned on their index and questions missing (NaN) in either are dropped.
    method : {"randomization", "ttest"}, default="randomization"
        Paired randomisation (sign-flip permutation) test, as IR evaluation tools use, or paired t-test.
    n_resamples : int, default=9999
        Permutations for the randomisation test.
    random_state : int, default=0

    Returns
    -------
    float
    """
    from scipy import stats

    if isinstance(a, pd.Series) and isinstance(b, pd.Series):
        a, b = a.align(b, join="inner")
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"a and b must have the same shape, got {a.shape} and {b.shape}.")
    keep = ~(np.isnan(a) | np.isnan(b))
    a, b = a[keep], b[keep]
    if len(a) < 2 or np.allclose(a, b):
        return 1.0
    if method == "ttest":
        return float(stats.ttest_rel(a, b).pvalue)
    if method != "randomization":
        raise ValueError(f"method must be 'randomization' or 'ttest', got {method!r}.")
    result = stats.permutation_test(
        (a - b,),
        np.mean,
        permutation_type="samples",
        n_resamples=n_resamples,
        alternative="two-sided",
        random_state=random_state,
        vectorized=True,
    )
    return float(result.pvalue)
