"""Torch modules of the context rankers (Han, Soldaini & Moschitti 2021, §2.2): multi-way attention over
context segments and the two-encoder context ensemble.

Inputs carry a ``segments`` tensor beside ``input_ids`` (see :data:`SEGMENTS`), so that a module can tell
the question, candidate, local-context and global-context tokens of one concatenated sequence apart.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ...params import SUMMARIES as _SUMMARIES
from ...params import Options, check_param
from ...neural.backbone import encoder_states, masked_mean
from ...neural.backbone import pool
from ..network import SegmentSimilarity, head_logits, segment_cosine, with_prior

__all__ = ["SEGMENTS", "SUMMARIES", "ContextEnsembleModule", "MultiwayAttention", "MultiwayContextEncoder", "check_summary",
           "contexts_together", "gather_segments", "multiway_attend", "multiway_weights", "segment_widths"]

#: Segment id of each token of a context input: special tokens (and padding) are 0.
SEGMENTS = {"special": 0, "question": 1, "candidate": 2, "local": 3, "global": 4}


def classifier(in_features: int, hidden: int, dropout: float = 0.1) -> nn.Sequential:
    """Dropout, dense ``in_features → hidden`` + tanh, dropout, dense → 1 logit (the cross-encoder head,
    widened to read several pooled vectors)."""
    return nn.Sequential(nn.Dropout(dropout), nn.Linear(in_features, hidden), nn.Tanh(), nn.Dropout(dropout), nn.Linear(hidden, 1))


def segment_widths(segments: torch.Tensor, groups) -> list[int]:
    """For each group of segment ids, the largest number of its tokens in a row (at least 1).

    One device-to-host read for all groups, made before the encoder runs (a read after the encoder would make
    a GPU idle while the rest is launched). It still waits for the work queued before it, so
    :class:`MultiwayContextEncoder` reads the widths from the batch's host-side counts where it has them.

    Parameters
    ----------
    segments : Tensor of int, shape (batch, length)
        Segment id of every token (:data:`SEGMENTS`).
    groups : sequence of sequences of int

    Returns
    -------
    list of int
    """
    return _widths([_kept(segments, ids).sum(dim=1) for ids in groups])


def _widths(counts) -> list[int]:
    return torch.stack(counts).amax(dim=1).clamp_min(1).tolist()


def _kept(segments: torch.Tensor, ids) -> torch.Tensor:
    # Comparisons with Python ints: a tensor of ``ids`` would be a host-to-device copy, which on a GPU waits
    # for everything queued before it.
    keep = segments == ids[0]
    for i in ids[1:]:
        keep |= segments == i
    return keep


def gather_segments(hidden: torch.Tensor, segments: torch.Tensor, ids, width: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The tokens of some segments of each row, packed to the left and padded to ``width``.

    Parameters
    ----------
    hidden : Tensor of shape (batch, length, dim)
    segments : Tensor of int, shape (batch, length)
        Segment id of every token (:data:`SEGMENTS`).
    ids : sequence of int
        Segments to keep, in sequence order (their tokens keep their order).
    width : int, default=None
        Tokens per row of the output, at least the largest count of kept tokens in a row
        (:func:`segment_widths`); ``None`` reads that count from the device.

    Returns
    -------
    tokens : Tensor of shape (batch, width, dim)
    mask : Tensor of bool, shape (batch, width)
        True for real tokens; a row without any token of ``ids`` is all False.
    """
    keep = _kept(segments, ids)
    counts = keep.sum(dim=1)
    if width is None:
        width = max(1, int(counts.max()))
    return _pack(hidden, keep, counts, width)


def _pack(hidden, keep, counts, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    tokens, mask = _pack_groups(hidden, keep[None], counts[None], width)
    return tokens[0], mask[0]


def _pack_groups(hidden, keeps, counts, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The kept tokens of several groups at once: ``keeps`` (groups, batch, length) and ``counts`` (groups,
    batch) give tokens (groups, batch, width, dim) and their mask (groups, batch, width), with one sort and one
    gather for all groups (on a GPU each operator is a kernel launch)."""
    groups, batch, length = keeps.shape
    # A stable sort of "not kept" brings the kept positions first, in their order.
    order = torch.sort((~keeps).to(torch.int8), dim=-1, stable=True).indices[..., :width]
    rows = torch.arange(0, batch * length, length, device=hidden.device)
    flat = (order + rows[:, None]).reshape(-1)
    tokens = hidden.reshape(batch * length, -1).index_select(0, flat).view(groups, batch, width, -1)
    mask = torch.arange(width, device=hidden.device) < counts.unsqueeze(-1)
    return tokens, mask


class _Projection(nn.Linear):
    """A weight of :class:`MultiwayAttention`, which :func:`multiway_weights` reads as a tensor (stacked with the
    others) rather than calling the layer. A class of its own, so that torch's dynamic int8 quantization of a
    fitted model (``precision="int8"``), which replaces the layers of class ``nn.Linear`` itself, keeps it float."""


class MultiwayAttention(nn.Module):
    """Multi-way attention (Tan et al., IJCAI 2018): each query token attends to the key tokens with four
    scoring functions, and the four attended views are mixed by an attention over the ways.

    With query token ``q`` and key token ``k``:

    * concat: ``v_cᵀ tanh(W_c¹ q + W_c² k)``
    * bilinear: ``qᵀ W_b k``
    * dot: ``v_dᵀ tanh(W_d (P_q q ⊙ P_k k))``
    * minus: ``v_mᵀ tanh(W_m (q − k))``

    Scores are soft-maxed over the real key tokens; each way's view of a query token is the weighted sum
    of the keys. Mixed aggregation: ``s_w = vᵀ tanh(W_a view_w + U_a q)``, soft-maxed over the ways, and the
    output is ``Σ_w softmax(s)_w view_w``.

    Departures from Tan et al., for cost: the concat, dot and minus ways work in an ``attention_dim`` space
    (their (query × key × attention_dim) tensors are the layer's memory and time), so the dot way takes the
    element-wise product after projecting ``q`` and ``k`` (``P_q``, ``P_k``) rather than in the full hidden
    space; and the views feed a pooled classifier directly (the transformer below already contextualises
    every token, where Tan et al. run a GRU).

    Parameters
    ----------
    hidden : int
        Token encoding size.
    attention_dim : int
        Size of the concat, dot and minus scoring spaces and of the way-mixing layer.
    """

    WAYS = ("concat", "bilinear", "dot", "minus")

    def __init__(self, hidden: int, attention_dim: int):
        super().__init__()
        a, linear = attention_dim, _Projection
        self.concat_query, self.concat_key = linear(hidden, a, bias=False), linear(hidden, a, bias=False)
        self.bilinear = linear(hidden, hidden, bias=False)
        self.dot_query, self.dot_key = linear(hidden, a, bias=False), linear(hidden, a, bias=False)
        self.dot = linear(a, a, bias=False)
        # W_m (q − k) = W_m q − W_m k: one projection of each side, not one per (query, key) pair.
        self.minus = linear(hidden, a, bias=False)
        self.score = nn.ModuleDict({w: linear(a, 1, bias=False) for w in ("concat", "dot", "minus")})
        self.mix_view, self.mix_query = linear(hidden, a, bias=False), linear(hidden, a)
        self.mix_score = linear(a, 1, bias=False)

    def weights(self, query, keys, key_mask) -> torch.Tensor:
        """Attention weights of every way, shape (batch, 4, queries, keys); zero on padded keys, and all
        zero for a row without keys."""
        return multiway_weights([self], query, keys[None], key_mask[None])[0][0]

    def forward(self, query, query_mask, keys, key_mask) -> torch.Tensor:
        """Attended representation of every query token.

        Parameters
        ----------
        query : Tensor of shape (batch, queries, hidden)
        query_mask : Tensor of bool, shape (batch, queries)
        keys : Tensor of shape (batch, keys, hidden)
        key_mask : Tensor of bool, shape (batch, keys)

        Returns
        -------
        Tensor of shape (batch, queries, hidden)
            Zero for padded query tokens and for rows without keys.
        """
        return multiway_attend([self], query, query_mask, keys[None], key_mask[None])[0]


def multiway_weights(layers, query, keys, key_mask) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:meth:`MultiwayAttention.weights` of several layers at once, each over its own keys, the query shared:
    the same values as each layer alone, in a fixed number of operators whatever the number of layers (on a GPU
    each is a kernel launch, which a small attention waits on more than on arithmetic).

    Parameters
    ----------
    layers : sequence of MultiwayAttention
    query : Tensor of shape (batch, queries, hidden)
    keys : Tensor of shape (layers, batch, keys, hidden)
    key_mask : Tensor of bool, shape (layers, batch, keys)

    Returns
    -------
    weights : Tensor of shape (layers, batch, 4, queries, keys)
    mix_query : Tensor of shape (layers, batch, queries, attention_dim)
        ``U_a q`` of the way mixing (:func:`multiway_attend`).
    mix_keys : Tensor of shape (layers, batch, keys, attention_dim)
        ``W_a k``.
    """
    n, a, hidden = len(layers), layers[0].dot.in_features, query.shape[-1]
    (_, batch, n_keys, _), n_queries = keys.shape, query.shape[1]
    # One projection of the query for every layer and way: W_m (q − k) = W_m q + (−W_m) k, so concat and minus are
    # both sums of a query and a key projection, and one broadcast sum and one tanh serve both.
    width = 4 * a + hidden
    query_weights = torch.cat([w for layer in layers for w in (layer.concat_query.weight, layer.minus.weight,
                                                                  layer.dot_query.weight, layer.mix_query.weight,
                                                                  layer.bilinear.weight)])
    q = F.linear(query, query_weights)
    q = q.view(batch, n_queries, n, width).permute(2, 0, 1, 3)  # (L, B, Tq, 4a + H)
    key_weights = torch.cat([w for layer in layers for w in (layer.concat_key.weight, -layer.minus.weight,
                                                                 layer.dot_key.weight, layer.mix_view.weight)])
    k = torch.bmm(keys.reshape(n, batch * n_keys, hidden), key_weights.view(n, 4 * a, hidden).transpose(1, 2))
    k = k.view(n, batch, n_keys, 4 * a)
    pairs = batch * n_queries * n_keys
    # The concat and minus scores: v_cᵀ tanh(·) and v_mᵀ tanh(·), as one product with a block-diagonal (2a × 2).
    score = torch.cat([layer.score[way].weight for layer in layers for way in ("concat", "minus")]).view(n, 2, a, 1)
    block = (score * torch.eye(2, device=score.device, dtype=score.dtype)[None, :, None, :]).reshape(n, 2 * a, 2)
    additive = torch.bmm(torch.tanh(q[..., None, : 2 * a] + k[:, :, None, :, : 2 * a]).reshape(n, pairs, 2 * a), block)
    product = (q[..., None, 2 * a : 3 * a] * k[:, :, None, :, 2 * a : 3 * a]).reshape(n, pairs, a)
    dot_weight = torch.stack([layer.dot.weight for layer in layers])
    dot_score = torch.stack([layer.score["dot"].weight for layer in layers])  # (L, 1, a)
    dot = torch.bmm(torch.tanh(torch.bmm(product, dot_weight.transpose(1, 2))), dot_score.transpose(1, 2))
    bilinear = q[..., 4 * a :] @ keys.transpose(-1, -2)  # (L, B, Tq, Tk)
    additive, dot = additive.view(n, batch, n_queries, n_keys, 2), dot.view(n, batch, n_queries, n_keys)
    scores = torch.stack((additive[..., 0], bilinear, dot, additive[..., 1]), dim=2)  # ways in WAYS' order
    invalid = ~key_mask[:, :, None, None, :]
    # A finite fill (not -inf) keeps rows without any key free of NaN in the forward and backward pass.
    scores = scores.masked_fill(invalid, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1).masked_fill(invalid, 0.0)
    mix_query = q[..., 3 * a : 4 * a]
    mix_bias = torch.stack([layer.mix_query.bias for layer in layers])[:, None, None, :].to(mix_query.dtype)
    return weights, mix_query + mix_bias, k[..., 3 * a :]


def multiway_attend(layers, query, query_mask, keys, key_mask) -> torch.Tensor:
    """:class:`MultiwayAttention` of several layers at once, each over its own keys (see
    :func:`multiway_weights`), shape (layers, batch, queries, hidden); zero for padded query tokens and for
    rows without keys."""
    weights, mix_query, mix_keys = multiway_weights(layers, query, keys, key_mask)
    # view_w = weights_w @ keys, so W_a view_w = weights_w @ (W_a keys) and Σ_w β_w view_w =
    # (Σ_w β_w weights_w) @ keys: the same values without materialising the four (Tq × hidden) views.
    n, batch, ways, n_queries, n_keys = weights.shape
    # Products of whole matrices (the ways and queries as rows), not broadcast ones that would copy an operand.
    projected = (weights.view(n, batch, ways * n_queries, n_keys) @ mix_keys).view(n, batch, ways, n_queries, -1)
    mixing = torch.tanh(projected + mix_query.unsqueeze(2)).view(n, batch * ways * n_queries, -1)
    mix_score = torch.stack([layer.mix_score.weight for layer in layers]).transpose(1, 2)  # (L, a, 1)
    mix = torch.softmax(torch.bmm(mixing, mix_score).view(n, batch, ways, n_queries, 1), dim=2)
    mixed = (mix * weights).sum(dim=2) @ keys
    return mixed * query_mask.unsqueeze(-1).to(mixed.dtype)


#: What :class:`MultiwayContextEncoder`'s classifier may read beside the attended views (defined in
#: :data:`as2rank.params.SUMMARIES`).
SUMMARIES = _SUMMARIES


def check_summary(summary) -> None:
    """Raise ``ValueError`` unless ``summary`` is one of :data:`SUMMARIES`."""
    check_param("summary", summary, [Options(SUMMARIES)])


def contexts_together(device) -> bool:
    """Whether :class:`MultiwayContextEncoder` runs its contexts' attention layers together on ``device``, over keys
    packed to the widest context (:func:`multiway_attend`): on a GPU, where a batch waits on kernel launches more
    than on arithmetic; on the CPU each context runs over its own width, with no work on padding."""
    return torch.device(device).type == "cuda"


class MultiwayContextEncoder(nn.Module):
    """One encoder over question, candidate and context segments; multi-way attention from the
    question+candidate tokens to each context's tokens, separately; a classifier over a summary of the
    encoding and the attended views averaged over the question+candidate tokens (the MWA model, paper
    Figure 2c).

    Parameters
    ----------
    encoder : transformers.PreTrainedModel
    pooling : {"cls", "mean"}
        Pooling of the whole sequence (as :class:`~as2rank.transformer.network.CrossEncoder`), used by
        ``summary="sequence"``.
    contexts : tuple of str
        ``"local"`` and/or ``"global"``: one :class:`MultiwayAttention` each.
    attention_dim : int
    summary : {"pair", "sequence"}, default="pair"
        What the classifier reads beside the attended views: the mean of the question+candidate tokens'
        own encodings (``"pair"``: Tan et al.'s aggregation reads each token's encoding beside its
        attended views), or the pooled whole sequence, context tokens included (``"sequence"``).
    similarity : bool, default=False
        Add a :class:`~as2rank.transformer.network.SegmentSimilarity` term of the question's and the candidate's
        segments (the batches then carry ``question_mask`` and ``candidate_mask``).
    """

    def __init__(self, encoder, pooling: str, contexts, attention_dim: int, summary: str = "pair",
                 similarity: bool = False):
        super().__init__()
        check_summary(summary)
        hidden = encoder.config.hidden_size
        self.encoder = encoder
        self.pooling = pooling
        self.summary = summary
        self.contexts = tuple(contexts)
        self.attention = nn.ModuleDict({c: MultiwayAttention(hidden, attention_dim) for c in self.contexts})
        self.head = classifier(hidden * (1 + len(self.contexts)), hidden)
        self.similarity = SegmentSimilarity() if similarity else None

    def segment_cosines(self, batch: dict) -> torch.Tensor:
        """The cosine that the :class:`~as2rank.transformer.network.SegmentSimilarity` term weighs, for every row,
        shape (rows, 1)."""
        return segment_cosine(encoder_states(self.encoder, batch), batch)[:, None]

    def forward(self, batch: dict) -> torch.Tensor:
        """One logit per row of ``batch`` (its ``segments`` tell the question, candidate and context
        tokens apart), shape (rows,).

        The packed segments' widths come from the batch's ``host_segment_counts`` (tokens of each segment id
        in each row, a host array) when it has them, else from one read of the device (see
        :func:`segment_widths`)."""
        groups = [(SEGMENTS["question"], SEGMENTS["candidate"])] + [(SEGMENTS[c],) for c in self.contexts]
        keeps = [_kept(batch["segments"], ids) for ids in groups]
        counts = [keep.sum(dim=1) for keep in keeps]
        host = batch.get("host_segment_counts")
        if host is None:
            widths = _widths(counts)  # before the encoder: see segment_widths
        else:
            widths = [max(1, int(host[:, list(ids)].sum(axis=1).max(initial=0))) for ids in groups]
        hidden = encoder_states(self.encoder, batch)
        query, query_mask = _pack(hidden, keeps[0], counts[0], widths[0])
        parts = [masked_mean(query, query_mask) if self.summary == "pair" else pool(hidden, batch["attention_mask"], self.pooling)]
        layers = [self.attention[context] for context in self.contexts]
        runs = [range(len(layers))] if contexts_together(hidden.device) else [[i] for i in range(len(layers))]
        views = []
        for run in runs:
            keys, key_mask = _pack_groups(hidden, torch.stack([keeps[1 + i] for i in run]),
                                          torch.stack([counts[1 + i] for i in run]), max(widths[1 + i] for i in run))
            attended = multiway_attend([layers[i] for i in run], query, query_mask, keys, key_mask)  # (run, B, Tq, H)
            pooled = masked_mean(attended.flatten(0, 1), query_mask.repeat(len(run), 1))  # (run × B, H)
            views.append(pooled.view(len(run), -1, pooled.shape[-1]))
        parts.append(torch.cat(views).transpose(0, 1).flatten(1))  # by row, the contexts in order
        logits = head_logits(self.head, torch.cat(parts, dim=-1)).squeeze(-1)
        if self.similarity is not None:
            logits = logits + self.similarity(hidden, batch)
        return with_prior(logits, batch)


class ContextEnsembleModule(nn.Module):
    """Two encoders, one reading question + candidate + local context and one question + candidate +
    global context; their pooled encodings concatenated into a classifier (paper Figure 2b).

    The batch holds the local inputs under the usual keys and the global ones under ``global_*`` keys.
    With ``trim_padding`` (the default) each set is cut to its own longest row, so neither pays for the
    other's padding; without it both run at the batch's width (fixed-length timing). With ``similarity``, a
    :class:`~as2rank.transformer.network.SegmentSimilarity` term of the question's and the candidate's segments in
    the local encoding (the batches then carry ``question_mask`` and ``candidate_mask`` of the local inputs).
    """

    def __init__(self, encoder, global_encoder, pooling: str, trim_padding: bool = True, similarity: bool = False):
        super().__init__()
        self.encoder = encoder
        self.global_encoder = global_encoder
        self.pooling = pooling
        self.trim_padding = trim_padding
        hidden = encoder.config.hidden_size
        self.head = classifier(2 * hidden, hidden)
        self.similarity = SegmentSimilarity() if similarity else None

    def _widths(self, batch) -> list[int]:
        masks = (batch["attention_mask"], batch["global_attention_mask"])
        if self.trim_padding:
            # Both widths in one host read, before either encoder runs (see segment_widths).
            return torch.stack([m.sum(dim=1).amax() for m in masks]).clamp_min(1).tolist()
        return [m.shape[1] for m in masks]

    @staticmethod
    def _inputs(batch, prefix, width, keys=("input_ids", "attention_mask", "token_type_ids")) -> dict:
        return {k: batch[prefix + k][:, :width] for k in keys if prefix + k in batch}

    def _local_states(self, batch, width) -> tuple[torch.Tensor, dict]:
        """The local encoder's states and the local inputs (masks included) cut to ``width``."""
        local = self._inputs(batch, "", width, ("input_ids", "attention_mask", "token_type_ids", "question_mask", "candidate_mask"))
        return encoder_states(self.encoder, local), local

    def segment_cosines(self, batch: dict) -> torch.Tensor:
        """The cosine that the :class:`~as2rank.transformer.network.SegmentSimilarity` term weighs, for every row
        (in the local encoding), shape (rows, 1)."""
        hidden, local = self._local_states(batch, self._widths(batch)[0])
        return segment_cosine(hidden, local)[:, None]

    def forward(self, batch: dict) -> torch.Tensor:
        """One logit per row of ``batch`` (local inputs under the usual keys, global ones under
        ``global_*``), shape (rows,)."""
        widths = self._widths(batch)
        hidden, local = self._local_states(batch, widths[0])
        glob = self._inputs(batch, "global_", widths[1])
        pooled = (pool(hidden, local["attention_mask"], self.pooling),
                  pool(encoder_states(self.global_encoder, glob), glob["attention_mask"], self.pooling))
        logits = head_logits(self.head, torch.cat(pooled, dim=-1)).squeeze(-1)
        if self.similarity is not None:
            logits = logits + self.similarity(hidden, local)
        return with_prior(logits, batch)
