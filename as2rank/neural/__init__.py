"""Shared torch plumbing of the neural estimators: devices, seeding, the training loop, question batching
and ranking losses.

Importing this package imports torch; ``import as2rank`` does not, so the lexical estimators stay light.
"""

from .devices import (
    PRECISIONS,
    autocast,
    cpu_bf16_supported,
    int8_supported,
    resolve_device,
    resolve_precision,
    seeded,
    to_device,
)
from .training import (
    OPTIMIZERS,
    SCHEDULES,
    TrainingHistory,
    linear_warmup_decay,
    listwise_kl_loss,
    padded_groups,
    question_batches,
    slanted_triangular,
    train,
)

__all__ = [
    "OPTIMIZERS",
    "PRECISIONS",
    "autocast",
    "cpu_bf16_supported",
    "int8_supported",
    "SCHEDULES",
    "TrainingHistory",
    "linear_warmup_decay",
    "listwise_kl_loss",
    "padded_groups",
    "question_batches",
    "resolve_device",
    "resolve_precision",
    "seeded",
    "slanted_triangular",
    "to_device",
    "train",
]
