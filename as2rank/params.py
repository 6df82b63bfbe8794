"""Torch-free checks of estimator parameters: numeric bounds, and the values of ``precision`` that each family
of neural estimators accepts.

The estimators validate their parameters before importing torch, so the precision table lives here rather
than in :mod:`as2rank.neural.devices` (which re-exports its part as :data:`as2rank.neural.PRECISIONS`).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["DTYPE_PRECISIONS", "TRANSFORMER_PRECISIONS", "check_precision"]

#: Values of ``precision`` that name one compute dtype: float32 (``"fp32"``), bfloat16 (``"bf16"``) or the
#: faster of the two that the device computes natively (``"auto"``); :class:`~as2rank.cosinet.Cosinet`'s
#: values, resolved by :func:`as2rank.neural.resolve_precision`.
DTYPE_PRECISIONS = ("auto", "fp32", "bf16")

#: Values of ``precision`` of the transformer estimators: the dtype values (as autocast), float16 autocast
#: with loss scaling (``"fp16"``, CUDA only) and an int8 copy of the model for prediction (``"int8"``, CPU
#: only: dynamic quantization of the linear layers).
TRANSFORMER_PRECISIONS = (*DTYPE_PRECISIONS, "fp16", "int8")


def check_precision(precision, supported) -> None:
    """Raise ``ValueError`` unless ``precision`` is one of ``supported``.

    Parameters
    ----------
    precision : object
        An estimator's ``precision`` parameter.
    supported : tuple of str
        :data:`DTYPE_PRECISIONS` or :data:`TRANSFORMER_PRECISIONS`.
    """
    if precision not in supported:
        raise ValueError(f"precision must be one of {supported}, got {precision!r}.")


def _check_number(name, value, low, high=None, *, integer=False, low_open=False, allow_none=False):
    """Raise ``ValueError`` unless ``value`` is a finite number (an integer with ``integer``) in the bounds.

    Parameters
    ----------
    name : str
        The parameter's name, for the message.
    value : object
    low : float
        Lower bound: ``value >= low``, or ``value > low`` with ``low_open``.
    high : float, default=None
        Upper bound (``value <= high``); ``None`` for none.
    integer : bool, default=False
        Require an integer (booleans are never numbers here).
    low_open : bool, default=False
    allow_none : bool, default=False
        Accept ``None``.
    """
    if value is None and allow_none:
        return
    kind = (int, np.integer) if integer else (int, float, np.integer, np.floating)
    ok = isinstance(value, kind) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (value > low if low_open else value >= low) and (high is None or value <= high)
    if not ok:
        bound = f"{'>' if low_open else '>='} {low}" + (f" and <= {high}" if high is not None else "")
        raise ValueError(f"{name} must be {'an integer' if integer else 'a number'} {bound}, got {value!r}.")
