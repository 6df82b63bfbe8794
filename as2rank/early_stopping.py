"""Early stopping of the neural estimators: its parameters, their rules, the validation split and what a fit
exposes afterwards, in one place for every estimator that trains with :func:`as2rank.neural.train`.

An estimator with early stopping takes ``early_stopping`` (``"auto"``, ``True`` or ``False``),
``validation_fraction`` and ``patience``, and its ``fit`` takes ``eval_set=(X_dev, y_dev)``. The validation
set is the ``eval_set`` or, without one, ``validation_fraction`` of the answered training questions (whole
questions, drawn with the fit's random generator, :func:`as2rank.data.holdout_questions`). ``"auto"`` stops
early when there is a validation set (an ``eval_set`` or a ``validation_fraction``); without one, an estimator
whose class sets ``_auto_holdout`` (those whose defaults benchmark measured the held-out split as best or
not told apart from it) holds out :data:`DEFAULT_VALIDATION_FRACTION` of the answered questions when the
training data has at least :data:`AUTO_MIN_QUESTIONS` of them, and every other fit trains the whole budget.
NumPy only: importable without torch.
"""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np

from .data import check_ranking_data
from .params import Boolean, Interval, Options

__all__ = ["AUTO_MIN_QUESTIONS", "CONSTRAINTS", "DEFAULT_VALIDATION_FRACTION", "check_early_stopping", "check_eval_set",
           "holdout_fraction", "training_summary"]

#: Share of the answered training questions held out by ``early_stopping=True`` without ``validation_fraction``.
DEFAULT_VALIDATION_FRACTION = 0.1

#: ``early_stopping="auto"`` holds out questions by itself only from this many answered training questions:
#: the defaults benchmark measured the whole budget ahead at 100 of them (a validation MAP over 10 questions
#: picks epochs by noise) and the held-out split best or not told apart from the best at 300 and more.
AUTO_MIN_QUESTIONS = 300

#: Accepted values of the three parameters (``_parameter_constraints`` entries).
CONSTRAINTS = {
    "early_stopping": [Options(("auto",)), Boolean()],
    "validation_fraction": [Interval(Real, 0, 1, closed="neither"), None],
    "patience": [Interval(Integral, 1, None), None],
}


def _disabled(estimator) -> bool:
    return estimator.early_stopping != "auto" and not estimator.early_stopping


def check_early_stopping(estimator) -> None:
    """The cross-parameter rule: ``validation_fraction`` holds out questions for early stopping only."""
    if estimator.validation_fraction is not None and _disabled(estimator):
        raise ValueError("validation_fraction holds out questions for early stopping, but early_stopping=False.")


def check_eval_set(estimator, eval_set):
    """``fit``'s ``eval_set`` checked: ``None``, or ``(X_dev, y_dev, index)`` as
    :func:`~as2rank.data.check_ranking_data` returns them."""
    if eval_set is None:
        return None
    if not (isinstance(eval_set, (tuple, list)) and len(eval_set) == 2):
        raise ValueError("eval_set must be a pair (X_dev, y_dev).")
    if _disabled(estimator):
        raise ValueError(
            "eval_set is the early-stopping set, but early_stopping=False; set early_stopping='auto' or True, "
            "or pass no eval_set."
        )
    return check_ranking_data(*eval_set)


def holdout_fraction(index, y, *, validation_fraction, early_stopping, auto: bool):
    """The fraction of answered questions a ``fit`` without ``eval_set`` holds out, or ``None`` for no split:
    ``validation_fraction`` when set; else :data:`DEFAULT_VALIDATION_FRACTION` with ``early_stopping=True``,
    or with ``"auto"`` where ``auto`` (the class holds out by itself) and the training data (``y`` grouped by
    ``index``) has at least :data:`AUTO_MIN_QUESTIONS` answered questions."""
    if validation_fraction is not None:
        return validation_fraction
    if early_stopping is True or early_stopping is np.True_:
        return DEFAULT_VALIDATION_FRACTION
    if (isinstance(early_stopping, str) and auto
            and np.count_nonzero(index.max(y) > 0) >= AUTO_MIN_QUESTIONS):
        return DEFAULT_VALIDATION_FRACTION
    return None


def training_summary(history) -> tuple:
    """What a fit keeps of a training ``history`` as its ``history_``, ``validation_scores_`` (the validation MAP
    of each evaluation) and ``best_iteration_`` (the optimizer step whose weights were kept: the last one
    without evaluations)."""
    best = int(history.best_step if history.best_step is not None else history.n_steps)
    return history, np.asarray(history.eval_scores, dtype=np.float64), best
