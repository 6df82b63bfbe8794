"""The grouped-candidate format: validation and group bookkeeping.

One row per (question, candidate) pair in a :class:`pandas.DataFrame`; the ``qid`` column says which
question a row belongs to. Every estimator, metric and loader validates its input here, and every
per-question computation goes through :class:`GroupIndex`, which works on whole arrays (no Python loop
over rows). Question ids, whether ``X["qid"]`` or a ``groups`` argument, follow one rule,
:func:`check_group_keys`: one kind of key, none missing, never coerced.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

__all__ = [
    "REQUIRED_COLUMNS",
    "FORMAT_COLUMNS",
    "GroupIndex",
    "check_group_keys",
    "check_keys",
    "check_X",
    "check_ranking_data",
    "check_labels",
    "check_text_columns",
    "require_columns",
    "retrieval_positions",
    "reading_order",
    "keep_answered",
    "holdout_questions",
    "ragged_arange",
    "make_frame",
    "nonstring_rows", "plain_scalar", "describe_rows",
]

#: Columns every grouped-candidate frame must have.
REQUIRED_COLUMNS = ("qid", "question", "candidate")

#: Columns that belong to the format itself (bookkeeping and text), as opposed to feature columns that a
#: transformer such as :class:`~as2rank.lexical.baselines.LexicalFeatures` appends.
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


def nonstring_rows(column: pd.Series) -> np.ndarray:
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


def plain_scalar(value):
    """A numpy scalar as the Python value it holds, so messages read ``0`` rather than ``np.int64(0)``."""
    return value.item() if isinstance(value, np.generic) else value


def describe_rows(rows: np.ndarray, limit: int = 5, what: str = "index") -> str:
    """``"3 row(s) (index 0, 4, 7)"``: how many rows, the first ``limit`` named as ``what`` (index or data row)."""
    shown = ", ".join(repr(r) for r in rows[:limit].tolist())
    more = f" and {len(rows) - limit} more" if len(rows) > limit else ""
    return f"{len(rows)} row(s) ({what} {shown}{more})"


def _key_type(value) -> str:
    """The kind of one key, for error messages: numpy scalars count as their Python kind."""
    if isinstance(value, (bool, np.bool_)):
        return "bool"
    if isinstance(value, (int, np.integer)):
        return "int"
    if isinstance(value, (float, np.floating)):
        return "float"
    if isinstance(value, (str, np.str_)):
        return "str"
    return type(value).__name__


_QID_COLUMN = "Column 'qid'"

#: numpy dtype kind -> the kind name ``pandas.api.types.infer_dtype`` gives the same values.
_NUMPY_KINDS = {"i": "integer", "u": "integer", "f": "floating", "c": "complex", "U": "string", "S": "bytes",
                "M": "datetime64", "m": "timedelta64", "b": "boolean"}


def check_keys(keys, name: str, what: str = "question id"):
    """:func:`check_group_keys` for any per-row id, and the ids' kind: ``(values, kind)``.

    The metrics check candidate ids (``docno``) by the same rule as question ids. ``name`` names the ids in messages
    (``"groups"``, ``"Column 'qid'"``), ``what`` one id (``"candidate id"``). ``values`` are the ids, never coerced
    across kinds; ``kind`` is ``pandas.api.types.infer_dtype``'s name (``"string"``, ``"integer"``, ``"empty"``, ...),
    which tells a metric how to compare them (an integer id as its decimal text, as in a run file).
    """
    subject = name  # e.g. "groups" or "Column 'qid'"
    labels = keys.index if isinstance(keys, pd.Series) else None
    if isinstance(keys, (pd.Series, pd.Index)):
        values = keys.array
    elif isinstance(keys, (np.ndarray, pd.api.extensions.ExtensionArray)):
        values = keys
    else:
        # Never np.asarray(keys) alone: it would turn [1, "1"] into ["1", "1"] and [1, 1.0] into floats.
        try:
            values = np.asarray(keys, dtype=object) if not isinstance(keys, (str, bytes)) else None
        except ValueError:  # ragged nested sequences
            raise ValueError(f"{subject} must be one {what} per row (a 1-d array of scalars).") from None
        if values is None or values.ndim == 0:
            raise ValueError(f"{subject} must be one {what} per row (a 1-d array), got a scalar {keys!r}.")
    if values.ndim != 1:
        raise ValueError(f"{subject} must be one {what} per row (a 1-d array), got shape {values.shape}.")
    if isinstance(values, pd.arrays.NumpyExtensionArray):
        values = values.to_numpy()

    def rows(mask):
        return labels[mask].to_numpy() if labels is not None else np.flatnonzero(mask)

    dtype = values.dtype
    if isinstance(values, np.ndarray) and dtype.kind in _NUMPY_KINDS:
        kind = _NUMPY_KINDS[dtype.kind]
        missing = np.isnan(values) if dtype.kind in "fc" else np.isnat(values) if dtype.kind in "Mm" else None
    elif isinstance(dtype, pd.CategoricalDtype):
        missing = values.codes < 0
        used = values.categories[np.bincount(values.codes[~missing], minlength=len(values.categories)) > 0]
        kind = pd.api.types.infer_dtype(used, skipna=False) if len(used) else "empty"
    else:
        # One pass decides the common case: an object array inferred all str or all int holds no missing
        # value. Extension arrays report their dtype's kind whatever they hold, and know their own NAs.
        kind = pd.api.types.infer_dtype(values, skipna=False)
        safe = isinstance(values, np.ndarray) and kind in ("string", "integer", "bytes", "empty")
        missing = None if safe else np.asarray(pd.isna(values), dtype=bool)
    if missing is not None and missing.any():
        raise ValueError(
            f"{subject} has missing values (None/NaN/NA/NaT) in {describe_rows(rows(missing))}; every row needs "
            f"its {what}."
        )
    if kind == "boolean":
        raise ValueError(
            f"{subject} holds booleans; a {what} must be a string or an integer (bool is rejected because "
            "True == 1: pass the ids, not a mask)."
        )
    if kind.startswith("mixed") or kind == "unknown-array":
        # Error path only: name the Python kind of every key to show which rows differ.
        kinds = pd.Series([_key_type(v) for v in np.asarray(values, dtype=object)])
        counts = kinds.value_counts()
        if len(counts) == 1:
            raise ValueError(
                f"{subject} holds keys of type {counts.index[0]}; {what}s must be all strings or all "
                "integers (or all of one other scalar kind such as floats)."
            )
        parts = "; ".join(f"{k} in {describe_rows(rows((kinds == k).to_numpy()), limit=3)}" for k in counts.index)
        raise ValueError(
            f"{subject} mixes key types ({parts}); {what}s must be all strings or all integers (or all of "
            "one other scalar kind), never mixed, so that 1 and '1' are never silently merged or split. "
            "Convert them to one kind first (e.g. .astype(str) or .astype(int))."
        )
    if isinstance(values, pd.api.extensions.ExtensionArray):
        if kind in ("integer", "floating"):  # e.g. Int64 without NA: plain numbers
            values = values.to_numpy()
        # Other extension arrays (string, category, ...) stay as they are: pd.factorize reads them directly.
    elif dtype == object and kind in ("integer", "floating"):
        try:
            values = values.astype(np.int64 if kind == "integer" else np.float64)
        except OverflowError:  # integers beyond int64 stay Python ints
            pass
    return values, kind


def check_group_keys(keys, *, name: str = "groups"):
    """Validate question ids: the one rule for ``X["qid"]``, ``groups=`` and every metric's ``groups``.

    The keys must be all of one kind: all strings, all integers (Python or numpy, any width, signed or
    unsigned: ``np.int8(1)`` and ``1`` are the same question), or all of one other scalar kind (floats,
    bytes, dates, ...). Nothing is coerced: a list is read element by element, never through
    :func:`numpy.asarray`, which would turn ``[1, "1"]`` into two equal strings.

    Parameters
    ----------
    keys : array-like of shape (n_rows,)
        Question id of each row: a list, numpy array, pandas Series/Index or extension array.
    name : str, default="groups"
        How errors name the keys (``"groups"``, or ``"Column 'qid'"`` for a frame's column). Rows are named
        by the Series index when ``keys`` is a Series, otherwise by position.

    Returns
    -------
    keys : ndarray or pandas ExtensionArray of shape (n_rows,)
        The keys, ready for :func:`pandas.factorize`: a numpy array (integer and float keys given as Python
        objects become int64/float64), or the extension array itself for extension dtypes such as
        ``"string"`` or ``"category"``.

    Raises
    ------
    ValueError
        If ``keys`` is not one-dimensional, has a missing value (None, NaN, ``pd.NA``, NaT), holds booleans
        (``True == 1`` would merge them with integer ids; a boolean mask is not a question id), or mixes
        kinds (e.g. ``1`` and ``"1"``, or ``1`` and ``1.0``); the message names the offending rows.
    """
    return check_keys(keys, name)[0]


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
        If ``X`` is empty, a required column is missing, ``qid`` breaks the rule of
        :func:`check_group_keys` (missing values, booleans, mixed key types), ``position`` has missing
        values, or a ``position`` is repeated inside a question.
    """
    return _check_frame(X, text_columns, required)[0]


def require_columns(columns, names, explain) -> None:
    """Refuse a table without every column of ``names``: the one check of a table's required columns.

    ``columns`` are the table's column labels; ``explain(missing)`` gives the message of the ValueError, which says
    what the caller reads the ``missing`` columns for and how to supply them."""
    missing = [c for c in names if c not in columns]
    if missing:
        raise ValueError(explain(missing))


def check_text_columns(X, columns) -> None:
    """Refuse a column of ``columns`` that ``X`` has and that holds anything but ``str`` (a TypeError naming rows)."""
    for col in columns:
        if col not in X.columns:
            continue
        bad = nonstring_rows(X[col])
        if len(bad):
            raise TypeError(
                f"Column {col!r} must hold text (str) in every row; {describe_rows(bad)} "
                "hold a missing value (NaN/None) or a non-string."
            )


def _check_frame(X, text_columns, required):
    """:func:`check_X`, also returning the validated ``qid`` keys (so that they are checked once)."""
    if not isinstance(X, pd.DataFrame):
        raise TypeError(
            "X must be a pandas DataFrame in the grouped-candidate format (columns "
            f"{', '.join(REQUIRED_COLUMNS)}; one row per question/candidate pair), got {type(X).__name__}."
        )
    require_columns(X.columns, required, lambda missing: (
        f"X is missing the required column(s) {missing}; the grouped-candidate format needs "
        f"{list(REQUIRED_COLUMNS)} (found {list(X.columns)})."
    ))
    if len(X) == 0:
        raise ValueError("X is empty: at least one question/candidate row is needed.")
    if X.columns.duplicated().any():
        raise ValueError(f"X has duplicated column names: {list(X.columns[X.columns.duplicated()])}.")
    qid = check_group_keys(X["qid"], name=_QID_COLUMN)
    check_text_columns(X, text_columns)
    if "position" in X.columns:
        pos = X["position"]
        if not pd.api.types.is_numeric_dtype(pos.dtype) or pd.api.types.is_bool_dtype(pos.dtype):
            raise TypeError(f"Column 'position' must be numeric (0-based ranks), got dtype {pos.dtype}.")
        if pos.isna().any():
            rows = X.index[pos.isna().to_numpy()].to_numpy()
            raise ValueError(f"Column 'position' has missing values in {describe_rows(rows)}.")
        if (pos < 0).any():
            rows = X.index[(pos < 0).to_numpy()].to_numpy()
            raise ValueError(f"Column 'position' must be 0-based (>= 0); negative in {describe_rows(rows)}.")
    return X, qid


def check_labels(y, n_rows: int, *, name: str = "y", reference: str = "X") -> np.ndarray:
    """Validate relevance labels: numeric, finite, one per row of ``X``.

    ``reference`` names what fixed ``n_rows`` in the length error (``"X"``, or ``"groups"`` for a metric).
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
        unit = "rows" if reference == "X" else "entries"
        raise ValueError(f"{reference} has {n_rows} {unit} but {name} has {len(arr)} labels; they must match.")
    if not np.isfinite(arr).all():
        bad = np.flatnonzero(~np.isfinite(arr))
        raise ValueError(f"{name} has missing or infinite labels at positions {bad[:5].tolist()}.")
    return arr


def ragged_arange(lengths) -> np.ndarray:
    """``concatenate([arange(n) for n in lengths])`` without a Python loop: each element's index inside its
    run, for runs of the given lengths laid end to end."""
    lengths = np.asarray(lengths, dtype=np.intp)
    return np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)


class GroupIndex:
    """Row-to-question bookkeeping for one grouped-candidate frame, computed with whole-array operations.

    Groups are numbered ``0..n_groups-1`` in order of first appearance of their ``qid``. Rows of a group
    need not be contiguous in ``X``.

    Parameters
    ----------
    qid : array-like of shape (n_rows,)
        Question id of each row, validated by :func:`check_group_keys` (one kind of key, none missing).
    position : array-like of shape (n_rows,), default=None
        Original rank of each row inside its group; when ``None`` the row order inside the group.
    name : str, default="qid"
        How errors about the keys name them (``"groups"`` for an explicit ``groups`` argument).

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

    def __init__(self, qid, position=None, *, name: str = "qid"):
        self._build(check_group_keys(qid, name=name), position)

    @classmethod
    def _from_keys(cls, keys: np.ndarray, position=None) -> GroupIndex:
        """An index from keys that already passed :func:`check_group_keys`."""
        index = cls.__new__(cls)
        index._build(keys, position)
        return index

    def _build(self, qid: np.ndarray, position) -> None:
        codes, keys = pd.factorize(qid, sort=False, use_na_sentinel=True)
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
                    f"Column 'position' is duplicated inside question {plain_scalar(self.keys[sorted_codes[first]])!r} "
                    f"(position {plain_scalar(sorted_pos[first])!r} appears more than once); positions must be unique "
                    "within a question."
                )
        sizes = np.bincount(self.codes, minlength=len(self.keys))
        self.offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.intp)

    @classmethod
    def from_frame(cls, X: pd.DataFrame, groups=None) -> GroupIndex:
        """Build the index of a validated frame; ``groups`` (if given) overrides ``X["qid"]``."""
        keys = check_group_keys(X["qid"], name=_QID_COLUMN) if groups is None else _check_groups(groups, len(X))
        position = X["position"].to_numpy() if "position" in X.columns else None
        return cls._from_keys(keys, position)

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
        out[self.order] = ragged_arange(self.sizes)
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
        ranks[order] = ragged_arange(self.sizes) + 1
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
        return GroupIndex._from_keys(self.keys[self.codes[rows]], self.position_index()[rows])


def retrieval_positions(X: pd.DataFrame) -> np.ndarray | None:
    """The retrieval rank of every row of a checked frame, for every signal that reads one (RR, WO+RR, the
    ``reciprocal_rank`` feature): ``X["position"]`` as float64, or None when ``X`` has no ``position`` column.
    The row order is then no rank, and the caller says what it does instead (RR refuses, WO+RR keeps the
    overlap's ties, the feature is 0)."""
    return X["position"].to_numpy(dtype=np.float64) if "position" in X.columns else None


def reading_order(X: pd.DataFrame, index: GroupIndex) -> np.ndarray:
    """Rows of a checked frame grouped like ``index.order`` (``index.offsets`` delimit the questions), each
    question's candidates in the order a sequence model reads them: by ``position`` when ``X`` has one
    (``index.order`` itself), else by candidate text, so that the sequence never depends on how the rows of
    ``X`` are laid out (only identical texts keep their row order)."""
    if "position" in X.columns:
        return index.order
    text = pd.factorize(X["candidate"].to_numpy(), sort=True)[0]
    return np.lexsort((text, index.codes))


def check_ranking_data(X, y=None, groups=None, *, require_y: bool = True, text_columns=("question", "candidate")):
    """Validate ``X`` (and ``y``, ``groups``) and index its groups: the one entry point of every estimator.

    Parameters
    ----------
    X : pandas.DataFrame
        Grouped-candidate frame (see :func:`check_X`).
    y : array-like of shape (n_rows,), default=None
        Relevance labels.
    groups : array-like of shape (n_rows,), default=None
        Question ids; when given they take precedence over ``X["qid"]``. Both follow the rule of
        :func:`check_group_keys`.
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
    X, qid = _check_frame(X, text_columns, REQUIRED_COLUMNS)
    keys = qid if groups is None else _check_groups(groups, len(X))
    y_arr = check_labels(y, len(X)) if (y is not None or require_y) else None
    position = X["position"].to_numpy() if "position" in X.columns else None
    return X, y_arr, GroupIndex._from_keys(keys, position)


def _check_groups(groups, n_rows: int) -> np.ndarray:
    """An explicit ``groups`` argument: the key rule, and one entry per row of ``X``."""
    keys = check_group_keys(groups, name="groups")
    if len(keys) != n_rows:
        raise ValueError(
            f"groups has {len(keys)} entries but X has {n_rows} rows; groups must give the question id of "
            "every row of X."
        )
    return keys


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


def holdout_questions(index: GroupIndex, y: np.ndarray, fraction: float, rng) -> np.ndarray:
    """Rows of a validation split: ``fraction`` of the questions with a positive label (at least one), whole
    questions drawn with ``rng`` (a :class:`numpy.random.Generator`). Questions without a positive, which
    add nothing to a validation MAP, stay in training.

    Returns
    -------
    ndarray of bool of shape (n_rows,)
        True for the held-out rows.
    """
    answered = np.flatnonzero(index.max(y) > 0)
    n_held = max(1, int(np.ceil(fraction * len(answered))))
    held = np.zeros(index.n_groups, dtype=bool)
    held[rng.permutation(answered)[:n_held]] = True
    return held[index.codes]


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
