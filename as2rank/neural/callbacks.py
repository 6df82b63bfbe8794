"""What the training loop (:func:`~as2rank.neural.train`) calls around its steps: :class:`Callback`, the base of
every callback, the built-in :class:`~as2rank.neural.early_stopping.EarlyStopping` and a user's own, which every
neural estimator takes as its ``callbacks`` parameter. Importing this module does not import torch.
"""

from __future__ import annotations

from ..params import InstanceOf, SequenceOf

__all__ = ["CONSTRAINTS", "Callback"]


class Callback:
    """The events of a training run, each a no-op here: a subclass overrides those it needs.

    The loop calls, in order:

    * ``on_train_begin(module, history, accelerator)`` once the model is on its device, before the first step:
      ``module`` is the ``torch.nn.Module`` being trained, ``history`` the
      :class:`~as2rank.neural.TrainingHistory` the run fills (``step_loss``, ``epoch_loss``, ``learning_rate``,
      ``eval_scores``, ...) and returns, ``accelerator`` the run's ``accelerate.Accelerator``. A callback keeps
      what it needs of them: the later events do not pass them again.
    * ``on_step_end(step)`` after every optimizer step (``step`` counted from 1 over the run);
    * ``on_epoch_end(step)`` after every full epoch, ``step`` being its last step, once the epoch's mean loss is
      in ``history.epoch_loss``;
    * ``on_train_end(step, stopped)`` after the last step, the model still in training mode: ``stopped`` says
      whether a callback stopped the run.

    **Stopping.** ``on_step_end`` and ``on_epoch_end`` return True to stop training after that step (anything
    false, None included, goes on); every callback still sees the event, then ``on_train_end`` runs. The run's
    ``history.stopped_early`` then says whether steps of the budget were left.

    The estimators run their built-in early stopping first, then their ``callbacks`` in the order given; the same
    objects serve every ``fit`` and ``partial_fit`` call (``on_train_begin`` starts each run).
    ``sklearn.base.clone`` gives a clone copies of them.

    Examples
    --------
    >>> class EpochLosses(Callback):
    ...     def on_train_begin(self, module, history, accelerator):
    ...         self.history, self.losses = history, []
    ...     def on_epoch_end(self, step):
    ...         self.losses.append(self.history.epoch_loss[-1])
    >>> class StopAfter(Callback):
    ...     def __init__(self, steps):
    ...         self.steps = steps
    ...     def on_step_end(self, step):
    ...         return step >= self.steps
    """

    def on_train_begin(self, module, history, accelerator) -> None:
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


#: Accepted values of the estimators' ``callbacks`` parameter (a ``_parameter_constraints`` entry).
CONSTRAINTS = [None, SequenceOf(InstanceOf(Callback, "as2rank.neural.Callback objects"))]
