"""Measures of answering or abstaining, over all questions: answer triggering, precision against coverage, and
the calibration of candidate probabilities.

A question-answering system answers a question with its top-ranked candidate, or abstains. On WikiQA test 390
of the 633 questions have no correct candidate, so the ranking metrics' "clean" protocol, which drops them
(:mod:`~as2rank.metrics.ranking`), cannot say whether a system should answer at all. These measures score every
question:

* :func:`~as2rank.metrics.answer_triggering`: question-level precision, recall and F1 of Yang, Yih & Meek
  (2015, WikiQA). A question is answered correctly when the system answers it and its top candidate is
  correct; precision is correct answers over answered questions, recall correct answers over the questions
  that have a correct candidate, F1 their harmonic mean.
* :func:`~as2rank.metrics.precision_coverage_curve`, :func:`~as2rank.metrics.precision_at_coverage`,
  :func:`~as2rank.metrics.precision_coverage_auc`: the questions answered in order of a question-level
  confidence, most confident first; coverage is the fraction of all questions answered, precision the
  fraction of those whose top candidate is correct (the selective prediction view; the area under the
  risk-coverage curve is one minus the area here).
* :func:`~as2rank.metrics.expected_calibration_error` and :func:`~as2rank.metrics.brier_score`: how well
  candidate probabilities match the labels.
* :func:`~as2rank.metrics.wilson_interval`: the confidence interval of a proportion (a precision over
  questions).

The top candidate of a question is the first by ``y_score`` under the tie policy ``ties`` (as in the ranking
measures, :mod:`as2rank.metrics`: pessimistic by default; ``ties="stable"`` with ``position`` is the candidate that
:func:`as2rank.rank <as2rank.base.rank>` puts first in a table with positions). Per-question inputs
(``answered``, ``confidence``) are a :class:`pandas.Series` indexed by question id, or an array in the order
of the questions' first appearance in ``groups`` (the order of ``per_group=True`` results and of
:meth:`CalibratedRanker.predict_answer <as2rank.answer.ranker.CalibratedRanker.predict_answer>`).
NumPy only: every function sorts once and works on whole arrays.
"""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np

from ..data import check_labels
from ..params import Interval, check_param
from .runs import RankedRun, question_values

__all__ = [
    "answer_triggering",
    "precision_coverage_curve",
    "precision_at_coverage",
    "precision_coverage_auc",
    "expected_calibration_error",
    "brier_score",
    "wilson_interval",
    "triggering_from_outcomes",
    "coverage_curve",
]

_DOC_RUN = """
    y_true : array-like of shape (n_rows,)
        Relevance labels (> 0: a correct candidate).
    y_score : array-like of shape (n_rows,)
        Ranking scores, higher is better: they choose each question's top candidate.
    groups : array-like of shape (n_rows,)
        Question id of each row (e.g. ``X["qid"]``).
    ties : {"pessimistic", "optimistic", "stable", "trec_eval"}, default="pessimistic"
        How equal scores are ordered (:mod:`as2rank.metrics`).
    position, docno : array-like of shape (n_rows,), default=None
        As in :func:`~as2rank.metrics.mean_average_precision`.
"""


def _outcomes(y_true, y_score, groups, ties, position, docno):
    """The run's group index, whether each question's top candidate is correct, and whether it has one."""
    run = RankedRun(y_true, y_score, groups, ties, position, docno)
    return run.index, run.top_relevant(), run.n_rel > 0


def triggering_from_outcomes(correct, answerable, answered) -> dict:
    """Answer triggering from per-question outcomes: what :func:`~as2rank.metrics.answer_triggering` and
    :func:`~as2rank.metrics.ranking_report` compute once a run's questions are known.

    Parameters
    ----------
    correct, answerable, answered : ndarray of bool of shape (n_questions,)
        Whether each question's top candidate is relevant, whether it has a relevant candidate, and whether
        the system answers it.

    Returns
    -------
    dict
        As :func:`~as2rank.metrics.answer_triggering`.
    """
    n_correct = int(np.sum(answered & correct))
    n_answered, n_answerable = int(np.sum(answered)), int(np.sum(answerable))
    precision = n_correct / n_answered if n_answered else 0.0
    recall = n_correct / n_answerable if n_answerable else 0.0
    f1 = 2 * n_correct / (n_answered + n_answerable) if n_answered + n_answerable else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "n_questions": len(correct),
            "n_answerable": n_answerable, "n_answered": n_answered, "n_correct": n_correct}


def answer_triggering(y_true, y_score, groups, answered, *, ties="pessimistic", position=None, docno=None) -> dict:
    index, correct, answerable = _outcomes(y_true, y_score, groups, ties, position, docno)
    return triggering_from_outcomes(correct, answerable, question_values(answered, index, "answered", "bool"))


answer_triggering.__doc__ = (
    "Answer triggering over all questions (Yang, Yih & Meek 2015): question-level precision, recall and F1.\n\n"
    "    A question counts as answered correctly when ``answered`` is True for it and its top candidate is\n"
    "    correct. ``precision`` = correct / answered questions (0 when none is answered, as scikit-learn's\n"
    "    ``zero_division=0``); ``recall`` = correct / questions with a correct candidate; ``f1`` their harmonic\n"
    "    mean, ``2 · correct / (answered + answerable)``.\n\n    Parameters\n    ----------"
    + _DOC_RUN
    + "    answered : array-like of bool of shape (n_questions,)\n"
    "        Whether the system answers each question (see :mod:`as2rank.metrics.answering` for the order).\n"
    "\n    Returns\n    -------\n    dict\n"
    "        ``precision``, ``recall``, ``f1``, ``n_questions``, ``n_answerable`` (questions with a correct\n"
    "        candidate), ``n_answered`` and ``n_correct``.\n"
)


def coverage_curve(confidence, correct):
    """Precision against coverage from per-question arrays: what
    :func:`~as2rank.metrics.precision_coverage_curve` computes once a run's questions are known, and what the
    answer threshold of :class:`~as2rank.answer.ranker.CalibratedRanker` is chosen on.

    Parameters
    ----------
    confidence : ndarray of float of shape (n_questions,)
        A question-level confidence, higher is surer.
    correct : ndarray of bool of shape (n_questions,)
        Whether each question's top candidate is correct.

    Returns
    -------
    coverage, precision, thresholds : ndarray of shape (n_points,)
        One point per distinct confidence, most confident first: answering the questions whose confidence is
        at least the threshold.
    """
    order = np.argsort(-confidence, kind="stable")
    c, hit = confidence[order], correct[order]
    last = np.r_[c[1:] != c[:-1], True]  # the last question of each run of equal confidences
    n_answered = np.flatnonzero(last) + 1
    n_correct = np.cumsum(hit)[last]
    return n_answered / len(c), n_correct / n_answered, c[last]


def precision_coverage_curve(y_true, y_score, groups, confidence, *, ties="pessimistic", position=None, docno=None):
    index, correct, _ = _outcomes(y_true, y_score, groups, ties, position, docno)
    return coverage_curve(question_values(confidence, index, "confidence", "float"), correct)


precision_coverage_curve.__doc__ = (
    "Precision against coverage: the questions answered from the most confident down.\n\n"
    "    At each distinct confidence ``t`` the system answers the questions whose confidence is at least ``t``:\n"
    "    coverage is the fraction of all questions answered, precision the fraction of those whose top\n"
    "    candidate is correct (a question without a correct candidate is always a wrong answer).\n\n"
    "    Parameters\n    ----------"
    + _DOC_RUN
    + "    confidence : array-like of float of shape (n_questions,)\n"
    "        A question-level confidence (e.g. ``predict_answer(X)['probability']``), higher is surer.\n"
    "\n    Returns\n    -------\n"
    "    coverage, precision, thresholds : ndarray of shape (n_points,)\n"
    "        One point per distinct confidence, coverage increasing (thresholds decreasing).\n"
)


def precision_at_coverage(y_true, y_score, groups, confidence, coverage, *, ties="pessimistic", position=None,
                          docno=None) -> float:
    check_param("coverage", coverage, [Interval(Real, 0, 1, closed="right")])
    cov, prec, _ = precision_coverage_curve(y_true, y_score, groups, confidence, ties=ties, position=position,
                                            docno=docno)
    return float(prec[np.searchsorted(cov, coverage - 1e-12)])


precision_at_coverage.__doc__ = (
    "Precision when answering at least a fraction ``coverage`` of the questions, the most confident first.\n\n"
    "    The point of :func:`precision_coverage_curve` with the highest threshold whose coverage is at least\n"
    "    ``coverage`` (questions of equal confidence are answered together, so the coverage reached may be\n"
    "    higher).\n\n    Parameters\n    ----------"
    + _DOC_RUN
    + "    confidence : array-like of float of shape (n_questions,)\n        As in :func:`precision_coverage_curve`.\n"
    "    coverage : float in (0, 1]\n        The fraction of questions to answer.\n"
    "\n    Returns\n    -------\n    float\n"
)


def precision_coverage_auc(y_true, y_score, groups, confidence, *, ties="pessimistic", position=None,
                           docno=None) -> float:
    cov, prec, _ = precision_coverage_curve(y_true, y_score, groups, confidence, ties=ties, position=position,
                                            docno=docno)
    return float(np.sum(prec * np.diff(cov, prepend=0.0)))


precision_coverage_auc.__doc__ = (
    "Area under the precision-coverage curve, as a step function: ``sum(precision_i * (coverage_i -\n"
    "    coverage_{i-1}))``, as average precision integrates a precision-recall curve.\n\n"
    "    Without ties in ``confidence`` it is the mean, over k = 1..n, of the precision of the k most confident\n"
    "    questions; a confidence that orders the correct answers first scores highest. One minus it is the area\n"
    "    under the risk-coverage curve (AURC).\n\n    Parameters\n    ----------"
    + _DOC_RUN
    + "    confidence : array-like of float of shape (n_questions,)\n        As in :func:`precision_coverage_curve`.\n"
    "\n    Returns\n    -------\n    float\n"
)


def _probabilities(y_true, y_prob):
    prob = np.asarray(y_prob, dtype=np.float64)
    if prob.ndim != 1 or not np.isfinite(prob).all() or (prob < 0).any() or (prob > 1).any():
        raise ValueError("y_prob must be one probability in [0, 1] per row (a 1-d array; of predict_proba, column 1).")
    return check_labels(y_true, len(prob), name="y_true", reference="y_prob") > 0, prob


def expected_calibration_error(y_true, y_prob, *, n_bins=10) -> float:
    """Expected calibration error of candidate probabilities, over equal-width bins.

    The probabilities are put in ``n_bins`` bins of equal width on [0, 1] (a probability of exactly 1 in the
    last); ECE = sum over bins of (rows in the bin / all rows) · abs(fraction of positives − mean probability).
    Equal-width bins are the usual choice (Guo et al. 2017; scikit-learn's ``calibration_curve`` default);
    the value depends on ``n_bins``, so report it with the number.

    Parameters
    ----------
    y_true : array-like of shape (n_rows,)
        Labels; > 0 is a positive.
    y_prob : array-like of shape (n_rows,)
        P(the candidate answers the question), e.g. ``predict_proba(X)[:, 1]``.
    n_bins : int, default=10

    Returns
    -------
    float
    """
    check_param("n_bins", n_bins, [Interval(Integral, 1, None)])
    positive, prob = _probabilities(y_true, y_prob)
    bins = np.minimum((prob * n_bins).astype(np.intp), n_bins - 1)
    gap = np.bincount(bins, weights=positive, minlength=n_bins) - np.bincount(bins, weights=prob, minlength=n_bins)
    return float(np.abs(gap).sum() / len(prob))


def brier_score(y_true, y_prob) -> float:
    """Brier score of candidate probabilities: the mean of ``(probability − label)²``, 0 at best.

    Parameters
    ----------
    y_true : array-like of shape (n_rows,)
        Labels; > 0 is a positive.
    y_prob : array-like of shape (n_rows,)
        P(the candidate answers the question).

    Returns
    -------
    float
    """
    positive, prob = _probabilities(y_true, y_prob)
    return float(np.mean((prob - positive) ** 2))


def wilson_interval(successes, trials, *, confidence=0.95) -> tuple:
    """Wilson score interval of a proportion ``successes / trials`` (Wilson 1927).

    Unlike the normal approximation it stays inside [0, 1] and is sensible for small ``trials`` and for
    proportions near 0 or 1, as precisions at a strict threshold are; with no trials it is [0, 1].

    Parameters
    ----------
    successes, trials : int
        E.g. correct answers and answered questions.
    confidence : float, default=0.95

    Returns
    -------
    low, high : float
    """
    from scipy.stats import norm

    check_param("trials", trials, [Interval(Integral, 0, None)])
    check_param("successes", successes, [Interval(Integral, 0, trials)])
    check_param("confidence", confidence, [Interval(Real, 0, 1, closed="neither")])
    z = float(norm.ppf(0.5 + confidence / 2))
    n, p = int(trials), successes / trials if trials else 0.0
    centre = (p + z * z / (2 * n)) / (1 + z * z / n) if n else 0.5
    half = z / (1 + z * z / n) * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) if n else 0.5
    return float(max(0.0, centre - half)), float(min(1.0, centre + half))
