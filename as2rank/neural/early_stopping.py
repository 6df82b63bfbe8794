"""Early stopping of the neural estimators, in one place: its parameters and their rules, the validation split,
the callback that evaluates, stops and restores the best weights (:class:`EarlyStopping`), and what a fit exposes
afterwards. The training shell (:mod:`as2rank.neural.shell`) applies them to every neural estimator.

An estimator with early stopping takes ``early_stopping`` (``"auto"``, ``True`` or ``False``),
``validation_fraction`` and ``patience``, and its ``fit`` takes ``eval_set=(X_dev, y_dev)``. The validation
set is the ``eval_set`` or, without one, ``validation_fraction`` of the answered training questions (whole
questions, drawn with the fit's random generator, :func:`as2rank.data.holdout_questions`). ``"auto"`` stops
early when there is a validation set (an ``eval_set`` or a ``validation_fraction``); without one, an estimator
whose class sets ``auto_holdout`` (those whose defaults benchmark measured the held-out split as best or
not told apart from it) holds out :data:`DEFAULT_VALIDATION_FRACTION` of the answered questions when the
training data has at least :data:`AUTO_MIN_QUESTIONS` of them, and every other fit trains the whole budget.
Importing this module does not import torch (the callback imports it when it runs).
"""

from __future__ import annotations

from numbers import Integral, Real

import math
from collections.abc import Callable

import numpy as np

from ..data import check_ranking_data
from ..params import Boolean, Interval, Options
from .callbacks import Callback

__all__ = ["AUTO_MIN_QUESTIONS", "CONSTRAINTS", "DEFAULT_VALIDATION_FRACTION", "EarlyStopping", "check_early_stopping",
           "check_eval_set", "holdout_fraction", "training_summary"]

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


class EarlyStopping(Callback):
    """Evaluate the model during training, stop after ``patience`` evaluations without improvement, and end the
    run with the weights of the best evaluation.

    ``evaluate(module) -> score`` (higher is better, e.g. a dev MAP) is called in evaluation mode without
    gradients, at the end of every epoch or every ``every`` optimizer steps; with ``every``, the last steps
    are evaluated at the end of the run when they were not yet. With several processes the score used is the
    mean over the processes, so all stop together. The evaluations go into the run's history
    (``eval_scores``, ``eval_steps``, ``best_step``); the best weights are kept as a CPU copy. The training shell
    adds it from an estimator's early-stopping parameters, before the estimator's own ``callbacks``.

    Parameters
    ----------
    evaluate : callable
        ``module -> float``.
    patience : int, default=None
        Stop after this many evaluations without improvement; None trains the whole budget (and still ends with
        the best weights).
    every : int, default=None
        Evaluate every this many optimizer steps instead of once per epoch.
    """

    def __init__(self, evaluate: Callable, patience: int | None = None, every: int | None = None):
        self.evaluate, self.patience, self.every = evaluate, patience, every

    def on_train_begin(self, module, history, accelerator) -> None:
        self.module, self.history, self.accelerator = module, history, accelerator
        self.best_score, self.best_state, self.bad, self.stopped = -math.inf, None, 0, False

    def on_step_end(self, step: int) -> bool:
        return self.every is not None and step % self.every == 0 and self._check(step)

    def on_epoch_end(self, step: int) -> bool:
        return self.every is None and self._check(step)

    def on_train_end(self, step: int, stopped: bool) -> None:
        # With ``every``, the last steps may not have been evaluated yet: they could hold the best weights.
        evaluated_last = bool(self.history.eval_steps) and self.history.eval_steps[-1] == step
        if self.every is not None and not self.stopped and not evaluated_last:
            self._check(step)
        if self.best_state is not None:
            self.module.load_state_dict(self.best_state)

    def _score(self) -> float:
        import torch

        self.module.eval()
        try:
            with torch.no_grad():
                score = float(self.evaluate(self.module))
        finally:
            self.module.train()
        if self.accelerator is not None and self.accelerator.num_processes > 1:
            total = torch.tensor([score], dtype=torch.float64, device=self.accelerator.device)
            score = float(self.accelerator.reduce(total, "mean")[0])
        return score

    def _check(self, step: int) -> bool:
        """Evaluate now; True when patience is exhausted."""
        score = self._score()
        self.history.eval_scores.append(score)
        self.history.eval_steps.append(step)
        if score > self.best_score:
            self.best_score, self.bad, self.history.best_step = score, 0, step
            self.best_state = {k: v.detach().to("cpu", copy=True) for k, v in self.module.state_dict().items()}
        else:
            self.bad += 1
            self.stopped = self.patience is not None and self.bad >= self.patience
        return self.stopped
