""":class:`CalibratedRanker`: a ranker that says how likely each candidate is to answer its question, how likely
the top candidate of each question is to answer it, and when to abstain.

NumPy, SciPy and scikit-learn only: importing this module does not import torch (the wrapped ranker may).
"""

from __future__ import annotations

import warnings
from numbers import Integral, Real

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, clone
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_is_fitted

from ..base import RankerMixin, check_scores, rank_tiebreak
from ..data import GroupIndex, check_ranking_data, check_X
from ..ensemble.calibration import apply_calibration, fit_calibration
from ..ensemble.teachers import clone_sharing
from ..params import HasMethods, Interval, Options, ParameterMixin, check_param, validated
from ..persistence import PersistenceMixin
from .heldout import cross_fit
from .threshold import choose_threshold
from .trigger import fit_trigger, question_features, trigger_proba

__all__ = ["CALIBRATED_CONSTRAINTS", "PREFIT_FOLDS", "CalibratedRanker"]

#: Question folds of the calibration's cross-fitting when ``cv="prefit"`` (no folds are given).
PREFIT_FOLDS = 5

_TARGET = [Interval(Real, 0, 1, closed="right"), None]


#: The constraint table of :class:`CalibratedRanker`'s parameters (the command line checks its options with it).
CALIBRATED_CONSTRAINTS = {
    "estimator": [HasMethods(("fit", "predict"), "a ranker with fit and predict")],
    "method": [Options(("sigmoid", "isotonic"))],
    "cv": [Interval(Integral, 3, None), Options(("prefit",)), HasMethods("split", "a group splitter")],
    "target_precision": _TARGET,
    "target_coverage": _TARGET,
}


class CalibratedRanker(ParameterMixin, PersistenceMixin, RankerMixin, BaseEstimator):
    """Calibrated candidate probabilities, a question-level answer probability and an abstention threshold
    around any ranker, all learned out of fold.

    Ranking scores say which candidate is best, not whether it answers the question. ``fit`` learns three
    things, each on questions that the step before did not learn from:

    1. **Candidate probabilities.** The ranker's out-of-fold scores (a clone fitted on the other question folds,
       ``GroupKFold``, scores each fold, as :func:`~sklearn.model_selection.cross_val_predict` does) are mapped
       to P(the candidate answers the question) by ``method``; the ranker is then refitted on all the data
       (``estimator_``), and the map fitted on all the out-of-fold scores is applied to its scores
       (scikit-learn's ``CalibratedClassifierCV(ensemble=False)``). ``predict`` is the ranker's own score: the
       ranking never changes.
    2. **The question-level probability** that a question's top candidate answers it: a logistic regression on
       the question's calibrated probabilities (:data:`~as2rank.answer.trigger.FEATURES`: the top
       probability, its margin over the second, the entropy of the list, the number of candidates), learned
       from out-of-fold probabilities (each fold's rows calibrated by a map fitted on the other folds).
    3. **The threshold** above which a question is answered (``threshold_``), for ``target_precision``,
       ``target_coverage`` or the best answer-triggering F1, chosen on held-out question probabilities;
       :mod:`as2rank.answer.threshold` gives the rules and the report (``threshold_report_``, with a 95 %
       Wilson interval of the held-out precision).

    A held-out question probability never reads its own fold's labels: its map, its regression and the
    calibration of the questions that regression learns from are all fitted on other folds (``cv · (cv + 1)``
    small calibration fits, no refit of the ranker). Only the ranker's scores can carry them: with ``cv``
    folds, the clone that scores another fold was trained on this one, a second-order dependence that nested
    cross-validation (``cv · (cv - 1)`` more fits of the ranker) would remove; with ``cv="prefit"`` or a rule
    ranker there is none.

    Parameters
    ----------
    estimator : estimator, default=None
        Required: a ranker, pipeline or fitted search with ``fit`` and ``predict`` (unfitted, cloned, unless
        ``cv="prefit"``).
    method : {"sigmoid", "isotonic"}, default="sigmoid"
        Platt's sigmoid of the score (two parameters, monotone and smooth: the choice for a few hundred
        questions), or isotonic regression (any monotone shape; needs more data and gives ties).
    cv : int, "prefit" or splitter, default=5
        An integer ``k >= 3``: ``GroupKFold(k)`` by question (``fit`` fits the ranker ``k + 1`` times). A
        splitter whose ``split(X, y, groups)`` keeps questions whole, puts every row in one test fold and makes
        at least 3 folds (a model saved pickle-free needs an integer or ``"prefit"``). ``"prefit"``:
        ``estimator`` is fitted already and is used as it is (shared, not copied, by clones); the data given to
        ``fit`` must be held out from its training (a dev split), since a ranker scores the questions it learned
        from too well. It costs no refit, the reason to choose it for an expensive transformer; the
        calibration and the threshold then learn from the dev split alone, cross-fitted over
        :data:`~as2rank.answer.ranker.PREFIT_FOLDS` question folds.
    target_precision : float in (0, 1], default=None
        Answer only when the answers given are right at least this often on held-out questions (the most
        questions that allows).
    target_coverage : float in (0, 1], default=None
        Answer this fraction of questions, the most confident; at most one of the two targets.

    Attributes
    ----------
    estimator_ : estimator
        The fitted ranker (with ``cv="prefit"``, ``estimator`` itself).
    calibration_ : ndarray of shape (2,) or (2, n_knots)
        The score-to-probability map (:mod:`as2rank.ensemble.calibration`).
    trigger_coef_ : ndarray of shape (4,)
    trigger_intercept_ : float
        The question-level logistic regression.
    threshold_ : float
        A question is answered when its probability exceeds it.
    threshold_report_ : dict
        The rule, the target and what the threshold gave on the held-out questions
        (:func:`~as2rank.answer.threshold.choose_threshold`).
    holdout_confidence_ : ndarray of shape (n_questions,)
    holdout_correct_, holdout_answerable_ : ndarray of bool of shape (n_questions,)
        The out-of-fold question probabilities of the training questions, whether their top candidate is correct
        and whether they have a correct candidate: what :meth:`threshold_for` chooses other thresholds from.

    Examples
    --------
    >>> from as2rank import OverlapRankRanker
    >>> from as2rank.answer import CalibratedRanker
    >>> from as2rank.datasets import load_sample
    >>> X, y = load_sample()
    >>> model = CalibratedRanker(OverlapRankRanker(), target_precision=0.8).fit(X, y)  # doctest: +SKIP
    >>> model.predict_answer(X).head()                                                 # doctest: +SKIP
    """

    _parameter_constraints = CALIBRATED_CONSTRAINTS

    def __init__(self, estimator=None, method="sigmoid", cv=5, target_precision=None, target_coverage=None):
        self._keep_params(locals())

    def _check_rules(self):
        if self.target_precision is not None and self.target_coverage is not None:
            raise ValueError("Give target_precision or target_coverage, not both.")

    @validated
    def fit(self, X, y, groups=None):
        """Fit the ranker, its calibration, the question-level probability and the threshold.

        Parameters
        ----------
        X : pandas.DataFrame
            Grouped-candidate frame, all questions included (those without a correct candidate teach when to
            abstain).
        y : array-like of shape (n_rows,)
        groups : array-like of shape (n_rows,), default=None
            Question ids overriding ``X["qid"]`` (the ranker's clones then see them as ``qid``).

        Returns
        -------
        self
        """
        X, y, index = check_ranking_data(X, y, groups, text_columns=())
        if groups is not None:
            X = X.assign(qid=np.asarray(groups))
        if self.cv == "prefit":
            estimator = self.estimator
            try:
                check_is_fitted(estimator)
            except NotFittedError as exc:
                raise NotFittedError(f"cv='prefit' needs a fitted estimator; {type(estimator).__name__} is not "
                                     "fitted (fit it on other data, or give cv a number of folds).") from exc
            folds = _folds(PREFIT_FOLDS, X, y, index)
            scores = check_scores(estimator.predict(X), len(X))
        else:
            folds = _folds(self.cv, X, y, index)
            scores = np.empty(len(X))
            for train, test in folds:
                fold_model = clone(self.estimator).fit(X.iloc[train], y[train])
                scores[test] = check_scores(fold_model.predict(X.iloc[test]), len(test))
            estimator = clone(self.estimator).fit(X, y)
        fold_of = np.empty(index.n_rows, dtype=np.intp)
        for j, (_, test) in enumerate(folds):
            fold_of[test] = j
        features, top, confidence, _ = cross_fit(index, scores, y, fold_of, self.method, rank_tiebreak(X))
        correct, answerable = y[top] > 0, index.max(y) > 0
        report = choose_threshold(confidence, correct, answerable, target_precision=self.target_precision,
                                  target_coverage=self.target_coverage)
        if self.target_precision is not None and not report["n_answered"]:
            warnings.warn(f"{_unreachable(report)}: the model answers no question.", UserWarning, stacklevel=2)
        self.estimator_ = estimator
        self.calibration_ = fit_calibration(scores, y, self.method)
        self.trigger_coef_, self.trigger_intercept_ = fit_trigger(features, correct)
        self.threshold_, self.threshold_report_ = report["threshold"], report
        self.holdout_confidence_, self.holdout_correct_, self.holdout_answerable_ = confidence, correct, answerable
        return self

    def predict(self, X) -> np.ndarray:
        """The ranker's scores, unchanged (the calibration is monotone: it never changes the ranking).

        Parameters
        ----------
        X : pandas.DataFrame

        Returns
        -------
        ndarray of float64 of shape (n_rows,)
        """
        check_is_fitted(self, "calibration_")
        X = check_X(X, text_columns=())
        return check_scores(self.estimator_.predict(X), len(X))

    def predict_proba(self, X) -> np.ndarray:
        """P(the candidate answers its question), as scikit-learn's classifiers give probabilities.

        Parameters
        ----------
        X : pandas.DataFrame

        Returns
        -------
        ndarray of shape (n_rows, 2)
            Column 1 is P(answers), column 0 its complement.
        """
        p = apply_calibration(self.calibration_, self.predict(X))
        return np.column_stack([1.0 - p, p])

    def predict_answer(self, X, threshold=None, return_scores=False):
        """One row per question: its top candidate, the probability that it answers the question, and whether
        the model answers.

        Parameters
        ----------
        X : pandas.DataFrame
            Grouped-candidate frame.
        threshold : float in [0, 1], default=None
            Answer when the probability exceeds it; default ``threshold_``.
        return_scores : bool, default=False
            Also return the ranking scores of the rows (what :func:`as2rank.rank <as2rank.base.rank>` ranks
            by), from the same prediction.

        Returns
        -------
        answers : pandas.DataFrame
            Columns ``qid``, ``question``, ``answer`` (the top candidate, None when the model abstains),
            ``row`` (the index label of the top candidate in ``X``, also when abstaining), ``probability`` and
            ``answered``; questions in order of first appearance. The top candidate is the one
            :func:`as2rank.rank <as2rank.base.rank>` puts first.
        scores : ndarray of shape (n_rows,)
            Only with ``return_scores=True``.
        """
        check_param("threshold", threshold, [Interval(Real, 0, 1), None])
        scores = self.predict(X)
        index = GroupIndex.from_frame(X)
        features, top = question_features(index, scores, apply_calibration(self.calibration_, scores),
                                          rank_tiebreak(X))
        probability = trigger_proba(features, self.trigger_coef_, self.trigger_intercept_)
        answered = probability > (self.threshold_ if threshold is None else threshold)
        best = X["candidate"].to_numpy(dtype=object)[top]
        answers = pd.DataFrame({
            "qid": X["qid"].to_numpy()[top],
            "question": X["question"].to_numpy()[top],
            "answer": pd.Series(np.where(answered, best, None), dtype=object),
            "row": X.index.to_numpy()[top],
            "probability": probability,
            "answered": answered,
        })
        return (answers, scores) if return_scores else answers

    def threshold_for(self, target_precision=None, target_coverage=None) -> dict:
        """The threshold for another target, chosen on the held-out questions of ``fit`` as ``threshold_`` was.

        Parameters
        ----------
        target_precision, target_coverage : float in (0, 1], default=None
            At most one; neither: the best answer-triggering F1.

        Returns
        -------
        dict
            As ``threshold_report_``; ``threshold`` is the value to pass to :meth:`predict_answer` or to
            ``as2rank.rank(..., abstain=threshold)``.
        """
        check_is_fitted(self, "calibration_")
        check_param("target_precision", target_precision, _TARGET)
        check_param("target_coverage", target_coverage, _TARGET)
        if target_precision is not None and target_coverage is not None:
            raise ValueError("Give target_precision or target_coverage, not both.")
        report = choose_threshold(self.holdout_confidence_, self.holdout_correct_, self.holdout_answerable_,
                                  target_precision=target_precision, target_coverage=target_coverage)
        if target_precision is not None and not report["n_answered"]:
            raise ValueError(_unreachable(report))
        return report

    def __sklearn_clone__(self):
        if self.cv == "prefit":
            return clone_sharing(self, "estimator")
        return super().__sklearn_clone__()


def _unreachable(report) -> str:
    best = report["best_precision"]
    return (f"No threshold reaches precision {report['target']:g} on the {report['n_questions']} held-out questions"
            + (f" (the best is {best:.3f})" if best is not None else ""))


def _folds(cv, X, y, index: GroupIndex) -> list:
    """The ``(train, test)`` row splits of ``cv`` (a number of ``GroupKFold`` folds or a splitter), checked: whole
    questions, every row in exactly one test fold."""
    from sklearn.model_selection import GroupKFold

    if isinstance(cv, Integral):
        if index.n_groups < cv:
            raise ValueError(f"cv={cv} folds need at least {cv} questions; X has {index.n_groups}.")
        cv = GroupKFold(n_splits=int(cv))
    folds = [(np.asarray(train), np.asarray(test)) for train, test in cv.split(X, y, index.codes)]
    tested = np.zeros(index.n_rows, dtype=np.intp)
    for train, test in folds:
        tested[test] += 1
        if np.intersect1d(index.codes[train], index.codes[test]).size:
            raise ValueError("cv splits a question between training and test rows; use a group splitter such as "
                             "GroupKFold, which keeps each question in one fold.")
    if (tested != 1).any():
        raise ValueError("cv must put every row in exactly one test fold (a partition of the questions, as "
                         "GroupKFold makes).")
    if len(folds) < 3:
        raise ValueError(f"cv makes {len(folds)} folds; the cross-fitting needs at least 3 (a fold's held-out "
                         "probabilities are learned from two other folds at least).")
    return folds
