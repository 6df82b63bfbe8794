"""Torch modules of the transformer rankers: the monolithic cross-encoder and the Cascade Transformer."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ..pruning import drop_lowest
from .backbone import LayerStack, masked_mean, truncate_layers

__all__ = ["CascadeEncoder", "CrossEncoder", "classifier_dropout", "feed_forward", "head_logits", "pool", "with_prior"]


def feed_forward(hidden: int, n_linear: int, dropout: float = 0.1) -> nn.Sequential:
    """``n_linear`` dense layers (hidden → hidden with tanh, the last → 1 logit), dropout before each."""
    layers = []
    for i in range(n_linear):
        last = i == n_linear - 1
        layers += [nn.Dropout(dropout), nn.Linear(hidden, 1 if last else hidden)]
        if not last:
            layers.append(nn.Tanh())
    return nn.Sequential(*layers)


def pool(hidden: torch.Tensor, attention_mask: torch.Tensor, pooling: str) -> torch.Tensor:
    """One vector per row: the first token's encoding (``"cls"``) or the mean over real tokens (``"mean"``)."""
    return hidden[:, 0] if pooling == "cls" else masked_mean(hidden, attention_mask)


def head_logits(head: nn.Module, features: torch.Tensor) -> torch.Tensor:
    """``head(features)`` in float32, outside any autocast.

    The encoder may run in bfloat16, but the scores must not: a bfloat16 logit has 8 significant bits, so
    candidates of one question would tie and the tie policy, not the model, would order them. The head is a
    few small matrix products, so float32 costs nothing measurable.
    """
    with torch.autocast(features.device.type, enabled=False):
        return head(features.float())


def classifier_dropout(config) -> float:
    """Dropout of a score head on ``config``'s encoder, as Hugging Face's sequence classifiers choose it:
    ``classifier_dropout`` when set, else the encoder's ``hidden_dropout_prob`` (0.1 for BERT, RoBERTa,
    ELECTRA, MiniLM), else 0.1. A config with both at 0 trains without any dropout (deterministic steps)."""
    value = getattr(config, "classifier_dropout", None)
    if value is None:
        value = getattr(config, "hidden_dropout_prob", 0.1)
    return float(value)


class CrossEncoder(nn.Module):
    """Encoder → pooled encoding (first token or token mean) → feed-forward head (2 dense layers) → logit,
    plus the batch's ``prior`` logits when it has them."""

    def __init__(self, encoder, pooling: str = "cls"):
        super().__init__()
        self.encoder = encoder
        self.pooling = pooling
        self.head = feed_forward(encoder.config.hidden_size, 2, classifier_dropout(encoder.config))

    def forward(self, batch: dict) -> torch.Tensor:
        """One logit per row of ``batch``, shape (rows,)."""
        inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in batch}
        hidden = self.encoder(**inputs).last_hidden_state
        return with_prior(head_logits(self.head, pool(hidden, batch["attention_mask"], self.pooling)).squeeze(-1), batch)


def with_prior(logits: torch.Tensor, batch: dict) -> torch.Tensor:
    """``logits`` (shape (rows,), or (rows, k) for k heads or exits) shifted by the batch's per-row ``prior``
    logits (:mod:`as2rank.prior`), when it has them: the network then learns what the prior misses."""
    if "prior" not in batch:
        return logits
    prior = batch["prior"]
    return logits.float() + (prior.unsqueeze(1) if logits.dim() == 2 else prior)


class CascadeEncoder(nn.Module):
    """One encoder with a classifier after each exit layer (Cascade Transformer, paper §4.3).

    Each classifier reads the mean of all token encodings of its layer (padding excluded) and is a 3-layer
    feed-forward network (hidden size = the model's, tanh, dropout 0.1). A batch's per-row ``prior`` logits,
    when it has them, are added to every exit's logits (before the drops).

    Parameters
    ----------
    encoder : transformers.PreTrainedModel
        BERT-style (see :class:`~as2rank.neural.backbone.LayerStack`); cut to the last exit.
    exits : tuple of int
        Increasing 1-based layer numbers ρ(i).
    """

    def __init__(self, encoder, exits):
        super().__init__()
        self.encoder = truncate_layers(encoder, exits[-1])
        self.exits = tuple(int(e) for e in exits)
        self.classifiers = nn.ModuleList(feed_forward(encoder.config.hidden_size, 3) for _ in self.exits)
        LayerStack(self.encoder)  # fail early on an unsupported architecture

    def forward(self, batch: dict, exit_index: int = -1) -> torch.Tensor:
        """Logits of one exit for every row (training, and ``exit_layer=`` scoring)."""
        exit_index = exit_index % len(self.exits)
        stack = LayerStack(self.encoder)
        mask = batch["attention_mask"]
        hidden = stack.run(stack.embed(batch), mask, 0, self.exits[exit_index])
        return with_prior(head_logits(self.classifiers[exit_index], masked_mean(hidden, mask)).squeeze(-1), batch)

    def all_exits(self, batch: dict) -> torch.Tensor:
        """Logits of every exit for every row, shape (n_rows, n_exits), from one pass (no drop)."""
        stack = LayerStack(self.encoder)
        mask = batch["attention_mask"]
        hidden = stack.embed(batch)
        start, logits = 0, []
        for classifier, stop in zip(self.classifiers, self.exits):
            hidden = stack.run(hidden, mask, start, stop)
            start = stop
            logits.append(head_logits(classifier, masked_mean(hidden, mask)).squeeze(-1))
        logits = torch.stack(logits, dim=1)
        return with_prior(logits, batch)

    def cascade(self, batch: dict, codes: np.ndarray, alphas, last_exit: int, chunk_tokens: int | None = None):
        """Run the cascade over whole questions, dropping rows between exits.

        Parameters
        ----------
        batch : dict of Tensor
            Rows of whole questions, each question's rows in original order.
        codes : ndarray of int, shape (n_rows,)
            Question of each row inside the batch.
        alphas : sequence of float
            Drop ratio after each exit but the last.
        last_exit : int
            Index of the last exit to run.
        chunk_tokens : int, default=None
            Run the layers on chunks of rows of similar length, each at most this many padded tokens
            (rows × its longest row), instead of on the whole batch padded to its longest row: the rows of
            a question differ in length, and on the CPU padding and large activations cost most of the
            time. Drops still act per question, over all its rows. ``None``: one chunk.

        Returns
        -------
        logits : ndarray of float64, shape (n_rows, n_exits)
            Logit of every exit a row reached; NaN after the row was dropped.
        rows_per_layer : ndarray of int, shape (exits[last_exit],)
            Rows processed by each layer.
        """
        from .backbone import token_budget_batches

        stack = LayerStack(self.encoder)
        full_mask = batch["attention_mask"]
        lengths = full_mask.sum(dim=1).cpu().numpy()
        n = len(lengths)

        def chunks(rows: np.ndarray) -> list:
            """``rows`` (batch positions) in length-sorted chunks of at most ``chunk_tokens`` padded tokens."""
            if chunk_tokens is None:
                return [rows]
            return [rows[np.sort(p)] for p in token_budget_batches(np.ones(len(rows), dtype=np.int64), lengths[rows], chunk_tokens)]

        # One state per chunk: its rows (batch positions), hidden states and mask, cut to its longest row.
        states = []
        for rows in chunks(np.arange(n)):
            width = int(lengths[rows].max())
            index = torch.from_numpy(rows).to(full_mask.device)
            part = {k: v[index, :width] for k, v in batch.items() if isinstance(v, torch.Tensor) and v.dim() == 2}
            states.append((rows, stack.embed(part), part["attention_mask"]))
        prior = batch["prior"].cpu().numpy().astype(np.float64) if "prior" in batch else np.zeros(n)
        alive = np.ones(n, dtype=bool)
        logits = np.full((n, len(self.exits)), np.nan)
        rows_per_layer = np.zeros(self.exits[last_exit], dtype=np.int64)
        start = 0
        for e in range(last_exit + 1):
            stop = self.exits[e]
            rows_per_layer[start:stop] = int(alive.sum())
            scores = np.full(n, np.nan)
            ran = []
            for rows, hidden, mask in states:
                hidden = stack.run(hidden, mask, start, stop)
                scores[rows] = head_logits(self.classifiers[e], masked_mean(hidden, mask)).squeeze(-1).cpu().numpy() + prior[rows]
                ran.append((rows, hidden, mask))
            states = ran
            start = stop
            live = np.flatnonzero(alive)  # batch order: each question's rows in original order
            logits[live, e] = scores[live]
            if e == last_exit or alphas[e] == 0:
                continue
            keep = drop_lowest(codes[live], scores[live], alphas[e])
            alive[live[~keep]] = False
            states = self._repack(ran, alive, lengths, full_mask, chunks)
        return logits, rows_per_layer

    @staticmethod
    def _repack(states, alive, lengths, full_mask, chunks) -> list:
        """The survivors of every chunk, packed into new full chunks.

        Keeping each chunk with its own survivors would leave, after a few drops, many small chunks (each a
        round of small matrix products); packing the survivors again keeps every chunk near the token budget.
        Each new chunk copies its rows straight from the chunks that hold them, at its own width (rows of a
        chunk may come in any order: scores are scattered back by row).
        """
        rows = np.flatnonzero(alive)
        if len(rows) == 0:
            return []
        source = np.empty(len(lengths), dtype=np.int64)  # chunk holding each row, and its position there
        position = np.empty(len(lengths), dtype=np.int64)
        for c, (chunk_rows, _, _) in enumerate(states):
            source[chunk_rows] = c
            position[chunk_rows] = np.arange(len(chunk_rows))
        repacked = []
        for part_rows in chunks(rows):
            part_rows = part_rows[np.argsort(source[part_rows], kind="stable")]
            width = int(lengths[part_rows].max())
            pieces = []
            for c in np.unique(source[part_rows]):
                hidden = states[c][1]
                take = torch.from_numpy(position[part_rows[source[part_rows] == c]]).to(hidden.device)
                piece = hidden[take, :width]
                pieces.append(nn.functional.pad(piece, (0, 0, 0, width - piece.shape[1])))
            mask = full_mask[torch.from_numpy(part_rows).to(full_mask.device), :width]
            repacked.append((part_rows, torch.cat(pieces) if len(pieces) > 1 else pieces[0], mask))
        return repacked
