"""Torch modules of the transformer rankers: the monolithic cross-encoder (with a new score head, or a pretrained
checkpoint's own) and the Cascade Transformer."""

from __future__ import annotations

import functools

import numpy as np
import torch
from torch import nn

from ..data import ragged_arange
from ..pruning.rules import n_dropped
from ..neural.backbone import CARRIED, LayerStack, encoder_states, is_sequence_classifier, masked_mean, pool, truncate_layers

__all__ = [
    "CascadeEncoder",
    "CrossEncoder",
    "ExitSegment",
    "SegmentSimilarity",
    "check_classifier",
    "classifier_dropout",
    "classifier_scores",
    "feed_forward",
    "head_logits",
    "segment_cosine",
    "with_prior",
]


def feed_forward(hidden: int, n_linear: int, dropout: float = 0.1) -> nn.Sequential:
    """``n_linear`` dense layers (hidden → hidden with tanh, the last → 1 logit), dropout before each."""
    layers = []
    for i in range(n_linear):
        last = i == n_linear - 1
        layers += [nn.Dropout(dropout), nn.Linear(hidden, 1 if last else hidden)]
        if not last:
            layers.append(nn.Tanh())
    return nn.Sequential(*layers)


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
    plus the :class:`SegmentSimilarity` term when built with ``similarity=True`` and the batch's ``prior``
    logits when it has them.

    With ``pooling="classifier"`` the encoder is a pretrained sequence classifier (a cross-encoder checkpoint,
    :func:`~as2rank.neural.backbone.is_sequence_classifier`) and its own head gives the logit
    (:func:`classifier_scores`): ``head`` is then None, the head's weights live in ``encoder``, and
    ``pooled_head`` says how that head reads the encoder (decided once, so that copies whose layers are
    replaced, such as the int8 ones, read it alike).
    """

    #: Its forward has no data-dependent control flow, so one ONNX export of it scores batches of any shape
    #: (:class:`~as2rank.neural.onnx.runtime.OnnxModule`).
    onnx_exportable = True

    def __init__(self, encoder, pooling: str = "cls", similarity: bool = False):
        super().__init__()
        self.encoder = encoder
        self.pooling = pooling
        if pooling == "classifier":
            self.pooled_head = check_classifier(encoder)
            self.head = None
        else:
            self.head = feed_forward(encoder.config.hidden_size, 2, classifier_dropout(encoder.config))
        self.similarity = SegmentSimilarity() if similarity else None

    def _hidden(self, batch: dict) -> torch.Tensor:
        return encoder_states(self.encoder, batch)

    def forward(self, batch: dict) -> torch.Tensor:
        """One logit per row of ``batch``, shape (rows,)."""
        hidden = self._hidden(batch)
        if self.head is None:
            logits = head_logits(functools.partial(classifier_scores, self.encoder, pooled=self.pooled_head), hidden)
        else:
            logits = head_logits(self.head, pool(hidden, batch["attention_mask"], self.pooling)).squeeze(-1)
        if self.similarity is not None:
            logits = logits + self.similarity(hidden, batch)
        return with_prior(logits, batch)

    def segment_cosines(self, batch: dict) -> torch.Tensor:
        """The cosine that the :class:`SegmentSimilarity` term weighs, for every row, shape (rows, 1)."""
        return segment_cosine(self._hidden(batch), batch)[:, None]


def classifier_scores(model, hidden: torch.Tensor, pooled: bool) -> torch.Tensor:
    """A pretrained sequence classifier's score of each row from its encoder's last hidden states, shape (rows,).

    The checkpoint's own head computes it: with ``pooled``, the pooled first token (BERT's pooler, in the
    encoder; DeBERTa's, beside it), dropout and the linear classifier; otherwise a classification head that
    reads the first token itself (RoBERTa, XLM-R, ELECTRA, MPNet). :func:`check_classifier` tells which a model
    is, and whether it computes its logits so.

    The score of a one-label head is its logit. That of a two-label head is ``logit[1] - logit[0]``, the log-odds
    of label 1 (the positive class, by the convention of binary classifiers) under the checkpoint's softmax: it
    orders pairs as the positive class's probability does, and it is the logit that binary cross-entropy
    trains, so fine-tuning continues the checkpoint's own objective. ``logit[1]`` alone would not do: the softmax
    ignores a shift of both logits, which then moves the score of each pair by its own amount.
    """
    if pooled:
        pooler = getattr(model, "pooler", None)
        pooler = model.base_model.pooler if pooler is None else pooler
        logits = model.classifier(model.dropout(pooler(hidden)))
    else:
        logits = model.classifier(hidden)
    return logits[:, 0] if logits.shape[1] == 1 else logits[:, 1] - logits[:, 0]


def check_classifier(model) -> bool:
    """Whether a sequence classifier's head reads a pooled vector (a linear classifier) or the hidden states
    (a classification head of its own), checking that :func:`classifier_scores` then gives ``model``'s own
    scores (on two made-up rows).

    Returns
    -------
    bool
        The ``pooled`` argument of :func:`classifier_scores` for ``model``.

    Raises
    ------
    ValueError
        If ``model`` is not a sequence classifier, has other than one or two labels, or computes its logits in
        a way that :func:`classifier_scores` does not follow.
    """
    name = type(model).__name__
    if not is_sequence_classifier(model):
        raise ValueError(
            f"pooling='classifier' needs a sequence classifier (a cross-encoder checkpoint), got a {name}."
        )
    n_labels = model.config.num_labels
    if n_labels not in (1, 2):
        raise ValueError(
            f"The {name} has {n_labels} labels; a relevance score is read from one logit (a regression head) or "
            "two (log-odds of label 1 against label 0), so a checkpoint with more labels cannot say which is relevant."
        )
    device = next(model.parameters()).device
    ids = (torch.arange(16, device=device) % (model.config.vocab_size - 1) + 1).reshape(2, 8)
    batch = {"input_ids": ids, "attention_mask": (ids.new_tensor(range(8)) < ids.new_tensor([[8], [5]])).long()}
    pooled = isinstance(getattr(model, "classifier", None), nn.Linear)
    training = model.training
    model.eval()
    try:
        with torch.no_grad():
            logits = model(**batch).logits.float()
            own = logits[:, 0] if n_labels == 1 else logits[:, 1] - logits[:, 0]
            read = classifier_scores(model, encoder_states(model, batch), pooled)
        same = read.shape == own.shape and bool(torch.allclose(read.float(), own, rtol=1e-4, atol=1e-5))
    except (AttributeError, TypeError, RuntimeError, IndexError):
        same = False
    finally:
        model.train(training)
    if not same:
        raise ValueError(
            f"The {name}'s head computes its logits in a way as2rank does not read: it scores with the heads of "
            "BERT-, DeBERTa-, RoBERTa-, XLM-R-, ELECTRA- and MPNet-style sequence classifiers (the pooled first "
            "token, or a head on the first token)."
        )
    return pooled


def segment_cosine(hidden: torch.Tensor, batch: dict) -> torch.Tensor:
    """The cosine of the mean encodings of each row's question and candidate tokens, in float32, shape (rows,).

    ``batch["question_mask"]`` marks the question segment of each pair (its first token through the first
    separator, :func:`~as2rank.neural.tokens.question_mask`); the candidate is ``batch["candidate_mask"]``
    where the rows hold more than the pair (the context rankers' segments), else the rest of the row's real
    tokens. Both means are taken inside the row's own encoding, so the cosine costs no pass of its own.
    """
    with torch.autocast(hidden.device.type, enabled=False):
        hidden = hidden.float()
        mask, question = batch["attention_mask"], batch["question_mask"]
        candidate = batch["candidate_mask"] if "candidate_mask" in batch else 1 - question
        return nn.functional.cosine_similarity(
            masked_mean(hidden, mask * question), masked_mean(hidden, mask * candidate), dim=-1)


class SegmentSimilarity(nn.Module):
    """A trained term of a ranker's logit: ``weight × cos(question mean, candidate mean)`` (:func:`segment_cosine`).

    Sentence-embedding checkpoints such as the default all-MiniLM-L6-v2 were trained so that mean token
    encodings compare sentences; a score head initialised at random cannot use that on a few hundred training
    questions. The weight starts at the value a logistic regression on the pretrained encoder's cosines gives
    it (:mod:`as2rank.transformer.prior`), so training starts from a ranking that already uses the
    similarity, and is then trained with the rest of the model.
    """

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(()))

    def forward(self, hidden: torch.Tensor, batch: dict) -> torch.Tensor:
        """The term for every row of ``batch`` from its encodings ``hidden``, in float32, shape (rows,)."""
        return self.weight * segment_cosine(hidden, batch)


def with_prior(logits: torch.Tensor, batch: dict) -> torch.Tensor:
    """``logits`` (shape (rows,), or (rows, k) for k heads or exits) shifted by the batch's per-row ``prior``
    logits (:mod:`as2rank.transformer.prior`), when it has them: the network then learns what the prior misses."""
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
    similarity : bool, default=False
        Give each exit a :class:`SegmentSimilarity` term of its layer's encodings.
    """

    #: Its exit segments have no data-dependent control flow (the drops happen between them), so one ONNX
    #: export of each runs any chunk (:class:`~as2rank.neural.onnx.runtime.OnnxCascade`).
    onnx_exportable = True

    def __init__(self, encoder, exits, similarity: bool = False):
        super().__init__()
        self.encoder = truncate_layers(encoder, exits[-1])
        self.exits = tuple(int(e) for e in exits)
        self.classifiers = nn.ModuleList(feed_forward(encoder.config.hidden_size, 3) for _ in self.exits)
        self.similarity = nn.ModuleList(SegmentSimilarity() for _ in self.exits) if similarity else None
        LayerStack(self.encoder)  # fail early on an unsupported architecture

    def exit_logits(self, exit_index: int, hidden: torch.Tensor, batch: dict) -> torch.Tensor:
        """Exit ``exit_index``'s logits (without the prior) from the hidden states of its layer, shape (rows,)."""
        similarity = None if self.similarity is None else self.similarity[exit_index]
        return _exit_logits(self.classifiers[exit_index], similarity, hidden, batch)

    def forward(self, batch: dict, exit_index: int = -1) -> torch.Tensor:
        """Logits of one exit for every row (training, and ``exit_layer=`` scoring)."""
        exit_index = exit_index % len(self.exits)
        stack = LayerStack(self.encoder)
        hidden = stack.run(stack.embed(batch), batch["attention_mask"], 0, self.exits[exit_index])
        return with_prior(self.exit_logits(exit_index, hidden, batch), batch)

    def _exit_states(self, batch: dict):
        """The hidden states at each exit, in turn, from one pass."""
        stack = LayerStack(self.encoder)
        hidden, start = stack.embed(batch), 0
        for stop in self.exits:
            hidden = stack.run(hidden, batch["attention_mask"], start, stop)
            start = stop
            yield hidden

    def all_exits(self, batch: dict) -> torch.Tensor:
        """Logits of every exit for every row, shape (n_rows, n_exits), from one pass (no drop)."""
        logits = [self.exit_logits(e, hidden, batch) for e, hidden in enumerate(self._exit_states(batch))]
        return with_prior(torch.stack(logits, dim=1), batch)

    def segment_cosines(self, batch: dict) -> torch.Tensor:
        """The cosine each exit's :class:`SegmentSimilarity` term weighs, shape (rows, n_exits)."""
        return torch.stack([segment_cosine(hidden, batch) for hidden in self._exit_states(batch)], dim=1)

    def segments(self) -> list:
        """The cascade cut at its exits: one :class:`ExitSegment` per exit, run in turn by
        :meth:`CascadeEncoder.cascade`."""
        return [ExitSegment(self, e) for e in range(len(self.exits))]

    def cascade(self, batch: dict, codes: np.ndarray, alphas, last_exit: int, chunk_tokens: int | None = None,
                lengths: np.ndarray | None = None, exact_widths: bool = False, segments=None):
        """Run the cascade over whole questions, dropping rows between exits.

        What depends on the scores (which rows a drop keeps, where the survivors go) is decided on the batch's
        device; the shape of every step comes from the host: a drop keeps a known number of rows of each
        question, and each chunk's width is a bound on its survivors' lengths (``_survivor_widths``). So, given
        ``lengths`` and without ``exact_widths``, nothing is read back from the device, whatever the number of
        exits: the logits stay there, for the caller to read with those of other batches.

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
            (rows × its width), instead of on the whole batch padded to its longest row: the rows of a
            question differ in length, and on the CPU padding and large activations cost most of the time.
            Drops still act per question, over all its rows. ``None``: one chunk.
        lengths : ndarray of int, shape (n_rows,), default=None
            Tokens of each row (its attention mask's sum), as the host's encoding knows them; ``None``
            reads them from the mask.
        exact_widths : bool, default=False
            After each drop, read which rows survived and pack them again into chunks under ``chunk_tokens``,
            each cut to its rows' real lengths rather than to the bound: one read per drop, which costs nothing
            where the batch already lives in host memory (the CPU), and saves the padding that the bound leaves
            (``_survivor_chunks``: why full chunks rather than the old chunks' shrunken remains).
        segments : list of callable, default=None
            What computes each exit's step, called like :class:`ExitSegment` (e.g. their ONNX Runtime
            copies, :class:`~as2rank.neural.onnx.runtime.OnnxModule`); ``None``: :meth:`segments`.

        Returns
        -------
        logits : Tensor of float32, shape (n_rows, n_exits), on the batch's device
            Logit of every exit a row reached; NaN after the row was dropped.
        rows_per_layer : ndarray of int, shape (exits[last_exit],)
            Rows processed by each layer.
        """
        from ..neural.batching import token_budget_batches

        segments = self.segments() if segments is None else segments
        full_mask = batch["attention_mask"]
        device = full_mask.device
        lengths = np.asarray(full_mask.sum(dim=1).cpu() if lengths is None else lengths, dtype=np.int64)
        n = len(lengths)
        alive, widths = _survivor_widths(codes, lengths, alphas, last_exit)

        def spans(bound: np.ndarray) -> list:
            """(first, end, width) of each chunk of the survivors, shortest first, under ``chunk_tokens``."""
            if chunk_tokens is None:
                return [(0, len(bound), int(bound[-1]))]
            parts = token_budget_batches(np.ones(len(bound), dtype=np.int64), bound, chunk_tokens)
            return [(int(p[0]), int(p[-1]) + 1, int(bound[p[-1]])) for p in parts]

        # ``order``: batch positions of the rows still running, shortest first (chunks are cut along it).
        order_host = np.argsort(lengths, kind="stable")
        order = torch.from_numpy(order_host).to(device)
        codes_t = torch.as_tensor(np.asarray(codes), device=device)
        # Each state is a chunk's input to the next segment: its tokens, then its hidden states.
        states = [
            {k: v[order[first:end], :width] for k, v in batch.items() if isinstance(v, torch.Tensor) and v.dim() == 2}
            for first, end, width in spans(widths[0])
        ]
        logits = torch.full((n, len(self.exits)), float("nan"), device=device)
        rows_per_layer = np.zeros(self.exits[last_exit], dtype=np.int64)
        start = 0
        for e in range(last_exit + 1):
            stop = self.exits[e]
            rows_per_layer[start:stop] = alive[e].sum()
            outputs = [segments[e](state) for state in states]
            states = [{"hidden": h, **{k: state[k] for k in CARRIED if k in state}} for (h, _), state in zip(outputs, states)]
            start = stop
            scores = torch.cat([out[1] for out in outputs]).float()
            if "prior" in batch:
                scores = scores + batch["prior"][order].float()
            logits[order, e] = scores
            dropped = alive[e] - alive[e + 1] if e < last_exit else None
            if dropped is None or not dropped.any():
                continue
            keep = _keep_on_device(codes_t[order], order, scores, alive[e], dropped)
            # Survivors first, each group in its order (shortest first still): a static number of rows.
            survivors = torch.argsort((~keep).to(torch.uint8), stable=True)[: int(alive[e + 1].sum())]
            if exact_widths:
                # The one read of this drop: which rows survived, so that the survivors are packed again into
                # full chunks, each cut to its longest row.
                kept = survivors.numpy()
                order_host = order_host[kept]
                order = torch.from_numpy(order_host)
                spans_now, hidden = _survivor_chunks([h for h, _ in outputs], kept, lengths[order_host], chunk_tokens)
            else:
                order = order[survivors]
                spans_now = spans(widths[e + 1])
                # Every running row at one width (the widest survivor's), so that any survivor can be gathered.
                need = spans_now[-1][2]
                padded = torch.cat([nn.functional.pad(h[:, :need], (0, 0, 0, max(0, need - h.shape[1]))) for h, _ in outputs])
                # Contiguous copies, like the chunks the first exit runs on.
                hidden = [padded[survivors[first:end], :width].contiguous() for first, end, width in spans_now]
            states = [{"hidden": h, **{k: batch[k][order[first:end], :width] for k in CARRIED if k in batch}}
                      for h, (first, end, width) in zip(hidden, spans_now)]
        return logits, rows_per_layer


class ExitSegment(nn.Module):
    """One step of a :class:`CascadeEncoder`: its blocks from the previous exit up to exit ``e``, then exit
    ``e``'s classifier. Maps a chunk (its tokens for the first exit, else ``hidden`` states, with its
    ``attention_mask``) to the chunk's hidden states at exit ``e`` and its logits there (without the prior)."""

    def __init__(self, cascade: CascadeEncoder, e: int):
        super().__init__()
        self.encoder = cascade.encoder
        self.classifier = cascade.classifiers[e]
        self.similarity = None if cascade.similarity is None else cascade.similarity[e]
        self.start = cascade.exits[e - 1] if e else 0
        self.stop = cascade.exits[e]

    def forward(self, state: dict) -> tuple:
        """``(hidden, logits)`` of the chunk ``state`` at this segment's exit."""
        stack = LayerStack(self.encoder)
        hidden = stack.embed(state) if self.start == 0 else state["hidden"]
        hidden = stack.run(hidden, state["attention_mask"], self.start, self.stop)
        return hidden, _exit_logits(self.classifier, self.similarity, hidden, state)


def _exit_logits(classifier, similarity, hidden: torch.Tensor, batch: dict) -> torch.Tensor:
    """A cascade exit's logits: its classifier on the mean token encoding, plus its similarity term if any."""
    logits = head_logits(classifier, masked_mean(hidden, batch["attention_mask"])).squeeze(-1)
    return logits if similarity is None else logits + similarity(hidden, batch)


def _survivor_chunks(hidden: list, kept: np.ndarray, lengths: np.ndarray,
                     chunk_tokens: int | None = None) -> tuple[list, list]:
    """The chunks after a drop: the survivors, packed again into chunks of at most ``chunk_tokens`` padded
    tokens, each cut to its longest survivor.

    Survivors are re-packed rather than left in their old chunks: a drop shrinks every chunk, and on a CPU a
    layer costs more per token on many small chunks than on a few full ones (each operator's fixed cost and
    the matrix products' efficiency at few rows), so that without it the later exits gain less than the rows
    they drop. The survivors run in ascending length, so a new chunk gathers rows of neighbouring old chunks,
    of about its width: rows shorter than it are padded with zeros, which its attention mask hides.

    Parameters
    ----------
    hidden : list of Tensor
        The hidden states of the last exit's chunks, in order.
    kept : ndarray of int
        The survivors' positions along those chunks' rows, ascending.
    lengths : ndarray of int
        The survivors' lengths, in order (ascending).
    chunk_tokens : int, default=None
        Padded tokens per new chunk; None: one chunk.

    Returns
    -------
    spans : list of (int, int, int)
        (first, end, width) of each new chunk along ``kept``; its width is its longest survivor's.
    states : list of Tensor
        Each new chunk's hidden states: its survivors gathered from their old chunks, cut or padded to its width.
    """
    from ..neural.batching import token_budget_batches

    starts = np.cumsum([0] + [len(h) for h in hidden])
    chunk = np.searchsorted(starts, kept, side="right") - 1
    if chunk_tokens is None:
        parts = [np.arange(len(kept))]
    else:
        parts = token_budget_batches(np.ones(len(kept), dtype=np.int64), lengths, chunk_tokens)
    spans, states = [], []
    for part in parts:
        first, end = int(part[0]), int(part[-1]) + 1
        width = int(lengths[first:end].max())
        pieces = []
        for c in np.unique(chunk[first:end]):
            rows = np.flatnonzero(chunk[first:end] == c) + first
            piece = hidden[c][:, :width][torch.from_numpy(kept[rows] - starts[c])]
            pieces.append(nn.functional.pad(piece, (0, 0, 0, width - piece.shape[1])))
        spans.append((first, end, width))
        states.append(pieces[0] if len(pieces) == 1 else torch.cat(pieces))
    return spans, states


def _survivor_widths(codes: np.ndarray, lengths: np.ndarray, alphas, last_exit: int) -> tuple[list, list]:
    """The shapes of a cascade, known before it runs.

    Returns
    -------
    alive : list of ndarray of int
        For each exit, the rows of each question (in code order) that reach it: a drop of ratio α keeps
        ``k − floor(α · k)`` of ``k`` (:func:`~as2rank.pruning.rules.n_dropped`).
    widths : list of ndarray of int
        For each exit, ascending: the longest rows of each question, as many as reach the exit. Whatever
        rows survive, the i-th shortest survivor is no longer than the i-th entry, so a chunk of the
        survivors sorted by length is at most as wide as the entry of its last row.
    """
    _, question, sizes = np.unique(codes, return_inverse=True, return_counts=True)
    alive = [sizes]
    for e in range(last_exit):
        k = alive[-1]
        alive.append(k - n_dropped(k, alphas[e]))
    longest_first = np.lexsort((-lengths, question))
    rank = ragged_arange(sizes)  # rank of each row of ``longest_first`` by length inside its question
    widths = [np.sort(lengths[longest_first][rank < np.repeat(k, sizes)]) for k in alive]
    return alive, widths


def _keep_on_device(codes: torch.Tensor, rows: torch.Tensor, scores: torch.Tensor, alive: np.ndarray,
                    dropped: np.ndarray) -> torch.Tensor:
    """:func:`~as2rank.pruning.rules.drop_lowest` on the device: which of the running ``rows`` (batch positions, one
    score each) survive dropping ``dropped[q]`` of the ``alive[q]`` rows of each question ``q`` (in code
    order), the lowest scores first and, among equal scores, the later row."""
    order = torch.argsort(rows, descending=True)
    order = order[torch.argsort(scores[order], stable=True)]
    order = order[torch.argsort(codes[order], stable=True)]  # by question, worst first inside each
    drop = np.flatnonzero(ragged_arange(alive) < np.repeat(dropped, alive))
    keep = torch.ones(len(rows), dtype=torch.bool, device=scores.device)
    keep[order[torch.from_numpy(drop).to(scores.device)]] = False
    return keep
