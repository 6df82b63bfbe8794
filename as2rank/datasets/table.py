"""A user's own table of questions, candidate sentences and labels, read into the grouped-candidate format.

:func:`read_pairs` reads CSV, TSV, Parquet, JSON Lines or a DataFrame under the user's column names and
checks it with whole-array operations: every problem is a one-line error that names the column and the data
rows, and nothing is dropped or coerced silently.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pandas as pd

from ..data import check_group_keys, check_X, describe_rows, nonstring_rows, plain_scalar, require_columns

__all__ = ["read_pairs", "table_columns"]

#: File suffix -> format.
_FORMATS = {
    ".csv": "CSV",
    ".tsv": "TSV",
    ".tab": "TSV",
    ".parquet": "Parquet",
    ".pq": "Parquet",
    ".jsonl": "JSON Lines",
    ".ndjson": "JSON Lines",
}
#: Compression suffixes that pandas reads after a text format's suffix (``pairs.csv.gz``).
_COMPRESSIONS = (".gz", ".bz2", ".xz", ".zst", ".zip")
#: Label words of text files, compared lower-cased (numbers equal to 0 or 1 are read as numbers).
_LABEL_WORDS = {"false": 0.0, "true": 1.0}
# dtype=False keeps JSON values as they are; before pandas 3 columns named like dates ("date", "*_at", ...)
# were also parsed unless convert_dates=False (a keyword pandas 3 deprecates).
_JSON_OPTIONS = {"dtype": False, **({} if int(pd.__version__.split(".")[0]) >= 3 else {"convert_dates": False})}


def read_pairs(data, *, question="question", candidate="candidate", label="label", qid=None, position=None):
    """Read a table of (question, candidate, label) rows into ``X, y``, under the table's own column names.

    Parameters
    ----------
    data : str, os.PathLike or pandas.DataFrame
        The table, or the path of a file whose suffix gives its format: ``.csv``; ``.tsv`` or ``.tab``
        (tab-separated, CSV quoting rules); ``.parquet`` or ``.pq``; ``.jsonl`` or ``.ndjson`` (JSON Lines:
        one JSON object per line). A CSV, TSV or JSON Lines file may be compressed (``pairs.csv.gz``). Text
        files are UTF-8 with a header line. Every field of a CSV or TSV is read as the text it is: a
        candidate ``"NA"``, ``"null"`` or ``"0123"`` stays that text.
    question, candidate : str, default="question", "candidate"
        Columns of the question text and of the candidate sentence.
    label : str or None, default="label"
        Column of the 0/1 relevance labels. ``None``, or the default ``"label"`` absent from the table,
        reads no labels (``y`` is None, for scoring); any other name must be a column.
    qid : str, default=None
        Column of the question ids. ``None`` takes the question text as the id: rows with the same question
        text are one question, and ``X["qid"]`` holds that text. Ids are read as text whatever the format, so
        that a table ranks the same as CSV, Parquet or JSON Lines: integer ids become their decimal text
        (``7`` and ``"7"`` in one column are refused as ambiguous), and float ids are refused (``2**53`` and
        ``2**53 + 1`` are one float).
    position : str, default=None
        Column of each candidate's 0-based retrieval (or document) rank inside its question, returned as
        ``X["position"]``. Without one, ``X`` has no ``position`` column and no model reads the row order as
        a rank: RR refuses, WO+RR and the ``reciprocal_rank`` feature ignore the order, Cosinet reads the
        candidates by text (see ``docs/guide/data.md``).

    Returns
    -------
    X : pandas.DataFrame
        Columns ``qid`` (text), ``question``, ``candidate`` and, with ``position``, ``position`` (int64), on a
        fresh ``RangeIndex``: row ``i`` of ``X`` is data row ``i`` of the table (0-based, header not counted).
    y : ndarray of float64 of shape (n_rows,) or None
        The labels as 0.0/1.0.

    Raises
    ------
    ValueError
        One line naming the column and the data rows, when: the suffix is not one of the above; the path is a
        directory; the file cannot be parsed, repeats a column name in its header (or a key in a JSON line), or
        has a quoted field that swallowed whole lines of the table (an unmatched ``"``); a named
        column is missing (the message lists the table's columns); the table has no data rows; a question
        or candidate is missing, empty, whitespace-only or not text; a label is not 0/1 (accepted: the
        numbers 0 and 1, booleans, and the text ``0``/``1``/``true``/``false`` in any case; rejected: 2, -1,
        0.5, ``"yes"``, an empty field, ...); a question id is missing; the rows of a question are not
        contiguous (sort the table by question first); one question id holds two question texts; a
        candidate text repeats inside a question without a position column (with one, the positions tell
        repeated sentences apart); a position is not a non-negative integer or repeats
        inside a question; question ids mix integers and text, or are floats or another kind.
    FileNotFoundError
        If the path does not exist.

    Examples
    --------
    >>> from as2rank.datasets import read_pairs
    >>> X, y = read_pairs("path/to/pairs.csv", question="query", candidate="sentence",
    ...                   label="relevant", position="rank")              # doctest: +SKIP
    """
    if isinstance(data, pd.DataFrame):
        table, source = data, "The DataFrame"
    elif isinstance(data, (str, os.PathLike)):
        table, source = _read(os.fspath(data)), repr(os.fspath(data))
    else:
        raise TypeError(f"data must be a file path or a pandas DataFrame, got {type(data).__name__}.")
    if label == "label" and label not in table.columns:
        label = None  # the default label column is optional: no labels, y is None
    names = [c for c in dict.fromkeys((question, candidate, qid, position, label)) if c is not None]
    require_columns(table.columns, names, lambda missing: (
        f"{source} has no column(s) {missing}; its columns are {list(table.columns)}. Name yours with "
        "read_pairs(..., question=..., candidate=..., label=..., qid=..., position=...), or on the command line "
        "--question, --candidate, --label, --qid, --position."
    ))
    repeated = [c for c in names if (table.columns == c).sum() > 1]
    if repeated:
        raise ValueError(f"{source} has several columns named {repeated}; name each column once.")
    if len(table) == 0:
        raise ValueError(f"{source} has no data rows.")
    table = table[names].reset_index(drop=True)  # rows named by their 0-based data row

    questions = _texts(table[question], "question")
    candidates = _texts(table[candidate], "candidate")
    y = None if label is None else _labels(table[label])
    positions = None if position is None else _positions(table[position])
    if qid is None:
        keys, key_name = questions, f"{question!r} (the question text is the question id)"
    else:
        keys, key_name = _keys(table[qid]), repr(qid)
    codes = _check_questions(keys, key_name, questions, question, qid)
    if positions is None:
        # Without a position, a repeated text is the same row twice; with one, a sentence its document repeats.
        _check_unique(codes, pd.factorize(candidates)[0], f"Column {candidate!r} repeats a candidate inside a "
                      "question (same question id, same text)", "each (question, candidate) pair must appear once "
                      "(drop the repeats, or name a position column if they are distinct sentences)")
    else:
        _check_unique(codes, positions, f"Column {position!r} repeats a position inside a question",
                      "positions must be unique within a question")

    X = pd.DataFrame({"qid": keys, "question": questions, "candidate": candidates})  # all on the RangeIndex
    if positions is not None:
        X["position"] = positions
    return check_X(X), y


def table_columns(path) -> list:
    """The column names of a table file, from its header alone: a CSV or TSV's first line, a Parquet file's schema,
    the keys of a JSON Lines file's first object. No row is read, so a caller may choose columns (the command line:
    a ``qid`` column) before :func:`read_pairs` reads the table once.

    Parameters
    ----------
    path : str or os.PathLike
        A table file, as :func:`read_pairs` takes it.

    Returns
    -------
    list of str
        Empty when the header cannot be read (a missing file, an unknown suffix, bytes that are not a table):
        :func:`read_pairs` then says why.
    """
    import json

    path = os.fspath(path)
    suffixes = [s.lower() for s in Path(path).suffixes]
    compressed = bool(suffixes) and suffixes[-1] in _COMPRESSIONS
    kind = _FORMATS.get(suffixes[-2 if compressed else -1]) if len(suffixes) > compressed else None
    try:
        if kind == "Parquet" and not compressed:
            import pyarrow.parquet as pq

            return [str(name) for name in pq.read_schema(path).names]
        if kind == "JSON Lines":
            with _open_text(path) as fh:
                line = next((line for line in fh if line.strip()), "{}")
            row = json.loads(line)
            return [str(k) for k in row] if isinstance(row, dict) else []
        if kind in ("CSV", "TSV"):
            with _open_text(path) as fh:
                header = pd.read_csv(fh, sep="\t" if kind == "TSV" else ",", dtype=str, keep_default_na=False, nrows=0)
            return [str(c) for c in header.columns]
    except Exception:  # whatever is wrong with the file, read_pairs reports it, in one line
        return []
    return []


def _read(path: str) -> pd.DataFrame:
    """The table of the file ``path``, in the format its suffix names, read strictly (see :func:`read_pairs`)."""
    suffixes = [s.lower() for s in Path(path).suffixes]
    compressed = bool(suffixes) and suffixes[-1] in _COMPRESSIONS
    if compressed:
        suffixes.pop()
    kind = _FORMATS.get(suffixes[-1]) if suffixes else None
    if kind is None or (compressed and kind == "Parquet"):
        raise ValueError(
            f"Cannot tell the format of {path!r} from its suffix; read_pairs reads {', '.join(_FORMATS)} "
            f"(CSV, TSV and JSON Lines also compressed: {', '.join(_COMPRESSIONS)}), or a pandas DataFrame."
        )
    if not os.path.exists(path):
        raise FileNotFoundError(f"No table at {path!r}.")
    if os.path.isdir(path):
        raise ValueError(f"{path!r} is a directory, not a {kind} file; give the path of the table itself.")
    try:
        if kind == "Parquet":
            return pd.read_parquet(path)
        if kind == "JSON Lines":
            return _read_json_lines(path)
        sep = "\t" if kind == "TSV" else ","
        # Every field as its text ("NA", "null" and "0123" stay text); labels and positions are parsed later.
        options = dict(sep=sep, dtype=str, keep_default_na=False, encoding="utf-8-sig")
        _check_line_ends(path)
        header = pd.read_csv(path, header=None, nrows=1, **options).iloc[0].tolist()
        repeated = sorted({c for c in header if header.count(c) > 1})
        if repeated:
            raise ValueError(f"its header names the column(s) {repeated} more than once; name each column once")
        table = pd.read_csv(path, **options)
    except pd.errors.EmptyDataError:
        raise ValueError(f"{path!r} is empty: expected a header line and data rows.") from None
    except (ValueError, UnicodeDecodeError, OSError) as exc:  # parser errors, invalid UTF-8 or JSON, not Parquet
        raise ValueError(f"{path!r} cannot be read as {kind}: {' '.join(str(exc).split())}") from None
    _check_quoting(table, sep, path)
    return table


def _check_line_ends(path: str) -> None:
    """Refuse a text table whose lines end in ``\n`` but which also holds a lone ``\r``: the CSV reader takes it
    for a line end and drops or splits what follows, while a writer that does not quote it (pandas does not)
    meant it as text. Read in blocks, so the check costs one pass over the bytes."""
    lone, newline, lines, carry = None, False, 0, b""
    with _open_text(path, binary=True) as fh:
        while block := fh.read(1 << 24):
            text = carry + block
            carry, text = (b"\r", text[:-1]) if text.endswith(b"\r") else (b"", text)  # see what follows it
            found = re.search(rb"\r(?!\n)", text) if lone is None else None
            if found:
                lone = lines + text[: found.start()].count(b"\n") + 1
            newline = newline or b"\n" in text
            lines += text.count(b"\n")
    if carry and lone is None:
        lone = lines + 1
    if lone is not None and newline:
        raise ValueError(f"line {lone} holds a carriage return (\\r) that does not end a line, in a file whose lines "
                         "end in \\n: a field with a line break was written without quotes; quote every field "
                         "(csv.QUOTE_ALL), or remove the \\r")


def _read_json_lines(path: str) -> pd.DataFrame:
    """A JSON Lines file as a frame of the values as JSON has them: integers of any size exact (pandas' reader
    goes through float64, merging ``2**53`` and ``2**53 + 1``), a key repeated in a line refused."""
    import json

    def pairs(items):
        keys = [k for k, _ in items]
        if len(set(keys)) != len(keys):
            raise ValueError(f"the key {next(k for k in keys if keys.count(k) > 1)!r} appears twice in one object")
        return dict(items)

    rows = []
    with _open_text(path) as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line, object_pairs_hook=pairs)
            except ValueError as exc:
                raise ValueError(f"line {number}: {exc}") from None
            if not isinstance(row, dict):
                raise ValueError(f"line {number} is a JSON {type(row).__name__}, not an object of column values")
            rows.append(row)
    if not rows:
        raise pd.errors.EmptyDataError
    columns = list(dict.fromkeys(k for row in rows for k in row))
    # Built column by column as objects: a frame built from the records would infer float64 for a column of
    # large integers and one float, merging ids.
    return pd.DataFrame({c: pd.Series([row.get(c) for row in rows], dtype=object) for c in columns})


def _open_text(path: str, binary: bool = False):
    """``path`` opened as UTF-8 text (or bytes), decompressed by its suffix."""
    import bz2
    import gzip
    import io
    import lzma
    import zipfile

    suffix = Path(path).suffix.lower()
    if suffix == ".zip":
        archive = zipfile.ZipFile(path)
        names = archive.namelist()
        if len(names) != 1:
            raise ValueError(f"a .zip table must hold exactly one file, this one holds {len(names)}")
        raw = archive.open(names[0])
    elif suffix == ".zst":
        try:
            import zstandard
        except ImportError:
            raise ValueError("reading .zst needs the zstandard package: pip install zstandard") from None
        raw = zstandard.open(path, "rb")
    else:
        raw = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}.get(suffix, open)(path, "rb")
    return raw if binary else io.TextIOWrapper(raw, encoding="utf-8-sig")


def _check_quoting(table: pd.DataFrame, sep: str, path: str) -> None:
    """Refuse a CSV/TSV in which a quoted field swallowed whole lines of the table: a field spanning lines one of
    which holds as many separators as a record (an unmatched ``"`` that closes rows later), which would merge
    rows and lose labels without an error. Fields with line breaks in their text are otherwise kept."""
    need = max(1, len(table.columns) - 1)
    for column in table.columns:
        values = table[column]
        spans = values.str.contains("[\r\n]", regex=True).to_numpy(dtype=bool, na_value=False)
        for row in np.flatnonzero(spans):
            lines = str(values.iloc[row]).splitlines()[1:]
            if any(line.count(sep) >= need for line in lines):
                raise ValueError(
                    f"{path!r}: data row {row} of column {column!r} is a quoted field that spans "
                    f"{len(lines) + 1} lines holding whole rows of the table: a quote (\") that is never closed on its "
                    "own line merged the rows after it. Fix the quoting of that row (or quote every field), then read "
                    "it again."
                )


def _texts(column: pd.Series, role: str) -> pd.Series:
    """A text column, checked: missing, empty, whitespace-only or non-string entries are an error."""
    bad = np.zeros(len(column), dtype=bool)
    bad[nonstring_rows(column)] = True
    strings = column[~bad]
    if not pd.api.types.is_string_dtype(strings.dtype):  # e.g. numbers: all of them bad, none left to strip
        strings = strings.astype(object)
    blank = strings.str.strip() == ""
    bad[blank.index[blank.to_numpy(dtype=bool)]] = True
    if bad.any():
        raise ValueError(
            f"Column {column.name!r} has no text (missing, empty, whitespace-only or not a string) in "
            f"{describe_rows(np.flatnonzero(bad), what='data row')}; every row needs its {role}: fill these rows "
            "in or remove them."
        )
    return column


def _labels(column: pd.Series) -> np.ndarray:
    """0/1 labels as float64: the numbers 0 and 1, booleans, or the text 0/1/true/false (any case)."""
    values = _numbers(column, _LABEL_WORDS)
    bad = np.flatnonzero(~np.isin(values, (0.0, 1.0)))
    if len(bad):
        examples = ", ".join(repr(v) for v in pd.unique(column.iloc[bad[:20]].to_numpy(dtype=object))[:3])
        raise ValueError(
            f"Column {column.name!r} must hold 0/1 labels (0, 1, 0.0, 1.0, booleans, or the text 0/1/true/false); "
            f"{describe_rows(bad, what='data row')} hold something else, e.g. {examples}."
        )
    return values


def _positions(column: pd.Series) -> np.ndarray:
    """0-based positions as int64: whole numbers >= 0 (as numbers or as text)."""
    if pd.api.types.infer_dtype(column, skipna=False) == "integer":  # exact, beyond float64's 2**53
        values = np.asarray(column.to_numpy(dtype=object), dtype=object)
        bad = np.flatnonzero([not (0 <= v < 2**63) for v in values])
        if not len(bad):
            return values.astype(np.int64)
    values = np.full(len(column), np.nan) if pd.api.types.is_bool_dtype(column.dtype) else _numbers(column)
    with np.errstate(invalid="ignore"):
        bad = np.flatnonzero(~(np.isfinite(values) & (values >= 0) & (values == np.floor(values))))
    if len(bad):
        examples = ", ".join(repr(v) for v in pd.unique(column.iloc[bad[:20]].to_numpy(dtype=object))[:3])
        raise ValueError(
            f"Column {column.name!r} must hold 0-based positions (whole numbers >= 0); "
            f"{describe_rows(bad, what='data row')} hold something else, e.g. {examples}."
        )
    return values.astype(np.int64)


def _numbers(column: pd.Series, words=None) -> np.ndarray:
    """The column as float64: numbers, number text and booleans (0/1) as they are, ``words`` (lower-cased
    text, stripped) by their value, NaN for anything else. Each distinct value is parsed once."""
    codes, uniques = pd.factorize(column, use_na_sentinel=False)
    uniques = pd.Series(np.asarray(uniques, dtype=object))
    values = pd.to_numeric(uniques, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan, copy=True)
    unparsed = np.isnan(values)
    if words is not None and unparsed.any():
        text = uniques[unparsed].astype(str).str.strip().str.lower()
        values[unparsed] = text.map(words).to_numpy(dtype=np.float64, na_value=np.nan)
    return values[codes]


def _keys(column: pd.Series) -> pd.Series:
    """Question ids of a ``qid`` column as text: none missing or blank, one kind (:func:`check_group_keys`), and
    that kind text or integers (whose decimal text is exact); floats and other kinds are refused."""
    blank = column.isna().to_numpy() | column.astype(str).str.strip().eq("").to_numpy(dtype=bool, na_value=False)
    if blank.any():
        raise ValueError(
            f"Column {column.name!r} has no question id (missing, empty or whitespace-only) in "
            f"{describe_rows(np.flatnonzero(blank), what='data row')}; every row needs its question id."
        )
    keys = check_group_keys(column, name=f"Column {column.name!r}")
    kind = pd.api.types.infer_dtype(keys, skipna=False)
    if kind == "string":
        return column.astype(object)
    if kind != "integer":
        example = plain_scalar(column.iloc[0])
        raise ValueError(
            f"Column {column.name!r} holds question ids of kind {kind!r} (e.g. {example!r}); ids are read as text, "
            "so they must be strings or integers (a float id may not survive a round trip: 2**53 and 2**53 + 1 are "
            "one float). Write them as strings or integers."
        )
    return pd.Series([str(int(k)) for k in np.asarray(keys, dtype=object)], index=column.index, dtype=object,
                     name=column.name)


def _check_questions(keys: pd.Series, key_name: str, questions: pd.Series, question: str, qid) -> np.ndarray:
    """Each question's rows form one block, under one question text; returns the question code of each row."""
    codes, uniques = pd.factorize(keys)
    first = np.unique(codes, return_index=True)[1]  # first row of each question
    starts = np.flatnonzero(np.concatenate(([True], codes[1:] != codes[:-1])))
    back = starts[first[codes[starts]] != starts]
    if len(back):
        raise ValueError(
            f"Column {key_name}: the rows of a question must be contiguous, but {len(np.unique(codes[back]))} "
            f"question(s) come back after other questions' rows, at {describe_rows(back, what='data row')}; "
            "sort the table by question first (e.g. pandas sort_values(..., kind='stable'))."
        )
    if qid is not None:
        text = pd.factorize(questions)[0]
        other = np.flatnonzero(text != text[first[codes]])
        if len(other):
            raise ValueError(
                f"Column {qid!r}: a question id holds two or more question texts (column {question!r}), e.g. "
                f"{plain_scalar(uniques[codes[other[0]]])!r}; {describe_rows(other, what='data row')} differ from "
                "the first row of their question id. One id must name one question."
            )
    return codes


def _check_unique(codes: np.ndarray, values: np.ndarray, what: str, rule: str) -> None:
    """No two rows of a question share a value (a candidate text's code, or a position)."""
    repeated = pd.DataFrame({"q": codes, "v": values}).duplicated(keep=False).to_numpy()
    if repeated.any():
        raise ValueError(f"{what} in {describe_rows(np.flatnonzero(repeated), what='data row')}; {rule}.")
