"""Token ids of model inputs built from the tokens of each distinct text: pairs and multi-text sequences.

A question is paired with every one of its candidates, and candidate sets built by retrieval repeat candidates
across questions; tokenising whole pairs would tokenise each question once per candidate. Here every distinct
text is tokenised once (:func:`distinct_tokens`, through the fast tokenizer's Rust backend where there is one)
and each row is then laid out with array operations (:func:`lay_out`) from its pieces: the special tokens the
tokenizer puts around a pair (:func:`pair_template`) and the kept part of each text.

:func:`pair_lengths` is the tokenizer's own ``longest_first`` pair truncation, so that a pair laid out here has
the ids, token types and length that ``tokenizer(question, candidate, truncation="longest_first",
max_length=...)`` gives (tested against it). Tokens of the same texts under the same tokenizer are computed once
(:data:`TOKEN_CACHE`): repeated ``predict`` calls on one frame, as a tuning loop makes them, tokenise it once.
NumPy and pandas only: no torch.
"""

from __future__ import annotations

import functools
import hashlib
import itertools

import numpy as np
import pandas as pd

from ..data import ragged_arange
from .fitcache import FitCache

__all__ = ["TOKEN_CACHE", "distinct_tokens", "encode_pairs", "lay_out", "pair_lengths", "pair_template",
           "question_mask"]


def _token_bytes(entry) -> int:
    uniques, pool, lengths = entry
    return int(pool.nbytes + lengths.nbytes + sum(len(u) for u in uniques))


#: The token ids of the distinct texts of recent :func:`distinct_tokens` calls with a fast tokenizer, keyed by
#: the tokenizer's serialisation (vocabulary, normaliser, added tokens...), the truncation and the texts' content
#: (a hash, checked against the stored texts on every hit, so a hit is always these texts' tokens). Bounded:
#: 32 calls, 512 MiB of ids and texts, least recently used first out.
TOKEN_CACHE = FitCache(max_entries=32, max_bytes=2**29, sizeof=_token_bytes)


@functools.lru_cache(maxsize=8)
def _text_backend(spec: str, max_length, side: str):
    """A Rust tokenizer from the serialised ``spec`` of a fast tokenizer's, encoding single texts cut at
    ``max_length`` tokens on ``side`` (``None``: whole), unpadded. Cached by the serialisation itself, so a
    tokenizer changed after a first call (tokens added, say) gets a new copy, and the caller's settings stay
    untouched."""
    from tokenizers import Tokenizer

    backend = Tokenizer.from_str(spec)
    backend.no_padding()
    if max_length is None:
        backend.no_truncation()
    else:
        backend.enable_truncation(int(max_length), stride=0, direction=side)
    return backend


def distinct_tokens(tokenizer, columns, max_length: int | None = None) -> tuple:
    """Tokenise the distinct texts of some columns once, without special tokens.

    Parameters
    ----------
    tokenizer : transformers tokenizer
    columns : list of array-like of str, each of shape (n,)
    max_length : int, default=None
        Keep at most this many tokens of each text (the first ones, or the last where the tokenizer truncates
        on the left); ``None`` keeps them all.

    Returns
    -------
    codes : ndarray of int, shape (n, len(columns))
        The distinct text of each cell.
    pool : ndarray of int64
        The token ids of every distinct text, one after the other.
    starts, lengths : ndarray of int64, shape (n_distinct,)
        Where each distinct text's tokens start in ``pool``, and how many there are.
    """
    n = len(columns[0])
    # A missing value stays a value of its own (no sentinel code, which would index another text's tokens).
    codes, uniques = pd.factorize(np.concatenate([np.asarray(c, dtype=object) for c in columns]), use_na_sentinel=False)
    bad = [u for u in uniques if not isinstance(u, str)]
    if bad:
        raise TypeError(f"Texts to tokenise must be str; got {len(bad)} distinct other value(s), e.g. {bad[0]!r}.")
    if getattr(tokenizer, "is_fast", False) and len(uniques):
        pool, lengths = _fast_tokens(tokenizer, uniques, max_length)
    else:
        cut = {} if max_length is None else {"truncation": True, "max_length": int(max_length)}
        pool, lengths = _flat(tokenizer(list(uniques), add_special_tokens=False, **cut)["input_ids"] if len(uniques) else [])
    return codes.reshape(len(columns), n).T, pool, np.cumsum(lengths) - lengths, lengths


def _flat(token_lists) -> tuple:
    lengths = np.fromiter(map(len, token_lists), dtype=np.int64, count=len(token_lists))
    return np.fromiter(itertools.chain.from_iterable(token_lists), dtype=np.int64, count=int(lengths.sum())), lengths


def _fast_tokens(tokenizer, uniques: np.ndarray, max_length) -> tuple:
    """``(pool, lengths)`` of the texts ``uniques`` through the fast tokenizer's Rust backend, from
    :data:`TOKEN_CACHE` when these texts were tokenised so before."""
    spec, side = tokenizer.backend_tokenizer.to_str(), tokenizer.truncation_side
    digest = hashlib.blake2b(spec.encode(), digest_size=16)
    digest.update(pd.util.hash_array(uniques).tobytes())
    key = (digest.hexdigest(), max_length, side)
    hit = TOKEN_CACHE.get(key)
    if hit is not None and np.array_equal(hit[0], uniques):
        return hit[1], hit[2]
    backend = _text_backend(spec, max_length, side)
    # ``encode_batch_fast`` (tokenizers >= 0.21) gives the same ids without tracking character offsets.
    encode = getattr(backend, "encode_batch_fast", backend.encode_batch)
    pool, lengths = _flat([e.ids for e in encode(list(uniques), add_special_tokens=False)])
    pool.flags.writeable = lengths.flags.writeable = False  # shared by every later hit
    TOKEN_CACHE.put(key, (uniques, pool, lengths))
    return pool, lengths


def pair_template(tokenizer) -> tuple:
    """The special tokens a tokenizer puts before, between and after a sentence pair, and the token type of
    each of the five pieces.

    Read from the tokenizer itself (BERT: ``[CLS]``, ``[SEP]``, ``[SEP]`` with types 0, 0, 0, 1, 1; RoBERTa:
    ``<s>``, ``</s></s>``, ``</s>``, all of type 0).

    Returns
    -------
    prefix, mid, suffix : tuple of int
        Token ids before the first text, between the two, and after the second.
    types : tuple of int
        Token type of the prefix, the first text, the middle, the second text and the suffix.

    Raises
    ------
    ValueError
        When the pair encoding does not hold the two texts' own tokens, or a piece mixes token types.
    """
    a = tokenizer("a", add_special_tokens=False)["input_ids"]
    b = tokenizer("b", add_special_tokens=False)["input_ids"]
    encoded = tokenizer("a", "b", return_token_type_ids=True)
    full, full_types = list(encoded["input_ids"]), list(encoded["token_type_ids"])
    for i in range(len(full) - len(a) + 1):
        if full[i : i + len(a)] != a:
            continue
        for j in range(i + len(a), len(full) - len(b) + 1):
            if full[j : j + len(b)] != b:
                continue
            bounds = (0, i, i + len(a), j, j + len(b), len(full))
            types = [set(full_types[s:e]) for s, e in itertools.pairwise(bounds)]
            if any(len(t) > 1 for t in types):
                break
            # An empty piece (no prefix, say) has no token to type: 0.
            return tuple(full[:i]), tuple(full[i + len(a) : j]), tuple(full[j + len(b) :]), tuple(t.pop() if t else 0 for t in types)
    raise ValueError(f"Cannot tell where {type(tokenizer).__name__} puts its special tokens around a sentence pair.")


def pair_lengths(first: np.ndarray, second: np.ndarray, target: int) -> tuple[np.ndarray, np.ndarray]:
    """Kept tokens of two texts under the tokenizers library's ``longest_first`` truncation to ``target`` tokens.

    Pairs that fit are kept whole. Otherwise, with ``short ≤ long`` the two lengths: the short text is kept
    whole and the long one cut to ``target − short`` when that leaves the long one at least as long as the
    short one; else both are cut to half of ``target``, the originally longer one (the second on a tie)
    taking the odd token.
    """
    first, second = np.asarray(first, dtype=np.int64), np.asarray(second, dtype=np.int64)
    short = np.minimum(first, second)
    long_kept = np.where(short > target, short, np.maximum(short, target - short))
    halves = short + long_kept > target
    short_kept = np.where(halves, target // 2, short)
    long_kept = np.where(halves, target // 2 + target % 2, long_kept)
    fits = first + second <= target
    swapped = first > second
    return (np.where(fits, first, np.where(swapped, long_kept, short_kept)),
            np.where(fits, second, np.where(swapped, short_kept, long_kept)))


def lay_out(pool: np.ndarray, starts: np.ndarray, sizes: np.ndarray, pad: int, **piece_values) -> dict:
    """Rows of token ids gathered from ``pool``, padded at the end.

    Parameters
    ----------
    pool : ndarray of int
    starts, sizes : ndarray of int, shape (n, pieces)
        Where each piece of each row starts in ``pool`` and how many tokens it has; a row is its pieces in order.
    pad : int
        Id of the padding token.
    **piece_values : ndarray of int, shape (pieces,)
        Further arrays to fill with one value per piece (token types, segment ids), zero on padding.

    Returns
    -------
    dict of ndarray
        ``input_ids``, ``attention_mask`` and each of ``piece_values``, of shape (n, longest row); ``lengths``
        of shape (n,).
    """
    n = len(sizes)
    flat = sizes.ravel()
    lengths = sizes.sum(axis=1)
    rows = np.repeat(np.arange(n), lengths)
    cols = ragged_arange(lengths)
    width = int(lengths.max()) if n else 0
    out = {"input_ids": np.full((n, width), pad, dtype=np.int64), "attention_mask": np.zeros((n, width), dtype=np.int64)}
    out["input_ids"][rows, cols] = pool[np.repeat(starts.ravel(), flat) + ragged_arange(flat)]
    out["attention_mask"][rows, cols] = 1
    for key, values in piece_values.items():
        out[key] = np.zeros((n, width), dtype=np.int64)
        out[key][rows, cols] = np.repeat(np.tile(np.asarray(values, dtype=np.int64), n), flat)
    out["lengths"] = lengths
    return out


def encode_pairs(tokenizer, questions, candidates, *, max_length: int = 128, token_types: bool = True) -> dict:
    """Tokenise (question, candidate) pairs once, padded to the longest pair.

    Parameters
    ----------
    tokenizer : transformers.PreTrainedTokenizerBase
    questions, candidates : sequence of str
    max_length : int, default=128
        Pairs are truncated longest-first to this many tokens.
    token_types : bool, default=True
        Return ``token_type_ids`` (segment ids); models with a single segment embedding need False.

    Returns
    -------
    dict of ndarray
        ``input_ids``, ``attention_mask`` (and ``token_type_ids``) of shape (n_pairs, longest), plus
        ``lengths`` of shape (n_pairs,). Batches slice these to their own longest row (dynamic padding).
    """
    if isinstance(max_length, bool) or not isinstance(max_length, (int, np.integer)) or max_length < 8:
        raise ValueError(f"max_length must be an integer >= 8, got {max_length!r}.")
    questions, candidates = list(questions), list(candidates)
    if getattr(tokenizer, "is_fast", False) and questions:
        return _encode_distinct(tokenizer, questions, candidates, int(max_length), token_types)
    enc = tokenizer(
        questions,
        candidates,
        truncation="longest_first",
        max_length=int(max_length),
        padding="longest",
        padding_side="right",  # batches keep each row's first ``length`` columns
        return_tensors="np",
        return_token_type_ids=token_types,
        return_attention_mask=True,
    )
    out = {"input_ids": enc["input_ids"].astype(np.int64), "attention_mask": enc["attention_mask"].astype(np.int64)}
    if token_types:
        out["token_type_ids"] = enc["token_type_ids"].astype(np.int64)
    out["lengths"] = out["attention_mask"].sum(axis=1)
    return out


def _encode_distinct(tokenizer, questions, candidates, max_length, token_types) -> dict:
    """:func:`encode_pairs` from the tokens of each distinct question and candidate (:func:`distinct_tokens`).

    The same ids as the ``tokenizer(...)`` call (tested), without tokenising a question once per candidate
    or the per-pair Python post-processing of that call.
    """
    codes, pool, text_starts, text_lengths = distinct_tokens(tokenizer, [questions, candidates])
    prefix, mid, suffix, types = pair_template(tokenizer)
    specials = np.asarray(prefix + mid + suffix, dtype=np.int64)
    lengths = text_lengths[codes]
    kept = np.stack(pair_lengths(lengths[:, 0], lengths[:, 1], max_length - len(specials)), axis=1)
    text_starts = text_starts[codes] + len(specials)
    if tokenizer.truncation_side == "left":
        text_starts += lengths - kept
    # Pieces of every row: prefix, question, mid, candidate, suffix; the special tokens lead the pool.
    starts = np.column_stack([np.zeros(len(codes), dtype=np.int64), text_starts[:, 0], np.full(len(codes), len(prefix)),
                              text_starts[:, 1], np.full(len(codes), len(prefix) + len(mid))])
    sizes = np.column_stack([np.full(len(codes), len(prefix)), kept[:, 0], np.full(len(codes), len(mid)), kept[:, 1],
                             np.full(len(codes), len(suffix))])
    out = lay_out(np.concatenate([specials, pool]), starts, sizes, tokenizer.pad_token_id or 0,
                  **({"token_type_ids": types} if token_types else {}))
    if token_types and tokenizer.pad_token_type_id:
        out["token_type_ids"][out["attention_mask"] == 0] = tokenizer.pad_token_type_id
    return out


def question_mask(input_ids: np.ndarray, tokenizer) -> np.ndarray:
    """Which tokens of each encoded pair belong to its question: the first token through the first separator.

    Pairs are encoded ``[CLS] question [SEP] candidate [SEP]`` (or the tokenizer's equivalent, e.g. RoBERTa's
    ``<s> question </s></s> candidate </s>``), so the question segment ends at the first separator token
    whatever the tokenizer's segment ids say (RoBERTa's are all 0).

    Parameters
    ----------
    input_ids : ndarray of int of shape (n_pairs, width)
    tokenizer : transformers.PreTrainedTokenizerBase

    Returns
    -------
    ndarray of int64 of shape (n_pairs, width)
        1 on the question's tokens, 0 elsewhere (the candidate's tokens and padding).

    Raises
    ------
    ValueError
        If the tokenizer has no separator token.
    """
    sep = getattr(tokenizer, "sep_token_id", None)
    if sep is None:
        raise ValueError(
            f"{type(tokenizer).__name__} has no separator token, so a pair's question and candidate tokens cannot "
            "be told apart: set segment_similarity=False."
        )
    is_sep = np.asarray(input_ids) == sep
    return (np.cumsum(is_sep, axis=1) - is_sep == 0).astype(np.int64)
