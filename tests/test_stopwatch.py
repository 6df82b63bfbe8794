"""The stopwatch's steady time: the wall time less the waits for a CPU, so that other work on the machine does
not change the figures the selector plans with."""

import multiprocessing
import sys
import time

import pytest

from as2rank.model_selection.stopwatch import Lap, Stopwatch, _waited


def _spin(seconds):
    start = time.process_time()
    while time.process_time() - start < seconds:
        pass


def test_waits_are_averaged_over_the_threads_that_worked():
    before = {"1": (0, 0), "2": (0, 0), "3": (0, 0)}
    # Threads 1 and 2 ran 1 s each and waited 0.4 and 0.6 s; thread 3 barely ran (an idle helper thread).
    after = {"1": (10**9, 4 * 10**8), "2": (10**9, 6 * 10**8), "3": (10**6, 9 * 10**8), "4": (10**9, 10**9)}
    assert _waited(before, after) == pytest.approx(0.5)  # thread 4 started during the lap: not counted
    assert _waited(None, after) == 0.0
    assert Lap(wall=2.0, cpu=2.0, waited=0.5).steady == 1.5 and Lap(1.0, 0.0, 2.0).steady == 0.0


def test_a_sleep_is_not_a_wait():
    # Counted as a wait, the sleep would leave ~0 s steady; a busy machine may add a few ms of waking up.
    with Stopwatch() as watch:
        time.sleep(0.2)
    assert watch.lap.waited < 0.1 and watch.lap.steady > 0.1 and watch.lap.cpu < 0.1


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="schedstat is Linux's")
def test_busy_neighbours_leave_the_steady_time_of_cpu_work_near_its_cpu_time():
    """One CPU-bound thread beside as many spinning processes as there are cores: its wall time grows, its steady
    time stays near the CPU time it used."""
    ctx = multiprocessing.get_context("fork")
    neighbours = [ctx.Process(target=_spin, args=(3.0,)) for _ in range(multiprocessing.cpu_count())]
    for p in neighbours:
        p.start()
    try:
        with Stopwatch() as watch:
            _spin(1.0)
    finally:
        for p in neighbours:
            p.terminate()
            p.join()
    lap = watch.lap
    assert lap.wall > 1.2  # the neighbours took the CPU from it ...
    assert lap.steady == pytest.approx(lap.cpu, rel=0.15)  # ... and the steady time leaves that out


def test_pace_is_wall_per_steady_second_and_never_below_one():
    from as2rank.model_selection.stopwatch import Lap, Pace

    pace = Pace()
    assert pace.ratio == 1.0  # nothing timed yet
    pace.add(Lap(wall=2.0, cpu=1.0, waited=1.0))  # half the wall time waited for a CPU
    pace.add(Lap(wall=1.0, cpu=1.0, waited=0.0))
    assert pace.ratio == 1.5
    assert Pace(wall=1.0, steady=2.0).ratio == 1.0


def test_free_cores_is_between_one_and_the_cores_this_process_may_use():
    import os

    from as2rank.model_selection.stopwatch import free_cores

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert 1 <= free_cores(window=0.05) <= cores


def test_threads_limits_torch_inside_the_block_and_restores_it():
    torch = pytest.importorskip("torch")
    from as2rank.model_selection.measures import threads

    before = torch.get_num_threads()
    with threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with threads(None):
        assert torch.get_num_threads() == before
