"""Dynamic batching in ``as2rank serve``: concurrent requests share a model call, the pair budget, the cascade
packed with other requests, the adaptive wait, closing with requests queued, and the passing thread that loads a
model. Models and helpers are those of ``tests/test_serve.py``."""

import threading
import time

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("prometheus_client")

from concurrent.futures import ThreadPoolExecutor  # noqa: E402

from as2rank.serve import ServedModel  # noqa: E402
from as2rank.serve.batching import Batcher, Closed, Job  # noqa: E402
from tests.test_serve import (QUESTION, TEXTS, Gated, concurrently, overlap, questions, ranking,  # noqa: E402,F401
                              sample, serving)


def test_concurrent_requests_share_one_model_call(overlap, questions):
    gated = Gated(overlap)
    with serving(gated, max_wait_ms=0) as client:
        gated.gate.clear()
        gated.calls.clear()
        gated.entered.clear()
        with ThreadPoolExecutor(len(questions) + 1) as pool:
            first = pool.submit(client.post, "/rerank", json={"query": QUESTION, "texts": TEXTS})
            assert gated.entered.wait(10)  # the worker holds the first request; the others queue meanwhile
            rest = [pool.submit(client.post, "/rerank", json={"query": q, "texts": t}) for q, t in questions]
            deadline = time.monotonic() + 10
            while client.app.state.batcher.depth() < len(questions) and time.monotonic() < deadline:
                time.sleep(0.01)
            gated.gate.set()
            responses = [first.result()] + [f.result() for f in rest]
        assert gated.calls == [1, len(questions)]
        for (question, texts), r in zip([(QUESTION, TEXTS)] + questions, responses):
            assert [x["index"] for x in r.json()] == ranking(overlap, question, texts)[0]
        metrics = client.get("/metrics").text
        # The first request's call and the batch's (the warm-up call is not a batch).
        assert "as2rank_batch_requests_count 2.0" in metrics
        assert f"as2rank_batch_requests_sum {1.0 + len(questions)}" in metrics


def test_without_dynamic_batching_each_request_has_its_call(overlap, questions):
    gated = Gated(overlap)
    with serving(gated, dynamic_batching=False, max_wait_ms=200) as client:
        gated.calls.clear()
        concurrently([lambda q=q, t=t: client.post("/rerank", json={"query": q, "texts": t}) for q, t in questions])
    assert gated.calls == [1] * len(questions)


def test_pair_budget_splits_batches(overlap):
    gated = Gated(overlap)
    with serving(gated, max_wait_ms=300, adaptive_wait=False, max_batch_pairs=len(TEXTS) * 2) as client:
        gated.calls.clear()
        responses = concurrently([lambda: client.post("/rerank", json={"query": QUESTION, "texts": TEXTS})] * 4)
    assert all(r.status_code == 200 for r in responses)
    assert max(gated.calls) <= 2 and sum(gated.calls) == 4


@pytest.mark.usefixtures("one_torch_thread")
def test_batched_cascade_ranks_each_request_as_alone():
    """A cascade drops candidates per question: packed with other requests, each request keeps its own drops."""
    pytest.importorskip("transformers")
    from tests.test_transformer import WORDS, SPECIAL, small, synthetic, tiny_config  # noqa: F401
    import transformers

    from as2rank.transformer.cascade import CascadeTransformer

    tokenizer = transformers.BertTokenizerFast(vocab={w: i for i, w in enumerate(SPECIAL + WORDS)})
    X, y = synthetic(n_questions=10, min_size=4, max_size=9)
    model = small(CascadeTransformer, "bert", tokenizer, model=tiny_config("bert", 4), alpha=0.3,
                  n_threads=1).fit(X, y)
    requests = [(g["question"].iloc[0], g.sort_values("position")["candidate"].tolist())
                for _, g in X.groupby("qid", sort=False)]
    gated = Gated(model)
    with serving(gated, max_wait_ms=400, adaptive_wait=False, threads=1) as client:
        gated.calls.clear()
        responses = concurrently([lambda q=q, t=t: client.post("/rerank", json={"query": q, "texts": t})
                                  for q, t in requests])
    assert max(gated.calls) > 1, "the requests should have been batched"
    for (question, texts), r in zip(requests, responses):
        assert r.status_code == 200, r.text
        order, scores = ranking(model, question, texts)
        served = r.json()
        np.testing.assert_allclose([x["score"] for x in served], scores, atol=1e-4)
        lone = dict(zip(order, scores))
        ranked = [lone[x["index"]] for x in served]  # the served order, by the lone scores: best first up to ties
        assert all(a >= b - 1e-4 for a, b in zip(ranked, ranked[1:]))


def test_adaptive_wait_skips_the_wait_after_a_lone_batch_only(overlap):
    """After a batch of one job the next takes what is queued at once; after a batch of two it waits for company
    (here up to a minute, cut short by the pair budget); with adaptive_wait=False every batch waits."""
    gated = Gated(overlap)
    batcher = Batcher(ServedModel(gated), max_wait_ms=60_000, max_batch_pairs=2 * len(TEXTS))
    batcher.start()
    try:
        assert batcher.ready.wait(30)
        gated.calls.clear()
        gated.entered.clear()
        gated.gate.clear()
        lone = batcher.submit(Job(QUESTION, TEXTS))
        assert gated.entered.wait(10)  # scored without the minute's wait
        pair = [batcher.submit(Job(QUESTION, TEXTS)) for _ in range(2)]  # queue while the worker is held
        deadline = time.monotonic() + 10
        while batcher.depth() < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        gated.gate.set()
        for future in [lone, *pair]:
            future.result(10)
        assert gated.calls == [1, 2]  # the queued two together, without a wait: the batch before was lone
        waiting = batcher.submit(Job(QUESTION, TEXTS))
        time.sleep(0.3)
        assert not waiting.done() and gated.calls == [1, 2]  # after a batch of two: it waits for company
        company = batcher.submit(Job(QUESTION, TEXTS))
        waiting.result(10), company.result(10)
        assert gated.calls == [1, 2, 2]
    finally:
        gated.gate.set()
        batcher.close(10)

    fixed = Batcher(ServedModel(Gated(overlap)), max_wait_ms=60_000, max_batch_pairs=2 * len(TEXTS),
                    adaptive_wait=False)
    fixed.start()
    try:
        assert fixed.ready.wait(30)
        first = fixed.submit(Job(QUESTION, TEXTS))
        time.sleep(0.3)
        assert not first.done()  # the first request after the warm-up waits too
        fixed.submit(Job(QUESTION, TEXTS)).result(10)
        assert first.result(10).order.tolist() == ranking(overlap, QUESTION, TEXTS)[0]
    finally:
        fixed.close(10)


def test_closing_serves_what_was_accepted(overlap):
    gated = Gated(overlap)
    batcher = Batcher(ServedModel(gated), max_wait_ms=0)
    batcher.start()
    assert batcher.ready.wait(30)
    gated.gate.clear()
    futures = [batcher.submit(Job(QUESTION, TEXTS)) for _ in range(3)]
    closing = threading.Thread(target=batcher.close)
    closing.start()
    time.sleep(0.1)
    with pytest.raises(Closed):
        batcher.submit(Job(QUESTION, TEXTS))
    gated.gate.set()
    closing.join(10)
    assert not closing.is_alive() and all(f.result(1).order.tolist() == futures[0].result().order.tolist()
                                          for f in futures)


def test_on_passing_thread_returns_or_raises_and_its_thread_ends():
    from as2rank.serve.batching import on_passing_thread

    threads = []

    def work(a, b=0):
        threads.append(threading.current_thread())
        if a < 0:
            raise KeyboardInterrupt("a BaseException")  # not an Exception: raised again all the same
        return a + b

    assert on_passing_thread(work, 2, b=3) == 5
    with pytest.raises(KeyboardInterrupt, match="a BaseException"):
        on_passing_thread(work, -1)
    assert len(threads) == 2 and threading.current_thread() not in threads
    assert not any(thread.is_alive() for thread in threads)
