"""Pointwise cross-encoders: one encoder cut to depth, one logit per row, binary cross-entropy.

What :class:`~as2rank.transformer.TransformerRanker` and the context rankers of :mod:`as2rank.context`
share: preparing the backbone (:func:`prepare_encoder`), the training loss (:func:`bce_loss`) and the
prediction loop over encoded rows (:func:`predict_logits`). Each estimator calls these from its own
methods.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from .backbone import batch_tensors, layer_list, native_pooling, token_budget_batches, truncate_layers
from .devices import autocast, to_device

__all__ = ["bce_loss", "predict_logits", "prepare_encoder"]


def prepare_encoder(encoder, model, num_layers, pooling) -> tuple:
    """Cut ``encoder`` to ``num_layers`` blocks and resolve ``pooling="auto"``.

    Parameters
    ----------
    encoder : transformers.PreTrainedModel
        The loaded backbone.
    model : str or transformers.PretrainedConfig
        The estimator's ``model`` parameter (``"auto"`` pooling follows the checkpoint it names).
    num_layers : int or None
        Transformer blocks to keep; ``None`` keeps all.
    pooling : {"auto", "cls", "mean"}

    Returns
    -------
    encoder : transformers.PreTrainedModel
        The encoder with its first ``n_layers`` blocks.
    n_layers : int
    pooling : {"cls", "mean"}

    Raises
    ------
    ValueError
        When ``num_layers`` is more than the encoder has.
    """
    depth = len(layer_list(encoder))
    if num_layers is not None and num_layers > depth:
        raise ValueError(f"num_layers={num_layers} but the encoder has only {depth} layers.")
    n_layers = depth if num_layers is None else int(num_layers)
    resolved = native_pooling(model) if pooling == "auto" else pooling
    return truncate_layers(encoder, n_layers), n_layers, resolved


def bce_loss(module, batch: dict) -> torch.Tensor:
    """Binary cross-entropy of the module's logit for each row against its 0/1 label.

    Parameters
    ----------
    module : torch.nn.Module
        Maps a batch to one logit per row, shape (rows,).
    batch : dict of torch.Tensor
        The module's inputs and ``labels`` (float 0/1, shape (rows,)).

    Returns
    -------
    torch.Tensor
        The mean loss (a scalar).
    """
    return F.binary_cross_entropy_with_logits(module(batch), batch["labels"])


def predict_logits(module, encoded: dict, device, *, batch_tokens: int, dtype, progress) -> np.ndarray:
    """The module's logit(s) for every encoded row, in row order (one per row, or one per head of a
    multi-head module).

    Rows are packed into batches of at most ``batch_tokens`` padded tokens (sorted by length, see
    :func:`~as2rank.neural.backbone.token_budget_batches`) and run without gradients under autocast.

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
        ``progress(batches, n_batches, description)`` returns an iterable over the batches (a progress bar
        or the batches themselves).

    Returns
    -------
    ndarray of float64 of shape (n,) or (n, n_heads)
        As the module's output per row.
    """
    n = len(encoded["lengths"])
    scores = None
    batches = token_budget_batches(np.ones(n, dtype=np.int64), encoded["lengths"], batch_tokens)
    with torch.inference_mode(), autocast(device, dtype):
        for rows in progress(batches, len(batches), "predict"):
            out = module(to_device(batch_tensors(encoded, rows), device)).float().cpu().numpy()
            if scores is None:
                scores = np.empty((n, *out.shape[1:]), dtype=np.float64)
            scores[rows] = out
    return np.empty(0, dtype=np.float64) if scores is None else scores
