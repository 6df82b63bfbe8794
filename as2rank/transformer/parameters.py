"""The accepted values of the parameters every transformer ranker shares, declared once.

Each transformer ranker writes out its whole ``__init__``: its own parameters (backbone, heads, loss), then the
training budget, optimizer, early-stopping, device, precision and bookkeeping parameters that all of them take,
in the same order and with the same defaults (:class:`~as2rank.transformer.ranker.TransformerRanker`'s docstring
describes them; a ranker whose measured budget differs says so in its own). :data:`TRAINING_CONSTRAINTS` holds
what those shared parameters accept, the entries of every ranker's ``_parameter_constraints``. NumPy only:
importable without torch.
"""

from __future__ import annotations

from numbers import Integral, Real

from ..neural.callbacks import CONSTRAINTS as CALLBACK_CONSTRAINTS
from ..neural.early_stopping import CONSTRAINTS as EARLY_STOPPING_CONSTRAINTS
from ..params import (
    DEVICE_CONSTRAINTS,
    LOSSES,
    RANDOM_STATE_CONSTRAINTS,
    TRANSFORMER_PRECISIONS,
    Boolean,
    Interval,
    Options,
    check_param,
)

__all__ = ["AUTO_BATCH_TOKENS", "BATCH_TOKENS_CONSTRAINTS", "TRAINING_CONSTRAINTS", "resolve_batch_tokens"]

#: ``batch_tokens="auto"``: padded tokens per prediction batch on the CPU (a torch model, and an int8 copy on
#: ONNX Runtime), and on other devices (CUDA). On the CPU small batches keep the activations in cache and pad
#: less; the ONNX Runtime copy is faster still with smaller ones (the speed benchmark sweeps both).
AUTO_BATCH_TOKENS = {"cpu": 2048, "cpu-onnx": 512, "other": 16384}

#: Accepted values of ``batch_tokens`` (the transformer rankers' and :class:`~as2rank.transformer.zeroshot.ZeroShotRanker`'s).
BATCH_TOKENS_CONSTRAINTS = [Options(("auto",)), Interval(Integral, 1, None)]


def resolve_batch_tokens(batch_tokens, device, auto=AUTO_BATCH_TOKENS, *, onnx: bool = False) -> int:
    """The padded-token budget of a prediction batch on ``device``: ``batch_tokens``, or for ``"auto"`` the entry of
    ``auto`` for the device (on the CPU, ``"cpu-onnx"`` for an int8 copy on ONNX Runtime). ``batch_tokens`` acts
    at prediction only and may be set after ``fit``, so it is checked here."""
    if isinstance(batch_tokens, str) and batch_tokens == "auto":
        if device.type != "cpu":
            return auto["other"]
        return auto["cpu-onnx" if onnx else "cpu"]
    check_param("batch_tokens", batch_tokens, BATCH_TOKENS_CONSTRAINTS)
    return int(batch_tokens)

#: Accepted values of the shared parameters (``_parameter_constraints`` entries), in signature order.
TRAINING_CONSTRAINTS = {
    "epochs": [Interval(Integral, 1, None)],
    "batch_size": [Interval(Integral, 1, None)],
    "loss": [Options(LOSSES)],
    "learning_rate": [Interval(Real, 0, None, closed="neither")],
    "head_lr_multiplier": [Interval(Real, 0, None, closed="neither")],
    "weight_decay": [Interval(Real, 0, None)],
    "warmup": [Interval(Real, 0, 1)],
    "max_grad_norm": [Interval(Real, 0, None, closed="neither"), None],
    **EARLY_STOPPING_CONSTRAINTS,
    "eval_every": [Interval(Integral, 1, None), None],
    "warm_start": [Boolean()],
    "freeze_embeddings": [Boolean()],
    "batch_tokens": BATCH_TOKENS_CONSTRAINTS,
    "device": DEVICE_CONSTRAINTS,
    "precision": [Options(TRANSFORMER_PRECISIONS)],
    "n_threads": [Interval(Integral, 1, None), None],
    "reuse_fit": [Boolean()],
    "random_state": RANDOM_STATE_CONSTRAINTS,
    "verbose": [Boolean()],
    "callbacks": CALLBACK_CONSTRAINTS,
}
