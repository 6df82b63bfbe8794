"""Scoring data larger than memory: stream a file through a fitted model (the ``as2rank predict`` command), or
score a Dask DataFrame on a cluster.

:func:`predict_file` reads an ASNQ TSV or a grouped-candidate Parquet table in chunks of whole questions,
scores each chunk and writes one Parquet part per chunk, so memory follows the chunk size and an
interrupted run resumes where it stopped. :func:`predict_dask` scores a Dask DataFrame partition by
partition after making sure no question spans two partitions.
"""

from __future__ import annotations

import json
import re
import time
from numbers import Integral
from pathlib import Path

import numpy as np
import pandas as pd

from ..base import check_scores, rank_tiebreak
from ..data import REQUIRED_COLUMNS, GroupIndex, require_columns
from ..files import atomic_file
from ..params import Interval, check_param
from .guards import is_failure as _is_failure, one_line as _one_line

__all__ = ["PREDICT_FILE_CONSTRAINTS", "count_rows", "iter_chunks", "load_model", "predict_dask", "predict_file",
           "score_frame"]

#: Accepted values of :func:`predict_file`'s sizes (the command line checks its flags against the same table).
PREDICT_FILE_CONSTRAINTS = {"chunksize": [Interval(Integral, 1, None)], "window": [Interval(Integral, 0, None)]}

_MANIFEST = "_as2rank_predict.json"
#: The name of a part that :func:`predict_file` writes (an earlier run's, when its manifest lists it).
_PART = re.compile(r"part-\d{5}\.parquet")
_PARQUET_SUFFIXES = (".parquet", ".pq")


def _is_parquet(path: Path) -> bool:
    return path.is_dir() or path.suffix.lower() in _PARQUET_SUFFIXES


def iter_chunks(path, chunksize: int, window: int = 0, columns=None):
    """``(X, y)`` chunks of whole questions of a file, by its format.

    Parameters
    ----------
    path : str or os.PathLike
        A Parquet file or directory in the grouped-candidate format (``.parquet``/``.pq`` or a directory;
        read by :func:`~as2rank.datasets.load_parquet`, labels not needed), or anything else as an ASNQ TSV
        (:func:`~as2rank.datasets.load_asnq`, rows of a question contiguous).
    chunksize : int
    window : int, default=0
        Parquet only: how far apart the rows of a question may be (see ``load_parquet``).
    columns : dict, default=None
        The file is a user's table (CSV, TSV, Parquet or JSON Lines with a header), read whole by
        :func:`~as2rank.datasets.read_pairs` with these keyword arguments (``question``, ``candidate``,
        ``qid``, ``position``; labels are not read), then cut into chunks.

    Returns
    -------
    iterator of (pandas.DataFrame, ndarray or None)
        Chunks indexed by row number in the file.
    """
    from ..datasets import load_asnq, load_parquet, read_pairs

    path = Path(path)
    if columns is not None:
        return _frame_chunks(read_pairs(path, **columns, label=None)[0], chunksize)
    if _is_parquet(path):
        return load_parquet(path, chunksize, label=None, window=window)
    if window:
        raise ValueError("window applies to Parquet input; an ASNQ TSV must have the rows of a question contiguous.")
    return load_asnq(path, chunksize)


def _frame_chunks(X, chunksize: int):
    """``(X, None)`` chunks of about ``chunksize`` rows of a frame whose questions are contiguous, cut at the
    first question that starts past each multiple of ``chunksize``."""
    codes = pd.factorize(X["qid"])[0]
    starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])
    block = starts // chunksize
    bounds = np.r_[starts[np.r_[True, block[1:] != block[:-1]]], len(X)]
    for start, stop in zip(bounds[:-1], bounds[1:]):
        yield X.iloc[start:stop], None


def count_rows(path) -> int:
    """Rows of a Parquet table (from its metadata) or lines of a TSV (read in 16 MiB blocks, without parsing).

    For the progress bar of :func:`predict_file`, and the ``total_rows`` of ``partial_fit``.

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    int
    """
    path = Path(path)
    if _is_parquet(path):
        import pyarrow.dataset as ds

        return ds.dataset(path, format="parquet").count_rows()
    count, last = 0, b"\n"
    with open(path, "rb") as fh:
        while block := fh.read(1 << 24):
            count += block.count(b"\n")
            last = block[-1:]
    return count + (last != b"\n")


def load_model(path, *, allow_pickle=False):
    """A fitted model: a ``save_pretrained`` directory (pickle-free), or, if the caller allows it, a pickle.

    The one way the command line loads a model, through :func:`as2rank.load <as2rank.persistence.load>`, which
    decides from the path's own entry, before a byte of it is read: a directory is loaded pickle-free (only
    as2rank classes and allow-listed scikit-learn estimators); a file named ``.joblib``, ``.pkl`` or ``.pickle`` is
    unpickled only with ``allow_pickle=True`` (``--allow-pickle``), since unpickling runs whatever code it holds;
    anything else (a pickle renamed ``model.safetensors``, ``model.json`` or ``model``, a link) is refused. An
    unpickled object must be a fitted estimator.

    Parameters
    ----------
    path : str or os.PathLike
    allow_pickle : bool, default=False
        Open a pickle file (the caller trusts its source).

    Returns
    -------
    estimator

    Raises
    ------
    FileNotFoundError
        If nothing is at ``path``.
    ValueError
        With a one-line message naming the path: a file that is not a pickle by its name, a pickle without
        ``allow_pickle``, or anything that is not a fitted model (random bytes, a truncated or foreign pickle, an
        object without ``predict``, a damaged directory, ...).
    """
    from ..persistence import check_model_path, load

    path = Path(path)
    if check_model_path(path, allow_pickle=allow_pickle) == "directory":
        return _loaded(path, lambda: load(path))  # every damage is a one-line ValueError there
    expected = "expected a save_pretrained directory or a joblib file of a fitted estimator"
    try:
        model = _loaded(path, lambda: load(path, allow_pickle=True))
    except ValueError as exc:  # a damaged or foreign file fails in many ways (EOFError, UnpicklingError, ...)
        reason = _one_line(exc, 300).rstrip(".")
        reason = f"it {reason[len(str(path)) + 1:]}" if reason.startswith(f"{path} ") else reason
        raise ValueError(f"{path} is not a fitted as2rank model: {reason}; {expected}.") from None
    reason = None
    if not hasattr(model, "predict"):
        reason = f"it holds a {type(model).__name__}, not an estimator with predict"
    else:
        from sklearn.exceptions import NotFittedError
        from sklearn.utils.validation import check_is_fitted

        try:
            check_is_fitted(model)
        except NotFittedError:
            reason = f"it holds an unfitted {type(model).__name__}"
        except TypeError:  # not a scikit-learn estimator, but it has predict
            pass
    if reason is not None:
        raise ValueError(f"{path} is not a fitted as2rank model: {reason}; {expected}.")
    return model


def _loaded(path, load_it):
    """``load_it()``, with what a native library raises outside the ``Exception`` tree (a Rust panic of tokenizers or
    safetensors is a ``BaseException``), or any other ``Exception`` but a ValueError, as a one-line ValueError naming
    the model; Ctrl-C and exits pass through."""
    try:
        return load_it()
    except (ValueError, FileNotFoundError):
        raise
    except BaseException as exc:
        if not _is_failure(exc):
            raise
        raise ValueError(f"{path} is not a loadable as2rank model ({type(exc).__name__}: {_one_line(exc, 300)}).") \
            from None


def score_frame(estimator, X: pd.DataFrame) -> pd.DataFrame:
    """Scores and 1-based ranks inside each question of a frame holding whole questions.

    Parameters
    ----------
    estimator : fitted estimator with ``predict``
    X : pandas.DataFrame
        Grouped-candidate frame; every question's rows all in it (a partition of whole questions).

    Returns
    -------
    pandas.DataFrame
        Columns ``score`` (float64) and ``rank`` (int64; equal scores ordered as :func:`~as2rank.base.rank` orders
        them), indexed like ``X``.
    """
    if len(X) == 0:
        return pd.DataFrame({"score": np.empty(0), "rank": np.empty(0, dtype=np.int64)}, index=X.index)
    scores = check_scores(estimator.predict(X), len(X))
    ranks = GroupIndex.from_frame(X).rank(scores, rank_tiebreak(X))
    return pd.DataFrame({"score": scores, "rank": ranks.astype(np.int64)}, index=X.index)


def predict_file(estimator, input, output, *, chunksize=100_000, window=0, model_id=None, progress=True, overwrite=False,
                 columns=None, table=None):
    """Score every row of a file in chunks of whole questions, writing one Parquet part per chunk.

    The output is a directory (``scores.parquet/part-00000.parquet``, ...) that ``pandas.read_parquet`` and
    pyarrow read as one table with one row per input row: ``row`` (0-based row number in the input),
    ``qid``, ``score`` and ``rank`` (1-based inside the question). Parts are written atomically (a temporary
    name, then a rename). Chunks are a deterministic function of the input and ``chunksize``, so a run
    that was interrupted resumes at the first missing part and rewrites nothing twice: the output ends
    with every row exactly once. A manifest (``_as2rank_predict.json``, ignored by Parquet readers) records
    the input, ``chunksize``, ``window`` and ``model_id`` so that a resumed run cannot mix two runs, and the name
    of every part before it is written: only those parts are ever skipped, replaced or deleted, so that a file of
    the user's in the directory (another table's parts) is never taken for a part or removed.

    Parameters
    ----------
    estimator : fitted estimator with ``predict``
    input : str or os.PathLike
        ASNQ TSV, or Parquet file/directory (see :func:`iter_chunks`).
    output : str or os.PathLike
        Output directory.
    chunksize : int, default=100_000
        Rows per chunk (about; a question is never split): memory follows it.
    window : int, default=0
        Parquet input whose questions are locally interleaved: see :func:`~as2rank.datasets.load_parquet`.
    model_id : str, default=None
        Identity of the model (e.g. its path and modification time), checked when resuming.
    progress : bool, default=True
        A tqdm progress bar over the input rows.
    overwrite : bool, default=False
        Start over, deleting the parts that the manifest lists (an earlier run's), instead of resuming it.
    columns : dict, default=None
        The input is a user's table, read whole under these column names (see :func:`iter_chunks`); ``row``
        is then its 0-based data row.
    table : pandas.DataFrame, default=None
        With ``columns``: the table already read from ``input`` under them (``read_pairs``'s ``X``), which the
        command line reads first to check it; it is not read again.

    Returns
    -------
    dict
        ``rows`` (rows in the output), ``parts``, ``parts_skipped`` (already written by an interrupted run),
        ``seconds``, ``rows_per_second`` (rows scored in this run per second).

    Raises
    ------
    ValueError
        If ``output`` holds the output of a different run (another input, chunk size, window or model) and
        ``overwrite`` is False, or is a file, or holds files named like parts that its manifest does not list
        (even with ``overwrite``: they are not this command's to replace).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    for name, value in (("chunksize", chunksize), ("window", window)):
        check_param(name, value, PREDICT_FILE_CONSTRAINTS[name])
    input, output = Path(input), Path(output)
    if not input.exists():
        raise FileNotFoundError(f"No input at {str(input)!r}.")
    if columns is not None and input.is_dir():
        raise ValueError(f"{str(input)!r} is a directory, not a table file; give the path of the table itself.")
    stat = input.stat()
    settings = {
        "input": str(input.resolve()),
        "input_bytes": stat.st_size,
        "input_mtime": stat.st_mtime,
        "chunksize": int(chunksize),
        "window": int(window),
        "model": model_id,
        **({} if columns is None else {"columns": dict(columns)}),
    }
    manifest = output / _MANIFEST
    if output.exists() and not output.is_dir():
        raise ValueError(f"--output {str(output)!r} is a file; the output is a directory of Parquet parts.")
    previous = _read_manifest(manifest) if output.is_dir() else None
    ours = set() if previous is None else _listed_parts(previous, output)
    # Parts that Parquet readers would read with ours (hidden names, such as a killed write's temporary, they skip).
    foreign = sorted(p.name for p in output.glob("part-*.parquet") if p.name not in ours) if output.is_dir() else []
    if foreign:
        raise ValueError(
            f"{str(output)!r} holds {foreign[0]!r}" + (f" and {len(foreign) - 1} more" if len(foreign) > 1 else "")
            + ", which as2rank predict did not write (no manifest there lists it): it is neither replaced nor deleted, "
            "even with overwrite=True (--overwrite). Choose another output directory, or remove them yourself."
        )
    if previous is not None and overwrite:
        for name in sorted(ours):
            (output / name).unlink(missing_ok=True)
        manifest.unlink()
        previous, ours = None, set()
    if previous is not None and previous["settings"] != settings:
        changed = [k for k in settings if previous["settings"].get(k) != settings[k]]
        raise ValueError(
            f"{str(output)!r} holds the output of another run (different {', '.join(changed)}); pass "
            "overwrite=True (--overwrite) to start over, or choose another output."
        )
    output.mkdir(parents=True, exist_ok=True)
    _write_json(manifest, {"settings": settings, "complete": False, "parts_written": sorted(ours)})

    total = count_rows(input) if progress and columns is None else None if table is None else len(table)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=total, desc="as2rank predict", unit="row", unit_scale=True)
    start = time.perf_counter()
    rows = parts = skipped = scored = 0
    try:
        chunks = iter_chunks(input, int(chunksize), int(window), columns) if table is None else \
            _frame_chunks(table, int(chunksize))
        for i, (X, _) in enumerate(chunks):
            part = output / f"part-{i:05d}.parquet"
            if part.name in ours and part.exists():
                skipped += 1
            else:
                if part.name not in ours:  # listed before it is written: a part is ours, complete or absent
                    ours.add(part.name)
                    _write_json(manifest, {"settings": settings, "complete": False, "parts_written": sorted(ours)})
                scores = score_frame(estimator, X)
                arrow = pa.table(
                    {
                        "row": pa.array(X.index.to_numpy(np.int64)),
                        "qid": pa.array(X["qid"].to_numpy()),
                        "score": pa.array(scores["score"].to_numpy()),
                        "rank": pa.array(scores["rank"].to_numpy()),
                    }
                )
                with atomic_file(part) as temporary:  # a part is either complete or absent
                    pq.write_table(arrow, temporary)
                scored += len(X)
            rows += len(X)
            parts += 1
            if bar is not None:
                bar.update(len(X))
    finally:
        if bar is not None:
            bar.close()
    stale = sorted(name for name in ours if int(name[5:10]) >= parts and (output / name).exists())
    if stale:
        raise ValueError(f"{str(output)!r} holds parts beyond the {parts} chunks of the input: {stale[0]}.")
    _write_json(manifest, {"settings": settings, "complete": True, "rows": rows, "parts": parts,
                           "parts_written": sorted(ours)})
    seconds = time.perf_counter() - start
    return {
        "rows": rows,
        "parts": parts,
        "parts_skipped": skipped,
        "seconds": seconds,
        "rows_per_second": scored / seconds if seconds > 0 else float("nan"),
    }


def _write_json(path: Path, data: dict) -> None:
    with atomic_file(path) as temporary:
        temporary.write_text(json.dumps(data, indent=2))


def _read_manifest(manifest: Path):
    """The manifest of an earlier run, or None where there is none; one line when it is not one as2rank wrote."""
    if not manifest.exists():
        return None
    try:
        previous = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        previous = exc
    if not isinstance(previous, dict) or not isinstance(previous.get("settings"), dict):
        raise ValueError(f"{str(manifest)!r} is not a manifest that as2rank predict wrote; nothing in its folder is "
                         "replaced or deleted. Choose another output directory.")
    return previous


def _listed_parts(previous: dict, folder: Path) -> set:
    """Names of the parts an earlier run wrote: those its manifest lists; for a manifest written before it listed
    them, the files of the folder named as parts are (``part-00000.parquet``, the pattern of as2rank's alone)."""
    listed = previous.get("parts_written")
    names = listed if isinstance(listed, list) else [p.name for p in folder.iterdir()]
    return {name for name in names if isinstance(name, str) and _PART.fullmatch(name)}


def predict_dask(estimator, ddf, *, partitioned=False):
    """Score a Dask DataFrame in the grouped-candidate format, partition by partition.

    The fitted estimator enters the task graph once, as one task: each worker fetches it when it first
    needs it and keeps it for the partitions it scores (not one copy per partition). Dask's active memory
    manager (on by default, policy ``ReduceReplicas``) may drop a worker's copy while no waiting task there
    needs it, and the worker then fetches it again. Work stealing (on by default) may move the estimator's task
    to another worker after the first received it: a worker unpickles a task when it arrives, so the first
    worker then loads the estimator once more when it fetches it. For a strict one copy per worker, start the
    scheduler with ``distributed.scheduler.active-memory-manager.start: False`` and
    ``distributed.scheduler.work-stealing: False``. Every partition must hold whole
    questions, since scores such as Cosinet's depend on a question's other candidates and ranks are per
    question: unless ``partitioned=True``, the frame is first shuffled by ``qid`` (hash partitioning), after
    adding a ``position`` column (the order of the rows inside their question, which a shuffle would lose)
    when it has none.

    Parameters
    ----------
    estimator : fitted estimator with ``predict``
        It must pickle (every as2rank estimator does, to a CPU state).
    ddf : dask.dataframe.DataFrame
        Columns ``qid``, ``question``, ``candidate`` (and what the model reads).
    partitioned : bool, default=False
        The caller guarantees that no question spans two partitions (e.g. files written one question set
        per file): skip the shuffle.

    Returns
    -------
    dask.dataframe.DataFrame
        Lazy; columns ``score`` (float64) and ``rank`` (int64, 1-based inside the question), with the index
        of ``ddf``'s rows (after the shuffle the row order differs: join on the index).

    Examples
    --------
    >>> import dask.dataframe as dd
    >>> from dask.distributed import Client
    >>> client = Client()                                                    # doctest: +SKIP
    >>> ddf = dd.read_parquet("asnq-dev/")                                   # doctest: +SKIP
    >>> scores = predict_dask(model, ddf).compute()                          # doctest: +SKIP
    """
    import dask

    require_columns(ddf.columns, REQUIRED_COLUMNS,
                    lambda missing: f"ddf is missing the column(s) {missing} of the grouped-candidate format.")
    if not partitioned:
        if "position" not in ddf.columns:
            # The shuffle may reorder a question's rows: remember their order to break ties as in memory, in a
            # column that is not a ``position`` (no model may read the row order as a rank).
            ddf = ddf.assign(**{_ROW_ORDER: ddf.groupby("qid").cumcount()})
        ddf = ddf.shuffle(on="qid")
    model = dask.delayed(estimator, pure=False, traverse=False)
    meta = pd.DataFrame({"score": pd.Series(dtype="float64"), "rank": pd.Series(dtype="int64")}, index=ddf._meta.index)
    return ddf.map_partitions(_score_partition, model, meta=meta)


#: The column in which :func:`predict_dask` keeps the row order of a question without ``position``.
_ROW_ORDER = "_as2rank_row_order"


def _score_partition(X, estimator):
    """:func:`score_frame` with the frame first, as ``map_partitions`` calls it; rows put back in their
    questions' original order first when :func:`predict_dask` recorded it."""
    if _ROW_ORDER not in X.columns:
        return score_frame(estimator, X)
    order = np.argsort(X[_ROW_ORDER].to_numpy(), kind="stable")
    scored = score_frame(estimator, X.iloc[order].drop(columns=_ROW_ORDER))
    return scored.iloc[np.argsort(order, kind="stable")]
