"""Reuse of trained weights across fits that differ only in inference parameters.

Model selection clones an estimator for every (parameter combination, fold) and fits each clone. When the
grid varies only parameters that act at prediction time (the cascade's ``alpha``, ``exit_layer``, the
inference batch size), clones of one fold would train identical models. :data:`FIT_CACHE` keys trained
weights by everything that determines training (estimator class, training parameters, the data, an integer
``random_state``), so ``GridSearchCV(CascadeTransformer(), {"alpha": [...]}, cv=GroupKFold(3))`` trains three
models, not one per grid point.

The key holds the *content* of the initial weights, not their name: ``model=`` and ``tokenizer=`` enter it as
their :func:`source_digest` (the bytes of every file of the directory a name resolves to; a config or
tokenizer object's pickle), computed afresh at every ``fit``. Overwriting a directory (a "transfer, save,
adapt" loop that saves to the same place) therefore changes the key, and the next ``fit`` trains. A name
that resolves to nothing on disk (a Hugging Face id not downloaded yet) disables reuse for that fit, and a
fit whose directory changed while it trained is not stored. The data part of the key holds the text
columns the model reads, the labels, the questions, the dev set and the per-row training targets (the
teachers' logits of a distilled student). A fit served from the cache says so: ``fit_cache_hit_`` is True,
and with ``verbose=True`` it prints one line.

The cache is per process and bounded in entries and in bytes (least recently used entries go first). With
``n_jobs>1`` (joblib's processes or Dask workers) each worker process has its own cache, and a task reuses a
fit only if its worker trained that fold before and still holds it: each worker trains each fold at most
once, so a grid of ``a`` inference-only values on ``f`` folds trains between ``f`` and ``min(k, a) × f``
models with ``k`` workers, instead of ``a × f``. Results are the same either way. A store shared across
processes (a directory keyed by the same :func:`fit_key`) could replace :class:`FitCache` without changing
the estimators.
"""

from __future__ import annotations

from collections import OrderedDict

import joblib

from ..digest import content_digest
from .models import resolve_model

__all__ = ["FIT_CACHE", "FitCache", "fit_key", "source_digest", "source_digests"]


def fit_key(estimator, params: dict, *data) -> str:
    """Hash of an estimator class, its training parameters and its training data."""
    return joblib.hash((type(estimator).__module__, type(estimator).__qualname__, params, data))


def _local_directory(name: str):
    """The directory ``name`` loads from, as :func:`~as2rank.neural.backbone.load_backbone` resolves it
    (an alias, a local path, or the cached snapshot of a Hugging Face id), or ``None`` when not on disk."""
    resolved, local = resolve_model(name)
    if local:
        return resolved
    try:
        from huggingface_hub import snapshot_download

        return snapshot_download(resolved, local_files_only=True)
    except Exception:  # not downloaded, not a valid id, no huggingface_hub: nothing to hash
        return None


def source_digest(source):
    """Digest of what a ``model=`` or ``tokenizer=`` value loads, or ``None`` if it cannot be told.

    Parameters
    ----------
    source : None, str, transformers.PretrainedConfig or tokenizer
        A name (alias, local directory, Hugging Face id) is hashed through the files it resolves to
        (:func:`as2rank.digest.content_digest`); anything else (``None``, a config, a tokenizer object) through its
        pickle (``joblib.hash``, which also covers the config attributes that ``to_json_string`` leaves out).

    Returns
    -------
    str or None
        ``None`` for a name that resolves to nothing on disk: the caller must not reuse a fit.
    """
    if not isinstance(source, str):
        return joblib.hash(source)
    directory = _local_directory(source)
    return None if directory is None else content_digest(directory)


def source_digests(model, tokenizer):
    """``(digest of model, digest of tokenizer)`` for :func:`fit_key` (one read of a directory named by
    both), or ``None`` if either cannot be told (see :func:`source_digest`)."""
    first = source_digest(model)
    second = first if isinstance(tokenizer, str) and tokenizer == model else source_digest(tokenizer)
    return None if first is None or second is None else (first, second)


class FitCache:
    """A bounded least-recently-used mapping ``fit_key -> fitted state``.

    Parameters
    ----------
    max_entries : int, default=8
        Enough for a k-fold grid search (one entry per fold plus the refit) with room to spare.
    max_bytes : int or None, default=4 GiB
        Bound on the weights held (each entry is one model's weights on the CPU, beside the estimator's
        own): eight all-MiniLM-L6-v2 or BERT-base entries fit, fewer of a larger model. A state larger than
        the bound is not stored. ``None``: no bound in bytes.
    sizeof : callable, default=None
        Bytes of a stored value; None: the tensors of a fitted state (its ``state_dict``). Another value
        makes this the bounded store of other things (the token cache,
        :data:`~as2rank.neural.tokens.TOKEN_CACHE`).

    Attributes
    ----------
    hits, misses : int
        Lookups answered and not answered (a miss is followed by a training run).
    nbytes : int
        Bytes of the weights held.
    """

    def __init__(self, max_entries: int = 8, max_bytes: int | None = 4 * 2**30, sizeof=None):
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.sizeof = _nbytes if sizeof is None else sizeof
        self._entries: OrderedDict = OrderedDict()  # key -> (state, bytes)
        self.nbytes = 0
        self.hits = 0
        self.misses = 0

    def get(self, key: str):
        """The state stored under ``key``, or ``None``."""
        if key in self._entries:
            self._entries.move_to_end(key)
            self.hits += 1
            return self._entries[key][0]
        self.misses += 1
        return None

    def put(self, key: str, state) -> None:
        """Store ``state`` (treated as read-only) under ``key``, evicting the oldest entries beyond the bounds."""
        size = self.sizeof(state)
        if self.max_bytes is not None and size > self.max_bytes:
            return
        self._drop(key)
        self._entries[key] = (state, size)
        self.nbytes += size
        while self._over_bounds():
            self._drop(next(iter(self._entries)))

    def _over_bounds(self) -> bool:
        too_many = len(self._entries) > max(0, self.max_entries)
        return too_many or (self.max_bytes is not None and self.nbytes > self.max_bytes)

    def _drop(self, key: str) -> None:
        if key in self._entries:
            self.nbytes -= self._entries.pop(key)[1]

    def clear(self) -> None:
        """Drop every entry and reset the counters."""
        self._entries.clear()
        self.nbytes = 0
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)


def _nbytes(state) -> int:
    """Bytes of the tensors of a fitted state (its ``state_dict``; the rest is small)."""
    tensors = state.get("state_dict", {}) if isinstance(state, dict) else {}
    return sum(int(getattr(t, "nbytes", 0)) for t in tensors.values())


#: The process-wide cache used by the transformer estimators (``reuse_fit=True``).
FIT_CACHE = FitCache()
