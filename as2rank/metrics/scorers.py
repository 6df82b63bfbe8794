"""Scorers for scikit-learn model selection: ``GridSearchCV(scoring=get_scorer("p@1"))``, ``cross_validate``.

A scorer predicts on the rows scikit-learn hands it (a fold of a grouped-candidate frame) and scores them per
question with a ranking measure, the questions read from ``X["qid"]``.
"""

from __future__ import annotations

import pandas as pd

from ..data import GroupIndex
from .ranking import mean_average_precision, mean_reciprocal_rank, ndcg_at_k, precision_at_k
from .runs import TIE_POLICIES, check_k

__all__ = ["get_scorer", "RankingScorer"]


class RankingScorer:
    """A scorer ``(estimator, X, y) -> float`` for ``GridSearchCV(scoring=...)`` and ``cross_validate``.

    The groups are read from ``X["qid"]`` (and ``X["position"]`` when present), so any row subset
    scikit-learn takes (a CV fold) is scored per question. Build one with :func:`get_scorer`.

    Parameters
    ----------
    metric : callable
        One of the ranking measures (:mod:`~as2rank.metrics.ranking`).
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
            return RankingScorer(metric, key, k=check_k(k), **common)
    raise ValueError(f"Unknown ranking scorer {name!r}; use 'map', 'mrr', 'p@k' or 'ndcg@k' (e.g. 'p@1', 'ndcg@10').")
