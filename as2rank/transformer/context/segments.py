"""Token layout of the context rankers' input: question, candidate and contexts in one sequence.

:func:`encode_segments` encodes ``prefix question mid candidate mid local mid global suffix``, where
``prefix``, ``mid`` and ``suffix`` are the special tokens the tokenizer puts around a sentence pair
(``[CLS] … [SEP] … [SEP]`` for BERT, ``<s> … </s></s> … </s>`` for RoBERTa; :func:`~as2rank.neural.tokens.pair_template`). The
question and candidate get their own budget, ``max_pair_length`` tokens with their special tokens
(shortened longest first, as :class:`~as2rank.transformer.ranker.TransformerRanker` does with its ``max_length``),
so no context can crowd them out; the contexts share what is left of ``max_length``, again longest first (a
short local context leaves its unused share to the global one; :func:`share_budget`), each cut at its end.
Segment ids alternate 0, 1, 0, 1 over question, candidate, first and second context, on models that have
them; every token also carries its segment (:data:`as2rank.transformer.context.network.SEGMENTS`) for the models that
tell the parts apart.

Every distinct text is tokenised once, and rows are laid out with whole-array operations
(:mod:`as2rank.neural.tokens`).
"""

from __future__ import annotations

import numpy as np

from ...neural.tokens import distinct_tokens, lay_out, pair_template

__all__ = ["encode_segments", "share_budget"]


def share_budget(lengths: np.ndarray, budget: np.ndarray) -> np.ndarray:
    """Kept lengths of segments sharing a token budget, shortening the longest first.

    Parameters
    ----------
    lengths : ndarray of int, shape (n, k)
    budget : ndarray of int, shape (n,)

    Returns
    -------
    ndarray of int, shape (n, k)
        ``min(length, cap)`` with the largest cap that fits, plus one token for the first capped segments
        while budget is left: short segments are kept whole and the long ones share the rest equally.
    """
    n, k = lengths.shape
    budget = np.maximum(budget, 0)
    short = np.sort(lengths, axis=1)
    before = np.cumsum(short, axis=1) - short  # tokens of the shorter segments
    caps = (budget[:, None] - before) // (k - np.arange(k))  # equal share if segments i.. are cut
    cut = short > caps
    cap = np.where(cut.any(axis=1), caps[np.arange(n), cut.argmax(axis=1)], np.iinfo(np.int64).max)
    kept = np.minimum(lengths, cap[:, None])
    capped = lengths > cap[:, None]
    spare = budget - kept.sum(axis=1)
    return kept + (capped & (np.cumsum(capped, axis=1) <= spare[:, None]))


def encode_segments(tokenizer, texts, segment_ids, *, max_length, max_pair_length, token_types) -> dict:
    """Token ids of ``prefix t0 mid t1 mid t2 … suffix`` for every row (see the module docstring).

    Parameters
    ----------
    tokenizer : transformers tokenizer
    texts : list of ndarray of str, each of shape (n,)
        Question, candidate, then the context columns.
    segment_ids : list of int
        Segment id of each text (:data:`as2rank.transformer.context.network.SEGMENTS`).
    max_length, max_pair_length : int
    token_types : bool
        Add ``token_type_ids`` (alternating 0, 1 over the texts; special tokens take the preceding text's).

    Returns
    -------
    dict of ndarray
        ``input_ids``, ``attention_mask``, ``segments`` (and ``token_type_ids``) of shape (n, longest row),
        padded at the end; ``lengths`` of shape (n,).
    """
    n, k = len(texts[0]), len(texts)
    # Each distinct text is tokenised once; none can use more than max_length tokens.
    codes, pool, text_starts, text_lengths = distinct_tokens(tokenizer, texts, max_length=int(max_length))
    prefix, mid, suffix, _ = pair_template(tokenizer)
    text_starts = text_starts + len(prefix) + len(mid) + len(suffix)

    lengths = text_lengths[codes]
    kept = np.empty_like(lengths)
    pair_specials = len(prefix) + len(mid) + len(suffix)
    kept[:, :2] = share_budget(lengths[:, :2], np.full(n, max_pair_length - pair_specials))
    if k > 2:
        specials = len(prefix) + (k - 1) * len(mid) + len(suffix)
        kept[:, 2:] = share_budget(lengths[:, 2:], max_length - specials - kept[:, :2].sum(axis=1))

    # Pieces of every row: prefix, text 0, mid, text 1, …, mid, text k-1, suffix.
    n_pieces = 2 * k + 1
    starts = np.zeros((n, n_pieces), dtype=np.int64)
    sizes = np.zeros((n, n_pieces), dtype=np.int64)
    sizes[:, 0] = len(prefix)
    starts[:, 1::2], sizes[:, 1::2] = text_starts[codes], kept
    starts[:, 2:-1:2], sizes[:, 2:-1:2] = len(prefix), len(mid)
    starts[:, -1], sizes[:, -1] = len(prefix) + len(mid), len(suffix)
    piece_segment = np.zeros(n_pieces, dtype=np.int64)
    piece_segment[1::2] = segment_ids
    # Segment type alternates over the texts; a special token takes the type of the text before it.
    piece_type = np.r_[0, np.repeat(np.arange(k) % 2, 2)]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    pool = np.concatenate([np.asarray(prefix + mid + suffix, dtype=np.int64), pool])
    return lay_out(pool, starts, sizes, pad, segments=piece_segment, **({"token_type_ids": piece_type} if token_types else {}))
