"""The transformer estimators on a CUDA device: fit, predict, agree with the CPU, and move between devices.

Skipped where torch sees no GPU (CI and most laptops); run ``pytest tests/test_cuda.py`` on a GPU machine.
"""

import io

import joblib
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

from as2rank.lexical.baselines import WordOverlapRanker  # noqa: E402
from as2rank.transformer.cascade import CascadeTransformer  # noqa: E402
from as2rank.transformer.cerberus import Cerberus  # noqa: E402
from as2rank.transformer.context.rankers import ContextConcat, ContextExtractor, ContextMWA  # noqa: E402
from as2rank.transformer.ranker import TransformerRanker  # noqa: E402
from tests import test_context as ctx  # noqa: E402
from tests.test_transformer import small, synthetic, tokenizer  # noqa: E402,F401


def roundtrip(est):
    buffer = io.BytesIO()
    joblib.dump(est, buffer)
    buffer.seek(0)
    return joblib.load(buffer)


@pytest.mark.parametrize("cls", [TransformerRanker, CascadeTransformer])
def test_fp32_cuda_predictions_match_the_cpu(cls, tokenizer):
    X, y = synthetic(n_questions=10)
    est = small(cls, "bert", tokenizer, epochs=2).fit(X, y)
    cpu = est.predict(X)
    gpu = est.set_params(device="cuda").predict(X)
    np.testing.assert_allclose(gpu, cpu, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("cls", [TransformerRanker, CascadeTransformer])
def test_fit_on_cuda_in_bf16_then_predict_on_the_cpu(cls, tokenizer):
    X, y = synthetic(n_questions=10)
    est = small(cls, "bert", tokenizer, device="cuda", precision="auto", epochs=2).fit(X, y)
    gpu = est.predict(X)
    assert np.isfinite(gpu).all()
    assert next(est.model_.parameters()).device.type in ("cpu", "cuda")
    cpu = roundtrip(est).set_params(device="cpu", precision="fp32").predict(X)
    # bf16 autocast on the GPU vs float32 on the CPU: close, not equal.
    np.testing.assert_allclose(gpu, cpu, atol=5e-2)


def test_cascade_drops_candidates_on_cuda(tokenizer):
    X, y = synthetic(n_questions=10, min_size=6, max_size=9)
    est = small(CascadeTransformer, "bert", tokenizer, device="cuda", epochs=1).fit(X, y)
    full = est.predict(X)
    pruned = est.set_params(alpha=0.3).predict(X)
    assert np.isfinite(pruned).all() and not np.allclose(full, pruned)


def test_cerberus_on_cuda(tokenizer):
    X, y = synthetic(n_questions=12)
    teachers = [WordOverlapRanker(), small(TransformerRanker, "bert", tokenizer, device="cuda")]
    est = small(Cerberus, "bert", tokenizer, teachers=teachers, teacher_cv=2, body_layers=4, head_layers=2,
                device="cuda", precision="auto").fit(X, y)
    gpu = est.predict(X)
    cpu = roundtrip(est).set_params(device="cpu", precision="fp32").predict(X)
    np.testing.assert_allclose(gpu, cpu, atol=5e-2)


@pytest.mark.parametrize("cls", [ContextConcat, ContextMWA])
def test_context_rankers_on_cuda(cls):
    pytest.importorskip("spacy")  # the extractor's n-gram scores tokenize with spaCy
    X, y = ctx.synthetic()
    X = ContextExtractor(max_global_sentences=2, max_global_tokens=12).fit_transform(X)
    tok = ctx.transformers.BertTokenizerFast(vocab={w: i for i, w in enumerate(ctx.SPECIAL + ctx.WORDS)})
    est = ctx.small(cls, tok, device="cuda").fit(X, y)
    gpu = est.predict(X)
    cpu = roundtrip(est).set_params(device="cpu", precision="fp32").predict(X)
    np.testing.assert_allclose(gpu, cpu, atol=5e-2)
