"""The int8 copies of a fitted module that ``precision="int8"`` predicts with on the CPU: static int8 on ONNX
Runtime (:func:`onnx_copy`, for modules calibrated at fit), or torch's dynamic quantization
(:func:`dynamic_copy`) where ONNX Runtime is not installed.

The copies are derived from the fitted weights, and exporting one takes seconds: :data:`INT8_COPIES` keeps
the copy of each fitted module beside it (weakly: it goes with the module), not on the estimator, so
``predict`` leaves the estimator as ``fit`` or loading left it."""

from __future__ import annotations

import copy
import warnings
import weakref
from pathlib import Path

import numpy as np
import torch

from ..predict import batch_tensors
from .runtime import int8_copy, ranges_key

__all__ = ["INT8_COPIES", "Int8Copies", "dynamic_copy", "onnx_copy"]


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


class Int8Copies:
    """The int8 copy of each fitted module, built on first use and kept while the module lives.

    A copy is rebuilt when what decides it changes: ONNX Runtime or torch's copy, the thread count, the input
    names and (by value: a copy quantized to other ranges is another model) the activation ranges. A module
    loaded from a directory with saved int8 graphs (``save_pretrained(path, int8=True)``) reads them rather
    than exporting, where they were exported from its weights (:func:`~as2rank.neural.onnx.runtime.int8_copy`).
    """

    def __init__(self):
        self._entries = weakref.WeakKeyDictionary()

    def attach_graphs(self, module, folder) -> None:
        """Let ``module``'s ONNX Runtime copy be read from the graphs saved in ``folder``."""
        self._entries[module] = {"graphs": Path(folder), "copy": None}

    def forget(self, module) -> None:
        """Drop ``module``'s copy and saved graphs: its weights are about to change (training continues)."""
        self._entries.pop(module, None)

    def get(self, module, *, onnx: bool, encoded=None, ranges=None):
        """The int8 copy of ``module``: on ONNX Runtime (``onnx``; static int8 to ``ranges``, traced on a few
        of the ``encoded`` rows) or torch's dynamic quantization."""
        threads = torch.get_num_threads()
        key = ("onnx", threads, tuple(encoded), ranges_key(ranges)) if onnx else ("torch", threads)
        entry = self._entries.setdefault(module, {"graphs": None, "copy": None})
        if entry["copy"] is None or entry["copy"][0] != key:
            built = onnx_copy(module, encoded, ranges, entry["graphs"]) if onnx else dynamic_copy(module)
            entry["copy"] = (key, built)
        return entry["copy"][1]


#: The int8 copies of the fitted modules of this process.
INT8_COPIES = Int8Copies()
