"""Shared torch plumbing of the neural estimators: the one training shell (:mod:`as2rank.neural.shell`), devices,
seeding, thread counts, the training loop (one process or several, under Accelerate), its callbacks and early
stopping, question batching and the training losses (:mod:`as2rank.neural.losses`).

The names below load their module on first use: importing this package, :mod:`as2rank.neural.shell`,
:mod:`as2rank.neural.callbacks` or :mod:`as2rank.neural.early_stopping` does not import torch, so the estimator
classes built on the shell import without it and the lexical estimators stay light.
"""

import importlib

#: The package's names and the module each comes from.
_SOURCES = {
    **dict.fromkeys(("PRECISIONS", "autocast", "autocast_dtype", "call_seed", "cpu_bf16_supported", "int8_supported",
                     "resolve_device", "resolve_precision", "seeded", "to_device", "torch_threads"), "devices"),
    "Callback": "callbacks",
    "EarlyStopping": "early_stopping",
    "listwise_kl_loss": "losses",
    **dict.fromkeys(("OPTIMIZERS", "SCHEDULES", "TrainingHistory", "TrainingState", "linear_warmup_decay",
                     "padded_groups", "question_batches", "slanted_triangular", "token_batches", "train"), "training"),
}

__all__ = sorted(_SOURCES)


def __getattr__(name):
    if name not in _SOURCES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_SOURCES[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted({*globals(), *__all__})
