"""Scale-out (issue 11): parallel model selection (joblib, Dask), training in several processes (Accelerate,
gloo), streamed training, chunked and Dask scoring, ``as2rank predict``. Offline, tiny models.

Tiny models run with ``n_threads=1``: on a busy machine, synchronising torch's threads costs more than they
give on matrices this small. Tolerances: runs with the same thread count give the same scores, compared at
1e-9. A fit in two processes
(gloo, dropout off) follows the one-process fit with the same global batches to 1e-5 in every step loss and
weight (the only difference is the summation order of the gradients: about 1e-7 here); both processes end
with bit-identical weights.
"""

import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import joblib
import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.model_selection import GridSearchCV, GroupKFold  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402

from as2rank.lexical.baselines import LexicalFeatures, PointwiseRanker, WordOverlapRanker  # noqa: E402
from as2rank.transformer.cascade import CascadeTransformer  # noqa: E402
from as2rank.app.cli import main  # noqa: E402
from as2rank.datasets import load_asnq, load_parquet, load_sample  # noqa: E402
from as2rank.metrics import get_scorer  # noqa: E402
from as2rank.neural import linear_warmup_decay, torch_threads  # noqa: E402
from as2rank.neural.distributed import Shard  # noqa: E402
from as2rank.app.scale import predict_dask, predict_file, score_frame  # noqa: E402
from as2rank.transformer.ranker import TransformerRanker  # noqa: E402
from tests import scale_helpers  # noqa: E402
from tests.scale_helpers import InterruptingRanker, asnq_rows, write_asnq  # noqa: E402
from tests.utils import assert_whole_questions  # noqa: E402
from tests.test_transformer import WORDS, small, synthetic, tokenizer  # noqa: E402,F401

ROOT = Path(__file__).resolve().parents[1]


def env():
    """Environment of subprocesses: this checkout first on the path, one torch thread each."""
    return {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def dask_client():
    distributed = pytest.importorskip("distributed")
    import dask

    # Without the active memory manager, which may drop a worker's copy of the model between partitions (then
    # fetched again), and without work stealing, which may move the model's task away from a worker that already
    # unpickled it on arrival: predict_dask's docs name these settings for a strict one copy per worker.
    settings = {"distributed.scheduler.active-memory-manager.start": False, "distributed.scheduler.work-stealing": False}
    with dask.config.set(settings), distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=50
    ) as cluster, distributed.Client(cluster) as client:
        # Import dask.dataframe in every worker up front: under load a worker failed to unpickle a task while
        # the module was still being imported (KeyError: 'dask.dataframe'), dropped out, and the shuffle re-ran
        # on the other worker, which then loaded the model several times.
        client.run(__import__, "dask.dataframe")
        yield client


@pytest.fixture(scope="module")
def sample_subset():
    X, y = load_sample()
    keep = X["qid"].isin(X["qid"].unique()[:150]).to_numpy()
    return X[keep].reset_index(drop=True), y[keep]


def searches(make, X, y, dask_client, **fit_params):
    """The same grid search with n_jobs=1, n_jobs=2 (loky) and on a 2-worker Dask cluster."""
    out = {}
    for name, n_jobs, backend in (("serial", 1, None), ("loky", 2, None), ("dask", -1, "dask")):
        search = make(n_jobs)
        if backend is None:
            search.fit(X, y, **fit_params)
        else:
            with joblib.parallel_backend(backend):
                search.fit(X, y, **fit_params)
        out[name] = search
    return out


def assert_same_search(runs, atol):
    reference = runs["serial"]
    splits = [k for k in reference.cv_results_ if k.startswith("split") and k.endswith("_test_score")]
    for name, search in runs.items():
        assert search.best_params_ == reference.best_params_, name
        for key in ["mean_test_score", *splits]:
            np.testing.assert_allclose(search.cv_results_[key], reference.cv_results_[key], rtol=0, atol=atol, err_msg=name)


# ------------------------------------------------------------------------------ parallel model selection


@pytest.mark.slow
def test_grid_search_lexical_pipeline_joblib_and_dask_agree(sample_subset, dask_client):
    X, y = sample_subset

    def make(n_jobs):
        model = make_pipeline(LexicalFeatures(), PointwiseRanker(LogisticRegression(max_iter=1000)))
        grid = {"pointwiseranker__estimator__C": [0.01, 100.0]}
        return GridSearchCV(model, grid, cv=GroupKFold(2), scoring=get_scorer("map"), n_jobs=n_jobs)

    assert_same_search(searches(make, X, y, dask_client, groups=X["qid"]), atol=1e-12)


@pytest.mark.slow
def test_grid_search_tiny_cascade_over_alpha_joblib_and_dask_agree(tokenizer, dask_client):
    """α acts at inference only: with n_jobs>1 the fits are reused inside each worker process, and the
    results are those of n_jobs=1."""
    X, y = synthetic(n_questions=12)

    def make(n_jobs):
        model = small(CascadeTransformer, "bert", tokenizer, exits=(1, 2), n_threads=1)
        return GridSearchCV(model, {"alpha": [0.0, 0.5]}, cv=GroupKFold(2), scoring=get_scorer("map"), n_jobs=n_jobs)

    runs = searches(make, X, y, dask_client, groups=X["qid"])
    assert_same_search(runs, atol=1e-9)


def test_n_threads_is_scoped_and_checked(tokenizer, monkeypatch):
    X, y = synthetic(4)
    before = torch.get_num_threads()
    model = small(TransformerRanker, "bert", tokenizer, num_layers=1, n_threads=1, reuse_fit=False)
    seen = []
    original = TransformerRanker.training_inputs

    def spy(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return original(*args, **kwargs)

    monkeypatch.setattr(TransformerRanker, "training_inputs", spy)
    model.fit(X, y)
    assert seen == [1] and torch.get_num_threads() == before
    with pytest.raises(ValueError, match="n_threads"):
        small(TransformerRanker, "bert", tokenizer, n_threads=0).fit(X, y)
    with pytest.raises(ValueError, match="n_threads"), torch_threads(-1):
        pass


# ------------------------------------------------------------------------------ several processes


def test_shard_split_gives_every_question_to_exactly_one_process():
    rng = np.random.default_rng(0)
    units = rng.permutation(40)
    questions = units // 5  # 8 questions of 5 rows, shuffled
    parts = [Shard(r, 3).split(units, questions) for r in range(3)]
    assert all(real for _, real in parts)
    assert sorted(np.concatenate([p for p, _ in parts]).tolist()) == list(range(40))
    owners = [set(questions[np.isin(units, p)]) for p, _ in parts]
    assert not (owners[0] & owners[1] or owners[0] & owners[2] or owners[1] & owners[2])
    np.testing.assert_array_equal(Shard().split(units, questions)[0], units)  # one process: unchanged
    # Fewer questions than processes: the process left without one gets a stand-in (weighed by zero).
    parts = [Shard(r, 2).split(np.array([3, 4]), np.array([7, 7])) for r in (0, 1)]
    assert sorted(real for _, real in parts) == [False, True]
    assert all(local.tolist() == [3, 4] for local, _ in parts)


def test_a_launched_fit_without_a_fixed_random_state_is_refused(monkeypatch):
    # Each process would draw its own batches and validation split from fresh entropy.
    from as2rank.neural import distributed

    launched = distributed.TrainingSetup(None, torch.device("cpu"), Shard(0, 2))
    monkeypatch.setattr(distributed, "setup_training", lambda device, precision: launched)
    with pytest.raises(ValueError, match="same random_state in every process"):
        with distributed.training_session(None, torch.device("cpu"), None):
            pass
    with distributed.training_session(None, torch.device("cpu"), 0) as (setup, rng):
        assert setup.shard.world_size == 2


@pytest.mark.slow
def test_two_gloo_processes_fit_like_one_process_with_the_same_global_batch(tmp_path):
    from tests.distributed_fit import ranker
    from tests.distributed_fit import tokenizer as make_tokenizer

    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
               str(ROOT / "tests" / "distributed_fit.py"), str(tmp_path)]
    done = subprocess.run(command, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in (0, 1)]
    assert ranks[0]["world_size"] == 2
    # Both processes end with the same model and the same (global) history.
    for key, value in ranks[0]["state_dict"].items():
        assert torch.equal(value, ranks[1]["state_dict"][key]), key
    assert ranks[0]["step_loss"] == ranks[1]["step_loss"]
    # One process, same global batches: same steps up to the order of the gradient sums.
    X, y = synthetic(n_questions=12)
    single = ranker(make_tokenizer(tmp_path)).fit(X, y)
    assert len(single.history_.step_loss) == len(ranks[0]["step_loss"]) == 20
    np.testing.assert_allclose(ranks[0]["step_loss"], single.history_.step_loss, rtol=0, atol=1e-5)
    np.testing.assert_allclose(ranks[0]["learning_rate"], single.history_.learning_rate, rtol=1e-12)
    for key, value in single.model_.state_dict().items():
        torch.testing.assert_close(ranks[0]["state_dict"][key], value, rtol=0, atol=1e-5)
    np.testing.assert_allclose(ranks[0]["scores"], single.predict(X), rtol=0, atol=1e-5)
    # save_pretrained from both processes: the main one wrote a complete model.
    loaded = TransformerRanker.from_pretrained(tmp_path / "saved")
    np.testing.assert_allclose(loaded.predict(X), ranks[0]["scores"], rtol=0, atol=1e-6)


# ------------------------------------------------------------------------------ streamed training


def test_partial_fit_once_on_all_rows_trains_exactly_as_fit(tokenizer):
    X, y = synthetic(n_questions=8, min_size=6, max_size=6)  # 48 rows: 6 full batches of 8
    fit = small(TransformerRanker, "bert", tokenizer, num_layers=2, n_threads=1, reuse_fit=False).fit(X, y)
    part = small(TransformerRanker, "bert", tokenizer, num_layers=2, n_threads=1).partial_fit(X, y, total_rows=len(X))
    assert part.history_.learning_rate == fit.history_.learning_rate
    assert part.history_.step_loss == fit.history_.step_loss
    for key, value in fit.model_.state_dict().items():
        assert torch.equal(value, part.model_.state_dict()[key]), key


def test_streamed_training_equals_in_memory_training_on_the_same_chunks(tokenizer, tmp_path):
    path = write_asnq(tmp_path / "train.tsv", asnq_rows(WORDS, 30, seed=1))
    X_all, y_all = load_asnq(path)
    n = len(X_all)

    def model():
        return small(TransformerRanker, "bert", tokenizer, num_layers=2, batch_size=8, n_threads=1)

    # In memory, the same chunks, and the estimator pickled and unpickled between calls (as a job that
    # checkpoints and restarts): the optimizer state travels with the pickle.
    streamed, in_memory = model(), model()
    chunks = 0
    for X, y in load_asnq(path, chunksize=40):
        streamed.partial_fit(X, y, total_rows=n)
        rows = X.index.to_numpy()
        in_memory = pickle.loads(pickle.dumps(in_memory.partial_fit(X_all.iloc[rows], y_all[rows], total_rows=n)))
        chunks += 1
    assert chunks > 3 and streamed._train_state.rows_done == n
    for key, value in in_memory.model_.state_dict().items():
        assert torch.equal(value, streamed.model_.state_dict()[key]), key
    # The learning rate follows one linear schedule over the declared rows, across the chunks.
    steps = int(np.ceil(n / 8))
    rates = streamed.history_.learning_rate
    assert rates[0] == pytest.approx(1e-3 * linear_warmup_decay(steps, 0.1)(0))
    assert max(rates) == pytest.approx(1e-3, rel=0.05) and rates[-1] < 0.1 * max(rates)
    with pytest.raises(ValueError, match="total_rows"):
        model().partial_fit(X_all, y_all)
    with pytest.warns(RuntimeWarning, match="more than the total_rows"):
        model().partial_fit(X_all, y_all, total_rows=8)


def test_cosinet_streamed_from_parquet_equals_in_memory_chunks(tmp_path):
    from gensim.models import KeyedVectors

    from tests.test_cosinet import WORDS as COSINET_WORDS
    from tests.test_cosinet import synthetic as cosinet_synthetic
    from tests.test_cosinet import tiny

    kv = KeyedVectors(8)
    kv.add_vectors(COSINET_WORDS, np.random.default_rng(0).normal(size=(len(COSINET_WORDS), 8)).astype(np.float32))
    X, y = cosinet_synthetic(24)
    frame = X.assign(label=y).sort_values(["qid", "position"], kind="stable").reset_index(drop=True)
    frame.to_parquet(tmp_path / "train.parquet", row_group_size=16)
    streamed, in_memory = tiny(kv, loss="listwise"), tiny(kv, loss="listwise")
    for X_chunk, y_chunk in load_parquet(tmp_path / "train.parquet", chunksize=25):
        streamed.partial_fit(X_chunk, y_chunk, total_rows=len(frame))
        rows = X_chunk.index.to_numpy()
        in_memory.partial_fit(frame.drop(columns="label").iloc[rows], frame["label"].to_numpy()[rows], total_rows=len(frame))
    assert streamed._train_state.rows_done == len(frame)
    for key, value in in_memory.module_.state_dict().items():
        assert torch.equal(value, streamed.module_.state_dict()[key]), key
    np.testing.assert_array_equal(streamed.vocabulary_, in_memory.vocabulary_)
    np.testing.assert_allclose(streamed.predict(X), in_memory.predict(X), rtol=0, atol=0)


# ------------------------------------------------------------------------------ chunked reading


def test_parquet_chunks_never_split_a_question_and_group_unsorted_rows(tmp_path):
    rows = asnq_rows(WORDS, 40, seed=2)
    frame = pd.DataFrame(rows, columns=["question", "candidate", "label"])
    frame.insert(0, "qid", pd.factorize(frame["question"])[0])
    # Locally interleaved: every row moves by at most 6 places.
    jitter = np.argsort(np.arange(len(frame)) + np.random.default_rng(0).uniform(0, 6, len(frame)), kind="stable")
    unsorted = frame.iloc[jitter].reset_index(drop=True)
    unsorted.to_parquet(tmp_path / "unsorted.parquet", row_group_size=9)
    frame.to_parquet(tmp_path / "sorted.parquet", row_group_size=9)
    with pytest.raises(ValueError, match=r"appears again.*Sort the data by question.*larger window"):
        list(load_parquet(tmp_path / "unsorted.parquet", chunksize=30))
    for name, window in (("sorted", 0), ("unsorted", 12)):
        chunks = list(load_parquet(tmp_path / f"{name}.parquet", chunksize=30, window=window))
        assert_whole_questions(chunks, frame)
        assert len(chunks) > 3 and max(len(X) for X, _ in chunks) <= 30 + 12
        joined = pd.concat([X for X, _ in chunks]).sort_index()
        source = frame if name == "sorted" else unsorted
        assert joined.index.tolist() == list(range(len(frame)))
        assert joined["candidate"].tolist() == source["candidate"].tolist()
    X, y = load_parquet(tmp_path / "sorted.parquet")
    assert len(X) == len(frame) and "label" not in X.columns
    with pytest.raises(ValueError, match="label=None"):
        load_parquet(tmp_path / "sorted.parquet", label="relevance")
    assert load_parquet(tmp_path / "sorted.parquet", label=None)[1] is None


# ------------------------------------------------------------------------------ scoring


@pytest.fixture
def asnq_file(tmp_path):
    return write_asnq(tmp_path / "score.tsv", asnq_rows(WORDS, 60, seed=3))


def read_scores(folder):
    return pd.read_parquet(folder).sort_values("row").reset_index(drop=True)


def test_cli_predict_one_score_per_row_as_in_memory(asnq_file, tmp_path, capsys):
    model = WordOverlapRanker()
    joblib.dump(model, tmp_path / "wo.joblib")
    out = tmp_path / "scores.parquet"
    command = ["predict", "--model", str(tmp_path / "wo.joblib"), "--allow-pickle", "--input", str(asnq_file),
               "--output", str(out), "--quiet"]
    assert main([*command, "--chunksize", "50"]) == 0
    assert "rows in" in capsys.readouterr().err
    X, _ = load_asnq(asnq_file)
    scores = read_scores(out)
    assert scores["row"].tolist() == list(range(len(X)))
    np.testing.assert_allclose(scores["score"], model.predict(X), rtol=0, atol=1e-12)
    np.testing.assert_array_equal(scores["rank"], model.predict_rank(X))
    np.testing.assert_array_equal(scores["qid"], X["qid"])
    assert len(list(out.glob("part-*.parquet"))) > 3
    # A finished run is not redone; another chunk size is another run.
    assert main([*command, "--chunksize", "50"]) == 0
    assert "from an earlier run" in capsys.readouterr().err
    assert main([*command, "--chunksize", "70"]) == 2
    assert "different chunksize" in capsys.readouterr().err


def test_predict_file_resumes_after_an_interruption_without_duplicates(asnq_file, tmp_path):
    out = tmp_path / "scores.parquet"
    with pytest.raises(KeyboardInterrupt):
        predict_file(InterruptingRanker(stop_at=2), asnq_file, out, chunksize=40, progress=False)
    assert len(list(out.glob("part-*.parquet"))) == 2
    (out / ".part-00002.parquet.tmp").write_bytes(b"half a part")  # as if killed while writing
    summary = predict_file(WordOverlapRanker(), asnq_file, out, chunksize=40, progress=False)
    assert summary["parts_skipped"] == 2 and summary["parts"] > 4
    X, _ = load_asnq(asnq_file)
    scores = read_scores(out)
    assert scores["row"].tolist() == list(range(len(X)))
    np.testing.assert_allclose(scores["score"], WordOverlapRanker().predict(X), rtol=0, atol=1e-12)


@pytest.mark.slow
def test_cli_predict_killed_and_restarted_gives_complete_output(asnq_file, tmp_path):
    joblib.dump(scale_helpers.SlowRanker(delay=0.3), tmp_path / "slow.joblib")
    out = tmp_path / "scores.parquet"
    command = [sys.executable, "-m", "as2rank", "predict", "--model", str(tmp_path / "slow.joblib"), "--allow-pickle",
               "--input", str(asnq_file), "--output", str(out), "--chunksize", "20", "--quiet"]
    process = subprocess.Popen(command, cwd=ROOT, env=env(), stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while len(list(out.glob("part-*.parquet"))) < 3 and process.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    written = len(list(out.glob("part-*.parquet")))
    assert process.returncode == -signal.SIGKILL and 3 <= written
    done = subprocess.run(command, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"{written} of them from an earlier run" in done.stderr
    X, _ = load_asnq(asnq_file)
    scores = read_scores(out)
    assert scores["row"].tolist() == list(range(len(X)))  # every row once
    np.testing.assert_allclose(scores["score"], WordOverlapRanker().predict(X), rtol=0, atol=1e-12)


def test_cli_predict_errors(asnq_file, tmp_path, capsys):
    joblib.dump(WordOverlapRanker(), tmp_path / "wo.joblib")
    rows = asnq_rows(WORDS, 5)
    unsorted = write_asnq(tmp_path / "unsorted.tsv", rows + [rows[0]])
    args = ["predict", "--model", str(tmp_path / "wo.joblib"), "--allow-pickle", "--output", str(tmp_path / "o"),
            "--quiet"]
    assert main([*args, "--input", str(unsorted)]) == 2
    assert "appears again" in capsys.readouterr().err
    assert main([*args, "--input", str(tmp_path / "missing.tsv")]) == 2
    assert "No input" in capsys.readouterr().err
    assert main(["predict", "--model", str(tmp_path / "none.joblib"), "--allow-pickle", "--input", str(asnq_file),
                 "--output", str(tmp_path / "p"), "--quiet"]) == 2


def test_chunked_scoring_of_a_neural_model_matches_in_memory(tokenizer, asnq_file, tmp_path):
    X, y = load_asnq(asnq_file)
    model = small(TransformerRanker, "bert", tokenizer, num_layers=1, n_threads=1).fit(X, y)
    predict_file(model, asnq_file, tmp_path / "s", chunksize=64, progress=False)
    scores = read_scores(tmp_path / "s")
    np.testing.assert_allclose(scores["score"], model.predict(X), rtol=0, atol=1e-5)
    np.testing.assert_array_equal(scores["rank"], model.predict_rank(X))


@pytest.mark.slow
def test_predict_dask_partitions_by_question_and_ships_the_model_once_per_worker(asnq_file, dask_client):
    import dask.dataframe as dd

    X, _ = load_asnq(asnq_file)
    X = X.assign(question=X["question"].astype(str))
    shuffled = X.drop(columns="position").sample(frac=1.0, random_state=0)  # questions spread over partitions
    model = scale_helpers.CountingRanker()
    result = predict_dask(model, dd.from_pandas(shuffled, npartitions=5)).compute()
    reference = score_frame(model, shuffled.sort_values("qid", kind="stable"))  # in memory, the same frame
    result = result.loc[reference.index]
    np.testing.assert_allclose(result["score"], reference["score"], rtol=0, atol=1e-12)
    np.testing.assert_array_equal(result["rank"], reference["rank"])
    loads = dask_client.run(lambda: __import__("tests.scale_helpers", fromlist=["LOADS"]).LOADS)
    assert all(count <= 1 for count in loads.values()) and sum(loads.values()) >= 1, loads
