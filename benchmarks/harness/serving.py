"""Servers under load: a server process on 127.0.0.1 (:class:`Server`), ``as2rank serve``'s command line, and one
load cell of the HTTP load generator ``hey`` (:func:`hey`)."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A server process on 127.0.0.1 with its log; ``ready()`` waits for ``/health``."""

    def __init__(self, name: str, cmd: list, logdir: Path):
        self.name, self.cmd, self.port = name, cmd, free_port()
        self.log = logdir / f"{re.sub(r'[^a-z0-9]+', '-', name.lower())}.log"
        self.proc = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "Server":
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen([*self.cmd, "--port", str(self.port)], stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        return self

    def ready(self, timeout=600) -> "Server":
        import httpx

        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise SystemExit(f"{self.name} exited ({self.proc.returncode}); see {self.log}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise SystemExit(f"{self.name} not ready after {timeout} s; see {self.log}")

    def stop(self, sig=signal.SIGTERM, timeout=120) -> int | None:
        """Signal the process (if it runs) and wait for it; its exit status (None if it never started)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@contextmanager
def running(servers: dict):
    """Start every server of ``servers`` (``{name: Server}``), wait until each answers ``/health``, and stop them
    all on the way out, an error included: they run in sessions of their own, so nothing else would stop them."""
    try:
        for server in servers.values():
            server.start()
        for server in servers.values():
            server.ready()
        yield servers
    finally:
        for server in servers.values():
            server.stop()


def cell_summary(rounds: list) -> dict:
    """One load cell's rounds (:func:`hey`'s records) as one row: the median requests/s and latency percentiles,
    the requests and errors summed, and each round's requests/s."""
    return {**{k: float(np.median([x[k] for x in rounds])) for k in ("rps", "p50_ms", "p95_ms", "p99_ms")},
            "requests": int(sum(x["requests"] for x in rounds)), "errors": int(sum(x["errors"] for x in rounds)),
            "rounds_rps": [round(x["rps"], 2) for x in rounds]}


def as2rank_cmd(model_dir, threads, *extra) -> list:
    """The command line of ``as2rank serve`` of the saved model ``model_dir`` with ``threads`` torch threads."""
    return [sys.executable, "-m", "as2rank", "serve", str(model_dir), "--threads", str(threads), *extra]


def hey(url: str, body: Path, concurrency: int, seconds: float, client_timeout: float = 300) -> dict:
    """One cell: ``hey`` for ``seconds`` at ``concurrency`` clients; requests/s of 200 answers and their latency
    percentiles (ms), from hey's per-request CSV. hey waits for the requests in flight at the end (up to
    ``client_timeout`` seconds), so that no server is still working for the last cell when the next one starts, and the
    span over which requests/s is counted runs to the last answer."""
    cmd = ["hey", "-z", f"{seconds}s", "-c", str(concurrency), "-t", str(client_timeout), "-m", "POST", "-T",
           "application/json", "-D", str(body), "-o", "csv", url + "/rerank"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + client_timeout + 60, check=True).stdout
    rows = list(csv.DictReader(io.StringIO(out)))
    ok = np.array([float(r["response-time"]) for r in rows if r["status-code"] == "200"])
    ends = [float(r["offset"]) + float(r["response-time"]) for r in rows]
    span = max(ends) if ends else seconds
    pct = np.percentile(ok, [50, 95, 99]) * 1000 if len(ok) else [float("nan")] * 3
    return {"requests": len(ok), "errors": len(rows) - len(ok), "seconds": span, "rps": len(ok) / span,
            "p50_ms": pct[0], "p95_ms": pct[1], "p99_ms": pct[2]}


def bodies_of(splits, folder: Path):
    """The two request bodies of the load (files in ``folder``) and their texts: ``"question"``, the WikiQA-test
    question whose candidate count is the median, and ``"100"``, a test question expanded to 100 candidates."""
    from harness.data import subset_questions
    from harness.library import expand_candidates

    X_test, y_test = splits["test"]
    sizes = X_test.groupby("qid", sort=False).size()
    median_q = (sizes - sizes.median()).abs().idxmin()
    one = X_test[X_test["qid"] == median_q]
    X_one, y_one = subset_questions(X_test, y_test, 1, seed=3)
    X_100, _ = expand_candidates(X_one, y_one, splits["pool"], k=100)
    bodies, texts = {}, {}
    for kind, frame in (("question", one), ("100", X_100)):
        texts[kind] = {"query": frame["question"].iloc[0], "texts": frame["candidate"].tolist()}
        bodies[kind] = folder / f"{kind}.json"
        bodies[kind].write_text(json.dumps(texts[kind]))
    return bodies, texts


def plot_load(panels: list, path) -> None:
    """Requests/s against concurrent clients, one panel per request kind: ``panels`` is a list of ``(title,
    {label: {clients: rps}})`` (clients as strings, as results keep them)."""
    from harness.pages import pyplot, save_figure

    plt = pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4))
    for ax, (title, lines) in zip(axes, panels):
        for label, by_c in lines.items():
            cs = sorted(by_c, key=int)
            ax.plot([int(c) for c in cs], [by_c[c] for c in cs], "o-", label=label)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrent clients")
        ax.set_ylabel("requests/s (median of rounds)")
        ax.set_title(f"POST /rerank, {title} per request", fontsize=9)
    save_figure(fig, path, legend_axes=axes[-1])
