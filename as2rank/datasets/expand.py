"""Retrieval-style candidate sets: add BM25-retrieved negatives from a pool of sentences."""

from __future__ import annotations

from numbers import Integral

import numpy as np
import pandas as pd
import scipy.sparse as sp

from ..data import check_ranking_data, ragged_arange
from ..text import bag_of_words, tokenize

__all__ = ["expand_candidates"]

#: Pool columns carried over to the rows that expand_candidates adds.
POOL_COLUMNS = ("doc_id", "doc_position", "title")

#: Dense score cells computed at once (questions x collection sentences), bounding the working memory.
_BLOCK_CELLS = 1 << 23


def expand_candidates(X, y, pool, k=100, *, k1=1.5, b=0.75):
    """Turn a small-candidate set into a retrieval-style one by adding BM25-retrieved negatives.

    Data sets such as WikiQA or SQuAD-sent give each question a handful of candidates from one paragraph;
    ASNQ and the Cascade Transformer paper's GPD give it about a hundred, retrieved from many documents.
    For every question, the sentences of ``pool`` that score highest under BM25 against the question are
    added as negatives (label 0) until the question has ``k`` candidates; then all its candidates,
    original and added, are ordered by their BM25 score and ``position`` becomes that retrieval rank.

    Parameters
    ----------
    X : pandas.DataFrame
        Grouped-candidate frame (``qid``, ``question``, ``candidate``, optional ``position``, ...).
    y : array-like of shape (n_rows,)
        Relevance labels of ``X``.
    pool : sequence of str or pandas.DataFrame
        The sentences to retrieve from, e.g. every sentence of the corpus. A DataFrame needs a
        ``candidate`` column; its ``doc_id``, ``doc_position`` and ``title`` columns, when present, are
        carried over to the added rows. Repeated sentences count once (the first occurrence's columns).
    k : int, default=100
        Number of candidates per question after expansion. A question that already has ``k`` or more keeps
        its candidates, none added, and is only reordered.
    k1, b : float, default=1.5, 0.75
        BM25 term-frequency saturation and length normalisation.

    Returns
    -------
    X_expanded : pandas.DataFrame
        Rows grouped by question (in order of first appearance in ``X``), each group in retrieval order,
        with a fresh ``RangeIndex``. Original rows keep every column of ``X``; ``position`` is now the
        0-based BM25 rank inside the question and ``orig_position`` holds the original position (the
        ``position`` of ``X``, or the row order inside the question when ``X`` has none). Added rows have
        the ``qid`` and ``question`` of their question, the pool sentence as ``candidate``,
        ``orig_position`` -1, the pool's doc columns where given, and missing values (NA) in every other
        column (integer columns become nullable ``Int64`` where that happens).
    y_expanded : ndarray of shape (n_rows_expanded,)
        The labels of the original rows, 0 for the added ones.

    Raises
    ------
    TypeError
        If ``pool`` is a single string or holds non-strings, or ``k`` is not an integer.
    ValueError
        If ``X``/``y`` are invalid, ``pool`` is empty or lacks a ``candidate`` column, or ``k < 1``.

    Notes
    -----
    Texts are tokenised by :func:`as2rank.text.tokenize` (lower-cased, punctuation dropped), each distinct
    text once. BM25 statistics (document frequencies, average length) are those of the collection of
    distinct sentences in ``pool`` and in ``X["candidate"]``. A sentence scores
    ``sum over distinct question terms t of idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len / avglen))``
    with ``idf(t) = log(1 + (N - df + 0.5) / (df + 0.5))`` (the non-negative Lucene variant). A pool sentence
    is never added to a question that already has the same text among its candidates, nor added twice.
    When the pool has fewer usable sentences than needed, the question ends with fewer than ``k``
    candidates; pool sentences sharing no term with the question (score 0) are used last. Ties are broken
    by original position, then pool order (except among equal scores at the cut-off, where the choice is
    arbitrary but deterministic). ``orig_position`` is numeric: exclude it from learned features, since
    -1 tells added rows (all negatives) from original ones.
    """
    X, y_checked, index = check_ranking_data(X, y)
    if isinstance(k, bool) or not isinstance(k, Integral):
        raise TypeError(f"k must be an integer (candidates per question), got {type(k).__name__}.")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}.")
    pool_frame = _check_pool(pool)

    # The collection: distinct pool sentences first (so a pool sentence's number is its row in pool_frame),
    # then the candidates of X that are not in the pool.
    n_pool = len(pool_frame)
    doc_of_row, collection = pd.factorize(
        pd.concat([pool_frame["candidate"], X["candidate"]], ignore_index=True).astype(object), sort=False
    )
    doc_of_row = doc_of_row[n_pool:]
    first_rows = index.order[index.starts]
    questions = X["question"].to_numpy(dtype=object)[first_rows]
    query, weights = _bm25_matrices(list(collection), list(questions), k1, b)

    row_score = np.empty(len(X))
    sizes = index.sizes
    added_group, added_doc, added_score = [], [], []
    block = max(1, _BLOCK_CELLS // max(len(collection), 1))
    for g0 in range(0, index.n_groups, block):
        g1 = min(g0 + block, index.n_groups)
        scores = (query[g0:g1] @ weights).toarray()
        rows = index.order[index.offsets[g0] : index.offsets[g1]]
        local = index.codes[rows] - g0
        row_score[rows] = scores[local, doc_of_row[rows]]
        # A question's own candidates (compared by text) are not retrievable for it.
        scores[local, doc_of_row[rows]] = -np.inf
        pool_scores = scores[:, :n_pool]
        need = np.clip(k - sizes[g0:g1], 0, n_pool)
        m = int(need.max())
        if m == 0:
            continue
        top = np.argpartition(-pool_scores, m - 1, axis=1)[:, :m]
        top_score = np.take_along_axis(pool_scores, top, axis=1)
        by_score = np.lexsort((top, -top_score), axis=1)
        top, top_score = np.take_along_axis(top, by_score, axis=1), np.take_along_axis(top_score, by_score, axis=1)
        keep = (np.arange(m) < need[:, None]) & np.isfinite(top_score)
        added_group.append(np.nonzero(keep)[0] + g0)
        added_doc.append(top[keep])
        added_score.append(top_score[keep])

    added_group = np.concatenate(added_group) if added_group else np.empty(0, dtype=np.intp)
    added_doc = np.concatenate(added_doc) if added_doc else np.empty(0, dtype=np.intp)
    added_score = np.concatenate(added_score) if added_score else np.empty(0)
    original = X.reset_index(drop=True).assign(
        orig_position=X["position"].to_numpy() if "position" in X.columns else index.position_index()
    )
    added = pd.DataFrame(
        {
            "qid": original["qid"].iloc[first_rows[added_group]].reset_index(drop=True),
            "question": original["question"].iloc[first_rows[added_group]].reset_index(drop=True),
            "candidate": pool_frame["candidate"].iloc[added_doc].reset_index(drop=True),
            "orig_position": np.full(len(added_group), -1, dtype=original["orig_position"].dtype),
        }
    )
    for col in pool_frame.columns.drop("candidate"):
        added[col] = pool_frame[col].iloc[added_doc].reset_index(drop=True)
    # A column that only one side has gets NA on the other: make integer/bool ones nullable to keep their type.
    for frame, other in ((original, added), (added, original)):
        for col in frame.columns.difference(other.columns):
            frame[col] = _nullable(frame[col])

    # Retrieval order inside each question: BM25 descending; ties: original rows by position, then added
    # rows by pool order.
    group = np.concatenate((index.codes, added_group))
    score = np.concatenate((row_score, added_score))
    is_added = np.concatenate((np.zeros(len(X), dtype=bool), np.ones(len(added_group), dtype=bool)))
    tiebreak = np.concatenate((index.position_index(), added_doc))
    order = np.lexsort((tiebreak, is_added, -score, group))
    counts = np.bincount(group, minlength=index.n_groups)
    position = ragged_arange(counts)

    out = pd.concat([original, added], ignore_index=True).iloc[order].reset_index(drop=True)
    out["position"] = position
    labels = np.asarray(y)
    labels = labels if labels.dtype.kind in "biuf" else y_checked
    y_out = np.concatenate((labels, np.zeros(len(added_group), dtype=labels.dtype)))[order]
    return out, y_out


def _nullable(column: pd.Series) -> pd.Series:
    """``column`` in a dtype that can hold NA without turning integers or booleans into floats."""
    nullable = {"i": "Int64", "u": "UInt64", "b": "boolean"}
    if isinstance(column.dtype, np.dtype) and column.dtype.kind in nullable:
        return column.astype(nullable[column.dtype.kind])
    return column


def _check_pool(pool) -> pd.DataFrame:
    """The pool as a frame with a ``candidate`` column (distinct texts) and the carried doc columns."""
    if isinstance(pool, str):
        raise TypeError(
            "pool must be a sequence of sentences or a DataFrame with a 'candidate' column, not a str."
        )
    if isinstance(pool, pd.DataFrame):
        if "candidate" not in pool.columns:
            raise ValueError(
                f"pool DataFrame needs a 'candidate' column of sentences (found {list(pool.columns)})."
            )
        frame = pool[["candidate", *(c for c in POOL_COLUMNS if c in pool.columns)]]
    else:
        frame = pd.DataFrame({"candidate": pd.Series(list(pool))})
    if len(frame) == 0:
        raise ValueError("pool is empty: give the sentences to retrieve candidates from.")
    texts = frame["candidate"]
    if texts.isna().any() or pd.api.types.infer_dtype(texts, skipna=False) != "string":
        raise TypeError("pool sentences must all be str (found a missing value or a non-string).")
    return frame[~texts.duplicated().to_numpy()].astype({"candidate": "str"}).reset_index(drop=True)


def _bm25_matrices(documents, questions, k1: float, b: float):
    """BM25 term weights of ``documents`` (terms x documents) and binary question-term rows.

    ``query @ weights`` is then the matrix of BM25 scores of every question against every document.
    """
    counts, vocabulary = bag_of_words(tokenize(documents, drop_punct=True))
    counts = counts.tocsr()
    length = np.asarray(counts.sum(axis=1)).ravel()
    avg_length = length.mean() if length.mean() > 0 else 1.0
    df = np.bincount(counts.indices, minlength=counts.shape[1])
    idf = np.log1p((len(documents) - df + 0.5) / (df + 0.5))
    tf = counts.data
    norm = np.repeat(k1 * (1 - b + b * length / avg_length), np.diff(counts.indptr))
    weights = sp.csr_matrix(
        (idf[counts.indices] * tf * (k1 + 1) / (tf + norm), counts.indices, counts.indptr), shape=counts.shape
    )
    query, _ = bag_of_words(tokenize(questions, drop_punct=True), vocabulary)
    query.data[:] = 1.0
    # Both CSR, so the per-block product converts nothing.
    return query.tocsr(), weights.T.tocsr()
