"""Reuse of trained weights across fits that differ only in inference parameters.

Model selection clones an estimator for every (parameter combination, fold) and fits each clone. When the
grid varies only parameters that act at prediction time (the cascade's ``alpha``, ``exit_layer``, the
inference batch size), clones of one fold would train identical models. :data:`FIT_CACHE` keys trained
weights by everything that determines training (estimator class, training parameters, the data, an integer
``random_state``), so ``GridSearchCV(CascadeTransformer(), {"alpha": [...]}, cv=GroupKFold(3))`` trains three
models, not one per grid point.

The cache is per process and bounded (least recently used entries go first). With ``n_jobs>1`` (joblib's
processes or Dask workers) each worker process has its own cache, and a task reuses a fit only if its
worker trained that fold before and still holds it: each worker trains each fold at most once, so a grid
of ``a`` inference-only values on ``f`` folds trains between ``f`` and ``min(k, a) × f`` models with ``k``
workers, instead of ``a × f``. Results are the same either way. A store shared across processes (a
directory keyed by the same :func:`fit_key`) could replace :class:`FitCache` without changing the
estimators.
"""

from __future__ import annotations

from collections import OrderedDict

import joblib

__all__ = ["FIT_CACHE", "FitCache", "fit_key"]


def fit_key(estimator, params: dict, *data) -> str:
    """Hash of an estimator class, its training parameters and its training data."""
    return joblib.hash((type(estimator).__module__, type(estimator).__qualname__, params, data))


class FitCache:
    """A bounded least-recently-used mapping ``fit_key -> fitted state``.

    Parameters
    ----------
    max_entries : int, default=8
        Enough for a k-fold grid search (one entry per fold plus the refit) with room to spare; each entry
        holds one model's weights on the CPU.

    Attributes
    ----------
    hits, misses : int
        Lookups answered and not answered (a miss is followed by a training run).
    """

    def __init__(self, max_entries: int = 8):
        self.max_entries = max_entries
        self._entries: OrderedDict = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, key: str):
        """The state stored under ``key``, or ``None``."""
        if key in self._entries:
            self._entries.move_to_end(key)
            self.hits += 1
            return self._entries[key]
        self.misses += 1
        return None

    def put(self, key: str, state) -> None:
        """Store ``state`` (treated as read-only) under ``key``, evicting the oldest entries beyond the bound."""
        self._entries[key] = state
        self._entries.move_to_end(key)
        while len(self._entries) > max(0, self.max_entries):
            self._entries.popitem(last=False)

    def clear(self) -> None:
        """Drop every entry and reset the counters."""
        self._entries.clear()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)


#: The process-wide cache used by the transformer estimators (``reuse_fit=True``).
FIT_CACHE = FitCache()
