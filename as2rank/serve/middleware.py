"""What every request passes through before its route: the metrics (outermost, so that refused requests count too),
the API key and the body-size limit; and the server's Prometheus metrics.

Both middlewares are plain ASGI: they see the request before FastAPI reads its body, so that a request without the
key is refused before its body is read, and a body over the limit before it is held in memory whole.
"""

from __future__ import annotations

import hmac
import json
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["Gate", "Telemetry", "error_body", "route_path"]

#: Latency buckets of the request histogram, in seconds.
_LATENCY = (0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


def error_body(message: str, error_type: str, limit=None, value=None) -> dict:
    """The JSON of every error response: ``error`` (one line), ``error_type`` and, for a limit, its name and value."""
    body = {"error": message, "error_type": error_type}
    if limit is not None:
        body.update(limit=limit, value=value)
    return body


def route_path(scope) -> str:
    """The request's path inside the app (without the prefix it is mounted under)."""
    path, root = scope.get("path", ""), scope.get("root_path", "")
    return path[len(root):] if root and path.startswith(root) else path


async def _send_json(send, status: int, body: dict, headers=()) -> None:
    payload = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()),
                            *headers]})
    await send({"type": "http.response.body", "body": payload})


class Telemetry:
    """The server's Prometheus metrics, in a registry of their own (two apps in one process share nothing).

    Metrics: ``as2rank_requests_total`` (by route and status), ``as2rank_request_duration_seconds`` (by route),
    ``as2rank_batch_requests`` and ``as2rank_batch_pairs`` (requests and pairs per model call),
    ``as2rank_predict_duration_seconds``, ``as2rank_predict_failures_total``, ``as2rank_queue_depth`` and
    ``as2rank_requests_in_flight`` (received, not yet answered).

    Parameters
    ----------
    routes : iterable of str
        The app's paths; any other path is counted under ``other`` (a label per unknown path would let clients
        grow the registry without bound).
    depth : callable
        Returns the number of requests waiting for a batch.
    """

    def __init__(self, routes, depth):
        self.routes = frozenset(routes)
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter("as2rank_requests", "HTTP requests by route and status code.", ["route", "status"],
                                registry=r)
        self.latency = Histogram("as2rank_request_duration_seconds", "Time from a request to its response.",
                                 ["route"], buckets=_LATENCY, registry=r)
        self.batch_requests = Histogram("as2rank_batch_requests", "Requests packed into one model call.",
                                        buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256), registry=r)
        self.batch_pairs = Histogram("as2rank_batch_pairs", "Question/candidate pairs scored in one model call.",
                                     buckets=(1, 4, 16, 64, 256, 1024, 4096, 16384), registry=r)
        self.predict = Histogram("as2rank_predict_duration_seconds", "Time of one model call.", buckets=_LATENCY,
                                 registry=r)
        self.failures = Counter("as2rank_predict_failures", "Model calls that raised.", registry=r)
        self.in_flight = Gauge("as2rank_requests_in_flight", "HTTP requests received and not yet answered.",
                               registry=r)
        self.depth = Gauge("as2rank_queue_depth", "Requests waiting for a batch.", registry=r)
        self.depth.set_function(depth)

    def totals(self) -> tuple[int, int]:
        """``(answered, in flight)``: HTTP requests answered so far, and those received and not yet answered."""
        answered = sum(s.value for metric in self.requests.collect() for s in metric.samples
                       if s.name.endswith("_total"))
        in_flight = sum(s.value for metric in self.in_flight.collect() for s in metric.samples)
        return int(answered), int(in_flight)

    def label(self, path: str) -> str:
        return path if path in self.routes else "other"

    def observe_batch(self, n_jobs: int, n_pairs: int, seconds: float, failed: bool) -> None:
        """The batcher's callback after each model call."""
        self.batch_requests.observe(n_jobs)
        self.batch_pairs.observe(n_pairs)
        self.predict.observe(seconds)
        if failed:
            self.failures.inc()

    def wrap(self, app):
        """``app`` with every HTTP request counted and timed."""

        async def measured(scope, receive, send):
            if scope["type"] != "http":
                return await app(scope, receive, send)
            route, start, status = self.label(route_path(scope)), time.perf_counter(), [500]

            async def sending(message):
                if message["type"] == "http.response.start":
                    status[0] = message["status"]
                await send(message)

            self.in_flight.inc()
            try:
                await app(scope, receive, sending)
            finally:
                self.in_flight.dec()
                self.requests.labels(route, str(status[0])).inc()
                self.latency.labels(route).observe(time.perf_counter() - start)

        return measured


class Gate:
    """The API key and the body-size limit, before any route.

    Parameters
    ----------
    app : ASGI app
    api_key : str or None
        Every path but ``/health`` needs ``Authorization: Bearer <api_key>`` (compared in constant time); None: no key.
    max_body_bytes : int
        A larger body is refused with 413, whether its ``Content-Length`` says so or its chunks add up to more.
    on_request : callable, default=None
        Called with no argument before each HTTP request (the app starts its worker there when no lifespan ran,
        as when it is mounted inside another app).
    """

    def __init__(self, app, *, api_key, max_body_bytes, on_request=None):
        self.app = app
        self.key = None if api_key is None else f"Bearer {api_key}".encode()
        self.max_body_bytes = max_body_bytes
        self.on_request = on_request

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if self.on_request is not None:
            self.on_request()
        if self.key is not None and route_path(scope) != "/health":
            given = dict(scope.get("headers", ())).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.key):
                return await _send_json(send, 401, error_body(
                    "missing or wrong API key: send the header Authorization: Bearer <key>", "auth"),
                    [(b"www-authenticate", b"Bearer")])
        if scope.get("method") in ("GET", "HEAD", "OPTIONS"):
            return await self.app(scope, receive, send)
        length = dict(scope.get("headers", ())).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body_bytes:
            return await self._too_large(send)
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return await self.app(scope, _replay([message]), send)
            size += len(message.get("body", b""))
            if size > self.max_body_bytes:
                return await self._too_large(send)
            chunks.append(message)
            if not message.get("more_body", False):
                break
        body = b"".join(m.get("body", b"") for m in chunks)
        await self.app(scope, _replay([{"type": "http.request", "body": body, "more_body": False}], receive), send)

    async def _too_large(self, send):
        await _send_json(send, 413, error_body(f"the request body is larger than {self.max_body_bytes} bytes",
                                               "limit", "max_body_bytes", self.max_body_bytes))


def _replay(messages, receive=None):
    """A ``receive`` that gives ``messages`` first, then what ``receive`` gives (a disconnect, later)."""
    pending = list(messages)

    async def replayed():
        if pending:
            return pending.pop(0)
        if receive is not None:
            return await receive()
        return {"type": "http.disconnect"}

    return replayed
