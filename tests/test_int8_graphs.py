"""Int8 graphs saved with the model (``save_pretrained(int8=True)``, tiny random models): a loaded model predicts
at int8 from them without exporting, with the scores of the process that saved them; graphs exported from
other weights (another model, or the same model changed after loading) are never used.

Each (module, inputs) is exported once per test run (the ``memoized_exports`` fixture): a graph exported again
is the one exported before, and one that a test refuses to export is still asked for."""

import copy
import shutil
import warnings

import numpy as np
import pytest

from tests.utils import reseal

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import as2rank.neural as neural  # noqa: E402
from as2rank.neural.onnx import runtime as onnx_runtime  # noqa: E402
from as2rank.neural.onnx import copies  # noqa: E402
from as2rank.transformer.ranker import TransformerRanker  # noqa: E402
from tests.test_onnx_runtime import shared_model  # noqa: E402
from tests.test_transformer import small, synthetic, tiny_config, tokenizer  # noqa: E402,F401

pytestmark = [pytest.mark.skipif(not (onnx_runtime.onnx_available() and neural.int8_supported()),
                                 reason="needs onnxruntime, onnx, onnxscript and int8 kernels"),
              pytest.mark.usefixtures("memoized_exports"), pytest.mark.xdist_group("onnx")]


def tiny(cls, tokenizer, layers=1, **params):
    """A model of one layer (each layer adds to every export's time): the model of ``test_onnx_runtime``, whose
    exports the tests share."""
    return small(cls, "bert", tokenizer, model=tiny_config("bert", layers), **params)


@pytest.fixture(scope="module")
def data():
    return synthetic(n_questions=10)


@pytest.fixture(scope="module")
def fitted(tokenizer, data):
    ranker, X, _ = shared_model(tokenizer)
    assert X.equals(data[0])
    # Its int8 copy, traced on the rows the tests predict (the one a deep copy exports again): what saving writes.
    ranker.set_params(precision="int8").predict(data[0])
    return ranker.set_params(precision="fp32")


def change_head(ranker):
    """``ranker`` with other weights: its head's first tensor moved by 0.5 (in place)."""
    with torch.no_grad():
        next(ranker.model_.head.parameters()).add_(0.5)
    return ranker


def refuse_exports(monkeypatch):
    def export(*args, **kwargs):
        raise AssertionError("exported a graph")

    monkeypatch.setattr(onnx_runtime, "export_graph", export)


def predict_quietly(est, X):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return est.predict(X)


def test_a_loaded_model_predicts_from_its_saved_graph_without_exporting(fitted, data, tmp_path, monkeypatch):
    X, _ = data
    ranker = copy.deepcopy(fitted).set_params(precision="int8")
    scores = ranker.predict(X)
    refuse_exports(monkeypatch)  # saving reuses the copy this process built to predict
    ranker.save_pretrained(tmp_path / "m", int8=True)
    assert sorted(p.name for p in (tmp_path / "m" / "onnx").iterdir()) == ["int8-0.onnx"]
    loaded = TransformerRanker.from_pretrained(tmp_path / "m", precision="int8")
    np.testing.assert_array_equal(predict_quietly(loaded, X), scores)
    graph = loaded.predictor(encoded=loaded.encode(X)).module
    assert isinstance(graph, onnx_runtime.OnnxModule) and graph.int8


@pytest.mark.slow  # two segments, each exported twice (float32, then int8)
def test_a_cascade_runs_and_saves_one_graph_per_segment(tokenizer, data, tmp_path, monkeypatch):
    # Each segment's float32 graph is checked against the torch segment when it is built (OnnxModule).
    from as2rank.transformer.cascade import CascadeTransformer

    X, y = data
    cascade = tiny(CascadeTransformer, tokenizer, layers=2, exits=(1, 2), alpha=0.4, lexical_prior=True).fit(X, y)
    s32, cost32 = cascade.predict(X, return_cost=True)
    cascade.save_pretrained(tmp_path / "c", int8=True)  # nothing predicted at int8 yet: exported now
    assert sorted(p.name for p in (tmp_path / "c" / "onnx").iterdir()) == ["int8-0.onnx", "int8-1.onnx"]
    refuse_exports(monkeypatch)  # predicting reuses the copy that saving built
    scores, cost = cascade.set_params(precision="int8").predict(X, return_cost=True)
    graphs = cascade.predictor(encoded=cascade.encode(X)).module
    assert isinstance(graphs, onnx_runtime.OnnxCascade) and len(graphs.segments) == 2
    assert all(isinstance(g, onnx_runtime.OnnxModule) and g.int8 for g in graphs.segments)
    # The cascade's work between segments needs the cores: its sessions do not spin.
    options = [g.session.get_session_options() for g in graphs.segments]
    assert [o.get_session_config_entry("session.intra_op.allow_spinning") for o in options] == ["0", "0"]
    np.testing.assert_array_equal(cost["rows_per_layer"], cost32["rows_per_layer"])  # the same drops' sizes
    np.testing.assert_allclose(scores, s32, atol=0.15 * max(1.0, np.abs(s32).max()))
    loaded = CascadeTransformer.from_pretrained(tmp_path / "c", precision="int8")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the saved graphs are read, not exported again
        loaded_scores, loaded_cost = loaded.predict(X, return_cost=True)
    np.testing.assert_array_equal(loaded_scores, scores)
    np.testing.assert_array_equal(loaded_cost["rows_per_layer"], cost["rows_per_layer"])


@pytest.mark.slow  # another model, exported twice
def test_graphs_of_another_model_are_not_used(fitted, data, tmp_path):
    X, y = data
    fitted.save_pretrained(tmp_path / "a", int8=True)
    # Another model of the same shape: the fitted one with other head weights (the model the next test changes
    # after loading), so that the graphs read, and would compute, without error.
    other = change_head(copy.deepcopy(fitted))
    other.save_pretrained(tmp_path / "b")
    assert not (tmp_path / "b" / "onnx").exists()
    own = copy.deepcopy(other).set_params(precision="int8").predict(X)
    shutil.copytree(tmp_path / "a" / "onnx", tmp_path / "b" / "onnx")
    with pytest.raises(ValueError, match="onnx/int8-0.onnx was not saved with the model"):
        TransformerRanker.from_pretrained(tmp_path / "b")  # the seal refuses graphs copied in
    reseal(tmp_path / "b")  # sealed again: the graphs are read, and refused for their digest
    loaded = TransformerRanker.from_pretrained(tmp_path / "b", precision="int8")
    with pytest.warns(UserWarning, match="not exported from this model"):
        scores = loaded.predict(X)
    np.testing.assert_array_equal(scores, own)
    graph = tmp_path / "a" / "onnx" / "int8-0.onnx"
    graph.write_bytes(graph.read_bytes()[: graph.stat().st_size // 2])  # a truncated copy: exported again
    reseal(tmp_path / "a")
    loaded = TransformerRanker.from_pretrained(tmp_path / "a", precision="int8")
    with pytest.warns(UserWarning, match="not exported from this model"):
        np.testing.assert_array_equal(loaded.predict(X), copy.deepcopy(fitted).set_params(precision="int8").predict(X))


@pytest.mark.slow  # two other models, each exported twice
def test_a_model_changed_after_loading_exports_again(fitted, data, tmp_path):
    X, y = data
    fitted.save_pretrained(tmp_path / "m", int8=True)
    loaded = TransformerRanker.from_pretrained(tmp_path / "m", precision="int8")
    saved = predict_quietly(loaded, X)
    changed = change_head(TransformerRanker.from_pretrained(tmp_path / "m", precision="int8"))
    with pytest.warns(UserWarning, match="exporting them again"):
        scores = changed.predict(X)
    assert not np.allclose(scores, saved)
    # A fit trains new weights: the saved graphs are forgotten, not checked and refused.
    refit = TransformerRanker.from_pretrained(tmp_path / "m", precision="int8", epochs=1).fit(X, y)
    assert copies.INT8_COPIES._entries.get(refit.model_) is None
    predict_quietly(refit, X)


def test_int8_saving_needs_a_calibrated_model(fitted, tmp_path):
    uncalibrated = copy.deepcopy(fitted)
    del uncalibrated.activation_ranges_
    with pytest.raises(ValueError, match="no int8 calibration"):
        uncalibrated.save_pretrained(tmp_path / "m", int8=True)


@pytest.mark.slow  # another model, exported twice
def test_a_context_ranker_saves_its_graph_traced_on_its_own_columns(tokenizer, tmp_path, monkeypatch):
    # ContextConcat reads context columns besides the pair: the rows that trace its graph at saving have them.
    from as2rank.transformer.context.rankers import ContextConcat
    from as2rank.transformer.context.features import ContextExtractor
    from tests import test_context

    X, y = test_context.synthetic()
    X = ContextExtractor(max_global_sentences=2, max_global_tokens=12).fit_transform(X)
    config = test_context.tiny_config()
    config.num_hidden_layers = 1  # each layer adds to the export's time
    ranker = test_context.small(ContextConcat, tokenizer, lexical_prior=True, model=config).fit(X, y)
    ranker.save_pretrained(tmp_path / "m", int8=True)
    scores = ranker.set_params(precision="int8").predict(X)
    refuse_exports(monkeypatch)
    loaded = ContextConcat.from_pretrained(tmp_path / "m", precision="int8")
    np.testing.assert_array_equal(predict_quietly(loaded, X), scores)


def test_copy_digest_reads_every_tensor_kind_and_each_input():
    module = torch.nn.Module()
    for name, value in {"scalar": torch.tensor(3.0), "empty": torch.zeros(0), "mask": torch.ones(2, dtype=torch.bool),
                        "bf16": torch.ones(3, dtype=torch.bfloat16)}.items():
        module.register_buffer(name, value)
    digest = onnx_runtime.copy_digest(module, {"layer": [0.0, 1.0]}, ["input_ids"])
    assert digest == onnx_runtime.copy_digest(module, {"layer": [0.0, 1.0]}, ["input_ids"])
    assert digest != onnx_runtime.copy_digest(module, {"layer": [0.0, 2.0]}, ["input_ids"])
    assert digest != onnx_runtime.copy_digest(module, {"layer": [0.0, 1.0]}, ["input_ids", "prior"])
    module.mask[1] = False
    assert digest != onnx_runtime.copy_digest(module, {"layer": [0.0, 1.0]}, ["input_ids"])
