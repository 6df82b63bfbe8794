"""The torch network of :class:`~as2rank.cosinet.estimator.Cosinet` (Bonadiman & Moschitti, 2020, §3).

:class:`CosinetNetwork` scores the pairs of a batch laid out by ``as2rank.cosinet.encoding._Encoded.batch``:
one convolution per side over ``[word vector ; relatedness]`` with max pooling, the pair representation
``[q ⊙ c ; q − c]``, an optional RNN over each question's candidates and a linear scorer.

Importing this module imports torch; :mod:`as2rank.cosinet.estimator` imports it only when it builds a network, so
``import as2rank`` does not import torch.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from .encoding import _to_grid

__all__ = ["CosinetNetwork"]


class CosinetNetwork(nn.Module):
    """Per-side convolution over [word vector ; relatedness] with max pooling, the pair
    representation, an optional RNN over the candidate list and a linear scorer. ``forward`` returns
    one score per pair of the batch.

    The frozen word vectors are not part of the module (see :meth:`forward`), so its state holds the
    trainable weights only. Cosinet builds it from its ``module_config_``.

    Parameters
    ----------
    dim : int
        Dimension of the word vectors.
    n_filters : int
        Convolution filters per side.
    kernel_size : int
        Convolution width in words.
    rnn : {None, "rnn", "birnn", "lstm", "bilstm"}
        Recurrent layer over a question's candidates, or ``None`` to score each pair on its own.
    rnn_hidden_size : int or None
        Hidden units of the RNN per direction (``None`` when ``rnn`` is ``None``).
    dropout : float
        Dropout on the pair representations during training.
    """

    def __init__(self, dim, n_filters, kernel_size, rnn, rnn_hidden_size, dropout):
        super().__init__()
        self.dim = dim
        # One convolution per side over [word vector ; relatedness]: the paper's layers and parameter
        # count. They are applied factorised (see _pool) but stored as ordinary Conv1d weights.
        self.q_conv = nn.Conv1d(dim + 1, n_filters, kernel_size)
        self.c_conv = nn.Conv1d(dim + 1, n_filters, kernel_size)
        self.dropout = nn.Dropout(dropout)
        pair_size = 2 * n_filters
        if rnn is None:
            self.rnn = None
            out_size = pair_size
        else:
            layer = nn.LSTM if rnn.endswith("lstm") else nn.RNN
            bidirectional = rnn.startswith("bi")
            self.rnn = layer(pair_size, rnn_hidden_size, batch_first=True, bidirectional=bidirectional)
            out_size = rnn_hidden_size * (2 if bidirectional else 1)
        self.scorer = nn.Linear(out_size, 1)

    def _pool(self, table, conv, stream, tokens, windows, lengths):
        """Convolution over ``[vector ; relatedness]`` and max pooling, one row per pair.

        The convolution is linear in its input channels, so it is computed as the sum of two parts:
        the word-vector channels once per distinct text of the batch (a question shared by all its
        candidates is convolved once, on a packed stream without padding), the relatedness channel,
        which depends on the pair, at every word of every pair.
        """
        weight = conv.weight  # (filters, dim + 1, kernel)
        filters, _, k = weight.shape
        if table.dtype != torch.float32:
            # oneDNN builds and keeps a bfloat16 kernel for every new matrix shape (up to its cache sizes):
            # padding the stream with the zero word to one of 8 lengths per octave (at most 1/8 more rows)
            # keeps memory flat over a long stream of batches (the scale-out benchmark measures it). The
            # padded positions are never read back.
            positions = len(stream) - k + 1
            step = 1 << max(0, positions.bit_length() - 4)
            stream = torch.nn.functional.pad(stream, (0, -positions % step))
        windows_e = table[stream].unfold(0, k, 1)  # (stream positions, dim, kernel)
        word_weight = weight[:, : self.dim, :].reshape(filters, -1).to(table.dtype)
        by_text = (windows_e.reshape(len(windows_e), -1) @ word_weight.T).float()
        # The rows are gathered by embedding(), not by_text[tokens]: a word of a question is read once per
        # candidate, and the backward pass of indexing sums those repeated rows' gradients with atomic
        # adds from several threads (CPU float32, large enough tensors), in an order that depends on
        # thread timing and so on the machine's load. embedding's backward adds them in token order
        # whatever the threads, which keeps fit reproducible bit for bit.
        hidden = torch.nn.functional.embedding(tokens, by_text) + windows @ weight[:, self.dim, :].T
        # ReLU commutes with the max, so it is applied once per pooled value.
        pooled = torch.segment_reduce(hidden, "max", lengths=lengths, axis=0)
        return torch.relu(pooled + conv.bias)

    def forward(self, batch, table):
        """Scores of ``batch``; ``table`` holds the frozen word vectors (row 0 = padding) on the module's
        device, in the precision of the convolution's matrix product. It is an argument, not module
        state, so that one fitted module can score in several threads at once (a Dask worker).

        Parameters
        ----------
        batch : dict
            A batch of ``as2rank.cosinet.encoding._Encoded.batch``, on the module's device.
        table : torch.Tensor of shape (n_words + 1, dim)

        Returns
        -------
        torch.Tensor of shape (n_pairs,)
            One score per pair, in the batch's pair order.
        """
        q = self._pool(table, self.q_conv, batch["q_stream"], batch["q_tokens"], batch["q_windows"], batch["q_lengths"])
        c = self._pool(table, self.c_conv, batch["c_stream"], batch["c_tokens"], batch["c_windows"], batch["c_lengths"])
        pairs = self.dropout(torch.cat([q * c, q - c], dim=1))
        if self.rnn is not None:
            grid, _ = _to_grid(pairs, batch)
            n_q, width = grid.shape[:2]
            # Packing keeps padded slots out of the recurrence (the backward direction starts at
            # each question's last real candidate).
            packed = pack_padded_sequence(grid, torch.as_tensor(batch["sizes"]), batch_first=True, enforce_sorted=False)
            out, _ = self.rnn(packed)
            out, _ = pad_packed_sequence(out, batch_first=True, total_length=width)
            pairs = out.reshape(n_q * width, -1)[batch["slots"]]
        return self.scorer(pairs).squeeze(1)
