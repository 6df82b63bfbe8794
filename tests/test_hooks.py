"""The training steps of the transformer estimators are the public hooks of the training shell
(:class:`as2rank.neural.shell.NeuralEstimator`): a subclass that overrides one changes what ``fit`` does, and the
loop calls them as documented."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from as2rank.neural.losses import LABEL_LOSSES  # noqa: E402
from as2rank.transformer.ranker import TransformerRanker  # noqa: E402
from tests.test_transformer import small, synthetic, tokenizer  # noqa: E402,F401

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class CountingLoss:
    """The label loss of ``loss``, counting the batches it scores and the rows they hold."""

    def __init__(self, loss):
        self.inner, self.by_question = LABEL_LOSSES[loss], LABEL_LOSSES[loss].by_question
        self.calls, self.rows = 0, 0

    def __call__(self, outputs, batch):
        self.calls += 1
        self.rows += len(batch["labels"])
        return self.inner(outputs, batch)


class Hooked(TransformerRanker):
    """A TransformerRanker whose loss counts its calls and whose validation score is the training step."""

    def get_loss(self):
        self.loss_object = CountingLoss(self.loss)  # a test's window on the loss this fit used
        return self.loss_object

    def evaluate(self, module, encoded, y, index, device):
        self.evaluations = getattr(self, "evaluations", 0) + 1
        return float(self.evaluations)  # always better: early stopping keeps the last weights


@pytest.mark.parametrize("loss", ["pointwise", "listwise"])
def test_the_loop_calls_the_loss_object_of_get_loss_once_per_batch(tokenizer, loss):
    X, y = synthetic(n_questions=10)
    est = small(Hooked, "bert", tokenizer, loss=loss, epochs=2, reuse_fit=False, early_stopping=False).fit(X, y)
    assert est.loss_object.calls == est.history_.n_steps > 2
    assert est.loss_object.rows == 2 * len(X)  # every row once per epoch
    plain = small(TransformerRanker, "bert", tokenizer, loss=loss, epochs=2, reuse_fit=False,
                  early_stopping=False).fit(X, y)
    np.testing.assert_array_equal(est.predict(X), plain.predict(X))  # the same loss: the same model


def test_evaluate_is_what_early_stopping_watches(tokenizer):
    X, y = synthetic(n_questions=10)
    est = small(Hooked, "bert", tokenizer, epochs=3, reuse_fit=False, early_stopping=True,
                validation_fraction=0.3, patience=1).fit(X, y)
    np.testing.assert_array_equal(est.validation_scores_, [1.0, 2.0, 3.0])  # one evaluation per epoch
    assert est.best_iteration_ == est.history_.n_steps and not est.history_.stopped_early


def test_forward_outputs_feeds_the_loss(tokenizer):
    class Scaled(TransformerRanker):
        def forward_outputs(self, module, batch):
            return 0.0 * module(batch)  # a constant logit: nothing to learn

    X, y = synthetic(n_questions=6)
    est = small(Scaled, "bert", tokenizer, reuse_fit=False, lexical_prior=False, segment_similarity=False).fit(X, y)
    np.testing.assert_allclose(est.history_.step_loss, np.log(2), rtol=1e-6)  # BCE of logit 0
