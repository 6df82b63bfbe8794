"""Calibration of static int8 quantization: the range of each input channel of every linear layer over some
training rows.

``precision="int8"`` on ONNX Runtime smooths each matrix product's input by factors that the per-channel
ranges decide, then quantizes it with a fixed scale and zero point taken from them
(:mod:`as2rank.neural.onnx.runtime`). Fixed scales make a row's score a function of that row alone; dynamic
quantization would scale each input by the range of its whole batch, so a score would change with the other
rows predicted beside it.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ..batching import token_budget_batches
from ..predict import batch_tensors
from ..devices import to_device

__all__ = ["CALIBRATION_ROWS", "activation_ranges", "calibration_rows"]

#: Training rows whose activations set the ranges (evenly spread over the training rows). 128 reproduced the
#: float32 scores of held-out questions as well as 512 or all of them did in the CPU prediction benchmark, and
#: costs a quarter of 512's forward pass at the end of every fit.
CALIBRATION_ROWS = 128
#: Padded tokens per calibration batch.
_BATCH_TOKENS = 4096


def calibration_rows(rows: np.ndarray, n: int = CALIBRATION_ROWS) -> np.ndarray:
    """At most ``n`` of ``rows``, evenly spread (first and last included): no random draw, so the ranges are a
    function of the fitted weights and the training rows."""
    if len(rows) <= n:
        return np.asarray(rows)
    return np.asarray(rows)[np.unique(np.linspace(0, len(rows) - 1, n).round().astype(np.int64))]


def activation_ranges(module: nn.Module, encoded: dict, rows: np.ndarray, device, previous: dict | None = None) -> dict:
    """The smallest and largest value of each input channel of each linear layer while ``module`` scores
    ``rows``.

    The module runs in float32, without gradients, on batches of rows of similar length; inputs with a
    token axis count the real tokens only (padding never reaches a score). A cascade (a module with
    ``all_exits``) runs every exit, so that each exit's classifier is calibrated.

    Parameters
    ----------
    module : torch.nn.Module
        On ``device``.
    encoded : dict of ndarray
        Token arrays of shape (n, width) and ``lengths`` (:func:`~as2rank.neural.tokens.encode_pairs`).
    rows : ndarray of int
        The rows of ``encoded`` to run.
    device : torch.device
    previous : dict, optional
        Ranges of earlier data (``partial_fit``'s earlier chunks): the result covers both. A range of the
        whole input (``[low, high]``, as models calibrated before per-channel ranges hold) bounds every
        channel.

    Returns
    -------
    dict of str to ndarray of float32 of shape (2, n_inputs)
        ``{name of the linear layer in module: [lows, highs]}``, one low and one high per input channel, for
        every linear layer that ran.
    """
    ranges = {name: np.asarray(r, dtype=np.float32) for name, r in (previous or {}).items()}
    mask = {}

    def record(name):
        def hook(layer, inputs):
            x = inputs[0].detach()
            if x.dim() == 3 and mask["real"].shape == x.shape[:2]:
                x = x[mask["real"]]
            low, high = torch.aminmax(x.float().reshape(-1, x.shape[-1]), dim=0)
            seen = np.stack([low.cpu().numpy(), high.cpu().numpy()])
            old = ranges.get(name)
            if old is not None:
                old = old.reshape(2, -1)  # a whole-input range bounds every channel
                seen = np.stack([np.minimum(old[0], seen[0]), np.maximum(old[1], seen[1])])
            ranges[name] = seen

        return hook

    run = getattr(module, "all_exits", module)
    handles = [layer.register_forward_pre_hook(record(name)) for name, layer in module.named_modules()
               if isinstance(layer, nn.Linear)]
    training = module.training
    module.eval()
    try:
        lengths = encoded["lengths"][rows]
        with torch.inference_mode(), torch.autocast(device.type, enabled=False):
            for part in token_budget_batches(np.ones(len(rows), dtype=np.int64), lengths, _BATCH_TOKENS):
                batch = to_device(batch_tensors(encoded, rows[part]), device)
                mask["real"] = batch["attention_mask"].bool()
                run(batch)
    finally:
        for handle in handles:
            handle.remove()
        module.train(training)
    return ranges
