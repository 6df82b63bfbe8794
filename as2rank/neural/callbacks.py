"""What :func:`~as2rank.neural.train` calls around its steps: a :class:`Callback` watches the run and may stop
it; :class:`EarlyStopping` evaluates the model, stops after ``patience`` evaluations without improvement and
restores the best weights.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

__all__ = ["Callback", "EarlyStopping"]


class Callback:
    """The hooks of a training run, each a no-op here: a subclass overrides those it needs.

    The loop calls :meth:`on_train_begin` once the model is on its device, :meth:`on_step_end` after every
    optimizer step and :meth:`on_epoch_end` after every full epoch (either returns True to stop training), and
    :meth:`on_train_end` when the steps are done, with the model still in training mode.
    """

    def on_train_begin(self, module: torch.nn.Module, history, accelerator) -> None:
        """``module`` is about to train; ``history`` is the :class:`~as2rank.neural.TrainingHistory` the run
        returns, ``accelerator`` the run's ``accelerate.Accelerator``."""

    def on_step_end(self, step: int) -> bool:
        """After optimizer step ``step`` (counted from 1 over the run); True stops the run."""
        return False

    def on_epoch_end(self, step: int) -> bool:
        """After the last step (``step``) of a full epoch; True stops the run."""
        return False

    def on_train_end(self, step: int, stopped: bool) -> None:
        """After the run's last step ``step``; ``stopped``: whether a callback stopped it."""


class EarlyStopping(Callback):
    """Evaluate the model during training, stop after ``patience`` evaluations without improvement, and end the
    run with the weights of the best evaluation.

    ``evaluate(module) -> score`` (higher is better, e.g. a dev MAP) is called in evaluation mode without
    gradients, at the end of every epoch or every ``every`` optimizer steps; with ``every``, the last steps
    are evaluated at the end of the run when they were not yet. With several processes the score used is the
    mean over the processes, so all stop together. The evaluations go into the run's history
    (``eval_scores``, ``eval_steps``, ``best_step``); the best weights are kept as a CPU copy.

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

    def __init__(self, evaluate: Callable[[torch.nn.Module], float], patience: int | None = None,
                 every: int | None = None):
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
