"""The grouped-candidate format: validation and group bookkeeping.

One row per (question, candidate) pair in a :class:`pandas.DataFrame`; the ``qid`` column says which
question a row belongs to. Every estimator, metric and loader validates its input here, and every
per-question computation goes through :class:`GroupIndex`, which works on whole arrays (no Python loop
over rows).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

__all__ = [
    "REQUIRED_COLUMNS",
    "FORMAT_COLUMNS",
    "GroupIndex",
    "check_X",
    "check_ranking_data",
    "check_labels",
    "keep_answered",
    "make_frame",
]

#: Columns every grouped-candidate frame must have.
REQUIRED_COLUMNS = ("qid", "question", "candidate")

#: Columns that belong to the format itself (bookkeeping and text), as opposed to feature columns that a
#: transformer such as :class:`~as2rank.baselines.LexicalFeatures` appends.
FORMAT_COLUMNS = (
    "qid",
    "question",
    "candidate",
    "position",
    "doc_id",
    "doc_position",
    "local_context",
    "global_context",
    "orig_position",
    "title",
)


def _nonstring_rows(column: pd.Series) -> np.ndarray:
    """Index labels of the entries of ``column`` that are missing or not ``str``."""
    missing = column.isna().to_numpy()
    if pd.api.types.is_string_dtype(column.dtype) and not pd.api.types.is_object_dtype(column.dtype):
        bad = missing
    elif pd.api.types.infer_dtype(column[~missing], skipna=False) in ("string", "empty"):
        bad = missing
    else:
        # Rare error path only: find which entries are not strings to name them in the message.
        bad = missing | ~column.map(lambda v: isinstance(v, str)).to_numpy(dtype=bool)
    return column.index[bad].to_numpy()


def _plain(value):
    """A numpy scalar as the Python value it holds, so messages read ``0`` rather than ``np.int64(0)``."""
    return value.item() if isinstance(value, np.generic) else value


def _describe_rows(rows: np.ndarray, limit: int = 5) -> str:
    shown = ", ".join(repr(r) for r in rows[:limit].tolist())
    more = f" and {len(rows) - limit} more" if len(rows) > limit else ""
    return f"{len(rows)} row(s) (index {shown}{more})"


def check_X(
    X,
    *,
    text_columns: Sequence[str] = ("question", "candidate"),
    required: Sequence[str] = REQUIRED_COLUMNS,
) -> pd.DataFrame:
    """Validate a grouped-candidate frame.

    Parameters
    ----------
    X : pandas.DataFrame
        One row per (question, candidate) pair with at least the columns ``qid``, ``question`` and
        ``candidate``; optional ``position``, ``doc_id``, ``doc_position``.
    text_columns : sequence of str, default=("question", "candidate")
        Columns that must hold non-missing strings.
    required : sequence of str, default=("qid", "question", "candidate")
        Columns that must be present.

    Returns
    -------
    X : pandas.DataFrame
        The same object, unchanged.

    Raises
    ------
    TypeError
        If ``X`` is not a DataFrame or a text column holds something other than strings.
    ValueError
        If ``X`` is empty, a required column is missing, ``qid`` or ``position`` has missing values, or a
        ``position`` is repeated inside a question.
    """
    if not isinstance(X, pd.DataFrame):
        raise TypeError(
            "X must be a pandas DataFrame in the grouped-candidate format (columns "
            f"{', '.join(REQUIRED_COLUMNS)}; one row per question/candidate pair), got {type(X).__name__}."
        )
    missing = [c for c in required if c not in X.columns]
    if missing:
        raise ValueError(
            f"X is missing the required column(s) {missing}; the grouped-candidate format needs "
            f"{list(REQUIRED_COLUMNS)} (found {list(X.columns)})."
        )
    if len(X) == 0:
        raise ValueError("X is empty: at least one question/candidate row is needed.")
    if X.columns.duplicated().any():
        raise ValueError(f"X has duplicated column names: {list(X.columns[X.columns.duplicated()])}.")
    if X["qid"].isna().any():
        rows = X.index[X["qid"].isna().to_numpy()].to_numpy()
        raise ValueError(f"Column 'qid' has missing values in {_describe_rows(rows)}.")
    for col in text_columns:
        if col not in X.columns:
            continue
        bad = _nonstring_rows(X[col])
        if len(bad):
            raise TypeError(
                f"Column {col!r} must hold text (str) in every row; {_describe_rows(bad)} "
                "hold a missing value (NaN/None) or a non-string."
            )
    if "position" in X.columns:
        pos = X["position"]
        if not pd.api.types.is_numeric_dtype(pos.dtype) or pd.api.types.is_bool_dtype(pos.dtype):
            raise TypeError(f"Column 'position' must be numeric (0-based ranks), got dtype {pos.dtype}.")
        if pos.isna().any():
            rows = X.index[pos.isna().to_numpy()].to_numpy()
            raise ValueError(f"Column 'position' has missing values in {_describe_rows(rows)}.")
        if (pos < 0).any():
            rows = X.index[(pos < 0).to_numpy()].to_numpy()
            raise ValueError(f"Column 'position' must be 0-based (>= 0); negative in {_describe_rows(rows)}.")
    return X


def check_labels(y, n_rows: int, *, name: str = "y") -> np.ndarray:
    """Validate relevance labels: numeric, finite, one per row of ``X``.

    Returns a float64 array of shape (n_rows,).
    """
    if y is None:
        raise ValueError(f"{name} is required: relevance labels (0/1, or graded) for every row of X.")
    if isinstance(y, pd.DataFrame):
        if y.shape[1] != 1:
            raise ValueError(f"{name} must be one column of labels, got a DataFrame with {y.shape[1]} columns.")
        y = y.iloc[:, 0]
    arr = np.asarray(y)
    if arr.ndim == 2 and 1 in arr.shape:
        arr = arr.ravel()
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}.")
    if arr.dtype.kind not in "biuf":
        try:
            converted = arr.astype(np.float64)
        except (TypeError, ValueError):
            raise TypeError(
                f"{name} must hold numeric relevance labels (0/1 or graded), got dtype {arr.dtype}."
            ) from None
        if arr.dtype.kind in "OUST" and pd.api.types.infer_dtype(arr, skipna=True) not in (
            "integer",
            "floating",
            "mixed-integer-float",
            "boolean",
            "decimal",
        ):
            raise TypeError(
                f"{name} must hold numeric relevance labels (0/1 or graded), got values of type "
                f"{pd.api.types.infer_dtype(arr, skipna=True)!r}."
            )
        arr = converted
    arr = arr.astype(np.float64, copy=False)
    if len(arr) != n_rows:
        raise ValueError(f"X has {n_rows} rows but {name} has {len(arr)} labels; they must match.")
    if not np.isfinite(arr).all():
        bad = np.flatnonzero(~np.isfinite(arr))
        raise ValueError(f"{name} has missing or infinite labels at positions {bad[:5].tolist()}.")
    return arr


class GroupIndex:
    """Row-to-question bookkeeping for one grouped-candidate frame, computed with whole-array operations.

    Groups are numbered ``0..n_groups-1`` in order of first appearance of their ``qid``. Rows of a group
    need not be contiguous in ``X``.

    Parameters
    ----------
    qid : array-like of shape (n_rows,)
        Question id of each row.
    position : array-like of shape (n_rows,), default=None
        Original rank of each row inside its group; when ``None`` the row order inside the group.

    Attributes
    ----------
    codes : ndarray of shape (n_rows,)
        Group number of each row.
    keys : ndarray of shape (n_groups,)
        The ``qid`` of each group.
    order : ndarray of shape (n_rows,)
        Row indices sorted by group, then by position: ``order[offsets[g]:offsets[g+1]]`` are the rows of
        group ``g`` in their original order.
    offsets : ndarray of shape (n_groups + 1,)
        Boundaries of the groups in ``order``.
    """

    def __init__(self, qid, position=None):
        qid = np.asarray(qid)
        codes, keys = pd.factorize(qid, sort=False, use_na_sentinel=True)
        if (codes < 0).any():
            raise ValueError("groups/qid has missing values.")
        self.codes = codes.astype(np.intp, copy=False)
        self.keys = np.asarray(keys)
        if position is None:
            self.order = np.argsort(self.codes, kind="stable")
        else:
            position = np.asarray(position)
            if len(position) != len(self.codes):
                raise ValueError(f"position has {len(position)} entries for {len(self.codes)} rows.")
            self.order = np.lexsort((position, self.codes))
            sorted_pos = position[self.order]
            sorted_codes = self.codes[self.order]
            dup = (sorted_codes[1:] == sorted_codes[:-1]) & (sorted_pos[1:] == sorted_pos[:-1])
            if dup.any():
                first = np.flatnonzero(dup)[0]
                raise ValueError(
                    f"Column 'position' is duplicated inside question {_plain(self.keys[sorted_codes[first]])!r} "
                    f"(position {_plain(sorted_pos[first])!r} appears more than once); positions must be unique "
                    "within a question."
                )
        sizes = np.bincount(self.codes, minlength=len(self.keys))
        self.offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.intp)

    @classmethod
    def from_frame(cls, X: pd.DataFrame, groups=None) -> GroupIndex:
        """Build the index of a validated frame; ``groups`` (if given) overrides ``X["qid"]``."""
        qid = X["qid"].to_numpy() if groups is None else np.asarray(groups)
        if len(qid) != len(X):
            raise ValueError(f"X has {len(X)} rows but groups has {len(qid)} entries; they must match.")
        position = X["position"].to_numpy() if "position" in X.columns else None
        return cls(qid, position)

    @property
    def n_groups(self) -> int:
        return len(self.keys)

    @property
    def n_rows(self) -> int:
        return len(self.codes)

    @property
    def sizes(self) -> np.ndarray:
        """Number of rows of each group."""
        return np.diff(self.offsets)

    @property
    def starts(self) -> np.ndarray:
        return self.offsets[:-1]

    def position_index(self) -> np.ndarray:
        """0-based index of each row inside its group by original order (``position`` or row order)."""
        out = np.empty(self.n_rows, dtype=np.intp)
        out[self.order] = np.arange(self.n_rows) - np.repeat(self.starts, self.sizes)
        return out

    def sum(self, values) -> np.ndarray:
        """Per-group sum of a per-row array."""
        return np.bincount(self.codes, weights=np.asarray(values, dtype=np.float64), minlength=self.n_groups)

    def max(self, values) -> np.ndarray:
        """Per-group maximum of a per-row array."""
        return np.maximum.reduceat(np.asarray(values)[self.order], self.starts)

    def rank(self, scores, tiebreak=None) -> np.ndarray:
        """1-based rank of each row inside its group by descending ``scores``.

        Ties are broken by ``tiebreak`` (ascending) and then by original position, so the result is
        always a permutation of ``1..size`` inside each group.
        """
        order = self.sort(scores, tiebreak)
        ranks = np.empty(self.n_rows, dtype=np.intp)
        ranks[order] = np.arange(1, self.n_rows + 1) - np.repeat(self.starts, self.sizes)
        return ranks

    def sort(self, scores, tiebreak=None) -> np.ndarray:
        """Row indices grouped like ``order`` but, inside each group, by descending score.

        Ties are broken by ``tiebreak`` (ascending) when given, then by original position.
        """
        scores = np.asarray(scores, dtype=np.float64)
        if scores.shape != (self.n_rows,):
            raise ValueError(f"Expected {self.n_rows} scores, got shape {scores.shape}.")
        keys = [self.position_index(), -scores, self.codes]
        if tiebreak is not None:
            keys.insert(1, np.asarray(tiebreak))
        return np.lexsort(keys)

    def take(self, rows) -> GroupIndex:
        """The index of a subset of rows (given in the order they should appear)."""
        rows = np.asarray(rows)
        return GroupIndex(self.keys[self.codes[rows]], self.position_index()[rows])


def check_ranking_data(X, y=None, groups=None, *, require_y: bool = True, text_columns=("question", "candidate")):
    """Validate ``X`` (and ``y``, ``groups``) and index its groups: the one entry point of every estimator.

    Parameters
    ----------
    X : pandas.DataFrame
        Grouped-candidate frame (see :func:`check_X`).
    y : array-like of shape (n_rows,), default=None
        Relevance labels.
    groups : array-like of shape (n_rows,), default=None
        Question ids; when given they take precedence over ``X["qid"]``.
    require_y : bool, default=True
        Whether ``y`` must be given.
    text_columns : sequence of str
        Columns that must hold strings.

    Returns
    -------
    X : pandas.DataFrame
    y : ndarray of float64 or None
    index : GroupIndex
    """
    X = check_X(X, text_columns=text_columns)
    if groups is not None:
        groups = np.asarray(groups)
        if groups.ndim != 1 or len(groups) != len(X):
            raise ValueError(
                f"X has {len(X)} rows but groups has {len(groups) if groups.ndim else 0} entries; they must match."
            )
    y_arr = check_labels(y, len(X)) if (y is not None or require_y) else None
    return X, y_arr, GroupIndex.from_frame(X, groups)


def keep_answered(X: pd.DataFrame, y, groups=None):
    """Keep only the questions with at least one positive label (the "clean" protocol).

    Returns
    -------
    X_kept : pandas.DataFrame
    y_kept : ndarray
    """
    X, y, index = check_ranking_data(X, y, groups)
    answered = index.max(y) > 0
    keep = answered[index.codes]
    return X[keep], y[keep]


def make_frame(question: str, candidates: Sequence[str], qid=0) -> pd.DataFrame:
    """A one-question grouped-candidate frame from plain strings, candidates in the given order."""
    if not isinstance(question, str):
        raise TypeError(f"question must be a str, got {type(question).__name__}.")
    if isinstance(candidates, str):
        raise TypeError("candidates must be a sequence of str, not a single str.")
    candidates = list(candidates)
    if not candidates:
        raise ValueError("candidates is empty: at least one candidate sentence is needed.")
    return pd.DataFrame(
        {
            "qid": [qid] * len(candidates),
            "question": [question] * len(candidates),
            "candidate": candidates,
            "position": np.arange(len(candidates)),
        }
    )
