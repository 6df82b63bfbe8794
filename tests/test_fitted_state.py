"""Only ``fit`` sets state: what a fitted estimator computes at prediction time (an int8 copy, a cost report,
a context report) is returned or kept beside the model, never written onto the estimator."""

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from as2rank.neural import int8_supported  # noqa: E402
from as2rank.neural.onnx import copies  # noqa: E402
from as2rank.pruning.sequential import SequentialRanker  # noqa: E402
from as2rank.lexical.baselines import OverlapRankRanker, WordOverlapRanker  # noqa: E402
from as2rank.transformer.cascade import CascadeTransformer  # noqa: E402
from as2rank.transformer.context.features import ContextExtractor  # noqa: E402
from as2rank.transformer.ranker import TransformerRanker  # noqa: E402
from tests.contract import assert_state_unchanged  # noqa: E402
from tests.test_transformer import small, synthetic, tokenizer  # noqa: E402, F401 (fixture)


@pytest.mark.skipif(not int8_supported(), reason="CPU without int8 kernels")
def test_int8_copy_is_kept_beside_the_model_not_on_the_estimator(tokenizer, monkeypatch):
    # torch's dynamic copy (no ONNX export: seconds per graph); the ONNX Runtime copy goes the same way.
    monkeypatch.setattr("as2rank.neural.onnx.runtime.onnx_available", lambda: False)
    X, y = synthetic()
    est = small(TransformerRanker, "bert", tokenizer, precision="int8").fit(X, y)
    before = dict(vars(est))
    first = est.predict(X)
    predictor = est.predictor()
    assert predictor.module is not est.model_ and predictor.module is est.predictor().module  # built once
    np.testing.assert_array_equal(est.predict(X), first)
    assert_state_unchanged(est, before, "an int8 predict")
    # Training again replaces the weights in place (warm start): the copy of the old weights is not reused.
    est.set_params(warm_start=True).fit(X, y)
    assert est.predictor().module is not predictor.module


def test_cascade_returns_its_cost_report(tokenizer):
    X, y = synthetic()
    est = small(CascadeTransformer, "bert", tokenizer, alpha=0.3).fit(X, y)
    before = dict(vars(est))
    scores, cost = est.predict(X, return_cost=True)
    np.testing.assert_array_equal(scores, est.predict(X))
    logits, full = est.predict_exits(X, return_cost=True)
    assert logits.shape == (len(X), len(est.exits_)) and full["relative_cost"] == 1.0 > cost["relative_cost"]
    assert_state_unchanged(est, before, "predict and predict_exits")


def test_sequential_ranker_and_context_extractor_return_their_reports():
    X, y = synthetic()
    sr = SequentialRanker([OverlapRankRanker(), WordOverlapRanker()], keep=0.5).fit(X, y)
    before = dict(vars(sr))
    scores, cost = sr.predict(X, return_cost=True)
    np.testing.assert_array_equal(scores, sr.predict(X))
    assert cost["survivors"][0] == len(X)
    assert_state_unchanged(sr, before, "predict")

    docs = X.assign(doc_id=X["qid"], doc_position=X["position"])
    extractor = ContextExtractor().fit(docs)
    before = dict(vars(extractor))
    out, report = extractor.transform(docs, return_report=True)
    assert report["n_rows"] == len(X) and out.equals(extractor.transform(docs))
    assert_state_unchanged(extractor, before, "transform")


def test_a_predictor_holds_what_predict_runs(tokenizer):
    X, y = synthetic()
    est = small(TransformerRanker, "bert", tokenizer, batch_tokens=64).fit(X, y)
    encoded = est.encode(X)
    predictor = est.predictor(encoded=encoded)
    assert predictor.module is est.model_ and predictor.batch_tokens == 64 and predictor.device.type == "cpu"
    np.testing.assert_array_equal(predictor.logits(encoded), est.predict(X))
    assert copies.INT8_COPIES._entries.get(est.model_) is None  # nothing built for a float model
