"""Cosinet's inputs: word ids of a frame's texts, word-relatedness features of its text pairs, and batches.

:func:`_encode` tokenises every distinct text of a frame once and maps its words to rows of the word-vector
table (:func:`_table`), giving an :class:`_Encoded`. :meth:`_Encoded.relate` then computes the
word-relatedness features of every distinct (question, candidate) text pair once per ``fit`` or ``predict``
(they depend only on the frozen vectors), and :meth:`_Encoded.batch` lays a set of questions out as the
tensors that :class:`~as2rank.cosinet.network.CosinetNetwork` reads, with whole-array NumPy
operations; :func:`_to_grid` scatters per-pair values of such a batch back into its (question × candidate)
grid.

Only NumPy and pandas are imported with this module; torch is imported inside the functions that make
tensors, so importing it (and ``import as2rank``) does not import torch.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..data import ragged_arange, reading_order
from ..text import tokenize


def _encode(X, index, lowercase, padding, vocabulary=None) -> _Encoded:
    """Tokenise every distinct text of ``X`` once and map the words to table ids.

    With ``vocabulary`` (the fitted words), known words keep their ids and the others are appended as
    ``new_words``; without it every word is new.

    Parameters
    ----------
    X : pandas.DataFrame
        Checked grouped-candidate frame (``question`` and ``candidate`` columns).
    index : as2rank.data.GroupIndex
        The questions of ``X``; each question's candidates are laid out in :func:`~as2rank.data.reading_order`
        (by ``position``, or by candidate text when ``X`` has none).
    lowercase : bool
        Lower-case the text before tokenisation.
    padding : tuple of (int, int)
        Padding words the convolution's kernel reaches to the left and to the right of a word.
    vocabulary : ndarray of str, default=None
        Words that already have table rows (``vocabulary[i]`` is row ``i + 1``).

    Returns
    -------
    _Encoded
    """
    from ..neural import padded_groups

    n = len(X)
    codes, texts = pd.factorize(np.concatenate([X["question"].to_numpy(object), X["candidate"].to_numpy(object)]))
    tokens = tokenize(list(texts), lower=lowercase)
    counts = np.fromiter((len(t) for t in tokens), dtype=np.int64, count=len(tokens))
    flat = pd.Series([w for t in tokens for w in t], dtype=object)
    known = np.asarray(pd.Index(vocabulary if vocabulary is not None else [], dtype=object).get_indexer(flat))
    new_codes, new_words = pd.factorize(flat[known < 0])
    word_ids = known + 1
    word_ids[known < 0] = (0 if vocabulary is None else len(vocabulary)) + 1 + new_codes
    lengths = np.maximum(counts, 1)
    ids = np.zeros((len(tokens), int(lengths.max())), dtype=np.int64)
    text_of_word = np.repeat(np.arange(len(tokens)), counts)
    ids[text_of_word, ragged_arange(counts)] = word_ids
    return _Encoded(
        rows=padded_groups(index.offsets, reading_order(X, index)),
        sizes=index.sizes,
        q_text=codes[:n].astype(np.int64),
        c_text=codes[n:].astype(np.int64),
        ids=ids,
        lengths=lengths,
        new_words=np.asarray(new_words, dtype=object),
        padding=padding,
    )


class _Encoded:
    """Everything about a frame that does not change during training, computed once per ``fit``/``predict``:
    the word ids of every distinct text, the questions' padded row lists and, after :meth:`relate`, the
    word-relatedness features of every (question, candidate) text pair. :meth:`batch` turns a set of
    questions into tensors with whole-array numpy operations (no per-candidate Python loop).

    Attributes
    ----------
    rows : ndarray (n_groups, max_candidates)
        Row numbers of each question's candidates in reading order (by ``position``, else by candidate text),
        -1 padded.
    sizes : ndarray (n_groups,)
    q_text, c_text : ndarray (n_rows,)
        Text number of each row's question and candidate.
    text_pair : ndarray (n_rows,)
        Number of each row's distinct (question text, candidate text) pair.
    ids : ndarray (n_texts, max_len)
        Word ids (1-based into the table; 0 pads) of every distinct text.
    lengths : ndarray (n_texts,)
        Words per text (at least 1: an empty text is one padding word).
    new_words : ndarray of str
        Words not in the given vocabulary, with ids ``len(vocabulary) + 1 ...``.
    padding : tuple of (int, int)
        Padding words the convolution's kernel reaches to the left and to the right of a word.
    pair_q, pair_c : ndarray (n_text_pairs,)
        Question and candidate text of each distinct text pair.
    q_offsets, c_offsets : ndarray (n_text_pairs + 1,)
        Where each text pair's features start in ``r_q`` and ``r_c``.
    r_q, r_c : ndarray of float32
        After :meth:`relate`: the relatedness feature of every word of every text pair's question and
        candidate.
    """

    def __init__(self, rows, sizes, q_text, c_text, ids, lengths, new_words, padding):
        self.rows, self.sizes, self.q_text, self.c_text = rows, sizes, q_text, c_text
        self.ids, self.lengths, self.new_words, self.padding = ids, lengths, new_words, padding
        n_texts = np.int64(len(lengths))
        _, first, self.text_pair = np.unique(q_text * n_texts + c_text, return_index=True, return_inverse=True)
        self.pair_q, self.pair_c = q_text[first], c_text[first]
        # Offsets of each text pair's features in the flat relatedness arrays.
        self.q_offsets = np.concatenate(([0], np.cumsum(lengths[self.pair_q])))
        self.c_offsets = np.concatenate(([0], np.cumsum(lengths[self.pair_c])))

    def relate(self, table, device, budget=1 << 23):
        """Word-relatedness features of every distinct text pair (they depend only on the frozen vectors,
        so they are computed once, not per epoch).

        For each question word, its highest cosine similarity to a word of the candidate; for each
        candidate word, its highest to a word of the question (the paper's ``r_i = max_j r_ij``).

        Parameters
        ----------
        table : Tensor (n_words + 1, dim)
            The word vectors, row 0 the zero padding vector (cosine 0 with everything).
        device : torch.device
        budget : int
            Largest number of floats in one chunk's gathered vectors.
        """
        import torch

        unit = torch.nn.functional.normalize(table.to(device), dim=1)
        self.r_q = np.empty(self.q_offsets[-1], dtype=np.float32)
        self.r_c = np.empty(self.c_offsets[-1], dtype=np.float32)
        q_len, c_len = self.lengths[self.pair_q], self.lengths[self.pair_c]
        # Chunks of pairs with similar candidate lengths keep the padding small.
        order = np.lexsort((q_len, c_len))
        floats_per_word = unit.shape[1]
        cost = (c_len[order] + int(q_len.max())) * floats_per_word  # floats gathered per pair, ascending
        start = 0
        with torch.no_grad():
            while start < len(order):
                # Size the chunk by its longest (last) pair: first guess from the first pair, then shrink.
                stop = min(len(order), start + max(1, budget // int(cost[start])))
                stop = min(stop, start + max(1, budget // int(cost[stop - 1])))
                chunk = order[start:stop]
                self._relate_chunk(chunk, unit, q_len[chunk], c_len[chunk], device)
                start = stop

    def _relate_chunk(self, chunk, unit, q_len, c_len, device):
        import torch

        wq, wc = int(q_len.max()), int(c_len.max())
        q_real = np.arange(wq) < q_len[:, None]
        c_real = np.arange(wc) < c_len[:, None]
        q_ids = torch.from_numpy(self.ids[self.pair_q[chunk], :wq]).to(device)
        c_ids = torch.from_numpy(self.ids[self.pair_c[chunk], :wc]).to(device)
        cosine = torch.bmm(unit[q_ids], unit[c_ids].transpose(1, 2))
        q_mask = torch.from_numpy(q_real).to(device)
        c_mask = torch.from_numpy(c_real).to(device)
        r_q = cosine.masked_fill(~c_mask[:, None, :], float("-inf")).amax(dim=2)
        r_c = cosine.masked_fill(~q_mask[:, :, None], float("-inf")).amax(dim=1)
        self.r_q[(self.q_offsets[chunk][:, None] + np.arange(wq))[q_real]] = r_q.cpu().numpy()[q_real]
        self.r_c[(self.c_offsets[chunk][:, None] + np.arange(wc))[c_real]] = r_c.cpu().numpy()[c_real]

    def batch(self, groups, labels=None) -> dict:
        """Tensors of the questions ``groups``.

        ``slots`` place the pairs (question by question, in reading order) in the padded
        (question × candidate) grid; per side, ``stream`` holds the words of the batch's distinct texts
        for the convolution, ``tokens`` the convolution output row of every word of every pair,
        ``windows`` the relatedness values under the kernel at that word, and ``lengths`` the words per
        pair (for the max pooling).

        Parameters
        ----------
        groups : ndarray of int
            Question numbers.
        labels : ndarray of float32 of shape (n_rows,), default=None
            Labels of all the rows; the batch gets those of its rows as ``labels``, and ``group``, each row's
            question numbered within the batch (``as2rank.neural.losses.LABEL_LOSSES``).

        Returns
        -------
        dict
            CPU tensors (``sizes`` stays a NumPy array), read by the network's ``forward`` and by
            :func:`_to_grid`.
        """
        import torch

        sizes = self.sizes[groups]
        width = int(sizes.max())
        grid = self.rows[groups, :width]
        real = grid >= 0
        rows = grid[real]
        pairs = self.text_pair[rows]
        batch = {"rows": torch.from_numpy(rows), "slots": torch.from_numpy(np.flatnonzero(real.ravel())), "sizes": sizes}
        for side, texts, features, offsets in (
            ("q", self.q_text[rows], self.r_q, self.q_offsets),
            ("c", self.c_text[rows], self.r_c, self.c_offsets),
        ):
            distinct, pair_text = np.unique(texts, return_inverse=True)
            stream, positions = self._stream(distinct)
            lengths = self.lengths[texts]
            token_pair = np.repeat(np.arange(len(rows)), lengths)
            token_at = ragged_arange(lengths)
            values = features[offsets[pairs][token_pair] + token_at]
            batch[f"{side}_stream"] = torch.from_numpy(stream)
            batch[f"{side}_tokens"] = torch.from_numpy(positions[pair_text.ravel()[token_pair], token_at])
            batch[f"{side}_windows"] = torch.from_numpy(self._windows(values, lengths, token_pair, token_at))
            batch[f"{side}_lengths"] = torch.from_numpy(lengths)
        if labels is not None:  # a training batch: its labels, and each row's question for a listwise loss
            batch["labels"] = torch.from_numpy(labels[rows])
            batch["group"] = torch.from_numpy(np.repeat(np.arange(len(sizes)), sizes))
        return batch

    def _stream(self, texts):
        """The words of ``texts`` packed into one stream for the convolution.

        Every text is followed by ``gap`` padding words, as many as the kernel reaches on either side, so
        a window never sees two texts and no compute is spent on padding. ``positions[i, t]`` is the
        convolution output row of word ``t`` of text ``i``.
        """
        left = self.padding[0]
        lengths = self.lengths[texts]
        width = int(lengths.max())
        real = np.arange(width) < lengths[:, None]
        starts, size = self._packed_starts(lengths)
        where = starts[:, None] + np.arange(width)
        stream = np.zeros(size, dtype=np.int64)
        stream[where[real]] = self.ids[texts, :width][real]
        return stream, np.where(real, where - left, 0)

    def _windows(self, values, lengths, token_pair, token_at):
        """Relatedness values under the kernel at every word of every pair (zero beyond the text), shape
        (n_words, kernel_size)."""
        left, right = self.padding
        starts, size = self._packed_starts(lengths)
        stream = np.zeros(size, dtype=np.float32)
        at = starts[token_pair] + token_at
        stream[at] = values
        return stream[(at - left)[:, None] + np.arange(left + right + 1)]

    def _packed_starts(self, lengths):
        """Where each of texts ``lengths`` words long starts in their packed stream, and the stream's length.

        The stream opens with the kernel's left padding, and every text is followed by as many padding
        positions as the kernel reaches on either side (see :meth:`_stream`).
        """
        left, right = self.padding
        gap = max(left, right)
        starts = left + np.concatenate(([0], np.cumsum(lengths + gap)[:-1]))
        return starts, left + int((lengths + gap).sum())


def _table(vectors: np.ndarray):
    """The lookup table of the network: row 0 is the zero padding vector, row ``i + 1`` is word ``i``.

    Parameters
    ----------
    vectors : ndarray of shape (n_words, dim)

    Returns
    -------
    torch.Tensor of float32, shape (n_words + 1, dim)
    """
    import torch

    dim = vectors.shape[1]
    return torch.from_numpy(np.concatenate([np.zeros((1, dim), dtype=np.float32), vectors.astype(np.float32, copy=False)]))


def _to_grid(values, batch):
    """Scatter per-pair values into a (questions × max candidates) grid, with the mask of real slots.

    Parameters
    ----------
    values : torch.Tensor of shape (n_pairs, ...)
        One value, or one vector, per pair of ``batch``, in the batch's pair order.
    batch : dict
        A batch of :meth:`_Encoded.batch` (its ``sizes`` and ``slots``).

    Returns
    -------
    grid : torch.Tensor of shape (n_questions, max_candidates, ...)
        ``values`` in the slots of their pairs, zeros in the padding slots.
    mask : torch.Tensor of bool, shape (n_questions, max_candidates)
        True in the slots of real pairs.
    """
    import torch

    sizes = batch["sizes"]
    n_q, width = len(sizes), int(sizes.max())
    grid = values.new_zeros((n_q * width, *values.shape[1:]))
    grid[batch["slots"]] = values
    mask = torch.zeros(n_q * width, dtype=torch.bool, device=values.device)
    mask[batch["slots"]] = True
    return grid.view(n_q, width, *values.shape[1:]), mask.view(n_q, width)
