"""Batches of the transformer estimators. Training: rows of similar length (pointwise losses), or whole questions
of similar length (listwise losses), whose rows the forward pass may take in parts of similar length (their
tensors: :func:`~as2rank.neural.token_batches`). Prediction: rows or questions packed under a budget of
padded tokens (:func:`token_budget_batches`). NumPy only."""

from __future__ import annotations

import numpy as np

from ..data import ragged_arange

__all__ = ["CHUNK_DEVICES", "CHUNK_ROWS", "length_bucket_batches", "length_chunks", "question_bucket_batches",
           "token_budget_batches"]

#: Rows per part of a listwise batch's forward pass (``length_chunks``).
CHUNK_ROWS = 8
#: The devices that run a listwise batch's forward pass in parts of :data:`CHUNK_ROWS` rows: a CPU's time grows
#: with the tokens it runs; a GPU's, on batches this small, with the kernels it launches.
CHUNK_DEVICES = ("cpu",)


def length_bucket_batches(lengths: np.ndarray, batch_size: int, rng: np.random.Generator, bucket: int = 50) -> list:
    """Training batches of ``batch_size`` rows of similar length, in shuffled order.

    Rows are shuffled, cut into buckets of ``bucket × batch_size`` rows, sorted by length inside each bucket
    and sliced into batches, whose order is shuffled again: dynamic padding then wastes little, while every
    epoch still mixes rows differently. The number of batches is always ``ceil(n / batch_size)``.

    Returns
    -------
    list of ndarray
        Row numbers of each batch.
    """
    perm = rng.permutation(len(lengths))
    span = bucket * batch_size
    bucket_id = np.arange(len(perm)) // span
    perm = perm[np.lexsort((lengths[perm], bucket_id))]
    batches = [perm[i : i + batch_size] for i in range(0, len(perm), batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))]


def question_bucket_batches(lengths: np.ndarray, codes: np.ndarray, batch_size: int, rng: np.random.Generator,
                            bucket: int = 50) -> list:
    """Training batches of whole questions, ``batch_size`` rows on average, of similar length, in shuffled order.

    Questions are shuffled, cut into buckets of about ``bucket × batch_size`` rows, sorted inside each bucket
    by their longest row, and the sequence is cut at question boundaries into
    ``min(n_questions, ceil(n_rows / batch_size))`` batches of about equal rows; a question is never split,
    so a batch holds at least as many rows as its largest question. The number of batches depends on the
    sizes only, never on the draw: every epoch has as many.

    Parameters
    ----------
    lengths : ndarray of int, shape (n_rows,)
        Tokens of each row.
    codes : ndarray of int, shape (n_rows,)
        Each row's question.
    batch_size : int
    rng : numpy.random.Generator
    bucket : int, default=50

    Returns
    -------
    list of ndarray
        Row numbers of each batch, a question's rows together.
    """
    questions, local = np.unique(codes, return_inverse=True)
    sizes = np.bincount(local, minlength=len(questions))
    longest = np.zeros(len(questions), dtype=np.int64)
    np.maximum.at(longest, local, np.asarray(lengths, dtype=np.int64))
    n_batches = min(len(questions), -(-len(codes) // batch_size))
    perm = rng.permutation(len(questions))
    bucket_id = np.cumsum(sizes[perm]) // (bucket * batch_size)
    perm = perm[np.lexsort((longest[perm], bucket_id))]
    ends = np.cumsum(sizes[perm])
    # Cut after the question whose rows reach each multiple of the mean batch; cuts at least one question
    # apart, so that every batch has one.
    shift = np.arange(1, n_batches)
    cuts = np.searchsorted(ends, shift * len(codes) / n_batches, side="left") + 1
    cuts = np.clip(np.maximum.accumulate(cuts - shift), 0, len(questions) - n_batches) + shift
    # The rows of the questions in that order, cut at the same places.
    starts = np.cumsum(sizes) - sizes
    rows = np.argsort(local, kind="stable")[np.repeat(starts[perm], sizes[perm]) + ragged_arange(sizes[perm])]
    batches = np.split(rows, ends[cuts - 1])
    return [batches[i] for i in rng.permutation(len(batches))]


def length_chunks(lengths: np.ndarray, rows_per_chunk: int) -> list:
    """A batch's rows in parts of similar length: positions sorted by length, cut into
    ``ceil(n / rows_per_chunk)`` parts of about equal size.

    A listwise batch holds whole questions, whose candidates differ in length: padded to the batch's longest
    row, many of its tokens are padding. Run part by part, each padded to its own longest row, the forward pass
    does the same work on far fewer tokens; the outputs, put back in row order, are the same.

    Parameters
    ----------
    lengths : ndarray of int, shape (n_rows,)
        Tokens of each row of the batch.
    rows_per_chunk : int

    Returns
    -------
    list of ndarray
        Positions (into ``lengths``) of each part, every position once.
    """
    order = np.argsort(np.asarray(lengths), kind="stable")
    return np.array_split(order, max(1, -(-len(order) // rows_per_chunk)))


def token_budget_batches(unit_sizes: np.ndarray, unit_lengths: np.ndarray, max_tokens: int) -> list:
    """Pack units (rows, or whole questions) into batches of at most ``max_tokens`` padded tokens.

    Units are sorted by length so that each batch pads to a similar width; a batch costs
    ``rows × longest length``. A unit larger than the budget forms a batch of its own.

    Parameters
    ----------
    unit_sizes : ndarray of int, shape (n_units,)
        Rows of each unit (1 for single rows, the number of candidates for a question).
    unit_lengths : ndarray of int, shape (n_units,)
        Longest token length of each unit.
    max_tokens : int

    Returns
    -------
    list of ndarray
        Unit numbers of each batch.
    """
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, (int, np.integer)) or max_tokens < 1:
        raise ValueError(f"batch_tokens must be a positive integer, got {max_tokens!r}.")
    order = np.argsort(unit_lengths, kind="stable")
    rows = np.cumsum(np.asarray(unit_sizes)[order])
    lengths = np.asarray(unit_lengths)[order]
    batches, start = [], 0
    while start < len(order):
        done = rows[start - 1] if start else 0
        # Padded cost of a batch [start, end]: rows × width of its last (longest) unit; monotone in end.
        cost = (rows[start:] - done) * lengths[start:]
        end = start + max(1, int(np.searchsorted(cost, max_tokens, side="right")))
        batches.append(order[start:end])
        start = end
    return batches

