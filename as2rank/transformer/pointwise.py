"""Pointwise cross-encoders: one encoder cut to depth, one logit per row, binary cross-entropy.

What :class:`~as2rank.transformer.ranker.TransformerRanker` and the context rankers of :mod:`as2rank.transformer.context.rankers`
share: preparing the backbone (:func:`prepare_encoder`) and the training loss (:func:`bce_loss`); their
prediction is :func:`as2rank.neural.predict.predict_logits`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..neural.backbone import layer_list, native_pooling, truncate_layers

__all__ = ["bce_loss", "prepare_encoder"]


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

