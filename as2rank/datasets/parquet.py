"""Grouped-candidate tables in Parquet (a file, a directory or a list of files), read whole or as a stream of
whole questions on pyarrow datasets."""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np
import pandas as pd

__all__ = ["load_parquet", "group_stream"]


def load_parquet(path, chunksize=None, *, label="label", columns=None, window=0):
    """Load a grouped-candidate table stored as Parquet, whole or as ``(X, y)`` chunks of whole questions.

    Parameters
    ----------
    path : str, os.PathLike or list of them
        A Parquet file, a directory of Parquet files (any ``pyarrow.dataset`` layout, e.g. written by
        Spark, Dask or ``pandas.DataFrame.to_parquet(partition_cols=...)``), or a list of files. Columns:
        ``qid``, ``question``, ``candidate``, optionally ``position``, ``doc_id``, ... and the label column.
    chunksize : int, default=None
        ``None`` returns the whole table. An integer returns an iterator of chunks of at most
        ``chunksize`` rows that never split a question (a question larger than ``chunksize`` forms a chunk
        of its own). Rows are read and decoded ``chunksize`` at a time, whatever the size of the file's row
        groups, so memory follows ``chunksize + window``, not the table.
    label : str or None, default="label"
        Column of the relevance labels, returned as ``y``; ``None`` reads no labels (``y`` is ``None``),
        for scoring.
    columns : list of str, default=None
        Columns to read besides ``label``; ``None`` reads them all.
    window : int, default=0
        How far apart, in rows, two rows of one question may be in a streamed table. ``0``: the rows of a
        question must be contiguous, as in a table sorted by question. A larger value groups a table whose
        questions are interleaved locally (e.g. written by parallel writers) on the fly: a question is
        complete once ``window`` rows have followed its last row, and up to about ``window`` rows wait in
        memory. Unused when ``chunksize`` is ``None`` (a whole table may be in any order).

    Returns
    -------
    X : pandas.DataFrame
        The columns read, indexed by row number in the table (0-based, continuing across chunks). Inside a
        streamed chunk the rows of each question are contiguous, in table order.
    y : ndarray or None
        The label column.
        When ``chunksize`` is given, an iterator of such ``(X, y)`` pairs instead.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    ValueError
        If a required column is missing, the table is empty, or (while iterating) two rows of a question
        are more than ``window`` rows apart: sort the table by question first, or raise ``window``.
    ImportError
        Without pyarrow.
    """
    try:
        import pyarrow.dataset as ds
    except ImportError as exc:  # pragma: no cover - pyarrow ships with the models and distributed extras
        raise ImportError("Reading Parquet needs pyarrow: pip install 'as2rank[distributed]'.") from exc

    paths = [os.fspath(p) for p in path] if isinstance(path, (list, tuple)) else [os.fspath(path)]
    missing = [p for p in paths if not os.path.exists(p)]
    if missing:
        raise FileNotFoundError(f"No Parquet data at {missing[0]!r}.")
    dataset = ds.dataset(paths if len(paths) > 1 else paths[0], format="parquet")
    names = dataset.schema.names
    wanted = names if columns is None else list(dict.fromkeys([*columns, *([label] if label else [])]))
    absent = [c for c in ("qid", "question", "candidate", *([label] if label else []), *wanted) if c not in names]
    if absent:
        hint = " (pass label=None to read a table without labels)" if label in absent else ""
        raise ValueError(f"{paths[0]!r} has no column(s) {sorted(set(absent))}{hint}; it has {names}.")
    if chunksize is None:
        frame = dataset.to_table(columns=wanted).to_pandas()
        if frame.empty:
            raise ValueError(f"{paths[0]!r} is empty: no rows.")
        return _split_label(frame, label)
    if isinstance(chunksize, bool) or not isinstance(chunksize, (int, np.integer)) or chunksize < 1:
        raise ValueError(f"chunksize must be None or a positive integer, got {chunksize!r}.")
    if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 0:
        raise ValueError(f"window must be a non-negative integer, got {window!r}.")
    return (_split_label(X, label) for X in group_stream(_blocks(dataset, wanted, int(chunksize)), int(chunksize), int(window), paths[0]))


def _split_label(frame: pd.DataFrame, label):
    if label is None:
        return frame, None
    return frame.drop(columns=label), frame[label].to_numpy()


#: Bytes read at a time from a column chunk while streaming a Parquet file, instead of the whole chunk.
_READ_BUFFER = 1 << 18


def _file_batches(dataset, columns, rows: int):
    """Record batches of at most ``rows`` rows of every file of ``dataset`` in order, decoded ``rows`` at a time.

    Each file goes through :meth:`pyarrow.parquet.ParquetFile.iter_batches`, which decodes ``rows`` rows of a
    row group at a time and reads its pages through a small buffer; the dataset scanner would decode whole
    row groups (``DataFrame.to_parquet`` writes up to a million rows in one) and read ahead several of them.
    Batches get the dataset's schema: a column missing from a file is null there, as the scanner makes it.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([dataset.schema.field(c) for c in columns], metadata=dataset.schema.metadata)
    for fragment in dataset.get_fragments():
        with pq.ParquetFile(
            fragment.path, filesystem=fragment.filesystem, buffer_size=_READ_BUFFER, pre_buffer=False
        ) as reader:
            present = [c for c in columns if c in reader.schema_arrow.names]
            for batch in reader.iter_batches(batch_size=rows, columns=present):
                arrays = []
                for field in schema:
                    if field.name in present:
                        array = batch.column(field.name)
                    else:
                        array = pa.nulls(batch.num_rows, type=field.type)
                    arrays.append(array if array.type == field.type else array.cast(field.type))
                yield pa.RecordBatch.from_arrays(arrays, schema=schema)


def _blocks(dataset, columns, rows: int) -> Iterator[pd.DataFrame]:
    """Consecutive blocks of ``rows`` rows (the last one shorter), indexed by row number.

    Fewer than ``2 * rows`` rows of the file are held here at a time, whatever the size of its row groups.
    """
    import pyarrow as pa

    pending, n_pending, start = [], 0, 0
    for batch in _file_batches(dataset, columns, rows):
        pending.append(batch)
        n_pending += batch.num_rows
        while n_pending >= rows:
            table = pa.Table.from_batches(pending)
            yield _frame(table.slice(0, rows), start)
            start += rows
            rest = table.slice(rows)
            pending, n_pending = rest.to_batches(), rest.num_rows
    if n_pending:
        yield _frame(pa.Table.from_batches(pending), start)


def _frame(table, start: int) -> pd.DataFrame:
    block = table.to_pandas()
    block.index = pd.RangeIndex(start, start + len(block))
    return block


def group_stream(blocks, chunksize: int, window: int, source: str = "the data") -> Iterator[pd.DataFrame]:
    """Regroup consecutive blocks of rows into chunks of whole questions, with a bounded buffer.

    Parameters
    ----------
    blocks : iterable of pandas.DataFrame
        Consecutive rows with a ``qid`` column, indexed by row number.
    chunksize : int
        Rows per chunk (a question is never split, so a chunk may be smaller, or larger when one question is).
    window : int
        Largest number of other rows allowed between two rows of one question; a question is complete once
        ``window`` rows have followed its last row.
    source : str
        Name of the data, for messages.

    Yields
    ------
    pandas.DataFrame
        Chunks whose questions are whole and contiguous, rows in table order inside a question, questions
        in order of first appearance.

    Raises
    ------
    ValueError
        When two rows of a question are more than ``window`` rows apart (also across chunks already emitted),
        or no row was read.
    """
    emitted = np.empty(0, dtype=np.uint64)  # sorted hashes of the qids of emitted questions
    buffer = None
    n_read = 0
    for block in blocks:
        if len(block) == 0:
            continue
        hashes = pd.util.hash_pandas_object(block["qid"], index=False).to_numpy()
        if len(emitted):
            at = np.minimum(np.searchsorted(emitted, hashes), len(emitted) - 1)
            again = emitted[at] == hashes
            if again.any():
                row = int(block.index[np.flatnonzero(again)[0]])
                raise ValueError(_apart_message(source, block["qid"].iloc[np.flatnonzero(again)[0]], None, row, window))
        buffer = block if buffer is None else pd.concat([buffer, block])
        n_read += len(block)
        codes, _ = pd.factorize(buffer["qid"], sort=False)
        rows = buffer.index.to_numpy()
        # Gaps between consecutive rows of each question: more than `window` other rows is an error.
        order = np.lexsort((rows, codes))
        same = codes[order][1:] == codes[order][:-1]
        gaps = rows[order][1:] - rows[order][:-1] - 1
        bad = np.flatnonzero(same & (gaps > window))
        if len(bad):
            first, second = rows[order][bad[0]], rows[order][bad[0] + 1]
            raise ValueError(_apart_message(source, buffer["qid"].iloc[order[bad[0]]], int(first), int(second), window))
        last = np.zeros(codes.max() + 1, dtype=np.int64)
        np.maximum.at(last, codes, rows)
        closed = last < n_read - 1 - window
        ready, buffer, hashes_out = _take_chunks(buffer, codes, closed, chunksize, final=False)
        emitted = _record(emitted, hashes_out)
        yield from ready
    if buffer is None:
        raise ValueError(f"{source!r} is empty: no rows.")
    if len(buffer):
        codes, _ = pd.factorize(buffer["qid"], sort=False)
        ready, _, _ = _take_chunks(buffer, codes, np.ones(codes.max() + 1, dtype=bool), chunksize, final=True)
        yield from ready


def _take_chunks(buffer, codes, closed, chunksize, final):
    """Cut the complete questions of ``buffer`` into chunks; returns (chunks, the rest, hashes of the emitted qids)."""
    sizes = np.bincount(codes, minlength=len(closed))
    complete = np.flatnonzero(closed)  # in order of first appearance
    available = int(sizes[complete].sum())
    if available == 0 or (available < chunksize and not final):
        return [], buffer, None
    # Greedy cut: each chunk takes the following questions while they fit in chunksize (at least one).
    bounds, used, start = [], 0, 0
    cum = np.cumsum(sizes[complete])
    while start < len(complete) and (final or available - used >= chunksize):
        end = max(start + 1, int(np.searchsorted(cum, used + chunksize, side="right")))
        bounds.append((start, end))
        used = int(cum[end - 1])
        start = end
    taken = complete[:start]
    chunk_of = np.full(len(closed), -1)
    for i, (a, b) in enumerate(bounds):
        chunk_of[complete[a:b]] = i
    row_chunk = chunk_of[codes]
    # Questions contiguous (in order of first appearance), rows in table order inside each.
    rank = np.empty(len(closed), dtype=np.int64)
    rank[complete] = np.arange(len(complete))
    chunks = []
    for i in range(len(bounds)):
        members = np.flatnonzero(row_chunk == i)
        members = members[np.lexsort((buffer.index.to_numpy()[members], rank[codes[members]]))]
        chunks.append(buffer.iloc[members])
    rest = buffer.iloc[np.flatnonzero(row_chunk < 0)]
    taken_rows = np.isin(codes, taken)
    hashes = pd.util.hash_pandas_object(buffer["qid"].iloc[np.flatnonzero(taken_rows)], index=False).to_numpy()
    return chunks, rest, hashes


def _record(emitted, hashes):
    return emitted if hashes is None or not len(hashes) else np.union1d(emitted, hashes)


def _apart_message(source, qid, first, second, window):
    value = qid.item() if isinstance(qid, np.generic) else qid
    where = f"rows {first} and {second}" if first is not None else f"row {second}, after its rows were complete"
    return (
        f"{source!r}: question {value!r} appears again at {where}; the rows of a question must be at most "
        f"window={window} rows apart (0: contiguous). Sort the data by question first (e.g. "
        "pyarrow.dataset / pandas sort_values('qid', kind='stable')), or pass a larger window."
    )
