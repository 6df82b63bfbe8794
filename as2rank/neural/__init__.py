"""Shared torch plumbing of the neural estimators: devices, seeding, thread counts, the training loop (one
process or several, under Accelerate) and its callbacks, question batching and the training losses
(:mod:`as2rank.neural.losses`).

Importing this package imports torch; ``import as2rank`` does not, so the lexical estimators stay light.
"""

from .devices import (
    PRECISIONS,
    autocast,
    autocast_dtype,
    call_seed,
    cpu_bf16_supported,
    int8_supported,
    resolve_device,
    resolve_precision,
    seeded,
    to_device,
    torch_threads,
)
from .callbacks import Callback, EarlyStopping
from .losses import listwise_kl_loss
from .training import (
    OPTIMIZERS,
    SCHEDULES,
    TrainingHistory,
    TrainingState,
    linear_warmup_decay,
    padded_groups,
    question_batches,
    slanted_triangular,
    train,
)

__all__ = [
    "Callback",
    "EarlyStopping",
    "OPTIMIZERS",
    "PRECISIONS",
    "SCHEDULES",
    "TrainingHistory",
    "TrainingState",
    "autocast",
    "autocast_dtype",
    "call_seed",
    "cpu_bf16_supported",
    "int8_supported",
    "linear_warmup_decay",
    "listwise_kl_loss",
    "padded_groups",
    "question_batches",
    "resolve_device",
    "resolve_precision",
    "seeded",
    "slanted_triangular",
    "to_device",
    "torch_threads",
    "train",
]
