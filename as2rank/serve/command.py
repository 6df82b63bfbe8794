"""``as2rank serve PATH/TO/MODEL``: the command that runs :func:`~as2rank.serve.app.create_app` under uvicorn.

The model is loaded (under the library's trust rules, as ``as2rank rank`` loads it) and scores one warm-up
request before the server binds its port: a bad model path, a damaged directory or a model that cannot score fails
at once in one line (``as2rank: error: ...``, status 2). The server binds 127.0.0.1 unless told otherwise, and
warns in one line when it listens beyond the loopback interface without an API key. SIGTERM (or Ctrl-C) stops it
gracefully: uvicorn stops accepting connections and answers every request it accepted, then the inference worker
stops; the command says how many requests it answered and how many it received and did not answer (0 unless a
model call outlasted the drain), and exits 0 after SIGTERM, 130 after Ctrl-C.

This module imports no web framework at import time: the command line builds its parser from it.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import warnings

__all__ = ["add_parser", "run"]

#: The options that go to :func:`~as2rank.serve.app.create_app` unchanged, by flag.
_OPTIONS = ("max_wait_ms", "max_batch_pairs", "max_queue", "max_candidates", "max_chars", "max_body_bytes",
            "timeout_s", "threads")
#: Seconds that uvicorn waits, beyond the request timeout, for accepted requests when it stops.
_DRAIN_MARGIN = 5.0


def add_parser(sub, allow_pickle_help: str):
    """Add the ``serve`` command to the command line's subparsers."""
    p = sub.add_parser("serve", help="serve a saved model over HTTP: text-embeddings-inference's /rerank, Cohere's "
                       "/v1/rerank, /answer for a calibrated model (needs as2rank[serve])")
    p.add_argument("model", help="a saved model directory (as2rank fit --output), or with --allow-pickle a "
                   ".joblib/.pkl/.pickle file")
    p.add_argument("--allow-pickle", action="store_true", help=allow_pickle_help)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only; "
                   "0.0.0.0 listens on every interface: give an API key)")
    p.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000; 0: any free port)")
    p.add_argument("--api-key", default=None, help="require Authorization: Bearer KEY on every route but /health "
                   "(default: the environment variable AS2RANK_API_KEY, else no key)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads of the inference worker (default: the cores this process may use)")
    g = p.add_argument_group("batching and limits")
    g.add_argument("--max-wait-ms", type=float, default=5.0,
                   help="how long a request may wait for others to be batched with it (default 5)")
    g.add_argument("--max-batch-pairs", type=int, default=1024,
                   help="question/candidate pairs per model call at most (default 1024)")
    g.add_argument("--no-dynamic-batching", action="store_true", help="one request per model call")
    g.add_argument("--fixed-wait", action="store_true", help="every model call waits --max-wait-ms for requests to "
                   "batch (default: a request that follows a call of one request does not wait)")
    g.add_argument("--max-queue", type=int, default=256,
                   help="requests waiting at most; beyond, 503 with Retry-After (default 256)")
    g.add_argument("--max-candidates", type=int, default=1000, help="texts per request at most (default 1000)")
    g.add_argument("--max-chars", type=int, default=10_000,
                   help="characters of the query and of each text at most (default 10000)")
    g.add_argument("--max-body-bytes", type=int, default=4 << 20,
                   help="bytes of a request body at most (default 4194304)")
    g.add_argument("--timeout-s", type=float, default=30.0,
                   help="seconds a request may wait for its scores; beyond, 504 (default 30)")
    p.set_defaults(func=run)
    return p


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve beyond this machine
        return False


def _listen(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` and listening, or one line saying why not (before the model is served)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise ValueError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise ValueError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


def run(args) -> int:
    """Run ``as2rank serve`` with the parsed ``args``; returns the exit status."""
    import importlib.util

    missing = [name for name in ("fastapi", "uvicorn", "prometheus_client") if importlib.util.find_spec(name) is None]
    if missing:
        raise ImportError(f"as2rank serve needs {', '.join(missing)}: pip install \"as2rank[serve]\"")
    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port must be an integer in [0, 65535], got {args.port}.")
    from ..params import check_param
    from .app import SERVE_CONSTRAINTS, create_app
    from .batching import on_passing_thread
    from .model import load_served_model

    options = {name: getattr(args, name) for name in _OPTIONS}
    options["threads"] = options["threads"] if options["threads"] is not None else _cores()
    for name, value in options.items():
        check_param(f"--{name.replace('_', '-')}", value, SERVE_CONSTRAINTS[name])
    api_key = args.api_key if args.api_key is not None else (os.environ.get("AS2RANK_API_KEY") or None)
    if api_key is not None and not api_key.strip():
        raise ValueError("--api-key is empty; give a key, or leave the option out to serve without one.")
    served = on_passing_thread(load_served_model, args.model, allow_pickle=args.allow_pickle)
    try:
        on_passing_thread(served.warm_up)
    except BaseException as exc:  # a Rust panic of tokenizers is a BaseException
        from ..app.guards import is_failure, one_line

        if not is_failure(exc):
            raise
        raise ValueError(f"the model at {args.model} cannot score a request ({type(exc).__name__}: "
                         f"{one_line(exc, 300)}); its saved state is damaged or was edited.") from None
    if not _loopback(args.host) and api_key is None:
        warnings.warn(f"listening on {args.host} without an API key: anyone who can reach this port can use the "
                      "model; give --api-key (or AS2RANK_API_KEY)", UserWarning, stacklevel=2)
    sock = _listen(args.host, args.port)
    app = create_app(served, api_key=api_key, dynamic_batching=not args.no_dynamic_batching,
                     adaptive_wait=not args.fixed_wait, **options)
    return _serve(app, sock, served, args.host, options["timeout_s"])


def _serve(app, sock, served, host, timeout_s) -> int:
    """uvicorn on ``sock`` until SIGTERM or Ctrl-C; 0 after SIGTERM, 130 after Ctrl-C."""
    import uvicorn

    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                            timeout_graceful_shutdown=int(timeout_s + _DRAIN_MARGIN))
    server = uvicorn.Server(config)
    port = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    kind = type(served.estimator).__name__
    print(f"as2rank serve: {served.name}{'' if served.name == kind else f' ({kind})'} on http://{shown}:{port} "
          "(routes: /rerank /v1/rerank /answer /health /info /metrics /docs; SIGTERM or Ctrl-C stops it)",
          file=sys.stderr, flush=True)
    # uvicorn handles SIGTERM and SIGINT while it runs, then restores the handlers it found and raises the signal
    # again: these handlers record it instead of ending the process with the signal's status.
    received = []
    previous = {sig: signal.signal(sig, lambda number, frame: received.append(number))
                for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        server.run(sockets=[sock])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sock.close()
    if not server.started:
        raise ValueError("the server did not start (uvicorn's message above says why).")
    answered, in_flight = app.state.telemetry.totals()
    print(f"as2rank serve: stopped; {answered} requests answered, {in_flight} received and not answered",
          file=sys.stderr, flush=True)
    return 130 if signal.SIGINT in received else 0
