"""The one batched prediction loop of the neural estimators (:func:`predict_batches`) and its per-row use by
the cross-encoders (:func:`predict_logits`).

Every estimator's ``predict`` goes through :func:`predict_batches`: it says how its rows are batched (by
token budget, by question) and what one batch computes; the loop runs the batches without gradients under
autocast, behind the progress bar, and gathers the outputs in row order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from .backbone import batch_tensors, token_budget_batches
from .devices import autocast, to_device

__all__ = ["Predictor", "no_progress", "predict_batches", "predict_logits"]

#: Outputs kept on the device before :func:`predict_batches` reads them (16M values: 64 MiB in float32).
PENDING_VALUES = 1 << 24


def no_progress(batches, n_batches: int, desc: str):
    """The ``progress`` of a loop that shows no bar: the batches themselves."""
    return batches


def predict_batches(batches, run, n_rows: int, *, device, dtype, progress, desc: str = "predict") -> np.ndarray:
    """Run ``run`` on every batch and gather its outputs by row.

    Parameters
    ----------
    batches : sequence
        What ``run`` takes, one item per batch.
    run : callable
        ``run(batch)`` returns ``(rows, out)``: the indices of the rows the batch scores and their outputs,
        a tensor or array of shape (len(rows), ...).
    n_rows : int
        Rows in all.
    device : torch.device
    dtype : torch.dtype
        Autocast dtype (``torch.float32``: none).
    progress : callable
        ``progress(batches, n_batches, description)`` returns an iterable over the batches (a progress bar
        or the batches themselves).
    desc : str, default="predict"
        The progress bar's description.

    Returns
    -------
    ndarray of float64 of shape (n_rows, ...)
        Each row's output; NaN for rows no batch scored.
    """
    rows, values, pending = [], [], []
    n_pending = 0

    def read():
        # One device-to-host transfer for every output not yet read.
        nonlocal n_pending
        values.append(torch.cat([out.float() for out in pending]).cpu().numpy())
        pending.clear()
        n_pending = 0

    with torch.inference_mode(), autocast(device, dtype):
        for batch in progress(batches, len(batches), desc):
            batch_rows, out = run(batch)
            rows.append(np.asarray(batch_rows))
            if not isinstance(out, torch.Tensor):
                if pending:  # keep the values in the order of their rows
                    read()
                values.append(np.asarray(out))
                continue
            # Tensors stay where ``run`` left them, so that a GPU never idles while the next batch is prepared
            # and launched; they are read once per call (or per PENDING_VALUES values, bounding device memory).
            pending.append(out)
            n_pending += out.numel()
            if n_pending >= PENDING_VALUES:
                read()
    if pending:
        read()
    if not rows:
        return np.full(n_rows, np.nan)
    values = np.concatenate(values)
    scores = np.full((n_rows, *values.shape[1:]), np.nan)
    scores[np.concatenate(rows)] = values
    return scores


def predict_logits(module, encoded: dict, device, *, batch_tokens: int, dtype, progress) -> np.ndarray:
    """The module's logit(s) for every encoded row, in row order (one per row, or one per head of a
    multi-head module).

    Rows are packed into batches of at most ``batch_tokens`` padded tokens (sorted by length, see
    :func:`~as2rank.neural.backbone.token_budget_batches`).

    Parameters
    ----------
    module : torch.nn.Module
        Maps a batch to one logit per row; already on ``device``, in evaluation mode.
    encoded : dict of ndarray
        Token arrays of shape (n, width) and ``lengths`` of shape (n,) (as
        :func:`~as2rank.neural.backbone.encode_pairs` returns them).
    device : torch.device
    batch_tokens : int
        Padded tokens per batch.
    dtype : torch.dtype
        Autocast dtype (``torch.float32``: none).
    progress : callable
        As in :func:`predict_batches`.

    Returns
    -------
    ndarray of float64 of shape (n,) or (n, n_heads)
        As the module's output per row.
    """
    n = len(encoded["lengths"])
    batches = token_budget_batches(np.ones(n, dtype=np.int64), encoded["lengths"], batch_tokens)
    return predict_batches(
        batches, lambda rows: (rows, module(to_device(batch_tensors(encoded, rows), device))), n,
        device=device, dtype=dtype, progress=progress,
    )


@dataclass(frozen=True)
class Predictor:
    """What a fitted estimator predicts with on one device: the module (the fitted one, or its int8 copy),
    the device, the autocast dtype and the padded-token budget of a batch. Built by the transformer estimators'
    ``predictor()`` from their fitted state and their current inference parameters.

    Attributes
    ----------
    module : torch.nn.Module or int8 copy
    device : torch.device
    dtype : torch.dtype
        Autocast dtype (``torch.float32``: none).
    batch_tokens : int
        Padded tokens per batch.
    progress : callable
        ``progress(batches, n_batches, description)``: the progress bar, or :func:`no_progress`.
    """

    module: object
    device: torch.device
    dtype: torch.dtype
    batch_tokens: int
    progress: Callable = no_progress

    def logits(self, encoded: dict) -> np.ndarray:
        """The module's output for every ``encoded`` row (:func:`predict_logits`)."""
        return predict_logits(self.module, encoded, self.device, batch_tokens=self.batch_tokens, dtype=self.dtype,
                              progress=self.progress)
