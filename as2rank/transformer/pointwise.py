"""Cross-encoders of one logit per row: the encoder cut to depth.

What :class:`~as2rank.transformer.ranker.TransformerRanker` and the context rankers of :mod:`as2rank.transformer.context.rankers`
share: preparing the backbone (:func:`prepare_encoder`); their loss is
:func:`as2rank.transformer.losses.label_loss`, their prediction :func:`as2rank.neural.predict.predict_logits`.
"""

from __future__ import annotations


from ..neural.backbone import layer_list, native_pooling, truncate_layers

__all__ = ["prepare_encoder"]


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
