import os

import numpy as np
import pandas as pd
import pytest


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true",
                     help="also run the tests marked slow (left out by default; CI runs them)")


def pytest_configure(config):
    """Under parallel workers (``pytest -n N``), each worker's torch gets its share of the cores (torch reads
    ``OMP_NUM_THREADS`` when first imported): N workers at torch's default of one thread per core would
    oversubscribe them. Registers the ``slow`` marker."""
    config.addinivalue_line(
        "markers", "slow: takes tens of seconds however small its model: starts other processes (torch.distributed, "
        "the CLI, joblib or Dask workers, spaCy) or exports ONNX graphs that no other test shares; left out unless "
        "pytest is given --slow")
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if workers and "OMP_NUM_THREADS" not in os.environ:
        os.environ["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // int(workers)))


def pytest_collection_modifyitems(config, items):
    """Without ``--slow``, the tests marked slow are deselected (pytest reports how many). The tests of an
    ``xdist_group`` come first: pytest-xdist then hands each group to a worker at the start, and the other
    workers share the rest, instead of one worker running a long group at the end while the others wait."""
    if not config.getoption("--slow"):
        slow = [item for item in items if item.get_closest_marker("slow")]
        if slow:
            config.hook.pytest_deselected(items=slow)
            items[:] = [item for item in items if not item.get_closest_marker("slow")]
    items.sort(key=lambda item: item.get_closest_marker("xdist_group") is None)  # stable: groups first


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models gain nothing from intra-op threads, and on a busy machine extra threads wait on each other."""
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def bf16_anywhere(monkeypatch):
    """bfloat16 wherever the test runs: on a CPU without native bfloat16 (AVX512-BF16 or AMX), where
    ``precision="auto"`` and ``"bf16"`` resolve to float32, the library is told that it has it, so that its
    bfloat16 autocast runs on torch's emulated kernels (the same rounding, slower). The bfloat16 paths are then
    tested on every host, not only on those that the AVX-512 pages ran on."""
    from as2rank.neural import devices

    if not devices.cpu_bf16_supported():
        monkeypatch.setattr(devices, "cpu_bf16_supported", lambda: True)


@pytest.fixture
def toy():
    """Three questions, rows of question 'q2' interleaved and out of position order."""
    X = pd.DataFrame(
        {
            "qid": ["q1", "q1", "q1", "q2", "q3", "q2", "q3", "q2"],
            "question": [
                "who wrote hamlet",
                "who wrote hamlet",
                "who wrote hamlet",
                "what is the capital of france",
                "when was the eiffel tower built",
                "what is the capital of france",
                "when was the eiffel tower built",
                "what is the capital of france",
            ],
            "candidate": [
                "Hamlet is a tragedy .",
                "Shakespeare wrote Hamlet around 1600 .",
                "It is set in Denmark .",
                "France is in Europe .",
                "The Eiffel Tower was built in 1889 .",
                "Paris is the capital of France .",
                "It is in Paris .",
                "The capital has many museums .",
            ],
            "position": [0, 1, 2, 2, 0, 0, 1, 1],
        }
    )
    y = np.array([0, 1, 0, 0, 1, 1, 0, 0])
    return X, y


@pytest.fixture(scope="session")
def export_memo(tmp_path_factory):
    """The ONNX graphs exported in this test run (:class:`tests.utils.ExportMemo`), in a folder that the
    pytest-xdist workers of the run share."""
    from tests.utils import ExportMemo

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # each worker's base folder is inside the run's
    return ExportMemo(root / "onnx-exports")


@pytest.fixture(scope="module")
def memoized_exports(export_memo):
    """While the tests of a module that uses it run, module-scoped fixtures included, the copies on ONNX Runtime
    (``as2rank.neural.onnx.runtime``) export each (module, inputs) once in this test run
    (:class:`tests.utils.ExportMemo`); a test that refuses exports still sees every call. The patch is this
    fixture's own: a test's ``monkeypatch.undo()`` leaves it in place. Without the optional ONNX packages nothing
    is exported, and nothing changes."""
    from as2rank.neural.onnx import runtime

    with pytest.MonkeyPatch.context() as patch:
        if runtime.onnx_available():
            patch.setattr(runtime, "export_graph", export_memo.wrap(runtime.export_graph))
        yield export_memo


def pytest_sessionstart(session):
    """With ``AS2RANK_SCORE_LOG=folder``, every ``predict`` of a public estimator during the run is recorded (a
    digest of its scores per test and call, :mod:`tests.score_log`), so that two runs of the suite (before and
    after a refactoring) can be compared score for score."""
    folder = os.environ.get("AS2RANK_SCORE_LOG")
    if folder:
        from tests import score_log

        score_log.start(folder)


def pytest_runtest_setup(item):
    if os.environ.get("AS2RANK_SCORE_LOG"):
        from tests import score_log

        score_log.current_test(item.nodeid)


def pytest_sessionfinish(session):
    if os.environ.get("AS2RANK_SCORE_LOG"):
        from tests import score_log

        score_log.finish(os.environ.get("PYTEST_XDIST_WORKER", "main"))
