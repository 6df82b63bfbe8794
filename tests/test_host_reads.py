"""Device-to-host reads during prediction: a bounded number per batch, whatever the number of exits,
contexts or chunks (on a GPU each read waits for all the work queued before it).

Counted on the CPU, where the code paths are the same: every call of ``Tensor.item``, ``.tolist``,
``.cpu`` and ``.numpy`` while ``predict`` runs.
"""

import contextlib

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from as2rank.cascade import CascadeTransformer  # noqa: E402
from tests import test_context as tc  # noqa: E402
from tests.test_cascade import one_question  # noqa: E402
from tests.test_transformer import small, synthetic, tokenizer  # noqa: E402,F401

READS = ("item", "tolist", "cpu", "numpy")


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
    assert sorted(calls) == ["cpu", "item", "numpy", "tolist"]


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
        scores = cascade.predict(X)
    np.testing.assert_allclose(scores, exact, rtol=1e-5, atol=1e-5)
    assert cascade.cost_report_["survivors"].tolist()[-1] < len(X)  # the drops happened
    assert calls == ["cpu", "numpy"]


@pytest.mark.parametrize("cls", ["ContextMWA", "ContextConcat"])
def test_context_rankers_read_once_or_twice_per_batch(cls):
    """Multi-way attention reads the widths of its segments once (all contexts at once, before the
    encoder) and its logits once, per batch; the concatenation reads its logits only."""
    import transformers

    from as2rank import context

    tok = transformers.BertTokenizerFast(vocab={w: i for i, w in enumerate(tc.SPECIAL + tc.WORDS)})
    X, y = tc.synthetic(n_questions=12)
    X = context.ContextExtractor(max_global_sentences=2, max_global_tokens=12).fit_transform(X)
    ranker = tc.small(getattr(context, cls), tok).fit(X, y)
    per_batch = 3 if cls == "ContextMWA" else 2
    for batch_tokens, batches in ((100_000, 1), (256, None)):
        ranker.set_params(batch_tokens=batch_tokens)
        with counted_reads() as calls:
            ranker.predict(X)
        if batches is None:  # several batches: count them by their logits' transfers
            batches = calls.count("numpy")
            assert batches > 1
        assert len(calls) == per_batch * batches, calls
