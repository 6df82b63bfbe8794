"""Streaming a Parquet table whose row groups are larger than the chunk (issue 22): ``DataFrame.to_parquet``
writes up to a million rows in one row group, and the stream must still decode ``chunksize`` rows at a time,
never split a question, and score every row as reading the table whole does."""

import numpy as np
import pandas as pd
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from as2rank.lexical.baselines import OverlapRankRanker  # noqa: E402
from as2rank.datasets import load_parquet  # noqa: E402
from as2rank.app.scale import predict_file, score_frame  # noqa: E402
from tests.utils import assert_whole_questions  # noqa: E402

WORDS = np.array([f"w{i}" for i in range(500)], dtype=object)


def grouped(n_rows, seed=0, words=20):
    """Random grouped-candidate rows, 1 to 30 candidates a question, rows of a question contiguous."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 31, n_rows)
    sizes = sizes[: np.searchsorted(np.cumsum(sizes), n_rows)]
    sizes = np.append(sizes, n_rows - sizes.sum())
    qid = np.repeat(np.arange(len(sizes)), sizes)
    questions = np.array([" ".join(w) + " ?" for w in WORDS[rng.integers(0, len(WORDS), (len(sizes), 6))]])
    return pd.DataFrame(
        {
            "qid": qid,
            "question": questions[qid],
            "candidate": [" ".join(w) + " ." for w in WORDS[rng.integers(0, len(WORDS), (n_rows, words))]],
            "label": rng.integers(0, 2, n_rows),
        }
    )


def test_one_row_group_is_decoded_chunksize_rows_at_a_time(tmp_path):
    frame = grouped(80_000, words=40)
    path = tmp_path / "one.parquet"
    frame.to_parquet(path)
    assert pq.ParquetFile(path).metadata.num_row_groups == 1
    decoded = pa.Table.from_pandas(frame).nbytes
    base = pa.total_allocated_bytes()
    peak, sizes, qids, rows = 0, [], [], []
    for X, y in load_parquet(path, chunksize=1000):
        peak = max(peak, pa.total_allocated_bytes() - base)
        sizes.append(len(X))
        qids.append(X["qid"].unique())
        rows.append(X.index.to_numpy())
        assert len(y) == len(X)
        del X, y
    # The Arrow memory held while the stream runs is a few chunks' worth, not the row group.
    assert peak < decoded / 3, (peak, decoded)
    assert max(sizes) <= 1000 and len(sizes) >= 40
    all_qids = np.concatenate(qids)
    assert len(all_qids) == frame["qid"].nunique()  # no question in two chunks
    np.testing.assert_array_equal(np.sort(np.concatenate(rows)), np.arange(len(frame)))


@pytest.mark.parametrize("layout", ["file", "directory", "interleaved"])
def test_streamed_chunks_and_scores_equal_reading_whole(tmp_path, layout):
    frame = grouped(6_000, seed=1)
    window = 0
    if layout == "file":
        path = tmp_path / "one.parquet"
        frame.to_parquet(path)
    elif layout == "directory":
        path = tmp_path / "parts"
        path.mkdir()
        cut = int(np.flatnonzero(np.diff(frame["qid"]))[len(frame) // 600] + 1)  # a question boundary
        frame.iloc[:cut].to_parquet(path / "a.parquet", index=False)
        frame.iloc[cut:].to_parquet(path / "b.parquet", index=False)
    else:
        # Every row moved by at most 6 places; one row group.
        rng = np.random.default_rng(0)
        frame = frame.iloc[np.argsort(np.arange(len(frame)) + rng.uniform(0, 6, len(frame)), kind="stable")]
        frame = frame.reset_index(drop=True)
        path = tmp_path / "interleaved.parquet"
        frame.to_parquet(path)
        window = 12
    chunksize = 500
    chunks = list(load_parquet(path, chunksize=chunksize, window=window))
    assert max(len(X) for X, _ in chunks) <= chunksize  # no question is larger than a chunk here
    assert_whole_questions(chunks, frame)
    for X, y in chunks:
        np.testing.assert_array_equal(y, frame["label"].to_numpy()[X.index])
    joined = pd.concat([X for X, _ in chunks]).sort_index()
    pd.testing.assert_frame_equal(joined, frame.drop(columns="label"), check_index_type=False)

    model = OverlapRankRanker()
    summary = predict_file(model, path, tmp_path / "scores", chunksize=chunksize, window=window, progress=False)
    assert summary["rows"] == len(frame) and summary["parts"] == len(chunks)
    scores = pd.read_parquet(tmp_path / "scores").sort_values("row").reset_index(drop=True)
    whole, _ = load_parquet(path)
    assert whole.index.tolist() == list(range(len(frame)))
    expected = score_frame(model, whole)
    assert scores["row"].tolist() == list(range(len(frame)))
    np.testing.assert_array_equal(scores["score"], expected["score"])
    np.testing.assert_array_equal(scores["rank"], expected["rank"])
