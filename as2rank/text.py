"""Text processing: spaCy tokenisation and sentence splitting, and bags of words as sparse matrices.

Only spaCy's rule-based English tokenizer and its ``sentencizer`` are used, so nothing is downloaded.
Each distinct text is tokenised once, however many rows repeat it.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pandas as pd
import scipy.sparse as sp

__all__ = ["tokenize", "split_sentences", "bag_of_words", "vocabulary_indices"]


@lru_cache(maxsize=1)
def _english():
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    return nlp


def tokenize(texts, *, lower: bool = True, drop_punct: bool = False) -> list[list[str]]:
    """Tokenise texts with spaCy's English tokenizer.

    Parameters
    ----------
    texts : sequence of str
    lower : bool, default=True
        Lower-case the tokens (as the Cosinet paper does).
    drop_punct : bool, default=False
        Drop punctuation and whitespace tokens.

    Returns
    -------
    list of list of str
        One token list per input text.
    """
    codes, uniques = pd.factorize(pd.Series(texts, dtype=object), sort=False)
    tokenizer = _english().tokenizer
    unique_tokens = []
    for doc in tokenizer.pipe(uniques, batch_size=1000):
        toks = [t for t in doc if not (t.is_space or (drop_punct and t.is_punct))]
        unique_tokens.append([t.lower_ if lower else t.text for t in toks])
    return [unique_tokens[c] for c in codes]


def split_sentences(text: str) -> list[tuple[int, int]]:
    """Character spans ``(start, end)`` of the sentences of ``text`` (spaCy ``sentencizer``)."""
    doc = _english()(text)
    return [(s.start_char, s.end_char) for s in doc.sents]


def bag_of_words(token_lists, vocabulary: dict | None = None):
    """Sparse count matrix of token lists.

    Parameters
    ----------
    token_lists : list of list of str
    vocabulary : dict, default=None
        Token → column. When ``None`` it is built from ``token_lists``; otherwise unknown tokens are
        ignored.

    Returns
    -------
    counts : scipy.sparse.csr_matrix of shape (len(token_lists), len(vocabulary))
    vocabulary : dict
    """
    lengths = np.fromiter((len(t) for t in token_lists), dtype=np.intp, count=len(token_lists))
    flat = [tok for toks in token_lists for tok in toks]
    rows = np.repeat(np.arange(len(token_lists)), lengths)
    if vocabulary is None:
        cols, uniques = pd.factorize(pd.Series(flat, dtype=object), sort=False)
        vocabulary = {tok: i for i, tok in enumerate(uniques)}
    else:
        cols = vocabulary_indices(flat, vocabulary)
        known = cols >= 0
        rows, cols = rows[known], cols[known]
    counts = sp.csr_matrix(
        (np.ones(len(rows), dtype=np.float64), (rows, cols)), shape=(len(token_lists), len(vocabulary))
    )
    counts.sum_duplicates()
    return counts, vocabulary


def vocabulary_indices(tokens, vocabulary: dict) -> np.ndarray:
    """The column of each token in ``vocabulary`` (token -> column), -1 for a token it lacks.

    One dict lookup per token, so the cost follows ``len(tokens)`` and not the size of ``vocabulary``
    (``Series.map`` with a dict indexes the whole dict first: a small request would pay for a large one).
    """
    return np.fromiter((vocabulary.get(t, -1) for t in tokens), dtype=np.intp, count=len(tokens))
