"""``as2rank serve`` and :func:`as2rank.serve.create_app`: every route, limit and error in process (FastAPI's test
client), the same rankings as ``as2rank.rank``, the metrics, the command line; and one slow test that runs the real
server process and stops it with SIGTERM while requests are in flight. Dynamic batching:
``tests/test_serve_batching.py``.

Models: a rule ranker (no torch), a CalibratedRanker over it, a tiny CascadeTransformer (one torch thread), and a
wrapper that counts, blocks or fails the model's calls."""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("prometheus_client")

from fastapi.testclient import TestClient  # noqa: E402

import as2rank  # noqa: E402
from as2rank.answer import CalibratedRanker  # noqa: E402
from as2rank.app.cli import build_parser, main  # noqa: E402
from as2rank.data import make_frame  # noqa: E402
from as2rank.datasets import load_sample  # noqa: E402
from as2rank.serve import ServedModel, create_app  # noqa: E402

QUESTION = "Who ruled the duchy of Normandy?"
TEXTS = ["The Normans were ruled by dukes.", "Richard I ruled the duchy of Normandy.", "Cats sleep a lot.",
         "Normandy is a region of France."]


@pytest.fixture(scope="module")
def sample():
    X, y = load_sample()
    keep = X["qid"].isin(X["qid"].unique()[:400])
    return X[keep].reset_index(drop=True), y[keep.to_numpy()]


@pytest.fixture(scope="module")
def overlap(sample):
    return as2rank.OverlapRankRanker().fit(*sample)


@pytest.fixture(scope="module")
def calibrated(sample):
    return CalibratedRanker(as2rank.OverlapRankRanker(), cv=3).fit(*sample)


@pytest.fixture(scope="module")
def questions(sample):
    """(question, candidates) of a few sample questions, candidates in their retrieval order."""
    X, _ = sample
    out = []
    for _, group in list(X.groupby("qid", sort=False))[:12]:
        group = group.sort_values("position")
        out.append((group["question"].iloc[0], group["candidate"].tolist()))
    return out


class Gated:
    """A model whose calls are counted (the questions of each call), can be held at a gate, and fail on a text."""

    def __init__(self, model, fail_on=None):
        self.model, self.fail_on = model, fail_on
        self.gate, self.entered = threading.Event(), threading.Event()
        self.gate.set()
        self.calls = []

    def predict(self, X):
        self.calls.append(X["qid"].nunique())
        self.entered.set()
        assert self.gate.wait(30), "the test never opened the gate"
        if self.fail_on is not None and (X["candidate"] == self.fail_on).any():
            raise RuntimeError("this text breaks the model")
        return self.model.predict(X)


def wait_ready(client, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if client.get("/health").status_code == 200:
            return
        time.sleep(0.02)
    raise AssertionError(f"not ready: {client.get('/health').json()}")


@contextmanager
def serving(model, **options):
    with TestClient(create_app(model, **options)) as client:
        wait_ready(client)
        yield client


def ranking(model, question, texts):
    """What as2rank.rank says for the request alone: candidate indices best first, and their scores."""
    ranked = as2rank.rank(model, make_frame(question, texts))
    return ranked["row"].tolist(), ranked["score"].to_numpy()


def concurrently(calls):
    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(lambda call: call(), calls))


# ----------------------------------------------------------------------------------------------- the rerank routes
def test_tei_rerank_ranks_as_as2rank_rank(overlap, questions):
    with serving(overlap) as client:
        for question, texts in questions + [(QUESTION, TEXTS)]:
            r = client.post("/rerank", json={"query": question, "texts": texts})
            assert r.status_code == 200, r.text
            order, scores = ranking(overlap, question, texts)
            assert [item["index"] for item in r.json()] == order
            np.testing.assert_allclose([item["score"] for item in r.json()], scores)
            assert all("text" not in item for item in r.json())
        body = client.post("/rerank", json={"query": QUESTION, "texts": TEXTS, "return_text": True,
                                            "raw_scores": True, "truncate": True}).json()
        assert [item["text"] for item in body] == [TEXTS[item["index"]] for item in body]


def test_cohere_rerank_v1_and_v2(overlap):
    order, scores = ranking(overlap, QUESTION, TEXTS)
    documents = [TEXTS[0], {"text": TEXTS[1], "title": "ignored"}, *TEXTS[2:]]
    with serving(overlap) as client:
        for route, version in (("/v1/rerank", "1"), ("/v2/rerank", "2")):
            r = client.post(route, json={"query": QUESTION, "documents": documents, "model": "rerank-english-v3.0"})
            assert r.status_code == 200, r.text
            body = r.json()
            assert body["meta"]["api_version"]["version"] == version and body["id"]
            assert [x["index"] for x in body["results"]] == order
            np.testing.assert_allclose([x["relevance_score"] for x in body["results"]], scores)
            assert all("document" not in x for x in body["results"])
        top = client.post("/v1/rerank", json={"query": QUESTION, "documents": TEXTS, "top_n": 2,
                                              "return_documents": True, "rank_fields": ["text"]}).json()["results"]
        assert [x["index"] for x in top] == order[:2]
        assert [x["document"]["text"] for x in top] == [TEXTS[i] for i in order[:2]]
        everything = client.post("/v1/rerank", json={"query": QUESTION, "documents": TEXTS, "top_n": 99}).json()
        assert len(everything["results"]) == len(TEXTS)


@contextmanager
def live(app):
    """``app`` under uvicorn in a thread of this process, on a free port of 127.0.0.1: its URL."""
    import socket

    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline and thread.is_alive()
            time.sleep(0.02)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


def test_official_cohere_client(overlap):
    cohere = pytest.importorskip("cohere")
    order, _ = ranking(overlap, QUESTION, TEXTS)
    with live(create_app(overlap, api_key="secret")) as url:
        co = cohere.Client(api_key="secret", base_url=url)
        response = co.rerank(model="any", query=QUESTION, documents=TEXTS, top_n=3, return_documents=True)
        assert [r.index for r in response.results] == order[:3]
        assert [r.document.text for r in response.results] == [TEXTS[i] for i in order[:3]]
        v2 = cohere.ClientV2(api_key="secret", base_url=url)
        assert [r.index for r in v2.rerank(model="any", query=QUESTION, documents=TEXTS).results] == order
        with pytest.raises(Exception, match="401|nauthori"):
            cohere.Client(api_key="wrong", base_url=url).rerank(model="any", query=QUESTION, documents=TEXTS)


def test_calibrated_scores_are_probabilities_and_raw_scores_are_not(calibrated):
    frame = make_frame(QUESTION, TEXTS)
    raw, probability = calibrated.predict(frame), calibrated.predict_proba(frame)[:, 1]
    order, _ = ranking(calibrated, QUESTION, TEXTS)
    with serving(calibrated) as client:
        tei = client.post("/rerank", json={"query": QUESTION, "texts": TEXTS}).json()
        assert [x["index"] for x in tei] == order
        np.testing.assert_allclose([x["score"] for x in tei], probability[order])
        tei_raw = client.post("/rerank", json={"query": QUESTION, "texts": TEXTS, "raw_scores": True}).json()
        np.testing.assert_allclose([x["score"] for x in tei_raw], raw[order])
        results = client.post("/v1/rerank", json={"query": QUESTION, "documents": TEXTS}).json()["results"]
        np.testing.assert_allclose([x["relevance_score"] for x in results], probability[order])
        info = client.get("/info").json()
        assert info["calibrated"] and info["score"] == "probability"


def test_answer_equals_predict_answer(calibrated, questions):
    target = calibrated.threshold_report_["best_precision"] * 0.9
    threshold = calibrated.threshold_for(target_precision=target)["threshold"]
    decisions = set()
    with serving(calibrated) as client:
        for question, texts in questions:
            for body, cut in (({}, None), ({"target_precision": target}, threshold)):
                r = client.post("/answer", json={"question": question, "candidates": texts, **body})
                assert r.status_code == 200, r.text
                expected = calibrated.predict_answer(make_frame(question, texts), threshold=cut).iloc[0]
                got = r.json()
                assert got["answered"] == bool(expected["answered"]) and got["index"] == expected["row"]
                assert got["answer"] == expected["answer"]
                assert got["probability"] == pytest.approx(expected["probability"])
                assert got["threshold"] == pytest.approx(calibrated.threshold_ if cut is None else cut)
                decisions.add(got["answered"])
        try:
            calibrated.threshold_for(target_precision=1.0)
        except ValueError as exc:  # no threshold of the held-out questions reaches it: the same message
            r = client.post("/answer", json={"question": QUESTION, "candidates": TEXTS, "target_precision": 1.0})
            assert r.status_code == 422 and r.json()["error"] == " ".join(str(exc).split())
        r = client.post("/answer", json={"question": QUESTION, "candidates": TEXTS, "target_precision": 0.5,
                                         "target_coverage": 0.5})
        assert r.status_code == 422
    assert decisions == {True, False}, "the questions should give both decisions"


def test_answer_of_an_uncalibrated_model_says_how_to_calibrate(overlap):
    with serving(overlap) as client:
        r = client.post("/answer", json={"question": QUESTION, "candidates": TEXTS})
    assert r.status_code == 400
    assert "--calibrate" in r.json()["error"] and "CalibratedRanker" in r.json()["error"]


# ----------------------------------------------------------------------------------------------- health, info, metrics
def test_health_is_503_until_the_warm_up_call_ran(overlap):
    gated = Gated(overlap)
    gated.gate.clear()
    with TestClient(create_app(gated)) as client:
        assert gated.entered.wait(10)
        r = client.get("/health")
        assert r.status_code == 503 and r.json()["status"] == "warming up"
        gated.gate.set()
        wait_ready(client)
        assert client.get("/health").json() == {"status": "ready"}
        batcher = client.app.state.batcher
    assert batcher.closing and not batcher._thread.is_alive()


def test_health_reports_a_failed_warm_up(overlap):
    with TestClient(create_app(Gated(overlap, fail_on="It has three chapters."))) as client:
        deadline = time.monotonic() + 10
        while client.get("/health").json()["status"] == "warming up" and time.monotonic() < deadline:
            time.sleep(0.02)
        r = client.get("/health")
    assert r.status_code == 503 and r.json()["status"] == "failed" and "breaks the model" in r.json()["error"]


def test_info_of_a_saved_model(overlap, sample, tmp_path):
    from as2rank.persistence import read_meta
    from as2rank.persistence.card import ModelCardData

    as2rank.save(overlap, tmp_path / "model", card=ModelCardData.from_data(*sample, name="the sample"))
    with serving(tmp_path / "model") as client:
        info = client.get("/info").json()
        assert client.post("/rerank", json={"query": QUESTION, "texts": TEXTS}).status_code == 200
    assert info["seal_sha256"] == read_meta(tmp_path / "model")["sha256"]
    assert info["class"] == "as2rank.lexical.baselines.OverlapRankRanker" and info["name"] == "OverlapRankRanker"
    assert info["as2rank_version"] == as2rank.__version__ and not info["calibrated"]
    assert "the sample" in info["card"]["training_data"]
    assert str(tmp_path) not in json.dumps(info)  # no path of the server's machine


def test_metrics_count_requests_per_app(overlap):
    with serving(overlap) as one, serving(overlap) as other:
        for _ in range(3):
            one.post("/rerank", json={"query": QUESTION, "texts": TEXTS})
        one.post("/rerank", json={"query": "", "texts": TEXTS})
        one.get("/no/such/route")
        text = one.get("/metrics").text
        assert 'as2rank_requests_total{route="/rerank",status="200"} 3.0' in text
        assert 'as2rank_requests_total{route="/rerank",status="422"} 1.0' in text
        assert 'as2rank_requests_total{route="other",status="404"} 1.0' in text
        assert 'as2rank_request_duration_seconds_count{route="/rerank"} 4.0' in text
        assert "as2rank_queue_depth 0.0" in text and "as2rank_batch_pairs_count" in text
        assert 'route="/rerank"' not in other.get("/metrics").text
        # The /metrics request itself is in flight while it is answered; afterwards none is.
        assert "as2rank_requests_in_flight 1.0" in text
        answered, in_flight = one.app.state.telemetry.totals()
        assert in_flight == 0 and answered >= 6  # the five and /metrics (and the warm-up's /health polls)


def test_openapi_schema_lists_the_routes(overlap):
    with serving(overlap) as client:
        paths = client.get("/openapi.json").json()["paths"]
    assert {"/rerank", "/v1/rerank", "/v2/rerank", "/answer", "/health", "/info", "/metrics"} <= set(paths)


# ----------------------------------------------------------------------------------------------- security
def test_api_key(overlap):
    body = {"query": QUESTION, "texts": TEXTS}
    with serving(overlap, api_key="s3cret") as client:
        r = client.post("/rerank", json=body)
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        assert r.json()["error_type"] == "auth"
        assert client.post("/rerank", json=body, headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert client.post("/rerank", json=body, headers={"Authorization": "s3cret"}).status_code == 401
        for path in ("/info", "/metrics", "/openapi.json", "/docs"):
            assert client.get(path).status_code == 401, path
        assert client.get("/health").status_code == 200
        assert client.post("/rerank", json=body, headers={"Authorization": "Bearer s3cret"}).status_code == 200


# ----------------------------------------------------------------------------------------------- validation and limits
@pytest.mark.parametrize("route,body,field", [
    ("/rerank", {"query": "", "texts": ["a"]}, "query"),
    ("/rerank", {"texts": ["a"]}, "query"),
    ("/rerank", {"query": "q", "texts": []}, "texts"),
    ("/rerank", {"query": "q", "texts": ["a", 3]}, "texts[1]"),
    ("/rerank", {"query": "q", "texts": "a"}, "texts"),
    ("/rerank", {"query": "q", "texts": ["a"], "raw_scores": "yes"}, "raw_scores"),
    ("/rerank", {"query": "q", "texts": ["a"], "top_k": 3}, "top_k: unknown field"),
    ("/rerank", {"query": "q", "texts": ["a"], "truncation_direction": "Left"}, "truncation_direction"),
    ("/v1/rerank", {"query": "q", "documents": ["a"], "top_n": 0}, "top_n"),
    ("/v1/rerank", {"query": "q", "documents": ["a"], "top_n": 1.5}, "top_n"),
    ("/v1/rerank", {"query": "q", "documents": [{"title": "a"}]}, "documents[0]"),
    ("/v1/rerank", {"query": "q", "documents": ["a"], "rank_fields": ["title"]}, "rank_fields"),
    ("/v1/rerank", {"query": "q", "documents": ["a"], "model_path": "/etc/passwd"}, "model_path: unknown field"),
    ("/answer", {"question": "q", "candidates": ["a"], "target_precision": 0}, "target_precision"),
    ("/answer", {"question": "q", "candidates": ["a"], "module": "os"}, "module: unknown field"),
])
def test_invalid_requests_are_422_naming_the_field(calibrated, route, body, field):
    with serving(calibrated) as client:
        r = client.post(route, json=body)
    assert r.status_code == 422, r.text
    assert field in r.json()["error"] and r.json()["error_type"] == "validation"


def test_a_body_that_is_not_json(overlap):
    with serving(overlap) as client:
        for content, headers in ((b'{"query": "q",', {"content-type": "application/json"}),
                                 (b'{"query": "q", "texts": ["a"]}', {"content-type": "text/plain"})):
            r = client.post("/rerank", content=content, headers=headers)
            assert r.status_code == 422 and r.json()["error_type"] == "validation", r.text
            assert r.json()["error"] in ("body: not valid JSON",
                                         "body: send one JSON object, with the header Content-Type: application/json")


def test_limits_answer_4xx_naming_the_limit(overlap):
    with serving(overlap, max_candidates=3, max_chars=40, max_body_bytes=600) as client:
        r = client.post("/rerank", json={"query": QUESTION, "texts": TEXTS})
        assert r.status_code == 422 and r.json()["limit"] == "max_candidates" and r.json()["value"] == 3
        r = client.post("/v1/rerank", json={"query": QUESTION, "documents": ["short", "x" * 41]})
        assert r.status_code == 422 and r.json()["limit"] == "max_chars" and "documents[1]" in r.json()["error"]
        r = client.post("/rerank", json={"query": "q" * 41, "texts": ["a"]})
        assert r.status_code == 422 and r.json()["limit"] == "max_chars"
        r = client.post("/rerank", json={"query": QUESTION, "texts": ["word " * 8] * 3, "pad": "x" * 600})
        assert r.status_code == 413 and r.json()["limit"] == "max_body_bytes"

        def chunks():  # no Content-Length: the chunks add up past the limit
            yield b'{"query": "q", "texts": ['
            for _ in range(60):
                yield b'"0123456789",'
            yield b'"a"]}'

        r = client.post("/rerank", content=chunks(), headers={"content-type": "application/json"})
        assert r.status_code == 413 and r.json()["limit"] == "max_body_bytes"
        assert client.post("/rerank", json={"query": QUESTION, "texts": TEXTS[:3]}).status_code == 200


def test_full_queue_is_503_with_retry_after(overlap):
    gated = Gated(overlap)
    with serving(gated, max_queue=1, max_wait_ms=0) as client:
        gated.gate.clear()
        gated.entered.clear()
        body = {"query": QUESTION, "texts": TEXTS}
        with ThreadPoolExecutor(2) as pool:
            held = pool.submit(client.post, "/rerank", json=body)
            assert gated.entered.wait(10)  # the worker holds the first request
            queued = pool.submit(client.post, "/rerank", json=body)
            deadline = time.monotonic() + 10
            while client.app.state.batcher.depth() < 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            r = client.post("/rerank", json=body)
            assert r.status_code == 503 and r.headers["retry-after"] == "1"
            assert r.json()["limit"] == "max_queue"
            gated.gate.set()
            assert held.result().status_code == 200 and queued.result().status_code == 200


def test_timeout_is_504_and_the_worker_goes_on(overlap):
    gated = Gated(overlap)
    with serving(gated, timeout_s=0.3) as client:
        gated.gate.clear()
        r = client.post("/rerank", json={"query": QUESTION, "texts": TEXTS})
        assert r.status_code == 504 and r.json()["limit"] == "timeout_s"
        gated.gate.set()
        assert client.post("/rerank", json={"query": QUESTION, "texts": TEXTS}).status_code == 200


def test_a_failing_request_fails_alone_and_the_worker_goes_on(overlap):
    gated = Gated(overlap, fail_on="BOOM")
    with serving(gated, max_wait_ms=300, adaptive_wait=False) as client:
        bad, good = concurrently([lambda: client.post("/rerank", json={"query": QUESTION, "texts": ["BOOM", "a"]}),
                                  lambda: client.post("/rerank", json={"query": QUESTION, "texts": TEXTS})])
        assert bad.status_code == 500 and bad.json()["error_type"] == "model"
        assert "breaks the model" in bad.json()["error"]
        assert good.status_code == 200  # batched with the bad one, then scored alone
        assert client.post("/rerank", json={"query": QUESTION, "texts": TEXTS}).status_code == 200
        assert "as2rank_predict_failures_total 2.0" in client.get("/metrics").text


# ----------------------------------------------------------------------------------------------- the command line
@pytest.mark.parametrize("option,value", [("max_queue", 0), ("timeout_s", 0), ("max_wait_ms", -1.0),
                                          ("threads", 0), ("dynamic_batching", "yes"), ("adaptive_wait", 1),
                                          ("api_key", "")])
def test_create_app_checks_its_options(overlap, option, value):
    with pytest.raises(ValueError, match=option):
        create_app(overlap, **{option: value})


def test_parser_defaults():
    args = build_parser().parse_args(["serve", "path/to/model"])
    assert (args.host, args.port, args.api_key, args.max_wait_ms, args.no_dynamic_batching, args.fixed_wait) == \
        ("127.0.0.1", 8000, None, 5.0, False, False)


def test_import_as2rank_loads_no_web_framework():
    code = ("import sys, as2rank, as2rank.app.cli\nas2rank.app.cli.build_parser()\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('fastapi', 'starlette', 'uvicorn', "
            "'prometheus_client') or m == 'as2rank.serve.app'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr
    out = subprocess.run([sys.executable, "-c", "import sys, as2rank; print('as2rank.serve' in sys.modules)"],
                         capture_output=True, text=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("argv,message", [
    (["serve", "path/to/nothing"], "No model at"),
    (["serve", "{tmp}"], "is not an as2rank model directory"),
    (["serve", "{model}", "--max-queue", "0"], "--max-queue must be"),
    (["serve", "{model}", "--port", "70000"], "--port must be"),
    (["serve", "{model}", "--max-wait-ms", "-1"], "--max-wait-ms must be"),
    (["serve", "{damaged}"], "was changed after the model was saved"),
    (["serve", "{model}.joblib"], "No model at"),
])
def test_command_fails_in_one_line_before_serving(overlap, tmp_path, capsys, monkeypatch, argv, message):
    def serve(*args):  # a command that got this far would listen until stopped: fail the test instead
        raise AssertionError("the command went on to serve")

    monkeypatch.setattr("as2rank.serve.command._serve", serve)
    as2rank.save(overlap, tmp_path / "model")
    as2rank.save(overlap, tmp_path / "damaged")
    seal = tmp_path / "damaged" / "as2rank.json"
    seal.write_text(seal.read_text().replace('"lowercase": true', '"lowercase": false'))
    (tmp_path / "empty").mkdir()
    argv = [a.format(tmp=tmp_path / "empty", model=tmp_path / "model", damaged=tmp_path / "damaged")
            for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("as2rank: error: ") and message in err and "\n" not in err


def test_command_warns_beyond_loopback_and_reads_the_key_from_the_environment(overlap, tmp_path, capsys,
                                                                               monkeypatch):
    from as2rank.serve import command

    as2rank.save(overlap, tmp_path / "model")
    apps = []
    monkeypatch.setattr(command, "_listen", lambda host, port: None)
    monkeypatch.setattr(command, "_serve", lambda app, *rest: apps.append(app) or 0)
    assert main(["serve", str(tmp_path / "model"), "--host", "0.0.0.0"]) == 0
    assert "as2rank: warning: listening on 0.0.0.0 without an API key" in capsys.readouterr().err
    monkeypatch.setenv("AS2RANK_API_KEY", "from-env")
    assert main(["serve", str(tmp_path / "model"), "--host", "0.0.0.0", "--threads", "1"]) == 0
    assert "warning" not in capsys.readouterr().err
    with TestClient(apps[-1]) as client:
        wait_ready(client)
        assert client.post("/rerank", json={"query": QUESTION, "texts": TEXTS}).status_code == 401
        assert client.post("/rerank", json={"query": QUESTION, "texts": TEXTS},
                           headers={"Authorization": "Bearer from-env"}).status_code == 200
        assert client.get("/info").status_code == 401


def test_loading_and_the_check_call_run_off_the_calling_thread(overlap, tmp_path, monkeypatch):
    """The command and create_app(path) load the model, and the command makes its check call, on threads that end:
    the inference worker is left the only thread that ran the model (its OpenMP pool the only one)."""
    from as2rank.app import scale
    from as2rank.serve import command

    as2rank.save(overlap, tmp_path / "model")
    calls = []
    load_model, warm_up = scale.load_model, ServedModel.warm_up
    monkeypatch.setattr(scale, "load_model", lambda *a, **k: calls.append(("load", threading.current_thread()))
                        or load_model(*a, **k))
    monkeypatch.setattr(ServedModel, "warm_up", lambda self: calls.append(("warm_up", threading.current_thread()))
                        or warm_up(self))
    monkeypatch.setattr(command, "_listen", lambda host, port: None)
    monkeypatch.setattr(command, "_serve", lambda *args: 0)
    assert main(["serve", str(tmp_path / "model")]) == 0
    assert [name for name, _ in calls] == ["load", "warm_up"]
    create_app(tmp_path / "model")
    assert [name for name, _ in calls] == ["load", "warm_up", "load"]
    for name, thread in calls:
        assert thread is not threading.current_thread() and not thread.is_alive(), name


@pytest.mark.slow
def test_real_server_answers_accepted_requests_through_sigterm(overlap, tmp_path):
    """The real process: concurrent requests wait in the batcher (a long max_wait) when SIGTERM comes; every one is
    answered, then the server exits 0."""
    import httpx

    as2rank.save(overlap, tmp_path / "model")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen([sys.executable, "-m", "as2rank", "serve", str(tmp_path / "model"), "--port", "0",
                                "--max-wait-ms", "1500", "--fixed-wait", "--threads", "1"],
                               stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = process.stderr.readline()
        assert "on http://127.0.0.1:" in line, line + process.stderr.read()
        url = line.split(" on ", 1)[1].split()[0]
        deadline = time.monotonic() + 60
        while httpx.get(f"{url}/health").status_code != 200:
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.05)
        expected = ranking(overlap, QUESTION, TEXTS)[0]
        with ThreadPoolExecutor(8) as pool:
            sent = [pool.submit(httpx.post, f"{url}/rerank", json={"query": QUESTION, "texts": TEXTS}, timeout=30)
                    for _ in range(8)]
            time.sleep(0.5)  # in flight: the batch closes 1.5 s after the first request arrived
            assert not any(f.done() for f in sent)
            process.send_signal(signal.SIGTERM)
            responses = [f.result() for f in sent]
        assert [r.status_code for r in responses] == [200] * 8
        assert all([x["index"] for x in r.json()] == expected for r in responses)
        assert process.wait(30) == 0
        tail = process.stderr.read()
        answered = int(re.search(r"stopped; (\d+) requests answered, 0 received and not answered", tail).group(1))
        assert answered >= 8 + 1  # the eight, and /health
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
