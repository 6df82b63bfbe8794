"""Timing that other work on the machine does not change much: the wall time of a call less the time this
process's threads waited for a CPU that another process held.

On Linux every thread's ``/proc/self/task/<tid>/schedstat`` gives the nanoseconds it ran and the nanoseconds it
was ready to run but waited for a CPU. A call's *steady* time is its wall time less that wait, divided among the
threads that worked during the call (two threads that wait side by side lose the same wall time once): on a quiet
machine it equals the wall time; on a busy one it estimates what the call would take on a quiet one, for
CPU-bound and waiting work alike (a sleep or a GPU kernel is not a wait for a CPU). Elsewhere the steady time is
the wall time.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

__all__ = ["Lap", "Pace", "Stopwatch", "free_cores"]

#: A thread counts as working during a lap when it ran at least this share of the busiest thread's time.
_WORKING = 0.1


def _schedstat() -> dict | None:
    """``{thread id: (ns run, ns waited for a CPU)}`` of this process's threads, or None where the kernel has no
    such accounting."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    out = {}
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/schedstat") as f:
                run, wait, _ = f.read().split()
        except (OSError, ValueError):  # a thread that ended meanwhile
            continue
        out[task] = (int(run), int(wait))
    return out or None


@dataclass(frozen=True)
class Lap:
    """One timed call: ``wall`` and ``cpu`` seconds (the process's CPU time, all threads), ``waited`` (seconds
    its working threads waited for a CPU, averaged over them) and ``steady = wall - waited``."""

    wall: float
    cpu: float
    waited: float

    @property
    def steady(self) -> float:
        return max(0.0, self.wall - self.waited)


@dataclass
class Pace:
    """Wall seconds per steady second over the laps added so far: 1 on a quiet machine, more where other processes
    share the cores. It turns a steady estimate into the wall time the work will take here and
    now, which is what a wall-clock budget has to hold."""

    wall: float = 0.0
    steady: float = 0.0

    def add(self, lap: Lap) -> None:
        self.wall += lap.wall
        self.steady += lap.steady

    @property
    def ratio(self) -> float:
        return max(1.0, self.wall / self.steady) if self.steady > 0 else 1.0


class Stopwatch:
    """Times a block: ``with Stopwatch() as watch: ...`` then ``watch.lap`` (a :class:`Lap`)."""

    def __enter__(self) -> Stopwatch:
        self._sched = _schedstat()
        self._cpu = time.process_time()
        self._wall = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        wall = time.perf_counter() - self._wall
        cpu = time.process_time() - self._cpu
        self.lap = Lap(wall, cpu, _waited(self._sched, _schedstat()))


def _waited(before, after) -> float:
    """Seconds the threads that worked between two :func:`_schedstat` readings waited for a CPU, on average."""
    if before is None or after is None:
        return 0.0
    deltas = [(run - before[t][0], wait - before[t][1]) for t, (run, wait) in after.items() if t in before]
    busiest = max((run for run, _ in deltas), default=0)
    working = [wait for run, wait in deltas if busiest and run >= _WORKING * busiest]
    return sum(working) / len(working) / 1e9 if working else 0.0


def _cpu_times() -> tuple[int, int]:
    """(idle, total) jiffies of all CPUs since boot, from the first line of ``/proc/stat``."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:9]]
    return values[3] + values[4], sum(values)  # idle and iowait; user ... steal


def free_cores(window: float = 0.1) -> int:
    """The cores of this process's CPU set that other processes leave idle, measured over ``window`` seconds
    (at least 1); all of them where the kernel has no such accounting. A thread pool wider than this waits at
    each of its barriers for a thread that another process holds."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    try:
        idle0, total0 = _cpu_times()
        time.sleep(window)
        idle1, total1 = _cpu_times()
    except (OSError, ValueError, IndexError):
        return cores
    share = (idle1 - idle0) / max(total1 - total0, 1)
    return max(1, min(cores, round(share * (os.cpu_count() or cores))))
