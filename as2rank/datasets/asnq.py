"""ASNQ, the Answer Sentence Natural Questions corpus (Garg et al., 2020), read in bounded memory."""

from __future__ import annotations

import csv
import os
from collections.abc import Iterator

import numpy as np
import pandas as pd

from ..data import ragged_arange

__all__ = ["load_asnq"]

#: Rows read from the file at a time when ``chunksize=None``; memory beyond the output stays about this big.
_READ_ROWS = 1 << 18


def load_asnq(path, chunksize=None):
    """Load an ASNQ TSV file (``train.tsv`` or ``dev.tsv``), whole or as a stream of whole questions.

    Parameters
    ----------
    path : str or os.PathLike
        Tab-separated, no header, one (question, sentence, label) triple per line; label 4 marks a correct
        answer, labels 1-3 the three kinds of negatives. The rows of a question must be contiguous, as
        they are in the released files.
    chunksize : int, default=None
        ``None`` returns the whole file. An integer returns an iterator of ``(X, y)`` chunks of about
        ``chunksize`` rows each that never split a question: a question that straddles a chunk boundary
        is moved whole into the next chunk (so a chunk can be larger than ``chunksize`` when a question
        is).

    Returns
    -------
    X : pandas.DataFrame
        Columns ``qid`` (int64: the 0-based index of the question in the file, consistent across
        chunks), ``question`` (categorical: each question text stored once), ``candidate`` (str) and
        ``position`` (int32: the row's order inside its question, file order). When ``chunksize`` is
        given, an iterator of such ``(X, y)`` pairs instead; the row index continues across chunks.
    y : ndarray of int8, shape (n_rows,)
        1 where the label is 4, else 0.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    ValueError
        If ``path`` is a directory, a line does not hold three tab-separated fields, a label is not an integer in 1-4, the file is
        empty, or a question reappears after other questions (the rows of a question are not
        contiguous; sort the file by question, e.g. ``LC_ALL=C sort -s -t $'\\t' -k1,1``). In the streamed
        mode these surface while iterating, with the line number.

    Notes
    -----
    The file is read ``chunksize`` (or 262,144) rows at a time and each chunk is turned into compact
    dtypes (int8 labels, categorical questions) at once, so the whole-file mode never holds more than its
    output plus one raw chunk, apart from the final join of the chunks (about twice the output, briefly).
    To stay bounded by a chunk instead, e.g. for the 20M-row training file, iterate with ``chunksize``.
    """
    if not os.path.exists(path):
        raise FileNotFoundError(f"No ASNQ file at {os.fspath(path)!r}.")
    if os.path.isdir(path):
        raise ValueError(f"{os.fspath(path)!r} is a directory: expected an ASNQ TSV file such as dev.tsv.")
    if chunksize is None:
        return _concat(_iter_chunks(path, _READ_ROWS))
    if isinstance(chunksize, bool) or not isinstance(chunksize, (int, np.integer)) or chunksize < 1:
        raise ValueError(f"chunksize must be None or a positive integer, got {chunksize!r}.")
    return _iter_chunks(path, int(chunksize))


def _read(path, chunksize: int):
    """Raw chunks of the file, every field as str."""
    # No `names`: pandas then takes the field count from the first line and rejects any longer line, where
    # with `names` it would silently drop the extra fields. QUOTE_NONE: ASNQ sentences contain unbalanced
    # quotes. No NA parsing: a sentence "null" is text.
    return pd.read_csv(
        path,
        sep="\t",
        header=None,
        dtype="str",
        quoting=csv.QUOTE_NONE,
        na_filter=False,
        encoding="utf-8",
        chunksize=chunksize,
    )


def _labels(raw: pd.DataFrame, path, first_line: int) -> np.ndarray:
    """Binary labels (label 4 -> 1) of a raw chunk, after checking its shape and label values."""
    if raw.shape[1] != 3:
        raise ValueError(
            f"{os.fspath(path)!r} has {raw.shape[1]} tab-separated fields per line; an ASNQ TSV has three "
            "(question, sentence, label) and no header."
        )
    labels = pd.to_numeric(raw[2], errors="coerce")
    bad = ~labels.isin([1, 2, 3, 4]).to_numpy()
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        value = raw[2].iloc[i]
        why = "fewer than three tab-separated fields" if pd.isna(value) or value == "" else f"label {value!r}"
        raise ValueError(
            f"{os.fspath(path)!r} line {first_line + i}: {why}; an ASNQ TSV has question, sentence and a "
            "label 1-4 on each line, tab-separated, with no header."
        )
    return (labels.to_numpy() == 4).astype(np.int8)


def _question_blocks(path, chunksize: int):
    """Yield ``(question, candidate, y)`` arrays holding whole questions, about ``chunksize`` rows each."""
    carry_q = np.empty(0, dtype=object)  # rows of the last, possibly unfinished question of a raw chunk
    carry_c = np.empty(0, dtype=object)
    carry_y = np.empty(0, dtype=np.int8)
    n_read = 0  # lines read before the current raw chunk
    try:
        with _read(path, chunksize) as reader:
            for raw in reader:
                labels = _labels(raw, path, n_read + 1)
                n_read += len(raw)
                question = np.concatenate((carry_q, raw[0].to_numpy(dtype=object)))
                candidate = np.concatenate((carry_c, raw[1].to_numpy(dtype=object)))
                y = np.concatenate((carry_y, labels))
                # The last question may continue in the next raw chunk: hold it back.
                cut = np.flatnonzero(question[1:] != question[:-1]).max(initial=-1) + 1
                carry_q, carry_c, carry_y = question[cut:], candidate[cut:], y[cut:]
                if cut:
                    yield question[:cut], candidate[:cut], y[:cut]
        if len(carry_q):
            yield carry_q, carry_c, carry_y
    except pd.errors.EmptyDataError:
        raise ValueError(f"{os.fspath(path)!r} is empty: no ASNQ rows.") from None
    except pd.errors.ParserError as exc:
        raise ValueError(
            f"{os.fspath(path)!r} is not an ASNQ TSV (question, sentence, label; tab-separated, no header): {exc}"
        ) from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"{os.fspath(path)!r} is not UTF-8 text: {exc}") from None


def _iter_chunks(path, chunksize: int) -> Iterator[tuple[pd.DataFrame, np.ndarray]]:
    """Yield ``(X, y)`` chunks of whole questions; see :func:`load_asnq`."""
    seen: set[str] = set()  # questions already emitted, to catch one that reappears later
    n_questions = 0  # qid of the next question
    n_rows = 0  # rows emitted so far (= row index of the next one)
    for question, candidate, y in _question_blocks(path, chunksize):
        starts = np.flatnonzero(np.concatenate(([True], question[1:] != question[:-1])))
        texts = question[starts]
        repeated = pd.Series(texts).duplicated().to_numpy() | np.fromiter(
            (t in seen for t in texts), dtype=bool, count=len(texts)
        )
        if repeated.any():
            i = int(np.flatnonzero(repeated)[0])
            raise ValueError(
                f"{os.fspath(path)!r} line {n_rows + starts[i] + 1}: question {texts[i]!r} appears again after "
                "other questions. load_asnq needs the rows of each question to be contiguous; sort the file by "
                "question first, keeping the order of its sentences, e.g. "
                "LC_ALL=C sort -s -t $'\\t' -k1,1 in.tsv > sorted.tsv"
            )
        seen.update(texts)
        sizes = np.diff(np.append(starts, len(question)))
        codes = np.repeat(np.arange(len(starts), dtype=np.int32), sizes)
        X = pd.DataFrame(
            {
                "qid": n_questions + codes.astype(np.int64),
                "question": pd.Categorical.from_codes(codes, categories=pd.Index(texts, dtype="str")),
                "candidate": pd.array(candidate, dtype="str"),
                "position": ragged_arange(sizes).astype(np.int32),
            },
            index=pd.RangeIndex(n_rows, n_rows + len(question)),
        )
        yield X, y
        n_questions += len(starts)
        n_rows += len(question)
    if n_rows == 0:
        raise ValueError(f"{os.fspath(path)!r} is empty: no ASNQ rows.")


def _concat(chunks) -> tuple[pd.DataFrame, np.ndarray]:
    """Join streamed chunks; questions never straddle chunks, so the categories simply concatenate."""
    parts = list(chunks)
    categories = pd.Index(
        np.concatenate([X["question"].cat.categories.to_numpy() for X, _ in parts]), dtype="str"
    )
    offsets = np.cumsum([0] + [len(X["question"].cat.categories) for X, _ in parts[:-1]])
    codes = np.concatenate([X["question"].cat.codes.to_numpy() + off for (X, _), off in zip(parts, offsets)])
    X = pd.DataFrame(
        {
            "qid": np.concatenate([X["qid"].to_numpy() for X, _ in parts]),
            "question": pd.Categorical.from_codes(codes, categories=categories),
            "candidate": pd.concat([X["candidate"] for X, _ in parts], ignore_index=True),
            "position": np.concatenate([X["position"].to_numpy() for X, _ in parts]),
        }
    )
    return X, np.concatenate([y for _, y in parts])
