"""The ranking mixin that every as2rank estimator inherits (the estimator contract: ``docs/guide/estimators.md``)."""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
import pandas as pd

from .data import GroupIndex, check_X, make_frame, ragged_arange
from .metrics import mean_average_precision
from .params import Boolean, Interval, check_param

__all__ = ["RANK_CONSTRAINTS", "RankerMixin", "check_scores", "predict_rank", "rank", "rank_tiebreak"]

#: Accepted values of :func:`rank`'s arguments (the command line checks ``--top-k`` against the same table).
RANK_CONSTRAINTS = {"top_k": [Interval(Integral, 1, None), None], "abstain": [Boolean(), Interval(Real, 0, 1)]}


def rank_tiebreak(X):
    """What breaks equal scores inside a question, so that no ranking reads the row order as a rank: the
    ``position`` when the frame has one, else the candidate text (its rows' order only between identical
    texts). Returns None for the first case (the index orders by position already) or the text codes."""
    if "position" in X.columns:
        return None
    return pd.factorize(X["candidate"].to_numpy(dtype=object), sort=True)[0]


def check_scores(scores, n_rows):
    """``scores`` as float64, checked: one finite number per row. A loaded model whose state was damaged could
    otherwise rank by NaN (every comparison false) without an error."""
    scores = np.asarray(scores, dtype=np.float64)
    if scores.shape != (n_rows,):
        raise ValueError(f"The model returned scores of shape {scores.shape} for {n_rows} rows; expected one per row.")
    bad = np.flatnonzero(~np.isfinite(scores))
    if len(bad):
        raise ValueError(f"The model returned {len(bad)} non-finite score(s) (NaN or infinite), e.g. for row {bad[0]} "
                         "of the table: its fitted state is damaged, or the rows hold values it cannot score.")
    return scores


def predict_rank(estimator, X) -> np.ndarray:
    """1-based rank of each row inside its question from any fitted estimator's ``predict`` scores.

    The same as :meth:`RankerMixin.predict_rank`, for objects that do not have that method, such as a
    scikit-learn ``Pipeline`` ending in an as2rank ranker. Equal scores are ordered by ``position``, else by
    candidate text.

    Parameters
    ----------
    estimator : fitted estimator with ``predict``
    X : pandas.DataFrame
        Grouped-candidate frame.

    Returns
    -------
    ndarray of int of shape (n_rows,)
    """
    X = check_X(X, text_columns=())
    scores = estimator.predict(X)
    return GroupIndex.from_frame(X).rank(scores, rank_tiebreak(X))


def rank(estimator, X, *, top_k: int | None = None, abstain=False) -> pd.DataFrame:
    """Every question's candidates in rank order, with their scores, from any fitted estimator.

    Works with as2rank rankers, scikit-learn pipelines ending in one and fitted searches
    (``GridSearchCV``, :class:`~as2rank.model_selection.selector.RankerSelector`): anything with ``predict``.

    Parameters
    ----------
    estimator : fitted estimator with ``predict``
    X : pandas.DataFrame
        Grouped-candidate frame (e.g. from :func:`as2rank.datasets.read_pairs`).
    top_k : int, default=None
        Keep only the best ``top_k`` candidates of each question.
    abstain : bool or float in [0, 1], default=False
        Say which questions the model answers: True with the model's own threshold, a number with that
        threshold on the question-level probability. Needs a model that can abstain
        (:class:`~as2rank.answer.ranker.CalibratedRanker`, its ``predict_answer``).

    Returns
    -------
    pandas.DataFrame
        Columns ``qid``, ``question``, ``rank`` (1 = best), ``candidate``, ``score`` and ``row`` (the index
        label of the row in ``X``); questions in order of first appearance, best candidate first. Equal
        scores are ordered by ``position`` when ``X`` has one, else by candidate text, so that shuffling the
        rows of a table without positions never changes the ranking. With ``abstain``, also
        ``answer_probability`` (the question's probability that its top candidate answers it, on each of its
        rows) and ``answer`` (True on the top candidate of each answered question, False everywhere else).

    Raises
    ------
    ValueError
        If the estimator returns a score that is not finite (a damaged model), or not one per row, or
        ``abstain`` is asked of a model that cannot abstain.
    """
    check_param("top_k", top_k, RANK_CONSTRAINTS["top_k"])
    check_param("abstain", abstain, RANK_CONSTRAINTS["abstain"])
    X = check_X(X)
    index = GroupIndex.from_frame(X)
    answers = None
    if isinstance(abstain, (bool, np.bool_)) and not abstain:
        scores = estimator.predict(X)
    elif not hasattr(estimator, "predict_answer"):
        raise ValueError(f"abstain needs a model that can abstain; a {type(estimator).__name__} cannot: wrap it in "
                         "as2rank.answer.CalibratedRanker (as2rank fit --calibrate).")
    else:
        threshold = None if isinstance(abstain, (bool, np.bool_)) else abstain
        answers, scores = estimator.predict_answer(X, threshold=threshold, return_scores=True)
    scores = check_scores(scores, len(X))
    order = index.sort(scores, rank_tiebreak(X))
    ranks = ragged_arange(index.sizes) + 1
    keep = slice(None) if top_k is None else ranks <= top_k
    order, ranks = order[keep], ranks[keep]
    ranked = pd.DataFrame(
        {
            "qid": X["qid"].to_numpy()[order],
            "question": X["question"].to_numpy()[order],
            "rank": ranks,
            "candidate": X["candidate"].to_numpy()[order],
            "score": scores[order],
            "row": X.index.to_numpy()[order],
        }
    )
    if answers is not None:  # one row per question, in the index's group order
        question = index.codes[order]
        ranked["answer_probability"] = answers["probability"].to_numpy()[question]
        ranked["answer"] = (ranks == 1) & answers["answered"].to_numpy()[question]
    return ranked


class RankerMixin:
    """Mixin for rankers of grouped candidates.

    A subclass implements ``fit(X, y, groups=None)`` and ``predict(X)`` (one score per row, higher is
    better); the mixin adds :meth:`predict_rank`, :meth:`score` (MAP), :meth:`rank` for plain strings, the
    scikit-learn tags, and a default metadata-routing request for ``groups`` in ``fit``, so that with
    ``sklearn.set_config(enable_metadata_routing=True)``, ``GridSearchCV(...).fit(X, y, groups=g)`` routes
    ``groups`` both to the splitter and to the estimator.
    """

    # Request ``groups`` in fit by default (used only when metadata routing is enabled).
    __metadata_request__fit = {"groups": True}

    def predict_rank(self, X) -> np.ndarray:
        """1-based rank of each row inside its question (1 = best).

        Rows are ranked by ``predict`` scores, descending; equal scores are ordered by ``position`` when
        ``X`` has one, else by candidate text (never by the row order), so the ranks of a question are always
        a permutation of ``1..n``.

        Parameters
        ----------
        X : pandas.DataFrame
            Grouped-candidate frame.

        Returns
        -------
        ndarray of int of shape (n_rows,)
        """
        return predict_rank(self, X)

    def score(self, X, y, sample_weight=None) -> float:
        """Mean average precision of ``predict`` on ``(X, y)``, over questions with a positive.

        Ties are ranked pessimistically (see :mod:`as2rank.metrics`).

        Parameters
        ----------
        X : pandas.DataFrame
        y : array-like of shape (n_rows,)
        sample_weight : None
            Not supported; present for scikit-learn's signature.

        Returns
        -------
        float
        """
        if sample_weight is not None:
            raise ValueError("sample_weight is not supported by ranking scores.")
        X = check_X(X, text_columns=())
        position = X["position"].to_numpy() if "position" in X.columns else None
        return mean_average_precision(y, self.predict(X), X["qid"].to_numpy(), position=position)

    def rank(self, question: str, candidates, top_k: int | None = None) -> pd.DataFrame:
        """Rank candidate sentences for one question given as plain strings.

        Parameters
        ----------
        question : str
        candidates : sequence of str
            In their original order (document or retrieval order), which some models use.
        top_k : int, default=None
            Return only the best ``top_k``.

        Returns
        -------
        pandas.DataFrame
            Columns ``candidate``, ``score`` and ``position`` (index in ``candidates``), best first.
        """
        check_param("top_k", top_k, [Interval(Integral, 1, None), None])
        X = make_frame(question, candidates)
        scores = np.asarray(self.predict(X), dtype=np.float64)
        order = np.lexsort((np.arange(len(X)), -scores))
        if top_k is not None:
            order = order[:top_k]
        return pd.DataFrame(
            {"candidate": X["candidate"].to_numpy()[order], "score": scores[order], "position": order}
        )

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # Input is a grouped-candidate DataFrame with text columns, not a numeric 2-D array.
        tags.input_tags.two_d_array = False
        tags.input_tags.string = True
        tags.target_tags.required = True
        return tags
