"""The predict loop's prefetch: batches laid out ahead in a background thread give the same bits as the loop
laying them out in turn, in row order, and errors surface; the default is on for a GPU only."""

import threading
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from as2rank.neural import predict as predict_module  # noqa: E402
from as2rank.neural.predict import PREFETCH, default_prefetch, no_progress, predict_batches  # noqa: E402
from as2rank.transformer.cascade import CascadeTransformer  # noqa: E402
from as2rank.transformer.ranker import TransformerRanker  # noqa: E402
from tests.test_transformer import small, synthetic, tokenizer  # noqa: E402,F401


def loop(batches, prefetch, prepare):
    return predict_batches(batches, lambda p: (p[0], torch.as_tensor(p[1])), 10, device=torch.device("cpu"),
                           dtype=torch.float32, progress=no_progress, prepare=prepare, prefetch=prefetch)


def test_prefetched_batches_keep_their_order_and_values():
    rng = np.random.default_rng(0)
    batches = [np.array([i, 9 - i]) for i in range(5)]
    threads = set()

    def prepare(rows):
        threads.add(threading.current_thread().name)
        time.sleep(float(rng.uniform(0, 0.01)))  # later batches may be ready first
        return rows, rows * 10.0

    expected = np.arange(10) * 10.0
    np.testing.assert_array_equal(loop(batches, 0, prepare), expected)
    assert threads == {threading.current_thread().name}
    threads.clear()
    np.testing.assert_array_equal(loop(batches, 3, prepare), expected)
    assert threads and all(name.startswith("as2rank-prefetch") for name in threads)


def test_an_error_while_laying_out_a_batch_surfaces():
    def prepare(rows):
        if rows[0] == 2:
            raise RuntimeError("bad batch")
        return rows, rows * 1.0

    with pytest.raises(RuntimeError, match="bad batch"):
        loop([np.array([i]) for i in range(5)], 2, prepare)


def test_prefetch_is_on_for_a_gpu_only():
    assert default_prefetch("cpu") == 0
    assert default_prefetch(torch.device("cuda")) == PREFETCH > 0


@pytest.mark.parametrize("cls", [TransformerRanker, CascadeTransformer])
def test_estimators_predict_the_same_bits_with_and_without_prefetch(cls, tokenizer, monkeypatch):
    X, y = synthetic(n_questions=10)
    params = {"alpha": 0.3} if cls is CascadeTransformer else {}
    est = small(cls, "bert", tokenizer, batch_tokens=16, **params).fit(X, y)
    threads = []
    original = predict_module.device_batch

    def spy(*args):
        threads.append(threading.current_thread().name)
        return original(*args)

    monkeypatch.setattr(predict_module, "device_batch", spy)
    sequential = est.predict(X)
    assert len(threads) > 2 and not any(t.startswith("as2rank-prefetch") for t in threads)  # many batches, in turn
    threads.clear()
    monkeypatch.setattr(predict_module, "default_prefetch", lambda device: 2)
    prefetched = est.predict(X)
    assert len(threads) > 2 and all(t.startswith("as2rank-prefetch") for t in threads)
    np.testing.assert_array_equal(prefetched, sequential)


def test_each_weight_is_cast_once_per_predict_call_and_the_bits_stay(monkeypatch):
    # Autocast's cast cache skips inference mode: there, every batch cast every weight again (a kernel per
    # weight and batch on a GPU). The loop keeps one lower-precision copy of each weight per call. (bfloat16
    # autocast runs on any CPU, natively or not.)
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)).eval()
    rows = torch.randn(12, 8)

    def weight_casts(n_batches):
        batches = np.array_split(np.arange(12), n_batches)
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            scores = predict_batches(batches, lambda b: (b, module(rows[b]).squeeze(-1)), 12, device=torch.device("cpu"),
                                     dtype=torch.bfloat16, progress=no_progress)
        casts = sum(1 for e in prof.events() if e.name == "aten::_to_copy" and e.input_shapes and tuple(e.input_shapes[0]) == (8, 8))
        return casts, scores

    one_batch, whole = weight_casts(1)
    many_batches, batched = weight_casts(6)
    assert one_batch == many_batches == 1
    monkeypatch.setattr(torch, "no_grad", torch.inference_mode)  # the loop as it was: casts in every batch
    recast, before = weight_casts(6)
    assert recast == 6
    np.testing.assert_array_equal(batched, before)
