"""Held-out answer probabilities from out-of-fold ranking scores.

Given every row's score from a model that did not see its question (cross-validation), and the fold each row
was scored in, these functions learn the maps of :mod:`as2rank.ensemble.calibration` and
:mod:`as2rank.answer.trigger` on some folds and apply them to the others, so that no fold's labels reach its own
probabilities. :class:`~as2rank.answer.ranker.CalibratedRanker` chooses its threshold from them;
:class:`~as2rank.model_selection.selector.RankerSelector` reports, per candidate, the calibration error and the
answer-triggering F1 they give. Arrays in, results out; NumPy only.
"""

from __future__ import annotations

import numpy as np

from ..data import GroupIndex
from ..ensemble.calibration import apply_calibration, fit_calibration
from ..metrics import brier_score, expected_calibration_error
from .threshold import choose_threshold
from .trigger import fit_trigger, question_features, trigger_proba

__all__ = ["cross_fit", "held_out_answering"]


def cross_fit(index: GroupIndex, scores, y, fold_of, method: str, tiebreak=None):
    """The question features of the questions, their held-out question probabilities and the out-of-fold
    candidate probabilities.

    ``proba``: fold ``g``'s rows calibrated by a map fitted on the other folds. ``features`` (what a final
    question-level regression learns from) come from ``proba``. The held-out probability of a question of fold
    ``f`` (``confidence``) comes from a regression fitted on the other folds' questions, whose features were
    calibrated without fold ``f`` too (fold ``g`` by a map fitted outside ``f`` and ``g``): no fold's labels
    reach its own held-out probabilities.

    Parameters
    ----------
    index : GroupIndex
        The questions of the rows.
    scores : ndarray of shape (n_rows,)
        Out-of-fold ranking scores.
    y : ndarray of shape (n_rows,)
        Labels (> 0: the candidate answers its question).
    fold_of : ndarray of int of shape (n_rows,)
        The fold each row was scored in, ``0 .. n_folds - 1`` (at least 3 folds; a question in one fold).
    method : {"sigmoid", "isotonic"}
    tiebreak : ndarray, default=None
        Secondary sort key for equal scores (:func:`as2rank.base.rank_tiebreak`), as ``rank`` orders them.

    Returns
    -------
    features : ndarray of shape (n_questions, n_features)
    top : ndarray of int of shape (n_questions,)
        The row of each question's top candidate.
    confidence : ndarray of shape (n_questions,)
    proba : ndarray of shape (n_rows,)
    """
    n_folds = fold_of.max() + 1

    def calibrated(left_out):
        proba = np.empty(len(scores))
        for g in range(n_folds):
            rows = fold_of == g
            fit = (fold_of != g) & (fold_of != left_out)
            proba[rows] = apply_calibration(fit_calibration(scores[fit], y[fit], method), scores[rows])
        return proba

    proba = calibrated(-1)
    features, top = question_features(index, scores, proba, tiebreak)
    correct, question_fold = y[top] > 0, fold_of[top]
    confidence = np.empty(index.n_groups)
    for f in range(n_folds):
        held = question_fold == f
        inner = question_features(index, scores, calibrated(f), tiebreak)[0]
        confidence[held] = trigger_proba(inner[held], *fit_trigger(inner[~held], correct[~held]))
    return features, top, confidence, proba


def held_out_answering(index: GroupIndex, scores, y, fold_of, method: str = "sigmoid", tiebreak=None) -> dict:
    """How well out-of-fold scores calibrate and answer or abstain, each fold judged by what the others learned.

    The candidate probabilities and question probabilities are those of :func:`cross_fit`; each fold's
    questions are answered when their probability exceeds the threshold of the best answer-triggering F1
    chosen on the other folds' questions (:func:`~as2rank.answer.threshold.choose_threshold`). The other folds'
    question probabilities were learned with this fold's labels among others, so the estimate is slightly
    optimistic, equally for every model compared.

    Parameters
    ----------
    index, scores, y, fold_of, method, tiebreak
        As :func:`cross_fit`.

    Returns
    -------
    dict
        ``ece`` (10 equal-width bins) and ``brier`` of the candidate probabilities; answer triggering over
        every question (Yang, Yih & Meek 2015): ``precision`` (None when none is answered), ``recall``, ``f1``,
        ``n_answered``, ``n_correct``, ``n_answerable``, ``n_questions``.
    """
    y = np.asarray(y)
    _, top, confidence, proba = cross_fit(index, scores, y, fold_of, method, tiebreak)
    correct, answerable, question_fold = y[top] > 0, index.max(y) > 0, fold_of[top]
    answered = np.zeros(index.n_groups, dtype=bool)
    for f in range(fold_of.max() + 1):
        held = question_fold == f
        threshold = choose_threshold(confidence[~held], correct[~held], answerable[~held])["threshold"]
        answered[held] = confidence[held] > threshold
    hits, k, n_answerable = int(np.sum(answered & correct)), int(answered.sum()), int(answerable.sum())
    return {
        "ece": expected_calibration_error(y > 0, proba),
        "brier": brier_score(y > 0, proba),
        "precision": hits / k if k else None,
        "recall": hits / n_answerable if n_answerable else 0.0,
        "f1": 2 * hits / (k + n_answerable) if k + n_answerable else 0.0,
        "n_answered": k,
        "n_correct": hits,
        "n_answerable": n_answerable,
        "n_questions": int(index.n_groups),
    }
