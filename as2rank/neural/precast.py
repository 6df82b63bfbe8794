"""Linear weights cast to the autocast dtype once per fitted model, not once per ``predict`` call.

Under autocast every linear layer casts its float32 weight and bias to the autocast dtype on each call of the
prediction loop: for a request of a few pairs on a CPU, these casts are a large share of the call (every weight
of the encoder is read and written again). :data:`PRECAST_COPIES` keeps, per fitted module and dtype, a copy
whose linear layers also hold their weight and bias in that dtype, and use them whenever autocast to that dtype
is on where they run: autocast would have cast them to the same values (round to nearest even), so the outputs
are the same bits. Where autocast is off (a float32 score head) a layer uses its float32 weight as before.

The copy shares every float32 tensor with the fitted module (only the cast weights are new memory: half the
linear weights' bytes at bfloat16). It is rebuilt when a parameter of the module changes in place (its version
counter) or is replaced, so it never predicts with weights the module no longer has.
"""

from __future__ import annotations

import copy
import weakref

import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["PRECAST_COPIES", "PrecastCopies", "PrecastLinear", "precast_copy"]


class PrecastLinear(nn.Linear):
    """A linear layer that also holds its weight and bias in one autocast dtype (``cast``), read when autocast
    to that dtype is on for the input's device."""

    cast: tuple

    def forward(self, x):
        """``x @ W.T + b``, with the weights already in the autocast dtype when autocast to it is on."""
        dtype, weight, bias = self.cast
        kind = x.device.type
        if torch.is_autocast_enabled(kind) and torch.get_autocast_dtype(kind) == dtype:
            return F.linear(x, weight, bias)
        return F.linear(x, self.weight, self.bias)


def _state(module: nn.Module) -> tuple:
    """What the copy depends on: each parameter's identity and in-place version."""
    return tuple((id(p), p._version) for p in module.parameters())


def precast_copy(module: nn.Module, dtype: torch.dtype) -> nn.Module:
    """A copy of ``module`` sharing its tensors, each :class:`torch.nn.Linear` a :class:`PrecastLinear` holding its
    weight and bias in ``dtype`` too."""
    shared = {id(t): t for t in [*module.parameters(), *module.buffers()]}
    out = copy.deepcopy(module, shared)
    for layer in out.modules():
        if type(layer) is nn.Linear:
            layer.__class__ = PrecastLinear
            bias = None if layer.bias is None else layer.bias.detach().to(dtype)
            layer.cast = (dtype, layer.weight.detach().to(dtype), bias)
    return out


class PrecastCopies:
    """The precast copy (:func:`precast_copy`) of each fitted module and dtype, built on first use and kept
    while the module lives and its parameters are unchanged."""

    def __init__(self):
        self._entries = weakref.WeakKeyDictionary()

    def get(self, module: nn.Module, dtype: torch.dtype) -> nn.Module:
        """The copy of ``module`` for autocast to ``dtype``."""
        state = _state(module)
        entry = self._entries.get(module)
        if entry is None or entry[0] != (dtype, state):
            # The parameters are held so that an identity in ``state`` cannot be reused by another tensor.
            entry = ((dtype, state), precast_copy(module, dtype), list(module.parameters()))
            self._entries[module] = entry
        return entry[1]


#: The precast copies of the fitted modules of this process.
PRECAST_COPIES = PrecastCopies()
