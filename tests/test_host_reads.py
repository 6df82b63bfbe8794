"""Device-to-host reads during prediction: a bounded number per batch, whatever the number of exits,
contexts or chunks (on a GPU each read waits for all the work queued before it).

Counted on the CPU, where the code paths are the same: every call of ``Tensor.item``, ``.tolist``,
``.cpu`` and ``.numpy`` while ``predict`` runs, and every truth test of a tensor (``if mask.all():``, as
transformers' mask builder makes), which reads it as well.
"""

import contextlib

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from as2rank.transformer.cascade import CascadeTransformer  # noqa: E402
from tests import test_context as tc  # noqa: E402
from tests.test_cascade import one_question  # noqa: E402
from tests.test_transformer import small, synthetic, tokenizer  # noqa: E402,F401

READS = ("item", "tolist", "cpu", "numpy", "__bool__")


@contextlib.contextmanager
def counted_reads():
    """A list that holds the name of every host read made inside the block."""
    calls, originals = [], {name: getattr(torch.Tensor, name) for name in READS}

    def counting(name):
        def read(self, *args, **kwargs):
            calls.append(name)
            return originals[name](self, *args, **kwargs)

        return read

    try:
        for name in READS:
            setattr(torch.Tensor, name, counting(name))
        yield calls
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)


def test_counter_sees_every_kind_of_read():
    with counted_reads() as calls:
        t = torch.ones(3)
        t.item() if t.numel() == 1 else t[0].item()
        t.tolist(), t.cpu().numpy()
        bool(t.all())
    assert sorted(calls) == ["__bool__", "cpu", "item", "numpy", "tolist"]


@pytest.mark.parametrize("batch_tokens", [64, 100_000])
def test_cascade_reads_its_logits_once_per_batch(tokenizer, batch_tokens, monkeypatch):
    """Five exits, four drops, and (``batch_tokens=64``) many length-sorted chunks per question: one batch,
    one transfer (``.cpu()`` then ``.numpy()`` on the host copy), as on a GPU. On the CPU the cascade also
    reads its survivors after each drop (free there) to cut their chunks exactly: the same scores."""
    cascade = small(CascadeTransformer, "bert", tokenizer, exits=(2, 3, 4, 5, 6)).fit(*synthetic())
    X = pd.concat([one_question(40, seed=1).assign(qid="a"), one_question(17, seed=2).assign(qid="b")])
    cascade.set_params(alpha=0.3, batch_tokens=batch_tokens)
    with counted_reads() as calls:
        exact = cascade.predict(X)
    assert calls.count("numpy") == 1 + 4  # the logits, and the survivors of each drop
    monkeypatch.setattr(CascadeTransformer, "_exact_widths", staticmethod(lambda device: False))
    with counted_reads() as calls:
        scores, cost = cascade.predict(X, return_cost=True)
    np.testing.assert_allclose(scores, exact, rtol=1e-5, atol=1e-5)
    assert cost["survivors"].tolist()[-1] < len(X)  # the drops happened
    assert calls == ["cpu", "numpy"]


@pytest.mark.parametrize("cls", ["ContextMWA", "ContextConcat"])
def test_context_rankers_read_once_per_predict(cls):
    """The logits of every batch are read together after the last one, and multi-way attention sizes its
    packed segments from host-side counts: one transfer per predict, whatever the number of batches."""
    import transformers

    from as2rank.transformer.context import features, rankers

    tok = transformers.BertTokenizerFast(vocab={w: i for i, w in enumerate(tc.SPECIAL + tc.WORDS)})
    X, y = tc.synthetic(n_questions=12)
    X = features.ContextExtractor(max_global_sentences=2, max_global_tokens=12).fit_transform(X)
    ranker = tc.small(getattr(rankers, cls), tok).fit(X, y)
    forwards = []
    ranker.model_.register_forward_hook(lambda *args: forwards.append(1))
    for batch_tokens in (100_000, 256):
        ranker.set_params(batch_tokens=batch_tokens)
        forwards.clear()
        with counted_reads() as calls:
            ranker.predict(X)
        assert calls == ["cpu", "numpy"], calls
    assert len(forwards) > 1  # the second predict ran several batches


def test_mwa_widths_from_host_counts_match_the_device_read():
    """Sizing the packed segments from the host-side counts gives the logits that reading them from the
    device gives (the batch without its counts)."""
    import transformers

    from as2rank.transformer.context import features, rankers
    from as2rank.neural.predict import batch_tensors

    tok = transformers.BertTokenizerFast(vocab={w: i for i, w in enumerate(tc.SPECIAL + tc.WORDS)})
    X, y = tc.synthetic(n_questions=12)
    X = features.ContextExtractor(max_global_sentences=2, max_global_tokens=12).fit_transform(X)
    ranker = tc.small(rankers.ContextMWA, tok).fit(X, y)
    encoded = ranker._encode(X)
    batch = batch_tensors(encoded, np.arange(len(X)))
    assert isinstance(batch["host_segment_counts"], np.ndarray)
    with torch.inference_mode(), counted_reads() as calls:
        host = ranker.model_(batch)
    assert "tolist" not in calls
    with torch.inference_mode(), counted_reads() as calls:
        read = ranker.model_({k: v for k, v in batch.items() if k != "host_segment_counts"})
    assert "tolist" in calls
    torch.testing.assert_close(host, read)


@pytest.mark.parametrize("pending_values", [1, 4, 1 << 24])
def test_predict_batches_reads_outputs_in_bounded_groups_and_puts_them_back_in_row_order(pending_values, monkeypatch):
    """Outputs are read once per call, or each time the unread ones reach ``PENDING_VALUES`` values; a batch
    that returns an array (ONNX Runtime) first reads what is pending, so every value lands on its own row."""
    from as2rank.neural import predict

    monkeypatch.setattr(predict, "PENDING_VALUES", pending_values)
    order = np.random.default_rng(0).permutation(10)
    batches = [order[:3], order[3:4], order[4:8], order[8:]]
    truth = np.arange(10, dtype=np.float64) * 1.5

    def run(rows):
        out = truth[rows]
        return rows, (out if len(rows) == 1 else torch.from_numpy(out).float())  # one batch as an array

    with counted_reads() as calls:
        got = predict.predict_batches(batches, run, 12, device=torch.device("cpu"), dtype=torch.float32,
                                      progress=predict.no_progress)
    np.testing.assert_array_equal(got[:10], truth)
    assert np.isnan(got[10:]).all()  # rows no batch scored
    # Tensor batches of 3, 4 and 2 values around the array. At most 1 value: each read alone; 4: [3] before
    # the array, [4] on reaching 4, [2] at the end; unbounded: [3] before the array, [4, 2] at the end.
    assert calls.count("numpy") == {1: 3, 4: 3, 1 << 24: 2}[pending_values]
