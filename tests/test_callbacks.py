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


# ------------------------------------------------------------------ the estimators' ``callbacks`` parameter
class RecordEpochs(Callback):
    """Records every epoch: its last step, its mean loss, and the module's training mode then."""

    def on_train_begin(self, module, history, accelerator):
        self.module, self.history, self.epochs, self.ended = module, history, [], None

    def on_epoch_end(self, step):
        self.epochs.append((step, self.history.epoch_loss[-1], self.module.training))

    def on_train_end(self, step, stopped):
        self.ended = (step, stopped)


class StopAfter(Callback):
    """Stops training after ``steps`` optimizer steps."""

    def __init__(self, steps):
        self.steps = steps

    def on_step_end(self, step):
        return step >= self.steps


def cosinet(**params):
    pytest.importorskip("gensim")
    from tests.test_cosinet import WORDS, tiny
    from gensim.models import KeyedVectors

    vectors = KeyedVectors(8)
    vectors.add_vectors(WORDS, np.random.default_rng(0).normal(size=(len(WORDS), 8)).astype(np.float32))
    return tiny(vectors, **params)


def transformer(**params):
    pytest.importorskip("transformers")
    from as2rank.transformer.ranker import TransformerRanker
    from tests.test_transformer import SPECIAL, WORDS, small

    import transformers

    tokenizer = transformers.BertTokenizerFast(vocab={w: i for i, w in enumerate(SPECIAL + WORDS)})
    return small(TransformerRanker, "bert", tokenizer, num_layers=1, **params)


def data(family):
    if family == "cosinet":
        from tests.test_cosinet import synthetic

        return synthetic(12)
    from tests.test_transformer import synthetic

    return synthetic(n_questions=6)


FAMILIES = {"cosinet": cosinet, "transformer": transformer}


@pytest.mark.parametrize("family", FAMILIES)
def test_a_callback_records_every_epoch_of_a_fit(family, one_torch_thread):
    X, y = data(family)
    record = RecordEpochs()
    model = FAMILIES[family](epochs=3, callbacks=[record]).fit(X, y)
    history = model.history_
    # One record per epoch, after its last step, with its mean loss, the module still training.
    steps_per_epoch = history.n_steps // 3
    assert [step for step, _, _ in record.epochs] == [steps_per_epoch, 2 * steps_per_epoch, 3 * steps_per_epoch]
    assert [loss for _, loss, _ in record.epochs] == history.epoch_loss
    assert all(training for _, _, training in record.epochs)
    assert record.ended == (history.n_steps, False) and not history.stopped_early
    # The callback watched; it did not change what the fit learned.
    plain = FAMILIES[family](epochs=3).fit(X, y)
    np.testing.assert_array_equal(model.predict(X), plain.predict(X))


@pytest.mark.parametrize("family", FAMILIES)
def test_a_callback_stops_a_fit_and_partial_fit_runs_them_too(family, one_torch_thread):
    X, y = data(family)
    model = FAMILIES[family](epochs=4, callbacks=[StopAfter(3), RecordEpochs()]).fit(X, y)
    assert model.history_.n_steps == 3 and model.history_.stopped_early
    assert model.best_iteration_ == 3
    record = model.callbacks[1]
    assert record.ended == (3, True)
    # Stopped at step 3: the weights are those of the first three steps of the full budget's run.
    full = FAMILIES[family](epochs=4).fit(X, y)
    assert full.history_.n_steps > 3
    np.testing.assert_array_equal(model.history_.step_loss, full.history_.step_loss[:3])
    # partial_fit runs the callbacks over each call's pass.
    streamed = FAMILIES[family](callbacks=[RecordEpochs()])
    streamed.partial_fit(X, y, total_rows=2 * len(X))
    streamed.partial_fit(X, y)
    assert len(streamed.callbacks[0].epochs) == 1 and streamed.callbacks[0].ended[1] is False


@pytest.mark.parametrize("family", FAMILIES)
def test_callbacks_are_a_parameter_cloned_checked_and_never_saved(family, one_torch_thread, tmp_path):
    from sklearn.base import clone

    import as2rank

    record = RecordEpochs()
    model = FAMILIES[family](epochs=1, callbacks=[record])
    copy = clone(model)
    assert isinstance(copy.callbacks[0], RecordEpochs) and copy.callbacks[0] is not record
    with pytest.raises(ValueError, match="callbacks"):
        FAMILIES[family](callbacks=[lambda step: True]).fit(*data(family))
    X, y = data(family)
    model.fit(X, y)
    as2rank.save(model, tmp_path / "m")
    assert "callbacks" not in (tmp_path / "m" / "as2rank.json").read_text()
    loaded = as2rank.load(tmp_path / "m")
    assert loaded.callbacks is None
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))


def test_a_fit_with_callbacks_is_never_reused_from_the_fit_cache(one_torch_thread):
    from as2rank.neural.fitcache import FIT_CACHE

    X, y = data("transformer")
    FIT_CACHE.clear()
    first = transformer(reuse_fit=True).fit(X, y)
    assert not first.fit_cache_hit_ and transformer(reuse_fit=True).fit(X, y).fit_cache_hit_
    record = RecordEpochs()
    watched = transformer(reuse_fit=True, callbacks=[record]).fit(X, y)
    assert not watched.fit_cache_hit_ and len(record.epochs) == 1
    np.testing.assert_array_equal(watched.predict(X), first.predict(X))
