"""Rule-based and learned lexical baselines (Bonadiman & Moschitti 2020, §2.1 and Table 2).

* :class:`WordOverlapRanker` (WO): number of unique lower-cased tokens shared by question and candidate.
* :class:`ReciprocalRankRanker` (RR): ``1 / (position + 1)``, the retrieval order.
* :class:`OverlapRankRanker` (WO+RR): word overlap, ties broken by the retrieval position.
* :class:`LexicalFeatures` and :class:`PointwiseRanker`: overlap/position features and a meta-ranker that
  turns any scikit-learn classifier or regressor into a ranker, for a learned lexical baseline::

      make_pipeline(LexicalFeatures(), PointwiseRanker(LogisticRegression()))

Overlaps are computed as products of sparse binary bag-of-words matrices, each distinct text tokenised
once. The retrieval rank is the ``position`` column (:func:`~as2rank.data.retrieval_positions`); the row
order of ``X`` is never read as one, so without that column RR refuses, WO+RR is plain word overlap and the
``reciprocal_rank`` feature is 0.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, TransformerMixin, clone, is_classifier
from sklearn.utils.validation import check_is_fitted

from ..base import RankerMixin
from ..data import FORMAT_COLUMNS, check_ranking_data, check_X, require_columns, retrieval_positions
from ..params import Boolean, HasMethods, InstanceOf, ParameterMixin, validated
from ..persistence import PersistenceMixin
from ..text import bag_of_words, tokenize, vocabulary_indices

__all__ = [
    "WordOverlapRanker",
    "ReciprocalRankRanker",
    "OverlapRankRanker",
    "LexicalFeatures",
    "PointwiseRanker",
]


def _binary_bags(X: pd.DataFrame, lower: bool, drop_punct: bool, vocabulary=None):
    """Binary bags of words of the question and the candidate of every row, on one vocabulary."""
    q_codes, q_texts = pd.factorize(X["question"].to_numpy(), sort=False)
    c_codes, c_texts = pd.factorize(X["candidate"].to_numpy(), sort=False)
    tokens = tokenize(list(q_texts) + list(c_texts), lower=lower, drop_punct=drop_punct)
    bags, vocabulary = bag_of_words(tokens, vocabulary)
    bags.data[:] = 1.0  # unique tokens
    q_bags = bags[: len(q_texts)][q_codes]
    c_bags = bags[len(q_texts) :][c_codes]
    return q_bags, c_bags, vocabulary


def _word_overlap(X: pd.DataFrame, lower: bool, drop_punct: bool) -> np.ndarray:
    q_bags, c_bags, _ = _binary_bags(X, lower, drop_punct)
    return np.asarray(q_bags.multiply(c_bags).sum(axis=1), dtype=np.float64).ravel()


def _required_positions(X: pd.DataFrame) -> np.ndarray:
    """``X["position"]`` for RR, which has nothing to rank by without it (the row order is not a rank)."""
    positions = retrieval_positions(X)
    if positions is None:
        raise ValueError(
            "ReciprocalRankRanker ranks by the retrieval order, and X has no 'position' column; give each candidate's "
            "0-based retrieval rank as X['position'] (read_pairs(..., position='your_rank_column'))."
        )
    return positions


class _RuleRanker(ParameterMixin, PersistenceMixin, RankerMixin, BaseEstimator):
    """Shared plumbing of the rule-based rankers: nothing to learn, ``fit`` only validates."""

    _text_columns: tuple = ("question", "candidate")

    @validated
    def fit(self, X, y=None, groups=None):
        """Validate the input; nothing is learned.

        Parameters
        ----------
        X : pandas.DataFrame
            Grouped-candidate frame.
        y : array-like of shape (n_rows,), default=None
            Relevance labels (validated when given, otherwise unused).
        groups : array-like of shape (n_rows,), default=None
            Question ids overriding ``X["qid"]`` (validated, otherwise unused).

        Returns
        -------
        self
        """
        check_ranking_data(X, y, groups, require_y=False, text_columns=self._text_columns)
        return self

    @validated
    def predict(self, X) -> np.ndarray:
        """The rule's score of each row, higher is better (no fitted state: ``fit`` only validates).

        Parameters
        ----------
        X : pandas.DataFrame
            Grouped-candidate frame with the columns the rule reads (``question``, ``candidate`` and
            ``position`` where there is one).

        Returns
        -------
        ndarray of shape (n_rows,)
        """
        X = check_X(X, text_columns=self._text_columns)
        return self._scores(X)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.requires_fit = False
        tags.target_tags.required = False
        return tags


class WordOverlapRanker(_RuleRanker):
    """Word overlap (WO): the number of unique tokens that question and candidate share.

    Tokens come from spaCy's English tokenizer, lower-cased (the paper's setting). Many candidates tie
    on small integer counts, so the metric's tie policy matters: the paper's WikiQA figure is reproduced with
    ``ties="pessimistic"`` (``docs/benchmarks/baselines.md``). Use :class:`OverlapRankRanker`
    to break ties by position.

    Parameters
    ----------
    lowercase : bool, default=True
        Compare lower-cased tokens.
    drop_punct : bool, default=False
        Ignore punctuation tokens.

    Examples
    --------
    >>> from as2rank import WordOverlapRanker
    >>> WordOverlapRanker().rank("who wrote hamlet ?", ["Paris is big .", "Hamlet was written by Shakespeare ."])
                                candidate  score  position
    0  Hamlet was written by Shakespeare .    2.0         1
    1                      Paris is big .    1.0         0
    """

    _parameter_constraints = {"lowercase": [Boolean()], "drop_punct": [Boolean()]}

    def __init__(self, lowercase=True, drop_punct=False):
        self._keep_params(locals())

    def _scores(self, X):
        return _word_overlap(X, self.lowercase, self.drop_punct)


class ReciprocalRankRanker(_RuleRanker):
    """Reciprocal rank (RR): ``1 / (position + 1)``; reproduces the retrieval order of the candidates.

    Reads ``X["position"]``, the 0-based retrieval (or document) rank. ``fit`` and ``predict`` raise a
    ``ValueError`` when ``X`` has no ``position`` column: the row order of a table is not a rank.
    """

    _text_columns = ()

    def fit(self, X, y=None, groups=None):
        """Validate the input, ``X["position"]`` included; nothing is learned (see :meth:`predict`).

        Parameters
        ----------
        X : pandas.DataFrame
            Grouped-candidate frame with a ``position`` column.
        y, groups : array-like of shape (n_rows,), default=None
            Validated when given, otherwise unused.

        Returns
        -------
        self
        """
        super().fit(X, y, groups)
        _required_positions(X)
        return self

    def _scores(self, X):
        return 1.0 / (_required_positions(X) + 1.0)


class OverlapRankRanker(_RuleRanker):
    """WO+RR: word overlap, ties broken by the retrieval position (earlier first).

    The score is ``overlap + RR / 2``: since the overlap is an integer and ``RR / 2`` lies in ``(0, 0.5]``,
    a larger overlap always wins and equal overlaps are ordered by position. Without a ``position`` column
    the score is the plain word overlap and equal overlaps stay tied (the row order is not a rank).

    Parameters
    ----------
    lowercase : bool, default=True
    drop_punct : bool, default=False
        As in :class:`WordOverlapRanker`.
    """

    _parameter_constraints = {"lowercase": [Boolean()], "drop_punct": [Boolean()]}

    def __init__(self, lowercase=True, drop_punct=False):
        self._keep_params(locals())

    def _scores(self, X):
        overlap = _word_overlap(X, self.lowercase, self.drop_punct)
        positions = retrieval_positions(X)
        return overlap if positions is None else overlap + 0.5 / (positions + 1.0)


class LexicalFeatures(ParameterMixin, PersistenceMixin, TransformerMixin, BaseEstimator):
    """Lexical overlap and position features, appended as columns to the grouped-candidate frame.

    The output keeps every input column (so ``qid`` still reaches the ranker and scorers downstream) and
    adds:

    ``overlap``
        unique shared tokens (WO);
    ``overlap_question``, ``overlap_candidate``
        the overlap divided by the number of unique tokens of the question, of the candidate;
    ``idf_overlap``
        sum of the IDF of the shared tokens; IDF is learnt in ``fit`` over the distinct candidate
        sentences, ``log((1 + n) / (1 + df)) + 1``; unseen tokens get the largest IDF;
    ``idf_overlap_question``
        ``idf_overlap`` divided by the IDF mass of the question's tokens;
    ``reciprocal_rank``
        ``1 / (position + 1)``; 0 in every row when ``X`` has no ``position`` column (no known rank, as for
        an infinitely deep position: the row order is not a rank).

    Parameters
    ----------
    lowercase : bool, default=True
    drop_punct : bool, default=True
        Ignore punctuation tokens (they carry no lexical evidence and dilute the normalised features).

    Attributes
    ----------
    vocabulary_ : dict
        Token → index of ``idf_``.
    idf_ : ndarray
    unseen_idf_ : float
        The IDF of a token unseen in fit.
    """

    # Accept ``groups`` when metadata routing sends it through a pipeline (it is only validated).
    __metadata_request__fit = {"groups": True}

    feature_names = (
        "overlap",
        "overlap_question",
        "overlap_candidate",
        "idf_overlap",
        "idf_overlap_question",
        "reciprocal_rank",
    )

    _parameter_constraints = {"lowercase": [Boolean()], "drop_punct": [Boolean()]}

    def __init__(self, lowercase=True, drop_punct=True):
        self._keep_params(locals())

    @validated
    def fit(self, X, y=None, groups=None):
        """Learn the IDF of candidate tokens.

        Parameters
        ----------
        X : pandas.DataFrame
            Grouped-candidate frame; the IDF counts each distinct ``candidate`` text once.
        y, groups : ignored
            Validated when given.

        Returns
        -------
        self
        """
        X, _, _ = check_ranking_data(X, y, groups, require_y=False)
        texts = pd.unique(X["candidate"].to_numpy())
        bags, vocabulary = bag_of_words(tokenize(texts, lower=self.lowercase, drop_punct=self.drop_punct))
        df = np.asarray((bags > 0).sum(axis=0), dtype=np.float64).ravel()
        self.vocabulary_ = vocabulary
        self.idf_ = np.log((1.0 + len(texts)) / (1.0 + df)) + 1.0
        self.unseen_idf_ = np.log(1.0 + len(texts)) + 1.0
        return self

    def transform(self, X) -> pd.DataFrame:
        """Append the feature columns.

        Parameters
        ----------
        X : pandas.DataFrame
            Grouped-candidate frame; the features read ``question``, ``candidate`` and ``position`` (when
            present).

        Returns
        -------
        pandas.DataFrame
            ``X`` with the columns of ``feature_names`` appended (a new frame; ``X`` is not modified).
        """
        check_is_fitted(self, "idf_")
        X = check_X(X)
        clash = [c for c in self.feature_names if c in X.columns]
        if clash:
            raise ValueError(f"X already has the column(s) {clash} that LexicalFeatures would add.")
        q_bags, c_bags, vocabulary = _binary_bags(X, self.lowercase, self.drop_punct)
        idf = self._idf_for(vocabulary)
        shared = q_bags.multiply(c_bags)
        overlap = np.asarray(shared.sum(axis=1)).ravel()
        n_q = np.asarray(q_bags.sum(axis=1)).ravel()
        n_c = np.asarray(c_bags.sum(axis=1)).ravel()
        idf_overlap = shared @ idf
        idf_q = q_bags @ idf
        with np.errstate(invalid="ignore", divide="ignore"):
            features = {
                "overlap": overlap,
                "overlap_question": np.nan_to_num(overlap / n_q),
                "overlap_candidate": np.nan_to_num(overlap / n_c),
                "idf_overlap": idf_overlap,
                "idf_overlap_question": np.nan_to_num(idf_overlap / idf_q),
                "reciprocal_rank": _reciprocal_rank(X),
            }
        return X.assign(**features)

    def _idf_for(self, vocabulary: dict) -> np.ndarray:
        """IDF of every token of ``vocabulary`` (unseen tokens get the largest IDF)."""
        fitted = vocabulary_indices(list(vocabulary), self.vocabulary_)
        return np.where(fitted >= 0, self.idf_[np.maximum(fitted, 0)], self.unseen_idf_)

    def get_feature_names_out(self, input_features=None):
        """Names of the output columns: the input columns followed by the feature columns."""
        check_is_fitted(self, "idf_")
        base = list(input_features) if input_features is not None else []
        return np.asarray(base + list(self.feature_names), dtype=object)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.two_d_array = False
        tags.input_tags.string = True
        return tags


def _reciprocal_rank(X: pd.DataFrame) -> np.ndarray:
    """``1 / (position + 1)``, or 0 for every row (no known rank) when ``X`` has no ``position`` column."""
    positions = retrieval_positions(X)
    return np.zeros(len(X)) if positions is None else 1.0 / (positions + 1.0)


def _check_class_labels(y: np.ndarray, estimator) -> None:
    """Refuse labels a classifier cannot learn from: non-integer values, or a single class."""
    name = type(estimator).__name__
    fractional = y != np.round(y)
    if fractional.any():
        example = _plain_number(y[np.flatnonzero(fractional)[0]])
        raise ValueError(
            f"PointwiseRanker wraps a classifier ({name}), which needs class labels: whole numbers, 0/1 or "
            f"graded 0, 1, 2, ...; y holds non-integer labels such as {example}. For continuous relevance, wrap a "
            "regressor instead, e.g. PointwiseRanker(Ridge())."
        )
    classes = np.unique(y)
    if len(classes) < 2:
        raise ValueError(
            f"PointwiseRanker wraps a classifier ({name}), which needs labels of at least two classes (0/1, or "
            f"graded 0, 1, 2, ...); all {len(y)} labels of y are {_plain_number(classes[0])}. Train on questions with "
            "both correct and wrong candidates."
        )


def _plain_number(value) -> int | float:
    """A label as it reads best in a message: ``1`` rather than ``1.0``."""
    value = float(value)
    return int(value) if value.is_integer() else value


class PointwiseRanker(ParameterMixin, PersistenceMixin, RankerMixin, BaseEstimator):
    """Turn any scikit-learn classifier or regressor into a ranker of grouped candidates.

    Each row is scored independently from its numeric feature columns: the positive-class probability
    (``predict_proba[:, 1]``) of a binary classifier, the expected label for a multi-class one, else
    ``decision_function``, else ``predict``. The grouped-candidate columns (``qid``, ``position``, texts)
    are not features; they keep travelling with the rows so that scorers can group them.

    A classifier learns from class labels: whole numbers (0/1, or graded 0, 1, 2, ...) with at least two
    distinct values; ``fit`` refuses anything else before fitting it. With graded labels the score is the
    expected label under the classifier's probabilities. A regressor takes any numeric labels, continuous
    relevance included.

    Parameters
    ----------
    estimator : estimator
        An unfitted scikit-learn classifier or regressor (cloned in ``fit``).
    features : list of str, default=None
        Feature columns; ``None`` takes every numeric column that is not part of the grouped-candidate
        format (e.g. the columns added by :class:`LexicalFeatures`).

    Attributes
    ----------
    estimator_ : estimator
        The fitted clone.
    features_ : list of str
        Feature columns used.

    Examples
    --------
    >>> from sklearn.linear_model import LogisticRegression
    >>> from sklearn.pipeline import make_pipeline
    >>> from as2rank import LexicalFeatures, PointwiseRanker
    >>> model = make_pipeline(LexicalFeatures(), PointwiseRanker(LogisticRegression()))
    """

    _parameter_constraints = {
        "estimator": [HasMethods("fit", "a scikit-learn estimator (with fit)"), None],
        "features": [InstanceOf((list, tuple, np.ndarray, pd.Index), "a list of feature column names"), None],
    }

    def __init__(self, estimator=None, features=None):
        self._keep_params(locals())

    def _feature_matrix(self, X, features):
        require_columns(X.columns, features, lambda missing: f"X is missing the feature column(s) {missing}.")
        F = X[list(features)]
        non_numeric = [c for c in features if not pd.api.types.is_numeric_dtype(F[c].dtype)]
        if non_numeric:
            raise TypeError(f"Feature column(s) {non_numeric} are not numeric.")
        return F.to_numpy(dtype=np.float64)

    @validated
    def fit(self, X, y, groups=None):
        """Fit the wrapped estimator on the feature columns.

        Parameters
        ----------
        X : pandas.DataFrame
            Grouped-candidate frame with numeric feature columns.
        y : array-like of shape (n_rows,)
            Relevance labels: for a classifier, whole numbers with at least two distinct values (0/1, or
            graded 0, 1, 2, ...); for a regressor, any numbers.
        groups : array-like, default=None
            Question ids (validated; pointwise training does not use them).

        Returns
        -------
        self

        Raises
        ------
        ValueError
            If the estimator is a classifier and the labels are not whole numbers or take only one value.
        """
        if self.estimator is None:
            raise ValueError("PointwiseRanker needs an estimator, e.g. PointwiseRanker(LogisticRegression()).")
        X, y, _ = check_ranking_data(X, y, groups, text_columns=())
        if is_classifier(self.estimator):
            _check_class_labels(y, self.estimator)
        if self.features is None:
            features = [
                c for c in X.columns if c not in FORMAT_COLUMNS and pd.api.types.is_numeric_dtype(X[c].dtype)
            ]
            if not features:
                raise ValueError(
                    "X has no numeric feature columns; put a feature transformer before PointwiseRanker, "
                    "e.g. make_pipeline(LexicalFeatures(), PointwiseRanker(LogisticRegression()))."
                )
        else:
            features = list(self.features)
        self.features_ = features
        self.estimator_ = clone(self.estimator).fit(self._feature_matrix(X, features), y)
        return self

    def predict(self, X) -> np.ndarray:
        """The wrapped estimator's score of each row's feature columns, higher is better.

        Parameters
        ----------
        X : pandas.DataFrame
            Grouped-candidate frame with the ``features_`` columns.

        Returns
        -------
        ndarray of shape (n_rows,)
        """
        check_is_fitted(self, "estimator_")
        X = check_X(X, text_columns=())
        F = self._feature_matrix(X, self.features_)
        est = self.estimator_
        if is_classifier(est) and hasattr(est, "predict_proba"):
            proba = est.predict_proba(F)
            if proba.shape[1] == 2:
                return proba[:, 1]
            return proba @ np.asarray(est.classes_, dtype=np.float64)
        if hasattr(est, "decision_function"):
            return np.asarray(est.decision_function(F), dtype=np.float64)
        return np.asarray(est.predict(F), dtype=np.float64)
