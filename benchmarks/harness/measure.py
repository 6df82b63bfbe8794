"""What the experiments measure alike: metrics over seeds, per-question scores averaged over seeds for the paired
tests, the test's settings, and timings (one call, or interleaved rounds whose order rotates so that a swing of
the machine's load does not always fall on the same row)."""

from __future__ import annotations

import inspect
import time

import numpy as np

from harness.machine import load_average, log
from harness.store import computing


def significance() -> dict:
    """The test behind every p of a page (``compare``'s paired randomisation test) with its defaults."""
    from harness.library import compare, paired_significance

    return {"n_resamples": inspect.signature(paired_significance).parameters["n_resamples"].default,
            "alpha": inspect.signature(compare).parameters["alpha"].default}


def mean_std(runs: list, metrics) -> dict:
    """``{m: mean, m_std: standard deviation}`` over ``runs`` (dicts holding each metric of ``metrics``)."""
    out = {}
    for m in metrics:
        out[m] = float(np.mean([r[m] for r in runs]))
        out[f"{m}_std"] = float(np.std([r[m] for r in runs]))
    return out


def seeds_per_question(y, score_lists, X, metric="map", **kwargs):
    """Each question's ``metric`` averaged over the seeds' scores ``score_lists`` (what the paired tests compare)."""
    import pandas as pd

    from harness.library import per_question

    return pd.concat([per_question(y, s, X, metric, **kwargs) for s in score_lists], axis=1).mean(axis=1)


def timed(fn, X, per_question: bool = False):
    """``fn(X)``, and its wall seconds, pairs per second and the load average before and after (with
    ``per_question``, the milliseconds per question too). Refused by a ``--cached-only`` run."""
    computing("a timing")
    before = load_average()
    start = time.perf_counter()
    out = fn(X)
    seconds = time.perf_counter() - start
    timing = {"seconds": seconds}
    if per_question:
        timing["ms_per_question"] = 1000 * seconds / X["qid"].nunique()
    return out, {**timing, "pairs_per_second": len(X) / seconds, "load_before": before, "load_after": load_average()}


def clocked(call):
    """``call()``, its wall seconds and its CPU seconds (of this process)."""
    start, cpu = time.perf_counter(), time.process_time()
    out = call()
    return out, time.perf_counter() - start, time.process_time() - cpu


def rotated(names: list, r: int) -> list:
    """The order of round ``r``: ``names`` rotated by ``r``."""
    return names[r % len(names):] + names[: r % len(names)]


def interleaved(calls: dict, rounds: int, label: str = "round", per: float = 1.0, unit: str = "s",
                rotate: bool = True) -> dict:
    """``{name: [value per round]}``: each zero-argument callable of ``calls`` timed once a round for ``rounds``
    rounds, its wall seconds divided by ``per`` and shown in the log with ``unit`` (``per=len(rows)/1e6`` with
    ``unit="µs"``: microseconds a row). With ``rotate`` the order turns each round (:func:`rotated`), so that a
    swing of the machine's load does not always fall on the same call. Refused by a ``--cached-only`` run."""
    computing("a timing")
    names, times = list(calls), {name: [] for name in calls}
    for r in range(rounds):
        for name in rotated(names, r) if rotate else names:
            start = time.perf_counter()
            calls[name]()
            times[name].append((time.perf_counter() - start) / per)
        log(f"[{label} {r + 1}/{rounds}] " + ", ".join(f"{n}: {t[-1]:.3g} {unit}" for n, t in times.items()))
    return times


def medians(times: dict) -> dict:
    """``{name: median}`` of :func:`interleaved`'s values."""
    return {name: float(np.median(values)) for name, values in times.items()}
