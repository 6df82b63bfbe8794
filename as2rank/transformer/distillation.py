"""The multi-head student of CERBERUS (Matsubara et al., 2022, §3.3); its loss (Eq. 1, after Hinton et al.)
is :class:`as2rank.neural.losses.HeadDistillation`.

The k ranking heads of :class:`CerberusEncoder` are not k modules called in turn: the weights of block ``l``
of every head are stacked along a leading head axis (:class:`StackedBlocks`), so each matrix product of a
block is one batched product (``torch.baddbmm``) over all heads, and attention runs once over ``k × batch``
rows. Each head still has weights of its own: the product for head ``i`` reads only slice ``i``, so the loss of
head ``i`` sends no gradient to head ``j``.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from ..neural.backbone import LayerStack, encoder_states, layer_list, pool, position_bias, truncate_layers
from .network import SegmentSimilarity, feed_forward, head_logits, segment_cosine, with_prior

__all__ = ["CerberusEncoder", "StackedBlocks", "StackedClassifiers"]


# Parameters of a block by stacked name: of a BERT-style block (BERT, RoBERTa, XLM-R, CamemBERT, ELECTRA), and of
# MPNet's, the same computation under other names (its attention ``attention.attn``, projections ``q``, ``k``, ``v``,
# ``o``). The query, key and value projections are concatenated (one product for the three).
_FFN_PARAMS = {
    "ffn_in_weight": "intermediate.dense.weight",
    "ffn_in_bias": "intermediate.dense.bias",
    "ffn_out_weight": "output.dense.weight",
    "ffn_out_bias": "output.dense.bias",
    "ffn_norm_weight": "output.LayerNorm.weight",
    "ffn_norm_bias": "output.LayerNorm.bias",
}
_BLOCK_PARAMS = {
    "bert": {"attn_out_weight": "attention.output.dense.weight", "attn_out_bias": "attention.output.dense.bias",
             "attn_norm_weight": "attention.output.LayerNorm.weight", "attn_norm_bias": "attention.output.LayerNorm.bias",
             **_FFN_PARAMS},
    "mpnet": {"attn_out_weight": "attention.attn.o.weight", "attn_out_bias": "attention.attn.o.bias",
              "attn_norm_weight": "attention.LayerNorm.weight", "attn_norm_bias": "attention.LayerNorm.bias",
              **_FFN_PARAMS},
}
_QKV = {"bert": ("attention.self.query", "attention.self.key", "attention.self.value"),
        "mpnet": ("attention.attn.q", "attention.attn.k", "attention.attn.v")}


# glibc's largest mmap threshold: larger allocations come as fresh pages (see CerberusEncoder.head_rows).
_CPU_TEMP_BYTES = 32 * 2**20


def _baddbmm(x, weight, bias):
    """``x @ weight[i].T + bias[i]`` for every head ``i`` at once: x (k, n, in), weight (k, out, in)."""
    return torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))


class StackedBlocks(nn.Module):
    """One transformer block for each of k heads, computed for all heads at once.

    Parameters
    ----------
    blocks : list of transformers blocks
        The k blocks (BERT-style: ``attention.self.{query,key,value}``, ``attention.output.{dense,LayerNorm}``,
        ``intermediate.dense``, ``output.{dense,LayerNorm}``; or MPNet's, see ``_BLOCK_PARAMS``); their weights
        are copied and stacked.
    """

    def __init__(self, blocks):
        super().__init__()
        first = blocks[0]
        # Whose names the weights have (block_state gives them back): MPNet's blocks hold ``attention.attn``.
        self.kind = "mpnet" if hasattr(first.attention, "attn") else "bert"
        attention = first.attention.attn if self.kind == "mpnet" else first.attention.self
        self.n_attention_heads = attention.num_attention_heads
        self.attention_dropout = attention.dropout.p
        self.hidden_dropout = first.output.dropout.p
        self.eps = first.output.LayerNorm.eps
        # The activation module (GELU for these models) holds no weights.
        self.activation = copy.deepcopy(first.intermediate.intermediate_act_fn)

        def stack(names):
            return nn.Parameter(torch.stack([torch.cat([b.get_parameter(n).detach() for n in names]) for b in blocks]))

        self.qkv_weight = stack([f"{p}.weight" for p in _QKV[self.kind]])
        self.qkv_bias = stack([f"{p}.bias" for p in _QKV[self.kind]])
        for name, hf_name in _BLOCK_PARAMS[self.kind].items():
            setattr(self, name, stack([hf_name]))

    def block_state(self, i: int) -> dict:
        """Head ``i``'s weights under the names of the transformers block they came from."""
        hidden = self.qkv_weight.shape[-1]
        state = {}
        for j, prefix in enumerate(_QKV[self.kind]):
            state[f"{prefix}.weight"] = self.qkv_weight[i, j * hidden : (j + 1) * hidden]
            state[f"{prefix}.bias"] = self.qkv_bias[i, j * hidden : (j + 1) * hidden]
        state.update({hf_name: getattr(self, name)[i] for name, hf_name in _BLOCK_PARAMS[self.kind].items()})
        return {k: v.detach().clone() for k, v in state.items()}

    def _norm(self, x, weight, bias):
        normed = F.layer_norm(x, x.shape[-1:], eps=self.eps)
        return torch.addcmul(bias.to(x.dtype).unsqueeze(1), normed, weight.to(x.dtype).unsqueeze(1))

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor, batch_shape) -> torch.Tensor:
        """Apply head ``i``'s block to ``hidden[i]`` for every ``i``.

        Parameters
        ----------
        hidden : Tensor of shape (k, batch × length, hidden)
            May be a stride-0 expansion of one input shared by all heads (the body's output).
        mask : Tensor of shape (k × batch, 1, 1, length) or (k × batch, heads, length, length)
            Boolean, True for real tokens; or float, added to the attention scores (MPNet's relative position
            bias, the dtype's minimum on padding).
        batch_shape : tuple (batch, length)

        Returns
        -------
        Tensor of shape (k, batch × length, hidden)
        """
        k, _, width = hidden.shape
        batch, length = batch_shape
        heads = self.n_attention_heads
        qkv = _baddbmm(hidden, self.qkv_weight, self.qkv_bias).view(k, batch, length, 3, heads, width // heads)
        # (k, batch) merge into one batch axis without a copy: attention runs once for every head.
        q, key, value = (qkv.select(3, j).transpose(2, 3).reshape(k * batch, heads, length, -1) for j in range(3))
        dropout = self.attention_dropout if self.training else 0.0
        mask = mask if mask.dtype == torch.bool else mask.to(q.dtype)
        context = F.scaled_dot_product_attention(q, key, value, attn_mask=mask, dropout_p=dropout)
        context = context.transpose(1, 2).reshape(k, batch * length, width)
        attended = F.dropout(_baddbmm(context, self.attn_out_weight, self.attn_out_bias), self.hidden_dropout, self.training)
        attended = self._norm(attended + hidden, self.attn_norm_weight, self.attn_norm_bias)
        inner = self.activation(_baddbmm(attended, self.ffn_in_weight, self.ffn_in_bias))
        out = F.dropout(_baddbmm(inner, self.ffn_out_weight, self.ffn_out_bias), self.hidden_dropout, self.training)
        return self._norm(out + attended, self.ffn_norm_weight, self.ffn_norm_bias)


class StackedClassifiers(nn.Module):
    """k feed-forward classifiers (dropout, dense + tanh, dropout, dense → 1 logit, as
    :func:`~as2rank.transformer.network.feed_forward` with 2 layers), computed at once from stacked weights.

    Parameters
    ----------
    classifiers : list of torch.nn.Sequential
        k modules made by ``feed_forward(hidden, 2)``; their weights are copied and stacked.
    """

    def __init__(self, classifiers):
        super().__init__()
        self.dropout = classifiers[0][0].p

        def stack(index, name):
            return nn.Parameter(torch.stack([getattr(c[index], name).detach() for c in classifiers]))

        self.dense_weight, self.dense_bias = stack(1, "weight"), stack(1, "bias")
        self.out_weight, self.out_bias = stack(4, "weight"), stack(4, "bias")

    def classifier_state(self, i: int) -> dict:
        """Head ``i``'s weights under the names of ``feed_forward(hidden, 2)``."""
        pairs = {"1": (self.dense_weight, self.dense_bias), "4": (self.out_weight, self.out_bias)}
        return {f"{n}.{kind}": p[i].detach().clone() for n, ps in pairs.items() for kind, p in zip(("weight", "bias"), ps)}

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        """Logits of shape (k, batch) from pooled encodings of shape (k, batch, hidden)."""
        x = F.dropout(pooled, self.dropout, self.training)
        x = torch.tanh(_baddbmm(x, self.dense_weight, self.dense_bias))
        x = F.dropout(x, self.dropout, self.training)
        return _baddbmm(x, self.out_weight, self.out_bias).squeeze(-1)


class CerberusEncoder(nn.Module):
    """A shared body of ``body_layers`` blocks and ``n_heads`` ranking heads of ``head_layers`` blocks each
    (the paper's B_b kH_h), each head followed by its own classifier.

    Built from a pretrained encoder of at least ``body_layers + head_layers`` blocks: blocks
    ``0 .. body_layers − 1`` form the body, and every head starts as a copy of blocks
    ``body_layers .. body_layers + head_layers − 1``; deeper blocks are dropped. An encoder of exactly
    ``body_layers`` blocks (a saved body) gets heads of the right shape whose weights the caller loads.

    Parameters
    ----------
    encoder : transformers.PreTrainedModel
        BERT-style (see :class:`~as2rank.neural.backbone.LayerStack`).
    body_layers, head_layers, n_heads : int
    pooling : {"cls", "mean"}
        What each head's classifier reads from its last block.
    similarity : bool, default=False
        Give each head a :class:`~as2rank.transformer.network.SegmentSimilarity` term of its last block's
        encodings (the batches then carry ``question_mask``).
    """

    def __init__(self, encoder, body_layers: int, head_layers: int, n_heads: int, pooling: str = "cls",
                 similarity: bool = False):
        super().__init__()
        LayerStack(encoder)  # fail early on an unsupported architecture
        layers = layer_list(encoder)
        # A pretrained encoder is deeper than the body; a saved body only gives the blocks' shape.
        fresh = len(layers) > body_layers
        top = list(layers[body_layers : body_layers + head_layers]) if fresh else [layers[-1]] * head_layers
        self.heads = nn.ModuleList(StackedBlocks([block] * n_heads) for block in top)
        hidden = encoder.config.hidden_size
        self.classifiers = StackedClassifiers([feed_forward(hidden, 2) for _ in range(n_heads)])
        self.encoder = truncate_layers(encoder, body_layers)
        self.pooling = pooling
        self.n_heads = n_heads
        self.similarity = nn.ModuleList(SegmentSimilarity() for _ in range(n_heads)) if similarity else None

    def forward(self, batch: dict) -> torch.Tensor:
        """Logits of every head for every row, shape (n_rows, n_heads): the body runs once. A batch's per-row
        ``prior`` logits, when it has them, are added to every head's."""
        body = encoder_states(self.encoder, batch)
        if torch.is_autocast_enabled(body.device.type):
            # The heads' products run in the autocast dtype anyway; keeping their residual stream in it too (HF
            # blocks keep float32) halves the memory traffic of their k times wider element-wise steps.
            body = body.to(torch.get_autocast_dtype(body.device.type))
        return with_prior(self._over_row_blocks(body, batch, self._logits), batch)

    def segment_cosines(self, batch: dict) -> torch.Tensor:
        """The cosine each head's :class:`~as2rank.transformer.network.SegmentSimilarity` term weighs, for every
        row, shape (rows, n_heads)."""
        return self._over_row_blocks(encoder_states(self.encoder, batch), batch, self._cosines)

    def _over_row_blocks(self, body: torch.Tensor, batch: dict, compute) -> torch.Tensor:
        """``compute(hidden, masks)`` of the heads' last encodings, over the row blocks of :meth:`head_rows`."""
        masks = {k: batch[k] for k in ("attention_mask", "question_mask") if k in batch}
        step = self.head_rows(body)
        if step >= len(body):
            return compute(*self._head_states(body, masks))
        return torch.cat([compute(*self._head_states(body[i : i + step], {k: v[i : i + step] for k, v in masks.items()}))
                          for i in range(0, len(body), step)])

    def head_rows(self, body: torch.Tensor) -> int:
        """Rows of the body's output that the heads take at once: all of them, except in CPU inference.

        On the CPU, glibc serves every allocation above 32 MiB (its largest mmap threshold) with fresh pages,
        each faulted in on first touch, and a head block's feed-forward temporaries are ``n_heads`` times
        those of one block. Inference there runs the heads over row blocks whose widest temporary stays under
        that size (all heads still at once for each block), so their temporaries reuse pages instead of
        faulting in fresh ones (the CERBERUS benchmark measures the latency). ``predict``'s default
        CPU batches (2,048 tokens) stay under it anyway; larger ``batch_tokens`` and direct calls of the
        module get the blocks. Training keeps whole batches, so its steps are the same with or without them.
        """
        batch_size, length, _ = body.shape
        if self.training or body.device.type != "cpu":
            return batch_size
        widest = self.n_heads * length * self.heads[0].ffn_in_weight.shape[1] * body.element_size()
        return max(1, min(batch_size, _CPU_TEMP_BYTES // widest))

    def _head_states(self, body: torch.Tensor, masks: dict) -> tuple:
        """Every head's last encodings of the rows of ``body``, shape (n_heads × rows, length, width), and the
        rows' masks repeated for each head."""
        batch_size, length, width = body.shape
        k = self.n_heads
        mask = masks["attention_mask"].bool()[:, None, None, :].repeat(k, 1, 1, 1)
        bias = position_bias(self.encoder, body)
        if bias is not None:  # MPNet: the blocks add the body's relative position bias to their scores
            mask = torch.where(mask, bias, torch.finfo(bias.dtype).min)
        # Every head reads the same body output: an expanded view, not k copies.
        hidden = body.reshape(1, batch_size * length, width).expand(k, -1, -1)
        for block in self.heads:
            hidden = block(hidden, mask, (batch_size, length))
        return hidden.view(k * batch_size, length, width), {name: m.repeat(k, 1) for name, m in masks.items()}

    def _cosines(self, hidden: torch.Tensor, masks: dict) -> torch.Tensor:
        """Each head's segment cosine of its rows, shape (rows, n_heads)."""
        return segment_cosine(hidden, masks).view(self.n_heads, -1).transpose(0, 1)

    def _logits(self, hidden: torch.Tensor, masks: dict) -> torch.Tensor:
        """Each head's logit of its rows (its classifier, plus its similarity term), shape (rows, n_heads)."""
        k = self.n_heads
        pooled = pool(hidden, masks["attention_mask"], self.pooling).view(k, -1, hidden.shape[-1])
        logits = head_logits(self.classifiers, pooled).transpose(0, 1)
        if self.similarity is None:
            return logits
        weights = torch.stack([term.weight for term in self.similarity])
        return logits + weights * self._cosines(hidden, masks)
