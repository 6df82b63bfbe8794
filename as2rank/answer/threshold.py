"""The answer threshold of :class:`~as2rank.answer.ranker.CalibratedRanker`, chosen on held-out questions.

A question is answered when its probability (that its top candidate answers it) exceeds the threshold. Every
threshold between two consecutive distinct held-out probabilities answers the same held-out questions; the
one chosen is the midpoint between them (0 to answer every question, 1 to answer none), a decision boundary
that favours neither side. Rules:

* a target precision ``p``: the threshold that answers the most held-out questions while their precision is
  at least ``p`` (the point estimate; its Wilson interval says how sure that is);
* a target coverage ``c``: the highest threshold that answers at least a fraction ``c`` of them;
* neither: the threshold of the best answer-triggering F1 (Yang, Yih & Meek 2015), the highest on ties.

The report gives the precision of the answered held-out questions with its 95 % Wilson interval
(:func:`as2rank.metrics.wilson_interval`). It is measured on the questions the threshold was chosen on,
so it is slightly optimistic for new questions, more so when few questions are answered.
"""

from __future__ import annotations

import numpy as np

from ..metrics.answering import coverage_curve, wilson_interval

__all__ = ["choose_threshold"]


def choose_threshold(confidence, correct, answerable, *, target_precision=None, target_coverage=None) -> dict:
    """The threshold for a rule (see the module docstring) and what it gives on the held-out questions.

    Parameters
    ----------
    confidence : ndarray of float of shape (n_questions,)
        Held-out P(the top candidate answers the question).
    correct : ndarray of bool of shape (n_questions,)
        Whether the top candidate is correct.
    answerable : ndarray of bool of shape (n_questions,)
        Whether the question has a correct candidate.
    target_precision, target_coverage : float in (0, 1], default=None
        At most one.

    Returns
    -------
    dict
        ``threshold``, ``rule`` (``"precision"``, ``"coverage"`` or ``"f1"``), ``target``, and on the held-out
        questions ``precision`` (None when none is answered), ``precision_low`` and ``precision_high`` (95 %
        Wilson interval), ``coverage``, ``recall``, ``f1``, ``n_questions``, ``n_answered``, ``n_correct``;
        ``best_precision``, the highest precision any threshold reaches there (None without questions). When
        no threshold reaches ``target_precision``, the threshold is 1: no question is answered.
    """
    confidence = np.asarray(confidence, dtype=np.float64)
    correct = np.asarray(correct, dtype=bool)
    n, n_answerable = len(confidence), int(np.sum(answerable))
    coverage, precision, values = coverage_curve(confidence, correct)
    answered = np.round(coverage * n).astype(np.int64)
    hits = np.round(precision * answered).astype(np.int64)
    # A cut: answer the questions down to the distinct confidence values[cut]; -1 answers none.
    if target_precision is not None:
        rule, target = "precision", float(target_precision)
        ok = np.flatnonzero(precision >= target - 1e-12)
        cut = ok[-1] if len(ok) else -1
    elif target_coverage is not None:
        rule, target = "coverage", float(target_coverage)
        cut = int(np.searchsorted(coverage, target - 1e-12))
    else:
        rule, target = "f1", None
        f1 = 2 * hits / (answered + n_answerable) if n_answerable else np.zeros(len(hits))
        cut = int(np.argmax(f1)) if len(f1) and f1.max() > 0 else -1
    if cut < 0:
        threshold, k, c = 1.0, 0, 0
    else:
        threshold = float(0.5 * (values[cut] + values[cut + 1])) if cut + 1 < len(values) else 0.0
        k, c = int(answered[cut]), int(hits[cut])
    low, high = wilson_interval(c, k)
    return {
        "threshold": threshold,
        "rule": rule,
        "target": target,
        "precision": c / k if k else None,
        "precision_low": low,
        "precision_high": high,
        "coverage": k / n if n else 0.0,
        "recall": c / n_answerable if n_answerable else 0.0,
        "f1": 2 * c / (k + n_answerable) if k + n_answerable else 0.0,
        "n_questions": n,
        "n_answered": k,
        "n_correct": c,
        "best_precision": float(precision.max()) if n else None,
    }
