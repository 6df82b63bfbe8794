""":func:`create_app`: a fitted model behind the HTTP reranking APIs that QA and RAG stacks already call.

Routes: ``POST /rerank`` (text-embeddings-inference's shape), ``POST /v1/rerank`` and ``POST /v2/rerank`` (Cohere's),
``POST /answer`` (answer or abstain, a calibrated model), ``GET /health``, ``GET /info``, ``GET /metrics``
(Prometheus) and FastAPI's ``/openapi.json`` and ``/docs``. Requests are scored by one inference worker that batches
concurrent requests (:mod:`as2rank.serve.batching`). The user guide is ``docs/guide/serve.md``.
"""

from __future__ import annotations

import asyncio
import uuid
from contextlib import asynccontextmanager
from functools import lru_cache
from numbers import Integral, Real
from os import PathLike

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..params import Boolean, Interval, check_param
from ..version import __version__
from .batching import Batcher, Closed, Job, QueueFull, on_passing_thread
from .middleware import Gate, Telemetry, error_body
from .model import ServedModel, load_served_model
from .schemas import (AnswerRequest, AnswerResponse, CohereRerankRequest, CohereRerankResponse, ErrorResponse, Rank,
                      RerankRequest)

__all__ = ["SERVE_CONSTRAINTS", "ServeError", "create_app"]

#: The accepted values of :func:`create_app`'s options (the command line checks its flags against the same table).
SERVE_CONSTRAINTS = {
    "max_wait_ms": [Interval(Real, 0, 10_000)],
    "max_batch_pairs": [Interval(Integral, 1, None)],
    "max_queue": [Interval(Integral, 1, None)],
    "max_candidates": [Interval(Integral, 1, None)],
    "max_chars": [Interval(Integral, 1, None)],
    "max_body_bytes": [Interval(Integral, 1, None)],
    "timeout_s": [Interval(Real, 0, None, closed="neither")],
    "dynamic_batching": [Boolean()],
    "adaptive_wait": [Boolean()],
    "threads": [Interval(Integral, 1, None), None],
}

#: Seconds a client is told to wait (``Retry-After``) when the queue is full.
RETRY_AFTER = 1
#: Seconds the app's shutdown waits for the worker beyond the request timeout.
_CLOSE_MARGIN = 5.0

_ROUTES = ("/rerank", "/v1/rerank", "/v2/rerank", "/answer", "/health", "/info", "/metrics")
_ERRORS = {code: {"model": ErrorResponse} for code in (401, 413, 422, 500, 503, 504)}


class ServeError(Exception):
    """An error answered as JSON (:func:`~as2rank.serve.middleware.error_body`) with an HTTP status."""

    def __init__(self, status: int, message: str, error_type: str, limit=None, value=None, headers=None):
        super().__init__(message)
        self.status, self.body, self.headers = status, error_body(message, error_type, limit, value), headers


def create_app(model, *, api_key=None, max_wait_ms=5.0, max_batch_pairs=1024, max_queue=256, max_candidates=1000,
               max_chars=10_000, max_body_bytes=4 << 20, timeout_s=30.0, dynamic_batching=True, adaptive_wait=True,
               threads=None, allow_pickle=False) -> FastAPI:
    """An ASGI app (FastAPI) that serves ``model``.

    What the scores mean: ``score`` (``/rerank``) and ``relevance_score`` (``/v1/rerank``) are a calibrated model's
    probability that the text answers the query (a :class:`~as2rank.answer.ranker.CalibratedRanker`); any other
    model's own ranking score, whose scale is the model's (higher is better). ``raw_scores`` (``/rerank``) returns
    the ranking score of a calibrated model too. The order is always the ranking score's, equal scores in the
    request's order, as :func:`as2rank.rank <as2rank.base.rank>` ranks a frame built from the request (each text's
    index is its ``position``).

    The app starts its inference worker when its lifespan starts (under uvicorn, or ``with TestClient(app)``), or at
    its first request when mounted inside another app (whose lifespan does not run the mounted app's); the worker
    first calls the model once (``/health`` answers 503 until that call succeeded). When the lifespan ends, the
    worker serves every accepted request, then stops; a mounting app can stop it with ``app.state.batcher.close()``.

    Parameters
    ----------
    model : estimator, ServedModel, str or os.PathLike
        A fitted estimator with ``predict``, or the path of a saved model directory (loaded as ``as2rank serve``
        loads it: :func:`~as2rank.serve.model.load_served_model`, on a thread of its own,
        :func:`~as2rank.serve.batching.on_passing_thread`). A path serves a torch model faster than an estimator
        that the calling thread has already run torch on: that thread's OpenMP pool slows the inference worker's
        (:mod:`as2rank.serve.batching`).
    api_key : str, default=None
        Every route but ``/health`` needs ``Authorization: Bearer <api_key>`` (401 otherwise); None: no key.
    max_wait_ms : float, default=5.0
        How long a request may wait for others to be batched with it.
    max_batch_pairs : int, default=1024
        Question/candidate pairs per model call at most (a larger request is scored alone).
    max_queue : int, default=256
        Requests waiting at most; beyond, 503 with ``Retry-After``.
    max_candidates : int, default=1000
        Candidates (texts, documents) per request at most (422 beyond).
    max_chars : int, default=10000
        Characters of the query and of each text at most (422 beyond).
    max_body_bytes : int, default=4194304
        Bytes of a request body at most (413 beyond).
    timeout_s : float, default=30.0
        Seconds a request may wait for its scores (504 beyond; the request is dropped if its batch has not started).
    dynamic_batching : bool, default=True
        False: one request per model call.
    adaptive_wait : bool, default=True
        True: a request that follows a model call of one request is scored with those queued already, without
        waiting ``max_wait_ms`` for more (one client at a time pays no wait); the wait resumes once a call holds
        two requests or more. False: every call waits.
    threads : int, default=None
        torch's intra-op threads in the inference worker; None leaves torch's setting.
    allow_pickle : bool, default=False
        With a path: accept a ``.joblib``/``.pkl`` file (unpickling runs its code: only from a trusted source).

    Returns
    -------
    fastapi.FastAPI
        Its ``state`` holds ``model`` (:class:`~as2rank.serve.model.ServedModel`), ``batcher`` and ``telemetry``.
    """
    options = dict(max_wait_ms=max_wait_ms, max_batch_pairs=max_batch_pairs, max_queue=max_queue,
                   max_candidates=max_candidates, max_chars=max_chars, max_body_bytes=max_body_bytes,
                   timeout_s=timeout_s, dynamic_batching=dynamic_batching, adaptive_wait=adaptive_wait,
                   threads=threads)
    for name, value in options.items():
        check_param(name, value, SERVE_CONSTRAINTS[name])
    if api_key is not None and (not isinstance(api_key, str) or not api_key):
        raise ValueError("api_key must be a non-empty string or None.")
    if isinstance(model, (str, PathLike)):
        served = on_passing_thread(load_served_model, model, allow_pickle=allow_pickle)
    else:
        served = model if isinstance(model, ServedModel) else ServedModel(model)
    batcher = Batcher(served, max_wait_ms=max_wait_ms, max_batch_pairs=max_batch_pairs, max_queue=max_queue,
                      dynamic_batching=dynamic_batching, adaptive_wait=adaptive_wait, threads=threads)
    telemetry = Telemetry(_ROUTES, batcher.depth)
    batcher.on_batch = telemetry.observe_batch

    @asynccontextmanager
    async def lifespan(app):
        batcher.start()
        yield
        # uvicorn has answered every accepted request by now; a model call stuck longer than a request may wait
        # is not waited for.
        await asyncio.to_thread(batcher.close, timeout_s + _CLOSE_MARGIN)

    app = FastAPI(title="as2rank", version=__version__, lifespan=lifespan, description=_DESCRIPTION)
    app.state.model, app.state.batcher, app.state.telemetry = served, batcher, telemetry
    limits = _Limits(max_candidates, max_chars)
    _add_error_handlers(app)
    _add_routes(app, served, batcher, telemetry, limits, timeout_s)
    app.add_middleware(Gate, api_key=api_key, max_body_bytes=max_body_bytes, on_request=batcher.start)
    app.add_middleware(_Measured, telemetry=telemetry)  # outermost: refused requests are counted too
    return app


_DESCRIPTION = (
    "An as2rank model behind text-embeddings-inference's POST /rerank and Cohere's POST /v1/rerank, with POST /answer "
    "(answer or abstain) for a calibrated model. Scores: a calibrated model's probability that the text answers the "
    "query, else the model's own ranking score (higher is better). Guide: docs/guide/serve.md.")


class _Measured:
    """:meth:`Telemetry.wrap <as2rank.serve.middleware.Telemetry.wrap>` as a middleware class."""

    def __init__(self, app, *, telemetry):
        self.call = telemetry.wrap(app)

    async def __call__(self, scope, receive, send):
        await self.call(scope, receive, send)


class _Limits:
    def __init__(self, max_candidates, max_chars):
        self.max_candidates, self.max_chars = max_candidates, max_chars

    def check(self, query: str, texts: list, field: str) -> None:
        """422 naming the limit when ``texts`` or one text is too large."""
        if len(texts) > self.max_candidates:
            raise ServeError(422, f"{field} holds {len(texts)} texts; this server takes {self.max_candidates} at most",
                             "limit", "max_candidates", self.max_candidates)
        if len(query) > self.max_chars:
            raise ServeError(422, f"the query has {len(query)} characters; this server takes {self.max_chars} at most",
                             "limit", "max_chars", self.max_chars)
        longest = max(range(len(texts)), key=lambda i: len(texts[i]))
        if len(texts[longest]) > self.max_chars:
            raise ServeError(422, f"{field}[{longest}] has {len(texts[longest])} characters; this server takes "
                             f"{self.max_chars} at most", "limit", "max_chars", self.max_chars)


def _add_error_handlers(app: FastAPI) -> None:
    """Every error as one JSON shape (:class:`~as2rank.serve.schemas.ErrorResponse`)."""

    @app.exception_handler(ServeError)
    async def serve_error(request: Request, exc: ServeError):
        return JSONResponse(exc.body, status_code=exc.status, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError):
        return JSONResponse(error_body(_validation_message(exc.errors()), "validation"), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        kind = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http")
        return JSONResponse(error_body(str(exc.detail), kind), status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))


def _validation_message(errors) -> str:
    """The first few of pydantic's errors on one line, each naming its field (``texts[2]: ...``)."""
    parts = {}
    for error in errors:
        kind, loc = error.get("type"), [part for part in error.get("loc", ()) if part != "body"]
        # A member of a union reports under its type's name (``documents.0.str``): one message for the field.
        document = any(isinstance(p, str) and p in ("str", "CohereDocument") for p in loc)
        if document:
            loc = loc[: next(i for i, p in enumerate(loc) if p in ("str", "CohereDocument"))]
        field = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".") or "body"
        if kind == "json_invalid":
            field, message = "body", "not valid JSON"
        elif kind == "extra_forbidden":
            message = "unknown field (not part of this route's request)"
        elif document:
            message = "a document is a string or an object with a string text field"
        elif field == "body" and kind in ("model_attributes_type", "dict_type"):
            message = "send one JSON object, with the header Content-Type: application/json"
        else:
            message = error.get("msg", "invalid")
        parts.setdefault(field, message)
    shown = [f"{field}: {message}" for field, message in list(parts.items())[:3]]
    return "; ".join(shown) + (f" (and {len(parts) - 3} more)" if len(parts) > 3 else "")


async def _scores(batcher: Batcher, question: str, texts: list, timeout_s: float):
    """Queue one request and wait for its :class:`~as2rank.serve.batching.JobResult`; each failure as a ServeError."""
    job = Job(question, texts)
    try:
        future = batcher.submit(job)
    except QueueFull as exc:
        raise ServeError(503, f"the server is busy: {exc}; retry later", "overloaded", "max_queue",
                         batcher.max_queue, headers={"Retry-After": str(RETRY_AFTER)}) from None
    except Closed as exc:
        raise ServeError(503, str(exc), "unavailable", headers={"Retry-After": str(RETRY_AFTER)}) from None
    try:
        return await asyncio.wait_for(asyncio.wrap_future(future), timeout_s)
    except asyncio.TimeoutError:
        future.cancel()  # dropped if its batch has not started
        raise ServeError(504, f"the request was not scored within {timeout_s:g} s", "timeout", "timeout_s",
                         timeout_s) from None
    except ServeError:
        raise
    except Exception as exc:  # the model failed on this request
        from ..app.guards import one_line

        raise ServeError(500, f"the model could not score this request ({type(exc).__name__}: "
                         f"{one_line(exc, 300)})", "model") from None


def _add_routes(app: FastAPI, served: ServedModel, batcher: Batcher, telemetry: Telemetry, limits: _Limits,
                timeout_s: float) -> None:

    @app.post("/rerank", response_model=list[Rank], response_model_exclude_none=True, responses=_ERRORS,
              summary="Rank texts for a query (text-embeddings-inference's request and response)")
    async def rerank(request: RerankRequest):
        if request.truncation_direction.lower() == "left":
            raise ServeError(422, "truncation_direction: only Right; the model truncates the end of each pair, as in "
                             "training", "validation")
        limits.check(request.query, request.texts, "texts")
        result = await _scores(batcher, request.query, request.texts, timeout_s)
        values = result.scores if request.raw_scores or result.probabilities is None else result.probabilities
        texts = request.texts if request.return_text else None
        return [{"index": int(i), "score": float(values[i]), "text": texts[i] if texts else None}
                for i in result.order]

    async def cohere(request: CohereRerankRequest, version: str):
        if request.rank_fields is not None and request.rank_fields != ["text"]:
            raise ServeError(422, "rank_fields: only [\"text\"]; the text of each document is ranked", "validation")
        texts = [d if isinstance(d, str) else d.text for d in request.documents]
        limits.check(request.query, texts, "documents")
        result = await _scores(batcher, request.query, texts, timeout_s)
        values = result.scores if result.probabilities is None else result.probabilities
        order = result.order if request.top_n is None else result.order[: request.top_n]
        results = [{"index": int(i), "relevance_score": float(values[i]),
                    **({"document": {"text": texts[i]}} if request.return_documents else {})} for i in order]
        return {"id": str(uuid.uuid4()), "results": results, "meta": {"api_version": {"version": version}}}

    @app.post("/v1/rerank", response_model=CohereRerankResponse, response_model_exclude_none=True,
              responses=_ERRORS, summary="Rank documents for a query (Cohere's v1 request and response)")
    async def cohere_v1(request: CohereRerankRequest):
        return await cohere(request, "1")

    @app.post("/v2/rerank", response_model=CohereRerankResponse, response_model_exclude_none=True,
              responses=_ERRORS, summary="Rank documents for a query (Cohere's v2 request and response)")
    async def cohere_v2(request: CohereRerankRequest):
        return await cohere(request, "2")

    @lru_cache(maxsize=64)
    def threshold(target_precision, target_coverage) -> float:
        try:
            return served.threshold(target_precision, target_coverage)
        except ValueError as exc:
            from ..app.guards import one_line

            raise ServeError(422, one_line(exc), "validation") from None

    @app.post("/answer", response_model=AnswerResponse, responses={**_ERRORS, 400: {"model": ErrorResponse}},
              summary="The answer, or an abstention, of a calibrated model")
    async def answer(request: AnswerRequest):
        if not served.calibrated:
            raise ServeError(400, f"this model ({type(served.estimator).__name__}) cannot abstain: it has no "
                             "calibrated probability. Fit one with as2rank fit DATA --model NAME --calibrate "
                             "--output path/to/model, or wrap the ranker in as2rank.answer.CalibratedRanker, and "
                             "serve that", "model")
        if request.target_precision is not None and request.target_coverage is not None:
            raise ServeError(422, "give target_precision or target_coverage, not both", "validation")
        limits.check(request.question, request.candidates, "candidates")
        cut = threshold(request.target_precision, request.target_coverage)
        result = await _scores(batcher, request.question, request.candidates, timeout_s)
        answered = result.answer_probability > cut
        return {"answer": request.candidates[result.answer_index] if answered else None,
                "index": result.answer_index, "probability": result.answer_probability, "answered": answered,
                "threshold": cut}

    @app.get("/health", summary="200 once the model has scored its warm-up request; 503 before and while stopping")
    async def health():
        if batcher.closing:
            return JSONResponse({"status": "stopping"}, status_code=503)
        if batcher.warm_up_error is not None:
            return JSONResponse({"status": "failed", "error": f"the warm-up call failed: {batcher.warm_up_error}"},
                                status_code=503)
        if not batcher.ready.is_set():
            return JSONResponse({"status": "warming up"}, status_code=503)
        return {"status": "ready"}

    @app.get("/info", summary="The model served, its seal's digest, its card's summary, the server's options")
    async def info():
        return {**served.describe(), "limits": {"max_candidates": limits.max_candidates, "max_chars": limits.max_chars,
                                                "max_queue": batcher.max_queue, "timeout_s": timeout_s},
                "batching": {"dynamic": batcher.dynamic_batching, "max_wait_ms": batcher.max_wait * 1000.0,
                             "adaptive_wait": batcher.adaptive_wait, "max_batch_pairs": batcher.max_batch_pairs,
                             "threads": batcher.threads}}

    @app.get("/metrics", summary="Prometheus metrics", response_class=Response)
    async def metrics():
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return Response(generate_latest(telemetry.registry), media_type=CONTENT_TYPE_LATEST)
