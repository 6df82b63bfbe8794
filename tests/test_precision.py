"""Precision, int8 quantization and the speed plumbing of the transformer estimators (tiny random models).

Tolerances per precision, on these tiny models (logits of order 1): float32 1e-5; bfloat16 5e-2 (about
three significant digits); int8 1.5e-1 (a few hundred uint8 steps per activation; on torch's kernels the
quantization is dynamic, so a row's score also moves slightly with the rows batched beside it).
"""

import pickle
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import as2rank.neural as neural  # noqa: E402
import as2rank.neural.devices as devices  # noqa: E402
from as2rank.neural.onnx import runtime as onnx_runtime  # noqa: E402
from as2rank.transformer.cascade import CascadeTransformer  # noqa: E402
from as2rank.neural import train  # noqa: E402
from as2rank.transformer.ranker import TransformerRanker  # noqa: E402
from tests.test_onnx_runtime import shared_model  # noqa: E402
from tests.test_transformer import small, synthetic, tiny_config, tokenizer  # noqa: E402,F401

ATOL = {"fp32": 1e-5, "bf16": 5e-2, "int8": 1.5e-1}
needs_int8 = pytest.mark.skipif(not neural.int8_supported(), reason="CPU without int8 kernels")
# int8 exports to ONNX Runtime: once per test run, in the worker of the other modules that share them
pytestmark = [pytest.mark.usefixtures("memoized_exports"), pytest.mark.xdist_group("onnx")]


@pytest.fixture(scope="module")
def fitted(tokenizer):
    # The model of tests/test_onnx_runtime.py: its int8 tests export it to ONNX Runtime, which takes seconds per
    # graph (and per layer), once per test run (the memoized_exports fixture).
    ranker, X, _ = shared_model(tokenizer)
    return ranker, X


def _scale(scores):
    return max(1.0, float(np.abs(scores).max()))


@pytest.mark.parametrize("precision", ["fp32", "bf16", pytest.param("int8", marks=needs_int8)])
def test_scores_do_not_depend_on_batch_order_or_size(fitted, precision, request):
    if precision == "bf16":
        request.getfixturevalue("bf16_anywhere")
    ranker, X = fitted
    ranker = ranker.set_params(precision=precision, batch_tokens=16384)
    reference = ranker.predict(X)
    perm = np.random.default_rng(0).permutation(len(X))
    shuffled = np.empty_like(reference)
    shuffled[perm] = ranker.predict(X.iloc[perm])  # scores come back in input order
    small_batches = ranker.set_params(batch_tokens=40).predict(X)
    ranker.set_params(batch_tokens=16384, precision="fp32")
    atol = ATOL[precision] * _scale(reference)
    np.testing.assert_allclose(shuffled, reference, atol=atol)
    np.testing.assert_allclose(small_batches, reference, atol=atol)


@pytest.mark.parametrize("precision", ["bf16", pytest.param("int8", marks=needs_int8)])
def test_low_precision_scores_close_to_fp32_but_really_applied(fitted, precision, request):
    if precision == "bf16":
        request.getfixturevalue("bf16_anywhere")
    ranker, X = fitted
    s32 = ranker.set_params(precision="fp32").predict(X)
    low = ranker.set_params(precision=precision).predict(X)
    ranker.set_params(precision="fp32")
    np.testing.assert_allclose(low, s32, atol=ATOL[precision] * _scale(s32))
    assert not np.array_equal(low, s32)


@needs_int8
def test_int8_copy_built_once_and_kept_out_of_pickles(fitted, monkeypatch):
    ranker, X = fitted
    # torch's int8 path (the ONNX Runtime one: tests/test_onnx_runtime.py)
    monkeypatch.setattr(onnx_runtime, "onnx_available", lambda: False)
    ranker.set_params(precision="int8")
    scores = ranker.predict(X)
    quantized = ranker.predictor().module
    assert any(type(m).__module__.startswith("torch.ao.nn.quantized") for m in quantized.modules())
    assert not any(type(m).__module__.startswith("torch.ao.nn.quantized") for m in ranker.model_.modules())
    ranker.predict(X)
    assert ranker.predictor().module is quantized  # quantized once, not per call
    blob = pickle.dumps(ranker)
    assert b"torch.ao.nn.quantized" not in blob
    loaded = pickle.loads(blob)
    assert loaded.predictor().module is not quantized  # the loaded model quantizes its own weights
    np.testing.assert_allclose(loaded.predict(X), scores, atol=1e-6)
    ranker.set_params(precision="fp32")


def test_low_precision_pickles_load_where_instructions_are_missing(fitted, monkeypatch):
    ranker, X = fitted
    s32 = ranker.set_params(precision="fp32").predict(X)
    for precision in ("bf16", "int8"):
        blob = pickle.dumps(ranker.set_params(precision=precision))
        with monkeypatch.context() as m:
            m.setattr(devices, "cpu_bf16_supported", lambda: False)
            m.setattr(devices, "int8_supported", lambda: False)
            m.setattr(neural, "cpu_bf16_supported", lambda: False)
            m.setattr(neural, "int8_supported", lambda: False)
            loaded = pickle.loads(blob)
            with pytest.warns(RuntimeWarning, match="float32"):
                scores = loaded.predict(X)
            np.testing.assert_allclose(scores, s32, atol=1e-6)
            # "auto" picks float32 on such a CPU, silently.
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                np.testing.assert_allclose(loaded.set_params(precision="auto").predict(X), s32, atol=1e-6)
    ranker.set_params(precision="fp32")


def test_auto_precision_follows_the_hardware(fitted, monkeypatch):
    ranker, X = fitted
    cpu = torch.device("cpu")
    ranker.set_params(precision="auto")
    monkeypatch.setattr(neural.devices, "cpu_bf16_supported", lambda: True)
    assert ranker._compute_dtype(cpu) == torch.bfloat16
    monkeypatch.setattr(neural.devices, "cpu_bf16_supported", lambda: False)
    assert ranker._compute_dtype(cpu) == torch.float32
    ranker.set_params(precision="int8")
    monkeypatch.setattr(neural.devices, "cpu_bf16_supported", lambda: True)
    assert ranker._compute_dtype(cpu, training=True) == torch.bfloat16  # int8 trains as "auto"
    ranker.set_params(precision="fp32")


def test_one_resolver_for_both_precision_tables(monkeypatch):
    """Cosinet's values resolve as the transformers' do, except that it never gets float16 (no loss scaling)."""
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert devices.autocast_dtype("auto", cuda) == torch.float16
    assert devices.resolve_precision("auto", cuda) == torch.float32
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert devices.resolve_precision("auto", cuda) == devices.autocast_dtype("auto", cuda) == torch.bfloat16
    monkeypatch.setattr(devices, "cpu_bf16_supported", lambda: False)
    for resolve in (devices.autocast_dtype, devices.resolve_precision):
        assert resolve("auto", cpu) == torch.float32
        with pytest.warns(RuntimeWarning, match="no native bfloat16"):
            assert resolve("bf16", cpu) == torch.float32
    for bad in ("fp16", "int8"):
        with pytest.raises(ValueError, match="precision must be"):
            devices.resolve_precision(bad, cpu)


def test_precision_errors(tokenizer):
    X, y = synthetic(4)
    with pytest.raises(ValueError, match="needs a CUDA device"):
        small(TransformerRanker, "bert", tokenizer, precision="fp16").fit(X, y)
    with pytest.raises(ValueError, match="precision must be"):
        small(TransformerRanker, "bert", tokenizer, precision="int4").fit(X, y)
    with pytest.raises(ValueError, match="head_lr_multiplier"):
        small(TransformerRanker, "bert", tokenizer, head_lr_multiplier=0).fit(X, y)
    with pytest.raises(ValueError, match="freeze_embeddings"):
        small(TransformerRanker, "bert", tokenizer, freeze_embeddings="yes").fit(X, y)


def test_bf16_training_runs_and_stays_close(tokenizer, bf16_anywhere):
    X, y = synthetic(6)
    fp32 = small(TransformerRanker, "bert", tokenizer).fit(X, y)
    bf16 = small(TransformerRanker, "bert", tokenizer, precision="bf16").fit(X, y)
    assert np.isfinite(bf16.history_.step_loss).all()
    np.testing.assert_allclose(bf16.history_.step_loss, fp32.history_.step_loss, atol=5e-2)


def test_fp32_fit_is_bit_for_bit_reproducible(tokenizer):
    X, y = synthetic()
    a = small(TransformerRanker, "bert", tokenizer, reuse_fit=False).fit(X, y)
    b = small(TransformerRanker, "bert", tokenizer, reuse_fit=False).fit(X, y)
    for k, v in a.model_.state_dict().items():
        assert torch.equal(v, b.model_.state_dict()[k]), k
    np.testing.assert_array_equal(a.predict(X), b.predict(X))


def test_cascade_int8_and_bf16_follow_fp32(tokenizer, monkeypatch, bf16_anywhere):
    # torch's int8 kernels (the cascade on ONNX Runtime: tests/test_onnx_runtime.py)
    monkeypatch.setattr(onnx_runtime, "onnx_available", lambda: False)
    X, y = synthetic()
    cascade = small(CascadeTransformer, "bert", tokenizer).fit(X, y)
    s32 = cascade.predict_exits(X)
    for precision in ("bf16", "int8") if neural.int8_supported() else ("bf16",):
        low = cascade.set_params(precision=precision).predict_exits(X)
        np.testing.assert_allclose(low, s32, atol=ATOL[precision] * _scale(s32))


def test_freeze_embeddings_keeps_word_vectors(tokenizer):
    X, y = synthetic()
    ranker = small(TransformerRanker, "bert", tokenizer, warm_start=True).fit(X, y)
    before = {k: v.clone() for k, v in ranker.model_.state_dict().items()}
    ranker.set_params(freeze_embeddings=True).fit(X, y)
    after = ranker.model_.state_dict()
    name = "encoder.embeddings.word_embeddings.weight"
    assert torch.equal(after[name], before[name])
    assert not torch.equal(after["encoder.embeddings.position_embeddings.weight"], before["encoder.embeddings.position_embeddings.weight"])
    assert not torch.equal(after["head.1.weight"], before["head.1.weight"])


def test_lr_multipliers_scale_one_submodule():
    """A submodule with multiplier 0 does not move; the others learn at the base rate."""
    torch.manual_seed(0)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    module = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    frozen = module[2].weight.clone()
    first = module[0].weight.clone()

    def loss(m, batch):
        return torch.nn.functional.mse_loss(m(batch["x"]), batch["y"])

    history = train(
        module, lambda epoch: [{"x": x, "y": y}], loss, epochs=3, steps_per_epoch=1, learning_rate=0.1,
        device=torch.device("cpu"), optimizer="adamw", schedule="constant", lr_multipliers={"2": 0.0},
    )
    assert torch.equal(module[2].weight, frozen) and not torch.equal(module[0].weight, first)
    assert history.learning_rate == [0.1] * 3
    with pytest.raises(ValueError, match="names no submodule"):
        train(module, lambda epoch: [{"x": x, "y": y}], loss, epochs=1, steps_per_epoch=1, learning_rate=0.1,
              device=torch.device("cpu"), lr_multipliers={"head": 2.0})


def test_batch_tokens_auto_is_small_on_the_cpu(fitted):
    ranker, X = fitted
    from as2rank.transformer.parameters import AUTO_BATCH_TOKENS

    assert TransformerRanker().batch_tokens == "auto" and CascadeTransformer().batch_tokens == "auto"
    ranker.set_params(batch_tokens="auto")
    assert ranker._batch_tokens(torch.device("cpu")) == AUTO_BATCH_TOKENS["cpu"] == 2048
    assert ranker._batch_tokens(torch.device("cuda")) == AUTO_BATCH_TOKENS["other"] == 16384
    # The int8 copy on ONNX Runtime predicts in smaller batches (the cascade's less small); torch models,
    # quantized or not, keep the CPU budget.
    onnx = object.__new__(onnx_runtime.OnnxModule)
    assert ranker._batch_tokens(torch.device("cpu"), onnx) == AUTO_BATCH_TOKENS["cpu-onnx"] == 512
    assert ranker._batch_tokens(torch.device("cpu"), torch.nn.Linear(1, 1)) == 2048
    assert ranker._batch_tokens(torch.device("cuda"), onnx) == 16384
    cascade = object.__new__(onnx_runtime.OnnxCascade)
    assert CascadeTransformer()._batch_tokens(torch.device("cpu"), cascade) == 1024
    assert ranker.set_params(batch_tokens=64)._batch_tokens(torch.device("cpu"), onnx) == 64
    ranker.set_params(batch_tokens="auto")
    reference = ranker.predict(X)
    np.testing.assert_allclose(ranker.set_params(batch_tokens=100_000).predict(X), reference, atol=1e-5)
    assert ranker.set_params(batch_tokens=64)._batch_tokens(torch.device("cpu")) == 64
    ranker.set_params(batch_tokens="auto")
    with pytest.raises(ValueError, match="batch_tokens"):
        ranker.set_params(batch_tokens="big").predict(X)
    ranker.set_params(batch_tokens="auto")


def test_score_heads_run_in_float32_under_autocast():
    from as2rank.transformer.network import feed_forward, head_logits

    torch.manual_seed(0)
    head = feed_forward(16, 2).eval()
    x = torch.randn(64, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, plain = head_logits(head, x), head(x)
    assert plain.dtype == torch.bfloat16 and out.dtype == torch.float32
    torch.testing.assert_close(out, head(x), rtol=0, atol=0)


@pytest.mark.parametrize("cls", [TransformerRanker, CascadeTransformer])
def test_bf16_scores_are_not_rounded_to_bf16(tokenizer, cls, bf16_anywhere):
    # Rounded logits would tie inside questions and leave the order to the tie policy.
    X, y = synthetic()
    ranker = small(cls, "bert", tokenizer).fit(X, y)
    scores = ranker.set_params(precision="bf16").predict(X).astype(np.float32)
    on_grid = torch.from_numpy(scores).to(torch.bfloat16).float().numpy() == scores
    assert on_grid.mean() < 0.2
    assert len(np.unique(scores)) > 0.9 * len(scores)
