"""The int8 copies of a fitted module that ``precision="int8"`` predicts with on the CPU: static int8 on ONNX
Runtime (:func:`onnx_copy`, for modules calibrated at fit), or torch's dynamic quantization
(:func:`dynamic_copy`) where ONNX Runtime is not installed."""

from __future__ import annotations

import copy
import warnings

import numpy as np
import torch

from ..backbone import batch_tensors
from .runtime import int8_copy

__all__ = ["dynamic_copy", "onnx_copy"]


def onnx_copy(module, encoded: dict, ranges: dict, saved=None):
    """An int8 copy of ``module`` on ONNX Runtime (static quantization to the input ``ranges`` of its linear
    layers), exported on a few of the ``encoded`` rows, or read from the ``saved`` graphs of the same model
    (see :func:`~as2rank.neural.onnx.runtime.int8_copy`)."""
    example = batch_tensors(encoded, np.arange(4) % len(encoded["lengths"]))  # >= 2 rows: a dynamic axis
    return int8_copy(module, example, ranges, threads=torch.get_num_threads(), saved=saved)


def dynamic_copy(module):
    """An int8 copy of ``module`` (CPU, evaluation mode): dynamic quantization of every linear layer."""
    quantized = copy.deepcopy(module).to("cpu").eval()
    with warnings.catch_warnings():
        # torch.ao.quantization is deprecated in favour of torchao (not a dependency); it still works.
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", UserWarning)
        return torch.ao.quantization.quantize_dynamic(quantized, {torch.nn.Linear}, dtype=torch.qint8)
