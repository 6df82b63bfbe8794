"""The ONNX Runtime backend of ``precision="int8"`` (tiny random models): the export agrees with the torch
module, a disagreeing export is refused, each int8 operator computes what its torch arithmetic does, the
calibrated ranges make a row's int8 score independent of the rows predicted with it, the int8 copy is built
once and never pickled, and without the optional packages the torch int8 path runs instead.

Exports take seconds each: the tests export each (module, inputs) once per test run (the
``memoized_exports`` fixture), and trace on the rows that the int8 copy traces on (:func:`example`), so that the
float32 export that checks an int8 copy is the one the float32 tests read. One layer is enough for all of them."""

import pickle

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import as2rank.neural as neural  # noqa: E402
from as2rank.neural.onnx import export as onnx_export  # noqa: E402
from as2rank.neural.onnx import runtime as onnx_runtime  # noqa: E402
from as2rank.neural.predict import batch_tensors  # noqa: E402
from as2rank.transformer.ranker import TransformerRanker  # noqa: E402
from tests.test_transformer import small, synthetic, tiny_config, tokenizer  # noqa: E402,F401

needs_onnx = pytest.mark.skipif(not onnx_runtime.onnx_available(), reason="onnxruntime, onnx or onnxscript missing")
needs_int8 = pytest.mark.skipif(not neural.int8_supported(), reason="CPU without int8 kernels")
#: One pytest-xdist worker runs the modules that share these exports (``--dist loadgroup``): the exporter's first
#: call in a process takes seconds to warm up, and a second worker would wait for each shared export.
pytestmark = [pytest.mark.usefixtures("memoized_exports"), pytest.mark.xdist_group("onnx")]
#: Encoder layers of the tiny models (each layer adds to every export's time).
LAYERS = 1


def tiny(cls, tokenizer, **params):
    return small(cls, "bert", tokenizer, model=tiny_config("bert", LAYERS), **params)


def shared_model(tokenizer):
    """The model whose exports the int8 tests of this module, ``test_int8_graphs`` and ``test_precision`` share
    (one xdist group, ``onnx``), fitted on its data: ``(ranker, X, y)``."""
    X, y = synthetic(n_questions=10)
    return tiny(TransformerRanker, tokenizer, lexical_prior=True).fit(X, y), X, y


@pytest.fixture(scope="module")
def fitted(tokenizer):
    ranker, X, _ = shared_model(tokenizer)
    return ranker, X, ranker.encode(X)


def example(encoded):
    """The rows an int8 copy is traced on (``neural.onnx.copies.onnx_copy``): any rows do, these share exports."""
    return batch_tensors(encoded, np.arange(4) % len(encoded["lengths"]))


@pytest.fixture
def written(tmp_path, monkeypatch):
    """The paths where every ONNX Runtime session built in the test writes the graph it runs (after its own
    rewrites), in order."""
    import onnxruntime as ort

    paths = []

    class Options(ort.SessionOptions):
        def __init__(self):
            super().__init__()
            self.optimized_model_filepath = str(tmp_path / f"run{len(paths)}.onnx")
            paths.append(self.optimized_model_filepath)

    monkeypatch.setattr(ort, "SessionOptions", Options)
    return paths


@needs_onnx
def test_float32_export_matches_the_module_on_any_shape(fitted):
    ranker, X, encoded = fitted
    model = ranker.model_.eval()
    graph = onnx_runtime.OnnxModule(model, example(encoded), threads=1)
    assert set(graph.names) == {"input_ids", "attention_mask", "token_type_ids", "question_mask", "prior"}
    rows = np.argsort(encoded["lengths"])
    # one row, padded rows of several widths, and every row at once
    for part in (rows[:1], rows[:2], rows[-5:], rows[::3], rows):
        batch = batch_tensors(encoded, part)
        with torch.inference_mode():
            expected = model(batch).numpy()
        np.testing.assert_allclose(graph(batch).numpy(), expected, atol=1e-5)
    del batch["prior"]
    with pytest.raises(ValueError, match="prior"):
        graph(batch)


@needs_onnx
def test_an_export_that_disagrees_with_the_module_is_refused(fitted):
    ranker, X, encoded = fitted
    model = ranker.model_.eval()

    class Session:
        """Stands for the graph's session: the module's output plus ``offset``."""

        def __init__(self, offset):
            self.offset = offset

        def run(self, names, feeds):
            with torch.inference_mode():
                return [model({k: torch.from_numpy(v) for k, v in feeds.items()}).numpy() + self.offset]

    graph = object.__new__(onnx_runtime.OnnxModule)
    example = batch_tensors(encoded, np.arange(3))
    graph._check(model, Session(0.0), example)
    with pytest.raises(RuntimeError, match="disagrees"):
        graph._check(model, Session(0.01), example)


@needs_onnx
@needs_int8
def test_int8_runs_on_onnx_runtime_built_once_and_kept_out_of_pickles(fitted):
    ranker, X, _ = fitted
    s32 = ranker.set_params(precision="fp32").predict(X)
    scores = ranker.set_params(precision="int8").predict(X)
    graph = ranker.predictor(encoded=ranker.encode(X)).module
    assert isinstance(graph, onnx_runtime.OnnxModule) and graph.int8
    np.testing.assert_allclose(scores, s32, atol=0.15 * max(1.0, np.abs(s32).max()))
    assert not np.array_equal(scores, s32)
    np.testing.assert_array_equal(ranker.predict(X), scores)
    assert ranker.predictor(encoded=ranker.encode(X)).module is graph  # exported once, not per call
    assert b"onnxruntime" not in pickle.dumps(ranker)
    ranker.set_params(precision="fp32")


@needs_int8
def test_int8_falls_back_to_torch_without_onnx_runtime(fitted, monkeypatch):
    ranker, X, _ = fitted
    monkeypatch.setattr(onnx_runtime, "onnx_available", lambda: False)
    ranker.set_params(precision="int8").predict(X)
    quantized = ranker.predictor(encoded=ranker.encode(X)).module
    assert any(type(m).__module__.startswith("torch.ao.nn.quantized") for m in quantized.modules())
    ranker.set_params(precision="fp32")


@needs_onnx
def test_sessions_run_without_the_fused_skip_layer_norm(fitted, written):
    # The graph a session runs (ONNX Runtime writes it where optimized_model_filepath says) keeps the residual
    # Add and its LayerNormalization apart; by default ONNX Runtime would fuse them.
    import onnx
    import onnxruntime as ort

    ranker, X, encoded = fitted
    onnx_runtime.OnnxModule(ranker.model_.eval(), example(encoded), threads=1)
    ours = written[-1]
    ort.InferenceSession(ours, ort.SessionOptions(), providers=["CPUExecutionProvider"])  # ONNX Runtime's default
    default = written[-1]

    def ops(path):
        return {node.op_type for node in onnx.load(path).graph.node}

    assert "SkipLayerNormalization" not in ops(ours) and "LayerNormalization" in ops(ours)
    assert "SkipLayerNormalization" in ops(default)
    # Each self-attention block is one fused Attention node (no Softmax or Transpose of its own left).
    assert "Attention" in ops(ours) and not {"Softmax", "Transpose"} & ops(ours)
    # The encoder's exact GELU runs as ONNX Runtime's own operator (here fused with the bias before it as
    # BiasGelu), none as the standard one.
    gelus = {(node.domain, node.op_type) for node in onnx.load(ours).graph.node if "Gelu" in node.op_type}
    assert gelus and {domain for domain, _ in gelus} == {"com.microsoft"}


@needs_onnx
def test_only_exact_gelu_is_rewritten_and_it_computes_the_same():
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    def graph(**attributes):
        node = helper.make_node("Gelu", ["x"], ["y"], **attributes)
        inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 7])]
        outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 7])]
        return helper.make_model(helper.make_graph([node], "g", inputs, outputs),
                                 opset_imports=[helper.make_opsetid("", 20)])

    x = np.linspace(-6, 6, 70, dtype=np.float32).reshape(10, 7)

    def run(model):
        return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]

    for attributes in ({}, {"approximate": "none"}):
        model = graph(**attributes)
        standard = run(model)
        assert onnx_export.contrib_gelu(model) == 1
        assert model.graph.node[0].domain == "com.microsoft" and not model.graph.node[0].attribute
        onnx.checker.check_model(model)
        np.testing.assert_allclose(run(model), standard, rtol=0, atol=1e-6)
        expected = 0.5 * x * (1 + torch.erf(torch.from_numpy(x) / 2**0.5).numpy())
        np.testing.assert_allclose(run(model), expected, rtol=0, atol=1e-5)
    tanh = graph(approximate="tanh")
    assert onnx_export.contrib_gelu(tanh) == 0 and tanh.graph.node[0].domain == ""


@needs_onnx
@pytest.mark.parametrize("implementation", [pytest.param("eager", marks=pytest.mark.slow), "sdpa"])  # eager: another graph
def test_fused_attention_matches_either_attention_mask(fitted, implementation):
    # eager attention gets an additive float mask, sdpa a boolean one: the fused node reads both.
    import copy

    ranker, X, encoded = fitted
    model = copy.deepcopy(ranker.model_).eval()
    model.encoder.set_attn_implementation(implementation)
    graph = onnx_runtime.OnnxModule(model, example(encoded), threads=1)
    batch = batch_tensors(encoded, np.argsort(encoded["lengths"])[::2])
    with torch.inference_mode():
        np.testing.assert_allclose(graph(batch).numpy(), model(batch).numpy(), atol=1e-5)


def test_only_bert_style_self_attention_is_fused(fitted):
    import copy

    ranker, X, encoded = fitted
    model = ranker.model_
    fused = onnx_runtime.export_copy(model)
    blocks = [m for m in fused.modules() if isinstance(m, onnx_runtime.FusedSelfAttention)]
    assert len(blocks) == model.encoder.config.num_hidden_layers and fused is not model
    assert not any(isinstance(m, onnx_runtime.FusedSelfAttention) for m in model.modules())  # a copy
    block = model.encoder.encoder.layer[0].attention.self
    w = blocks[0].weight.detach()
    x = torch.randn(2, model.encoder.config.hidden_size)
    with torch.no_grad():  # query, key and value side by side
        np.testing.assert_allclose((x @ w + blocks[0].bias).numpy(),
                                   torch.cat([block.query(x), block.key(x), block.value(x)], 1).numpy(), atol=1e-5)
    causal = copy.deepcopy(block)
    causal.is_causal = True
    assert onnx_runtime._is_bert_self_attention(block) and not onnx_runtime._is_bert_self_attention(causal)
    head_only = model.head
    assert onnx_runtime.export_copy(head_only) is head_only


def _export(module, inputs: dict, path):
    torch.onnx.export(module, tuple(inputs.values()), str(path), input_names=list(inputs), dynamo=True,
                      external_data=False)


def _run_exported(memo, module, *inputs, exact_integer_sums=False):
    """``module`` (positional tensors in, one tensor out) exported (once per test run: ``memo``, the
    ``export_memo`` fixture) and run by ONNX Runtime, on its default uint8 x int8 kernels or, with
    ``exact_integer_sums``, on the exact uint8 x uint8 ones that the int8 sessions ask for where the default
    kernels clamp their sums."""
    import tempfile
    from pathlib import Path

    feeds = {f"x{i}": x for i, x in enumerate(inputs)}
    with tempfile.TemporaryDirectory() as folder, onnx_export.quiet():
        path = Path(folder) / "m.onnx"
        memo.wrap(_export)(module, feeds, path)
        session = onnx_runtime.cpu_session(path, exact_integer_sums=exact_integer_sums)
        return session.run(None, {n: x.numpy() for n, x in feeds.items()})[0]


def _default_kernels() -> str:
    """What ONNX Runtime's default uint8 x int8 kernels compute on this CPU: ``"exact"`` sums where
    :func:`~as2rank.neural.onnx.runtime.u8s8_sums_exact` says so (AVX-512 VNNI, or not x86); ``"saturating"``
    pair sums (:func:`_saturating_sums`) on x86 CPUs with neither AVX-512 VNNI nor AVX-VNNI (SSE4.1, AVX2,
    AVX-512 without VNNI: checked on an AVX2 EPYC); ``"either"`` with AVX-VNNI alone, whose kernels the library
    treats as saturating without having checked them."""
    if onnx_runtime.u8s8_sums_exact():
        return "exact"
    return "either" if torch.cpu.get_capabilities().get("avx_vnni", False) else "saturating"


def _saturating_sums(codes, weight):
    """The sums of uint8 ``codes`` (..., k) times int8 ``weight`` (k, n) as ONNX Runtime's uint8 x int8 kernels
    without VNNI compute them (``vpmaddubsw``): the products of each pair of neighbouring input channels (2i,
    2i + 1) added in 16 bits and clamped to [-32768, 32767], then the pairs added in 32 bits. Int64 tensors."""
    if codes.shape[-1] % 2:  # an odd last channel pairs with a zero
        codes, weight = torch.nn.functional.pad(codes, (0, 1)), torch.nn.functional.pad(weight, (0, 0, 0, 1))
    pairs = codes.reshape(*codes.shape[:-1], -1, 2, 1) * weight.reshape(-1, 2, weight.shape[1])
    return pairs.sum(-2).clamp(-32768, 32767).sum(-2)


def _saturating_product(layer, x):
    """What :class:`~as2rank.neural.onnx.runtime.Int8Input`'s product computes on saturating kernels: the
    uint8 codes of the smoothed ``x`` times the int8 weights, summed by :func:`_saturating_sums` (the kernels
    multiply the raw codes and subtract the zero point's share from the sums after), then scaled, plus the
    bias."""
    codes = torch.clamp(torch.round(layer._smoothed(x) / layer.scale) + layer.zero.float(), 0, 255).long()
    weight = layer.weight.long()
    sums = _saturating_sums(codes, weight) - int(layer.zero) * weight.sum(0)
    return (sums.double() * float(layer.scale) * layer.weight_scale.double() + layer.bias.double()).float()


def _assert_kernel_arithmetic(got, kernels, exact, saturating, atol=1e-5):
    """``got``, an exported int8 operator's output on ``kernels`` (``"exact"``: the uint8 x uint8 kernels,
    ``"default"``: this CPU's default ones), is the arithmetic those kernels compute: ``exact`` (the eager
    module) or ``saturating`` (the same with :func:`_saturating_sums`), which the inputs must tell apart."""
    assert np.abs(saturating - exact).max() > 100 * atol  # some pair sums leave 16 bits
    expected = "exact" if kernels == "exact" else _default_kernels()
    close = {name: np.allclose(got, value, atol=atol, rtol=0)
             for name, value in (("exact", exact), ("saturating", saturating))}
    assert close[expected] if expected != "either" else any(close.values()), close


class _First(torch.nn.Module):
    """A module's first output (attention blocks return a pair)."""

    def __init__(self, module):
        super().__init__()
        self.module = module

    def forward(self, *inputs):
        out = self.module(*inputs)
        return out[0] if isinstance(out, tuple) else out


def _channel_ranges(x):
    """Per-channel [lows, highs] of ``x`` (..., channels), as calibration records them."""
    flat = x.reshape(-1, x.shape[-1])
    return np.stack([flat.amin(0).numpy(), flat.amax(0).numpy()])


def test_saturating_sums_clamp_each_pair_of_products_to_16_bits():
    codes = torch.tensor([[255, 255, 1, 2, 255]])
    weight = torch.tensor([[127, -127], [127, -127], [3, 5], [4, 6], [127, 1]])
    # pairs (255 * 127 * 2 = 64,770 -> 32,767; 3 + 8 = 11; 255 * 127 + 0) and (-64,770 -> -32,768; 5 + 12; 255)
    np.testing.assert_array_equal(_saturating_sums(codes, weight), [[32767 + 11 + 32385, -32768 + 17 + 255]])
    assert (codes @ weight).tolist() == [[64770 + 11 + 32385, -64770 + 17 + 255]]
    small = torch.randint(0, 64, (4, 9)), torch.randint(-64, 64, (9, 3))  # pairs within 16 bits: exact
    np.testing.assert_array_equal(_saturating_sums(*small), small[0] @ small[1])


@needs_onnx
@pytest.mark.parametrize("kernels", ["exact", "default"])
@pytest.mark.parametrize("per_channel", [False, True])
def test_int8_linear_layer_exports_the_arithmetic_it_computes(per_channel, kernels, export_memo):
    # On either kernels, whatever this CPU: "exact" is the int8 sessions' choice where u8s8_sums_exact() is
    # False (forced here on any host); "default" checks this CPU's own kernels against the arithmetic they are
    # documented to compute, so that a host of either kind catches a change of either.
    torch.manual_seed(0)
    linear = torch.nn.Linear(48, 16)
    x = torch.randn(3, 5, 48) * 3
    ranges = _channel_ranges(x) if per_channel else [float(x.min()), float(x.max())]
    layer = onnx_runtime.Int8Linear(linear, ranges)
    assert (layer.inverse is not None) == per_channel  # a whole-input range: no smoothing
    with torch.inference_mode():
        eager, exact = layer(x), linear(x)
        saturating = _saturating_product(layer, x)
    got = _run_exported(export_memo, _First(layer), x, exact_integer_sums=kernels == "exact")
    _assert_kernel_arithmetic(got, kernels, eager.numpy(), saturating.numpy())
    # int8 rounding, and nothing else: close to the float layer, not equal to it. Smoothing divides input
    # channel j by s_j and multiplies the weights it meets by s_j.
    s = 1 / layer.inverse if per_channel else torch.ones(48)
    step = (float(layer.scale) * (linear.weight * s).abs().sum(dim=1).max().item()
            + float(layer.weight_scale.max()) * (x / s).abs().sum(-1).max().item())
    assert 0 < (eager - exact).abs().max() <= step
    # values beyond the calibrated range saturate to its ends
    wide = x * 10
    with torch.inference_mode():
        assert (layer(wide) - linear(wide)).abs().max() > 10 * (eager - exact).abs().max()


def test_smoothing_moves_an_outlier_channel_s_range_into_the_weights(monkeypatch):
    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 32)
    x = torch.randn(4, 10, 64)
    x[..., 3] *= 60  # one channel far wider than the others, as in transformer encodings
    ranges = _channel_ranges(x)
    errors = {}
    for alpha in (None, onnx_runtime.SMOOTHING):
        monkeypatch.setattr(onnx_runtime, "SMOOTHING", alpha)
        layer = onnx_runtime.Int8Linear(linear, ranges)
        with torch.inference_mode():
            errors[alpha] = (layer(x) - linear(x)).abs().mean().item()
            if alpha is not None:  # the smoothed product is the same product before rounding
                s = 1 / layer.inverse
                torch.testing.assert_close((x / s) @ (linear.weight * s).T + linear.bias, linear(x), rtol=1e-5, atol=1e-4)
    assert errors[onnx_runtime.SMOOTHING] < errors[None] / 3


@needs_onnx
@pytest.mark.parametrize("int8, kernels", [(False, "default"), (True, "exact"), (True, "default")])
def test_fused_attention_exports_the_arithmetic_it_computes(fitted, int8, kernels, monkeypatch, export_memo):
    ranker, X, encoded = fitted
    block = ranker.model_.encoder.encoder.layer[0].attention.self
    torch.manual_seed(0)
    hidden = torch.randn(3, 6, ranker.model_.encoder.config.hidden_size)
    keep = torch.ones(3, 6)
    keep[1, 4:], keep[2, 2:] = 0, 0
    additive = ((1 - keep) * -10000.0)[:, None, None, :]
    fused = onnx_runtime.FusedSelfAttention(block, _channel_ranges(hidden) if int8 else None)
    with torch.inference_mode():
        eager, exact = fused(hidden, additive)[0], block(hidden, attention_mask=additive)[0]
    real = keep.bool().numpy()  # padded queries' outputs are never read
    got = _run_exported(export_memo, _First(fused), hidden, additive, exact_integer_sums=kernels == "exact")[real]
    if int8:  # the query, key and value projections on either kernels (see the linear layer's test)
        with torch.inference_mode(), monkeypatch.context() as m:
            m.setattr(fused, "_product", lambda h: _saturating_product(fused, h))
            saturating = fused(hidden, additive)[0]
        _assert_kernel_arithmetic(got, kernels, eager.numpy()[real], saturating.numpy()[real])
    else:
        np.testing.assert_allclose(got, eager.numpy()[real], atol=1e-5)
    gap = (eager - exact).abs()[keep.bool()].max()
    assert (0 < gap < 0.1) if int8 else gap < 1e-5


def test_export_copy_quantizes_the_calibrated_layers_only(fitted):
    ranker, X, encoded = fitted
    model = ranker.model_
    ranges = ranker.activation_ranges_
    copied = onnx_runtime.export_copy(model, ranges)
    blocks = [m for m in copied.modules() if isinstance(m, onnx_runtime.FusedSelfAttention)]
    assert len(blocks) == model.encoder.config.num_hidden_layers and all(b.int8 for b in blocks)
    int8 = {name for name, m in copied.named_modules() if isinstance(m, onnx_runtime.Int8Linear)}
    linear = {name for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    assert int8 == {n for n in linear if n in ranges and ".attention.self." not in n}
    assert "head.1" in int8 and "head.4" in int8
    partial = {k: v for k, v in ranges.items() if k != "head.4"}
    assert "head.4" not in {n for n, m in onnx_runtime.export_copy(model, partial).named_modules()
                            if isinstance(m, onnx_runtime.Int8Linear)}
    assert not any(isinstance(m, onnx_runtime.Int8Linear) for m in model.modules())  # a copy


def test_calibration_records_each_linear_input_over_real_tokens(fitted):
    from as2rank.neural.onnx.calibration import activation_ranges, calibration_rows

    ranker, X, encoded = fitted
    model = ranker.model_.eval()
    rows = np.arange(len(X))
    ranges = activation_ranges(model, encoded, rows, torch.device("cpu"))
    assert set(ranges) == {n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    # the first block's query reads the embeddings: recompute them row by row, without padding
    seen = []
    for r in rows:
        batch = batch_tensors(encoded, np.array([r]))
        with torch.inference_mode():
            out = model.encoder.embeddings(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"])
        seen.append(out.flatten())
    seen = torch.cat(seen).reshape(-1, model.encoder.config.hidden_size)
    query = ranges["encoder.encoder.layer.0.attention.self.query"]
    assert query.shape == (2, model.encoder.config.hidden_size)  # one low and one high per input channel
    np.testing.assert_allclose(query, np.stack([seen.amin(0).numpy(), seen.amax(0).numpy()]), rtol=1e-5, atol=1e-6)
    # more data widens a range, never narrows it
    half = activation_ranges(model, encoded, rows[::2], torch.device("cpu"))
    both = activation_ranges(model, encoded, rows[1::2], torch.device("cpu"), previous=half)
    for name, (low, high) in ranges.items():
        np.testing.assert_allclose(np.stack([low, high]), both[name], rtol=1e-5)
        assert (half[name][0] >= low).all() and (half[name][1] <= high).all()
    # a whole-input range of an older model bounds every channel
    whole = {name: [float(low.min()) - 1, float(high.max())] for name, (low, high) in half.items()}
    merged = activation_ranges(model, encoded, rows[1::2], torch.device("cpu"), previous=whole)
    for name, (low, high) in merged.items():
        assert (low == whole[name][0]).all() and (high >= both[name][1]).all()
    np.testing.assert_array_equal(calibration_rows(np.arange(10), 4), [0, 3, 6, 9])
    np.testing.assert_array_equal(calibration_rows(np.arange(3), 4), [0, 1, 2])


def _other_kernels(exact: bool):
    """A parameter whose int8 graph is not this host's own (another export): marked slow."""
    return pytest.param(exact, marks=pytest.mark.slow) if exact != onnx_runtime.u8s8_sums_exact() else exact


@needs_onnx
@needs_int8
@pytest.mark.parametrize("exact_u8s8", [_other_kernels(True), _other_kernels(False)])
def test_int8_sessions_ask_for_exact_sums_where_the_cpu_kernels_clamp_them(fitted, written, monkeypatch, exact_u8s8):
    # Where the uint8 x int8 kernels clamp their sums (x86 without AVX-512 VNNI), the int8 session has ONNX Runtime
    # rewrite the int8 weights as uint8 for its exact kernels; where they are exact, it keeps them int8.
    import onnx

    ranker, X, encoded = fitted
    monkeypatch.setattr(onnx_runtime, "u8s8_sums_exact", lambda: exact_u8s8)
    onnx_runtime.OnnxModule(ranker.model_.eval(), example(encoded), ranges=ranker.activation_ranges_, threads=1)
    graph = onnx.load(written[-1]).graph
    types = {init.name: init.data_type for init in graph.initializer}
    weights = [types[node.input[1]] for node in graph.node if node.op_type in ("MatMulIntegerToFloat", "QAttention")]
    assert weights and set(weights) == {onnx.TensorProto.INT8 if exact_u8s8 else onnx.TensorProto.UINT8}


@needs_onnx
@needs_int8
@pytest.mark.skipif(not onnx_runtime.u8s8_sums_exact(), reason="this CPU's uint8 x int8 kernels clamp their sums")
def test_exact_integer_kernels_give_the_scores_of_the_default_ones(fitted, monkeypatch):
    # On a CPU whose default kernels are exact already, the uint8 x uint8 rewrite computes the same products.
    ranker, X, encoded = fitted
    model, rows = ranker.model_.eval(), example(encoded)
    default = onnx_runtime.OnnxModule(model, rows, ranges=ranker.activation_ranges_, threads=1)
    monkeypatch.setattr(onnx_runtime, "u8s8_sums_exact", lambda: False)
    exact = onnx_runtime.OnnxModule(model, rows, ranges=ranker.activation_ranges_, threads=1)
    batch = batch_tensors(encoded, np.arange(len(encoded["lengths"])))
    np.testing.assert_array_equal(exact(batch).numpy(), default(batch).numpy())


def _int8_in_batches(ranker, X) -> tuple:
    """int8 scores of every row predicted all at once, one row per call and two rows per call."""
    together = ranker.set_params(precision="int8").predict(X)
    alone = np.concatenate([ranker.predict(X.iloc[[i]]) for i in range(len(X))])
    pairs = np.concatenate([ranker.predict(X.iloc[i:i + 2]) for i in range(0, len(X) - 1, 2)])
    ranker.set_params(precision="fp32")
    return together, alone, pairs


@needs_onnx
@needs_int8
@pytest.mark.slow  # a second model, exported twice
def test_int8_score_of_a_row_does_not_depend_on_its_batch(tokenizer, fitted):
    # The plain head: every value the graph's float parts pass on is quantized with fixed ranges before it
    # reaches the logit, so a row's score is bit-identical whatever the batch.
    X = fitted[1]
    plain = tiny(TransformerRanker, tokenizer, lexical_prior=True, segment_similarity=False)
    plain.fit(X, synthetic(n_questions=10)[1])
    together, alone, pairs = _int8_in_batches(plain, X)
    np.testing.assert_array_equal(alone, together)
    np.testing.assert_array_equal(pairs, together[: len(pairs)])
    # The segment similarity reads the last layer's float encodings unquantized, and their sums round
    # differently at another padded width: the score moves by float rounding only (~1e-7 here).
    together, alone, pairs = _int8_in_batches(fitted[0], X)
    np.testing.assert_allclose(alone, together, atol=1e-5, rtol=0)
    np.testing.assert_allclose(pairs, together[: len(pairs)], atol=1e-5, rtol=0)


def _spinning(module):
    """The session's ``allow_spinning`` entry (None: ONNX Runtime's default, spinning)."""
    try:
        return module.session.get_session_options().get_session_config_entry("session.intra_op.allow_spinning")
    except RuntimeError:
        return None


@needs_onnx
def test_a_session_that_does_not_spin_scores_the_same(fitted):
    ranker, X, encoded = fitted
    rows = example(encoded)
    whole = onnx_runtime.OnnxModule(ranker.model_, rows, threads=1)
    quiet = onnx_runtime.OnnxModule.from_graph(whole.graph, whole.names, int8=False, threads=1, digest="", spinning=False)
    assert _spinning(whole) is None and _spinning(quiet) == "0"
    np.testing.assert_array_equal(quiet(rows).numpy(), whole(rows).numpy())


def test_ranges_key_tells_every_input_of_an_int8_copy_apart(monkeypatch):
    per_channel = {"a": np.array([[-1.0, 0.0], [2.0, 3.0]]), "b": np.array([[0.0], [1.0]])}
    key = onnx_runtime.ranges_key(per_channel)
    assert key == onnx_runtime.ranges_key(dict(reversed(per_channel.items())))  # the order of the layers is not
    assert key != onnx_runtime.ranges_key({**per_channel, "a": per_channel["a"] * 2})
    # a whole-input range (no smoothing) is not a one-channel range of the same values
    assert key != onnx_runtime.ranges_key({**per_channel, "b": [0.0, 1.0]})
    monkeypatch.setattr(onnx_runtime, "SMOOTHING", 0.5)
    assert key != onnx_runtime.ranges_key(per_channel)


@needs_onnx
@needs_int8
@pytest.mark.slow  # another int8 graph
def test_another_smoothing_is_another_int8_model(fitted, monkeypatch):
    ranker, X, _ = fitted
    try:
        smoothed = ranker.set_params(precision="int8").predict(X)
        monkeypatch.setattr(onnx_runtime, "SMOOTHING", None)
        plain = ranker.predict(X)  # never the copy built for the other strength
        assert not np.array_equal(plain, smoothed)
        monkeypatch.undo()
        np.testing.assert_array_equal(ranker.predict(X), smoothed)
    finally:
        ranker.set_params(precision="fp32")


@needs_onnx
@needs_int8
@pytest.mark.slow  # another int8 graph (other ranges)
def test_calibration_is_saved_and_partial_fit_widens_it(fitted, tokenizer, tmp_path):
    ranker, X, _ = fitted
    ranker.save_pretrained(tmp_path / "m")
    loaded = TransformerRanker.from_pretrained(tmp_path / "m")
    assert loaded.activation_ranges_.keys() == ranker.activation_ranges_.keys()
    for name, r in ranker.activation_ranges_.items():
        np.testing.assert_array_equal(loaded.activation_ranges_[name], r)
    np.testing.assert_array_equal(loaded.set_params(precision="int8").predict(X),
                                  ranker.set_params(precision="int8").predict(X))
    # other ranges are another int8 model, never the copy built for the old ones
    loaded.activation_ranges_ = {k: 2 * r for k, r in loaded.activation_ranges_.items()}
    assert not np.array_equal(loaded.predict(X), ranker.predict(X))
    ranker.set_params(precision="fp32")
    stream = tiny(TransformerRanker, tokenizer)
    first = X["qid"].isin(X["qid"].unique()[:5]).to_numpy()
    rest = ~first
    y = synthetic(n_questions=10)[1]
    stream.partial_fit(X[first], y[first], total_rows=len(X))
    before = dict(stream.activation_ranges_)
    stream.partial_fit(X[rest], y[rest])
    for name, (low, high) in before.items():
        assert (stream.activation_ranges_[name][0] <= low).all() and (stream.activation_ranges_[name][1] >= high).all()
