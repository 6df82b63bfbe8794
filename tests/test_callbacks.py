"""The training loop's callbacks (:mod:`as2rank.neural.callbacks`): when early stopping evaluates, when it stops,
which weights it keeps, and a callback of one's own stopping the loop."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from as2rank.neural import Callback, EarlyStopping, TrainingState, train  # noqa: E402

X = torch.randn(8, 3, generator=torch.Generator().manual_seed(0))
Y = (X[:, 0] > 0).float()


def loss(module, batch):
    return torch.nn.functional.binary_cross_entropy_with_logits(module(batch["x"]).squeeze(1), batch["y"])


def run(callbacks, epochs=6, steps_per_epoch=1, state=None):
    torch.manual_seed(0)
    module = torch.nn.Linear(3, 1)
    weights = []  # the weights after each step

    class Record(Callback):
        def on_step_end(self, step):
            weights.append(module.weight.detach().clone())
            return False

    history = train(module, lambda epoch: [{"x": X, "y": Y}] * steps_per_epoch, loss, epochs=epochs,
                    steps_per_epoch=steps_per_epoch, learning_rate=0.1, device=torch.device("cpu"),
                    schedule="constant", callbacks=[Record(), *callbacks], state=state)
    return module, history, weights


def scripted(scores):
    """An ``evaluate`` that returns ``scores`` in turn, and records the mode and gradient switch it ran under."""
    seen = []

    def evaluate(module):
        seen.append((module.training, torch.is_grad_enabled()))
        return scores[len(seen) - 1]

    return evaluate, seen


def test_early_stopping_stops_after_patience_and_keeps_the_best_weights():
    evaluate, seen = scripted([0.1, 0.5, 0.3, 0.2, 0.9, 0.9])
    module, history, weights = run([EarlyStopping(evaluate, patience=2)])
    # Evaluated after each epoch (one step each): 0.5 at step 2 is the best, two worse ones stop the run.
    assert history.eval_steps == [1, 2, 3, 4] and history.eval_scores == [0.1, 0.5, 0.3, 0.2]
    assert history.best_step == 2 and history.stopped_early and history.n_steps == 4
    torch.testing.assert_close(module.weight, weights[1], rtol=0, atol=0)
    assert seen == [(False, False)] * 4  # evaluation mode, no gradients
    assert not module.training


def test_early_stopping_without_patience_trains_the_budget_and_keeps_the_best():
    evaluate, _ = scripted([0.1, 0.4, 0.3, 0.2, 0.35, 0.0])
    module, history, weights = run([EarlyStopping(evaluate)])
    assert history.n_steps == 6 and not history.stopped_early and history.best_step == 2
    torch.testing.assert_close(module.weight, weights[1], rtol=0, atol=0)


def test_every_n_steps_evaluates_the_last_steps_too():
    evaluate, _ = scripted([0.1, 0.2, 0.3])
    module, history, weights = run([EarlyStopping(evaluate, every=3)], epochs=4, steps_per_epoch=2)
    # Steps 3 and 6, then the two steps after the last evaluation at the end of the run.
    assert history.eval_steps == [3, 6, 8] and history.best_step == 8
    torch.testing.assert_close(module.weight, weights[-1], rtol=0, atol=0)


def test_a_callback_of_ones_own_stops_the_loop_mid_epoch():
    class StopAt(Callback):
        def __init__(self, step):
            self.step, self.ended = step, None

        def on_step_end(self, step):
            return step == self.step

        def on_train_end(self, step, stopped):
            self.ended = (step, stopped)

    stop = StopAt(5)
    _, history, weights = run([stop], epochs=3, steps_per_epoch=2)
    assert history.n_steps == len(weights) == 5 and history.stopped_early
    assert stop.ended == (5, True) and len(history.epoch_loss) == 3


def test_early_stopping_cannot_continue_a_run():
    with pytest.raises(ValueError, match="Early stopping is not available"):
        run([EarlyStopping(lambda m: 0.0)], state=TrainingState(8))
    _, history, _ = run([], epochs=1, state=TrainingState(8))  # other runs continue
    assert history.n_steps == 1 and np.isfinite(history.step_loss).all()
