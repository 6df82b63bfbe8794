"""Context for answer sentence selection (Han, Soldaini & Moschitti 2021).

* :class:`ContextExtractor`: a scikit-learn transformer that adds each candidate's **local context** (the
  ``k`` sentences before and after it in its document, §2.1.1) and **global context** (the sentences of the
  document most similar to the question and candidate, §2.1.2: n-gram overlap, Eq. 1, or embedding
  cosine, Eq. 2) as the columns ``local_context`` and ``global_context``.
* Rankers over those columns, all transformer estimators like
  :class:`~as2rank.transformer.TransformerRanker` (the paper's "no context" row):
  :class:`ContextConcat` (one encoder over the concatenation), :class:`ContextEnsemble` (one encoder per
  context, trained for AS2, then joined and fine-tuned) and :class:`ContextMWA` (one encoder, multi-way
  attention from the question and candidate to each context).

Typical use::

    make_pipeline(ContextExtractor(global_method="cosine"), ContextMWA(random_state=0))

**Input layout and truncation.** Context rankers encode
``prefix question mid candidate mid local mid global suffix``, where ``prefix``, ``mid`` and ``suffix`` are
the special tokens the tokenizer puts around a sentence pair (``[CLS] … [SEP] … [SEP]`` for BERT,
``<s> … </s></s> … </s>`` for RoBERTa). The question and candidate get their own budget,
``max_pair_length`` tokens with their special tokens (shortened longest first, as
:class:`~as2rank.transformer.TransformerRanker` does with its ``max_length``), so no context can crowd
them out; the contexts share what is left of ``max_length``, again longest first (a short local context
leaves its unused share to the global one), each cut at its end. Segment ids alternate 0, 1, 0, 1 over
question, candidate, first and second context, on models that have them.
"""

from __future__ import annotations

import copy
import functools
import itertools
from collections.abc import Mapping

import numpy as np
import pandas as pd
import scipy.sparse as sp
from sklearn.base import BaseEstimator, TransformerMixin

from .data import REQUIRED_COLUMNS, check_ranking_data, check_X
from .persistence import PersistenceMixin
from .text import bag_of_words, tokenize
from .transformer import TransformerRanker, _check_number, _TransformerEstimator

__all__ = ["CONTEXTS", "GLOBAL_METHODS", "ContextConcat", "ContextEnsemble", "ContextExtractor", "ContextMWA"]

#: The two kinds of context, in the order they enter a model's input.
CONTEXTS = ("local", "global")

#: Values of ``ContextExtractor(global_method=...)``.
GLOBAL_METHODS = ("ngram", "cosine")

#: Longest input of the global-context sentence encoder (the sentence-transformers setting of all-MiniLM-L6-v2).
_ENCODER_MAX_LENGTH = 256

#: Pairs scored per chunk when ranking global-context sentences (bounds the memory of the pair matrices).
_PAIR_CHUNK = 1 << 16


def _ragged_arange(lengths: np.ndarray) -> np.ndarray:
    """``concatenate([arange(n) for n in lengths])`` without a Python loop."""
    lengths = np.asarray(lengths, dtype=np.int64)
    return np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)


def _runs(sorted_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start and length of each run of equal values in ``sorted_keys``."""
    starts = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])
    return starts, np.diff(np.r_[starts, len(sorted_keys)])


def _group_rank(sorted_keys: np.ndarray) -> np.ndarray:
    """0-based rank of each entry inside its run of equal ``sorted_keys``."""
    return _ragged_arange(_runs(sorted_keys)[1])


def _group_cumsum(values: np.ndarray, sorted_keys: np.ndarray) -> np.ndarray:
    """Cumulative sum of ``values`` restarting at each run of equal ``sorted_keys``."""
    total = np.cumsum(values)
    starts, sizes = _runs(sorted_keys)
    return total - np.repeat(total[starts] - values[starts], sizes)


def _join(rows: np.ndarray, texts: np.ndarray, n: int) -> np.ndarray:
    """One string per row: the ``texts`` of each row joined with spaces, in the order given ("" if none)."""
    out = np.full(n, "", dtype=object)
    if len(rows):
        joined = pd.Series(texts, dtype=object).groupby(rows, sort=False).agg(" ".join)
        out[joined.index.to_numpy()] = joined.to_numpy()
    return out


def _ngram_lists(token_lists, n: int = 3) -> list[list[str]]:
    """Uni- to ``n``-grams of each token list (spaCy tokens hold no spaces, so a space joins them)."""
    return [[" ".join(toks[i : i + k]) for k in range(1, n + 1) for i in range(len(toks) - k + 1)] for toks in token_lists]


@functools.lru_cache(maxsize=2)
def _sentence_encoder(name: str):
    """The global-context sentence encoder, loaded once per process (read-only: never trained)."""
    from .neural.backbone import load_backbone

    return load_backbone(name)


class ContextExtractor(PersistenceMixin, TransformerMixin, BaseEstimator):
    """Add each candidate's local and global context from its document (paper §2.1).

    **Documents.** By default a document is rebuilt from the rows of ``X`` itself: every row with the same
    ``doc_id`` is a sentence of that document, at ``doc_position`` (WikiQA, whose candidates are all the
    sentences of a summary paragraph, and SQuAD paragraphs, as :func:`~as2rank.datasets.load_wikiqa` and
    :func:`~as2rank.datasets.load_squad_sent` return them). Or pass ``documents={doc_id: [sentences]}``:
    rows then need ``doc_id``, and ``doc_position`` when present must point at the candidate's sentence;
    without it the candidate is looked up in its document by exact text.

    **Local context** (§2.1.1): the sentences at ``doc_position ± 1 … local_window`` that exist (fewer at
    the edges of a document), in document order, joined with spaces.

    **Global context** (§2.1.2): every sentence of the document but the candidate (by position and by
    text, so a repeated sentence is left out too; other repeated sentences count once) is scored against
    the question and candidate:

    * ``"ngram"`` (Eq. 1): ``|Ng(C_p) ∩ Ng(Q, C_j)| / |Ng(Q, C_j)|`` over the sets of uni-, bi- and
      tri-grams of lower-cased spaCy tokens, punctuation left out; ``Ng(Q, C_j)`` is the union of the
      question's and the candidate's n-grams (none spans the two). Computed as products of sparse binary
      n-gram matrices, every distinct text tokenised once.
    * ``"cosine"`` (Eq. 2): the cosine between the embeddings of ``question + " " + candidate`` and of the
      sentence, from ``encoder`` (default the packaged all-MiniLM-L6-v2 sentence encoder with its own mean
      pooling; the paper used RoBERTa-base), every distinct text encoded once.

    The ``max_global_sentences`` best (ties: earlier in the document first) are kept, best first, as long
    as their running token count stays within ``max_global_tokens`` (the paper's ``h=5`` sentences within
    128 tokens); they are joined with spaces **in score order**, best first, so that a ranker whose
    ``max_length`` cuts the end of the context drops the least similar sentence first. Tokens are counted
    as spaCy word and punctuation tokens (wordpiece tokenizers make about 1.2–1.4× more).

    ``transform`` returns a copy of ``X`` with ``local_context`` and ``global_context`` added (replaced if
    present); no other column and no row order change. It also sets ``report_``.

    Parameters
    ----------
    local_window : int, default=1
        ``k``: sentences taken on each side (the paper settles on 1).
    global_method : {"ngram", "cosine"}, default="ngram"
    max_global_sentences : int, default=5
        ``h``; 0 gives empty global contexts.
    max_global_tokens : int, default=128
    documents : mapping, default=None
        ``{doc_id: [sentence, ...]}``, sentences in document order; ``None`` rebuilds the documents from
        the rows of ``X``.
    encoder : str, default="minilm-l6"
        Sentence encoder of the ``"cosine"`` method: an alias, local path or Hugging Face id (see
        :func:`~as2rank.neural.backbone.load_backbone`); its pooling is the checkpoint's own
        (:func:`~as2rank.neural.backbone.native_pooling`).
    batch_tokens : int, default=16384
        Padded tokens per encoder batch (``"cosine"``).
    device : str, default="auto"
        Device of the encoder (``"cosine"``).

    Attributes
    ----------
    report_ : dict
        Set by each ``transform``: ``mean_local_sentences``, ``mean_global_sentences`` (the paper reports
        ~3 with h=5 on ASNQ), ``mean_global_tokens`` and ``n_rows``.

    Examples
    --------
    >>> import pandas as pd
    >>> from as2rank.context import ContextExtractor
    >>> X = pd.DataFrame({"qid": ["q"] * 3, "question": ["who wrote hamlet"] * 3,
    ...                   "candidate": ["Hamlet is a play.", "Shakespeare wrote it.", "It is long."],
    ...                   "doc_id": ["d"] * 3, "doc_position": [0, 1, 2]})
    >>> Xc = ContextExtractor(max_global_sentences=1).fit_transform(X)
    >>> Xc.loc[1, "local_context"], Xc.loc[1, "global_context"]
    ('Hamlet is a play. It is long.', 'Hamlet is a play.')
    """

    # Accept ``groups`` when metadata routing sends it through a pipeline (it is only validated).
    __metadata_request__fit = {"groups": True}

    def __init__(
        self,
        local_window=1,
        global_method="ngram",
        max_global_sentences=5,
        max_global_tokens=128,
        documents=None,
        encoder="minilm-l6",
        batch_tokens=16384,
        device="auto",
    ):
        self.local_window = local_window
        self.global_method = global_method
        self.max_global_sentences = max_global_sentences
        self.max_global_tokens = max_global_tokens
        self.documents = documents
        self.encoder = encoder
        self.batch_tokens = batch_tokens
        self.device = device

    def _check_params(self):
        _check_number("local_window", self.local_window, 0, integer=True)
        _check_number("max_global_sentences", self.max_global_sentences, 0, integer=True)
        _check_number("max_global_tokens", self.max_global_tokens, 1, integer=True)
        _check_number("batch_tokens", self.batch_tokens, 1, integer=True)
        if self.global_method not in GLOBAL_METHODS:
            raise ValueError(f"global_method must be one of {GLOBAL_METHODS}, got {self.global_method!r}.")
        if self.documents is not None and not isinstance(self.documents, Mapping):
            raise ValueError(f"documents must be a mapping {{doc_id: [sentences]}} or None, got {type(self.documents).__name__}.")
        if not isinstance(self.encoder, str):
            raise ValueError(f"encoder must be a model alias, path or Hugging Face id (str), got {type(self.encoder).__name__}.")

    def fit(self, X, y=None, groups=None):
        """Validate the parameters and the input; nothing is learned.

        Parameters
        ----------
        X : pandas.DataFrame
            Grouped-candidate frame with ``doc_id`` (and ``doc_position`` unless ``documents`` is given).
        y, groups : ignored
            Validated when given.

        Returns
        -------
        self
        """
        X, _, _ = check_ranking_data(X, y, groups, require_y=False)
        self._check_params()
        self._check_document_columns(X)
        return self

    def transform(self, X) -> pd.DataFrame:
        """Add the ``local_context`` and ``global_context`` columns.

        Parameters
        ----------
        X : pandas.DataFrame

        Returns
        -------
        pandas.DataFrame
            A copy of ``X`` with the two columns (other columns and the row order unchanged).
        """
        X = check_X(X)
        self._check_params()
        self._check_document_columns(X)
        docs = self._document_table(X)
        local_rows, local_sents = self._local(docs)
        global_rows, global_sents = self._global(X, docs)
        n = len(X)
        global_tokens = np.bincount(global_rows, weights=docs["tokens"][global_sents], minlength=n)
        self.report_ = {
            "mean_local_sentences": float(len(local_rows) / n),
            "mean_global_sentences": float(len(global_rows) / n),
            "mean_global_tokens": float(global_tokens.mean()),
            "n_rows": n,
        }
        return X.assign(
            local_context=_join(local_rows, docs["text"][local_sents], n),
            global_context=_join(global_rows, docs["text"][global_sents], n),
        )

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.two_d_array = False
        tags.input_tags.string = True
        tags.requires_fit = False
        return tags

    # ----------------------------------------------------------------- documents
    def _check_document_columns(self, X):
        needed = ("doc_id",) if self.documents is not None else ("doc_id", "doc_position")
        missing = [c for c in needed if c not in X.columns]
        if missing:
            raise ValueError(
                f"ContextExtractor needs each candidate's document: X lacks the column(s) {missing}. Give X the "
                "columns 'doc_id' and 'doc_position' (sentence index in its document; load_wikiqa and load_squad_sent "
                "return both), or pass documents={doc_id: [sentences]} and a 'doc_id' column."
            )
        if X["doc_id"].isna().any():
            raise ValueError("Column 'doc_id' has missing values.")
        if "doc_position" in X.columns:
            pos = X["doc_position"]
            integral = pd.api.types.is_integer_dtype(pos.dtype) or (
                pd.api.types.is_float_dtype(pos.dtype) and np.all(np.mod(pos.to_numpy(), 1) == 0)
            )
            if pd.api.types.is_bool_dtype(pos.dtype) or not integral or (pos < 0).any():
                raise ValueError("Column 'doc_position' must hold 0-based integer sentence positions (no missing values).")

    def _document_table(self, X) -> dict:
        """The sentences of the rows' documents, sorted by (document, position), and each row's place in them.

        Returns a dict of arrays: ``text``, ``doc``, ``pos``, ``tokens`` (one entry per sentence), ``starts``,
        ``sizes`` (per document), ``row_doc``, ``row_pos`` (per row of ``X``).
        """
        doc_ids = X["doc_id"].to_numpy()
        if self.documents is None:
            row_doc, _ = pd.factorize(doc_ids)
            table = pd.DataFrame({"doc": row_doc, "pos": X["doc_position"].to_numpy(dtype=np.int64), "text": X["candidate"].to_numpy(dtype=object)})
            table = table.drop_duplicates()
            clash = table.duplicated(["doc", "pos"], keep=False).to_numpy()
            if clash.any():
                first = table[clash].iloc[0]
                raise ValueError(
                    f"Rows of document {doc_ids[np.flatnonzero(row_doc == first['doc'])[0]]!r} give different sentences "
                    f"at doc_position {first['pos']}; a (doc_id, doc_position) must name one sentence."
                )
            table = table.sort_values(["doc", "pos"], kind="stable")
            n_docs = int(row_doc.max()) + 1
            text, doc, pos = table["text"].to_numpy(dtype=object), table["doc"].to_numpy(), table["pos"].to_numpy()
            row_pos = X["doc_position"].to_numpy(dtype=np.int64)
        else:
            keys = pd.unique(pd.Series(doc_ids, dtype=object))
            absent = [k for k in keys if k not in self.documents]
            if absent:
                raise ValueError(f"documents has no entry for {len(absent)} doc_id(s) of X, e.g. {absent[:3]!r}.")
            sentences = [self.documents[k] for k in keys]
            if any(isinstance(s, str) or not all(isinstance(t, str) for t in s) for s in sentences):
                raise ValueError("documents must map each doc_id to a list of sentences (str), in document order.")
            sizes = np.fromiter(map(len, sentences), dtype=np.int64, count=len(sentences))
            text = np.fromiter(itertools.chain.from_iterable(sentences), dtype=object, count=int(sizes.sum()))
            doc = np.repeat(np.arange(len(keys)), sizes)
            pos = _ragged_arange(sizes)
            n_docs = len(keys)
            row_doc = pd.Index(keys).get_indexer(pd.Series(doc_ids, dtype=object))
            row_pos = self._rows_in_documents(X, text, doc, pos, sizes, row_doc)
        sizes = np.bincount(doc, minlength=n_docs)
        return {
            "text": text,
            "doc": doc,
            "pos": pos,
            "tokens": np.fromiter(map(len, tokenize(text, lower=False)), dtype=np.int64, count=len(text)),
            "starts": np.cumsum(sizes) - sizes,
            "sizes": sizes,
            "row_doc": row_doc,
            "row_pos": row_pos,
        }

    def _rows_in_documents(self, X, text, doc, pos, sizes, row_doc) -> np.ndarray:
        """Each row's position in its ``documents`` entry: ``doc_position`` (checked), or found by text."""
        candidates = X["candidate"].to_numpy(dtype=object)
        starts = np.cumsum(sizes) - sizes
        if "doc_position" in X.columns:
            row_pos = X["doc_position"].to_numpy(dtype=np.int64)
            inside = row_pos < sizes[row_doc]
            same = np.zeros(len(X), dtype=bool)
            same[inside] = pd.Series(text[starts[row_doc[inside]] + row_pos[inside]]).str.strip().to_numpy() == pd.Series(
                candidates[inside]
            ).str.strip().to_numpy()
            if not same.all():
                bad = np.flatnonzero(~same)[0]
                raise ValueError(
                    f"Row {X.index[bad]!r}: doc_position {row_pos[bad]} of document {X['doc_id'].iloc[bad]!r} is not its "
                    "candidate sentence in documents; check that documents splits sentences as X does."
                )
            return row_pos
        first = pd.DataFrame({"doc": doc, "text": text, "pos": pos}).drop_duplicates(["doc", "text"])
        found = pd.DataFrame({"doc": row_doc, "text": candidates}).merge(first, on=["doc", "text"], how="left")["pos"]
        if found.isna().any():
            bad = int(np.flatnonzero(found.isna().to_numpy())[0])
            raise ValueError(
                f"Row {X.index[bad]!r}: its candidate is not a sentence of document {X['doc_id'].iloc[bad]!r} in "
                "documents; add a 'doc_position' column or make the sentences match."
            )
        return found.to_numpy(dtype=np.int64)

    # ----------------------------------------------------------------- local context
    def _local(self, docs) -> tuple[np.ndarray, np.ndarray]:
        """(row, sentence) pairs of the local contexts, in row then document order."""
        k = int(self.local_window)
        offsets = np.r_[-k:0, 1 : k + 1]
        stride = int(docs["pos"].max()) + 1
        sentence_keys = docs["doc"].astype(np.int64) * stride + docs["pos"]  # ascending, as the table is sorted
        target = docs["row_pos"][:, None] + offsets
        inside = (target >= 0) & (target < stride)
        keys = docs["row_doc"][:, None].astype(np.int64) * stride + target
        idx = np.minimum(np.searchsorted(sentence_keys, keys), len(sentence_keys) - 1)
        found = inside & (sentence_keys[idx] == keys)
        rows, _ = np.nonzero(found)
        return rows, idx[found]

    # ----------------------------------------------------------------- global context
    def _global(self, X, docs) -> tuple[np.ndarray, np.ndarray]:
        """(row, sentence) pairs of the global contexts, best first inside each row."""
        n = len(X)
        sizes = docs["sizes"][docs["row_doc"]]
        pair_row = np.repeat(np.arange(n), sizes)
        pair_sent = np.repeat(docs["starts"][docs["row_doc"]], sizes) + _ragged_arange(sizes)
        codes, _ = pd.factorize(np.concatenate([docs["text"], X["candidate"].to_numpy(dtype=object)]))
        sent_code, cand_code = codes[: len(docs["text"])], codes[len(docs["text"]) :]
        own = (docs["pos"][pair_sent] == docs["row_pos"][pair_row]) | (sent_code[pair_sent] == cand_code[pair_row])
        pair_row, pair_sent = pair_row[~own], pair_sent[~own]
        if self.max_global_sentences == 0 or not len(pair_row):
            return pair_row[:0], pair_sent[:0]
        score = self._ngram_scores if self.global_method == "ngram" else self._cosine_scores
        scores = score(X, docs["text"], pair_row, pair_sent)
        order = np.lexsort((docs["pos"][pair_sent], -scores, pair_row))
        pair_row, pair_sent = pair_row[order], pair_sent[order]
        # A sentence repeated in the document enters a context once (its first, best-placed copy).
        _, first = np.unique(pair_row * (int(sent_code.max()) + 1) + sent_code[pair_sent], return_index=True)
        first = np.sort(first)
        pair_row, pair_sent = pair_row[first], pair_sent[first]
        top = _group_rank(pair_row) < self.max_global_sentences
        pair_row, pair_sent = pair_row[top], pair_sent[top]
        # Running token count inside each row, best first: keep the prefix that fits the budget.
        fits = _group_cumsum(docs["tokens"][pair_sent], pair_row) <= self.max_global_tokens
        return pair_row[fits], pair_sent[fits]

    def _ngram_scores(self, X, sentences, pair_row, pair_sent) -> np.ndarray:
        """Eq. 1 for every (row, sentence) pair, from sparse binary n-gram matrices."""
        texts = np.concatenate([X["question"].to_numpy(dtype=object), X["candidate"].to_numpy(dtype=object), sentences])
        codes, uniques = pd.factorize(texts)
        grams, _ = bag_of_words(_ngram_lists(tokenize(list(uniques), lower=True, drop_punct=True)))
        grams.data[:] = 1.0
        n = len(X)
        pair_grams = grams[codes[:n]] + grams[codes[n : 2 * n]]
        pair_grams.data[:] = 1.0  # the union of the question's and the candidate's n-gram sets
        sentence_grams = grams[codes[2 * n :]]
        size = np.diff(pair_grams.indptr).astype(np.float64)
        shared = np.empty(len(pair_row))
        for lo in range(0, len(pair_row), _PAIR_CHUNK):
            part = slice(lo, lo + _PAIR_CHUNK)
            both = pair_grams[pair_row[part]].multiply(sentence_grams[pair_sent[part]])
            shared[part] = np.asarray(sp.csr_matrix(both).sum(axis=1)).ravel()
        return shared / np.maximum(size[pair_row], 1.0)

    def _cosine_scores(self, X, sentences, pair_row, pair_sent) -> np.ndarray:
        """Eq. 2 for every (row, sentence) pair: cosine of sentence-encoder embeddings."""
        pairs = (X["question"].astype(object) + " " + X["candidate"].astype(object)).to_numpy(dtype=object)
        pair_code, pair_texts = pd.factorize(pairs)
        sent_code, sent_texts = pd.factorize(sentences)
        embeddings = self._embed(list(pair_texts) + list(sent_texts))
        pair_emb, sent_emb = embeddings[: len(pair_texts)], embeddings[len(pair_texts) :]
        scores = np.empty(len(pair_row))
        for lo in range(0, len(pair_row), _PAIR_CHUNK):
            part = slice(lo, lo + _PAIR_CHUNK)
            scores[part] = np.einsum("ij,ij->i", pair_emb[pair_code[pair_row[part]]], sent_emb[sent_code[pair_sent[part]]])
        return scores

    def _embed(self, texts: list) -> np.ndarray:
        """Unit-length embeddings of ``texts`` from ``encoder`` with its own pooling."""
        import torch

        from .neural import resolve_device
        from .neural.backbone import native_pooling, token_budget_batches
        from .neural.heads import pool

        encoder, tokenizer = _sentence_encoder(self.encoder)
        device = resolve_device(self.device)
        pooling = native_pooling(self.encoder)
        max_length = min(_ENCODER_MAX_LENGTH, encoder.config.max_position_embeddings)
        enc = tokenizer(texts, truncation=True, max_length=max_length, padding="longest", return_tensors="np")
        ids, mask = enc["input_ids"].astype(np.int64), enc["attention_mask"].astype(np.int64)
        lengths = mask.sum(axis=1)
        out = np.empty((len(texts), encoder.config.hidden_size), dtype=np.float32)
        encoder = encoder.to(device)
        with torch.inference_mode():
            for rows in token_budget_batches(np.ones(len(texts), dtype=np.int64), lengths, self.batch_tokens):
                width = int(lengths[rows].max())
                batch_mask = torch.from_numpy(mask[rows, :width]).to(device)
                hidden = encoder(input_ids=torch.from_numpy(ids[rows, :width]).to(device), attention_mask=batch_mask).last_hidden_state
                out[rows] = pool(hidden, batch_mask, pooling).float().cpu().numpy()
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)


# --------------------------------------------------------------------------------------------- encoding
def _special_tokens(tokenizer) -> tuple[list, list, list]:
    """The special tokens a tokenizer puts before, between and after a sentence pair.

    Read from the tokenizer itself (BERT: ``[CLS]``, ``[SEP]``, ``[SEP]``; RoBERTa: ``<s>``, ``</s></s>``,
    ``</s>``), so that every segment boundary of a context input looks like the pair boundary the model
    was pre-trained on.
    """
    a = tokenizer("a", add_special_tokens=False)["input_ids"]
    b = tokenizer("b", add_special_tokens=False)["input_ids"]
    full = list(tokenizer("a", "b")["input_ids"])
    for i in range(len(full) - len(a) + 1):
        if full[i : i + len(a)] != a:
            continue
        for j in range(i + len(a), len(full) - len(b) + 1):
            if full[j : j + len(b)] == b:
                return full[:i], full[i + len(a) : j], full[j + len(b) :]
    raise ValueError(f"Cannot tell where {type(tokenizer).__name__} puts its special tokens around a sentence pair.")


def _share_budget(lengths: np.ndarray, budget: np.ndarray) -> np.ndarray:
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


def _encode_segments(tokenizer, texts, segment_ids, *, max_length, max_pair_length, token_types) -> dict:
    """Token ids of ``prefix t0 mid t1 mid t2 … suffix`` for every row (see the module docstring).

    Parameters
    ----------
    tokenizer : transformers tokenizer
    texts : list of ndarray of str, each of shape (n,)
        Question, candidate, then the context columns.
    segment_ids : list of int
        Segment id of each text (:data:`as2rank.neural.context.SEGMENTS`).
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
    codes, uniques = pd.factorize(np.concatenate([np.asarray(t, dtype=object) for t in texts]))
    codes = codes.reshape(k, n).T
    # Each distinct text is tokenised once; none can use more than max_length tokens.
    token_lists = tokenizer(list(uniques), add_special_tokens=False, truncation=True, max_length=int(max_length))["input_ids"]
    text_lengths = np.fromiter(map(len, token_lists), dtype=np.int64, count=len(token_lists))
    prefix, mid, suffix = _special_tokens(tokenizer)
    pool = np.concatenate([np.asarray(prefix + mid + suffix, dtype=np.int64), np.fromiter(itertools.chain.from_iterable(token_lists), dtype=np.int64, count=int(text_lengths.sum()))])
    text_starts = len(prefix) + len(mid) + len(suffix) + np.cumsum(text_lengths) - text_lengths

    lengths = text_lengths[codes]
    kept = np.empty_like(lengths)
    pair_specials = len(prefix) + len(mid) + len(suffix)
    kept[:, :2] = _share_budget(lengths[:, :2], np.full(n, max_pair_length - pair_specials))
    if k > 2:
        specials = len(prefix) + (k - 1) * len(mid) + len(suffix)
        kept[:, 2:] = _share_budget(lengths[:, 2:], max_length - specials - kept[:, :2].sum(axis=1))

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

    flat = sizes.ravel()
    row_lengths = sizes.sum(axis=1)
    rows = np.repeat(np.arange(n), row_lengths)
    cols = _ragged_arange(row_lengths)
    source = np.repeat(starts.ravel(), flat) + _ragged_arange(flat)
    width = int(row_lengths.max())
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    out = {
        "input_ids": np.full((n, width), pad, dtype=np.int64),
        "attention_mask": np.zeros((n, width), dtype=np.int64),
        "segments": np.zeros((n, width), dtype=np.int64),
    }
    out["input_ids"][rows, cols] = pool[source]
    out["attention_mask"][rows, cols] = 1
    out["segments"][rows, cols] = np.repeat(np.tile(piece_segment, n), flat)
    if token_types:
        out["token_type_ids"] = np.zeros((n, width), dtype=np.int64)
        out["token_type_ids"][rows, cols] = np.repeat(np.tile(piece_type, n), flat)
    out["lengths"] = row_lengths
    return out


def _check_contexts(contexts) -> tuple:
    """``contexts`` validated, in input order (local before global)."""
    ok = isinstance(contexts, (tuple, list)) and len(contexts) > 0 and len(set(contexts)) == len(contexts)
    if not ok or any(c not in CONTEXTS for c in contexts):
        raise ValueError(f"contexts must be a non-empty tuple of 'local' and/or 'global', got {contexts!r}.")
    return tuple(c for c in CONTEXTS if c in contexts)


# --------------------------------------------------------------------------------------------- rankers
class _ContextRanker(_TransformerEstimator):
    """What the context rankers share: parameters, the segment encoding, and TransformerRanker's pointwise
    loss, scoring and prediction."""

    #: Whether the model reads per-token segment ids (multi-way attention).
    _needs_segments = False

    _loss = TransformerRanker._loss
    _dev_scores = TransformerRanker._dev_scores
    _logits = TransformerRanker._logits
    _prepare_encoder = TransformerRanker._prepare_encoder
    predict = TransformerRanker.predict

    def _contexts(self) -> tuple:
        return _check_contexts(self.contexts)

    @property
    def _input_columns(self):
        return ("question", "candidate", *(f"{c}_context" for c in self._contexts()))

    def _check_params(self):
        from .neural.backbone import POOLINGS

        self._check_common_params()
        self._contexts()
        _check_number("num_layers", self.num_layers, 1, integer=True, allow_none=True)
        _check_number("max_pair_length", self.max_pair_length, 8, integer=True)
        if self.max_pair_length >= self.max_length:
            raise ValueError(
                f"max_pair_length ({self.max_pair_length}) must be below max_length ({self.max_length}): the "
                "contexts get what the question and candidate leave of max_length."
            )
        if self.pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {self.pooling!r}.")

    def _check_columns(self, X):
        columns = self._input_columns
        missing = [c for c in columns if c not in X.columns]
        if missing:
            raise ValueError(
                f"{type(self).__name__} reads the column(s) {missing}, which ContextExtractor adds: use "
                f"make_pipeline(ContextExtractor(), {type(self).__name__}(...)) or transform X with ContextExtractor first."
            )
        check_X(X, text_columns=columns, required=(*REQUIRED_COLUMNS, *columns))

    def fit(self, X, y, groups=None, eval_set=None):
        """Fine-tune the backbone and the head(s) (pointwise binary cross-entropy).

        Parameters
        ----------
        X : pandas.DataFrame
            Grouped-candidate frame with the context columns of :class:`ContextExtractor`.
        y : array-like of shape (n_rows,)
            Relevance labels; a label > 0 is a positive.
        groups : array-like of shape (n_rows,), default=None
            Question ids overriding ``X["qid"]``.
        eval_set : tuple (X_dev, y_dev), default=None
            Dev set for early stopping on dev MAP (best weights restored).

        Returns
        -------
        self
        """
        self._check_columns(X)
        if isinstance(eval_set, (tuple, list)) and len(eval_set) == 2:
            self._check_columns(eval_set[0])
        return super().fit(X, y, groups=groups, eval_set=eval_set)

    def _encode_contexts(self, X, contexts) -> dict:
        from .neural.backbone import uses_token_types
        from .neural.context import SEGMENTS

        self._check_columns(X)
        columns = ("question", "candidate", *(f"{c}_context" for c in contexts))
        encoded = _encode_segments(
            self.tokenizer_,
            [X[c].to_numpy(dtype=object) for c in columns],
            [SEGMENTS[c.removesuffix("_context")] for c in columns],
            max_length=self.max_length,
            max_pair_length=self.max_pair_length,
            token_types=uses_token_types(self.model_.encoder, self.tokenizer_),
        )
        if not self._needs_segments:
            del encoded["segments"]
        return encoded

    def _encode(self, X):
        return self._encode_contexts(X, self._contexts())

    def _export_attrs(self):
        return {**super()._export_attrs(), "pooling_": self.pooling_}

    def _import_attrs(self, attrs):
        super()._import_attrs(attrs)
        self.pooling_ = attrs["pooling_"]


_SHARED_PARAMS_DOC = """\
    model : str or transformers.PretrainedConfig, default="minilm-l6"
        As in :class:`~as2rank.transformer.TransformerRanker`.
    tokenizer : None, str or tokenizer, default=None
        Required when ``model`` is a config.
    num_layers : int, default=None
        Keep only the first ``num_layers`` transformer blocks.
    pooling : {"auto", "cls", "mean"}, default="auto"
        As in :class:`~as2rank.transformer.TransformerRanker` (``"auto"``: mean pooling for the default
        sentence-transformers backbone, the first token elsewhere).
    max_length : int, default=256
        Tokens of the whole input, special tokens included.
    max_pair_length : int, default=128
        Tokens reserved for the question and candidate with their special tokens (shortened longest first
        beyond it, as ``TransformerRanker(max_length=128)`` does); the contexts share the rest of
        ``max_length`` (see :mod:`as2rank.context`).
    epochs, batch_size, learning_rate, head_lr_multiplier, weight_decay, warmup, max_grad_norm, \
early_stopping, validation_fraction, patience, eval_every, warm_start, freeze_embeddings, batch_tokens, device, precision, n_threads, \
reuse_fit, random_state, verbose
        As in :class:`~as2rank.transformer.TransformerRanker`."""


class ContextConcat(_ContextRanker):
    __doc__ = f"""Context concatenation (paper §2.2, Figure 2a): one encoder over the question, the candidate and
    the contexts, joined with the tokenizer's separators; the pooled encoding feeds a feed-forward head
    (as :class:`~as2rank.transformer.TransformerRanker`'s) trained with pointwise binary cross-entropy.

    ``contexts=("local",)`` and ``("global",)`` give the paper's "Local Context" and "Global Context" rows,
    ``("local", "global")`` its "Context Concat" row; the "No Context" row is
    :class:`~as2rank.transformer.TransformerRanker`.

    Parameters
    ----------
{_SHARED_PARAMS_DOC}
    contexts : tuple of {{"local", "global"}}, default=("local", "global")
        Context columns read (``local_context``, ``global_context``); the local one comes first in the
        input whatever the order given.

    Attributes
    ----------
    model_ : torch.nn.Module
        :class:`~as2rank.neural.heads.CrossEncoder`: ``model_.encoder`` and ``model_.head``.
    tokenizer_ : transformers.PreTrainedTokenizerBase
    n_layers_ : int
    pooling_ : {{"cls", "mean"}}
    history_ : as2rank.neural.TrainingHistory
    fit_cache_hit_ : bool
        Whether the last ``fit`` reused an identical earlier fit's weights (``reuse_fit``), as in
        :class:`~as2rank.transformer.TransformerRanker`.

    Examples
    --------
    >>> from sklearn.pipeline import make_pipeline
    >>> from as2rank.context import ContextConcat, ContextExtractor
    >>> model = make_pipeline(ContextExtractor(), ContextConcat(contexts=("local",), random_state=0))
    >>> model.fit(X_train, y_train).predict(X_test)  # doctest: +SKIP
    """

    def __init__(
        self,
        model="minilm-l6",
        tokenizer=None,
        contexts=("local", "global"),
        num_layers=None,
        pooling="auto",
        max_length=256,
        max_pair_length=128,
        epochs=2,
        batch_size=32,
        learning_rate=2e-5,
        head_lr_multiplier=10.0,
        weight_decay=0.01,
        warmup=0.1,
        max_grad_norm=1.0,
        early_stopping="auto",
        validation_fraction=0.1,
        patience=2,
        eval_every=None,
        warm_start=False,
        freeze_embeddings=False,
        batch_tokens="auto",
        device="auto",
        precision="auto",
        n_threads=None,
        reuse_fit=True,
        random_state=None,
        verbose=False,
    ):
        self.model = model
        self.tokenizer = tokenizer
        self.contexts = contexts
        self.num_layers = num_layers
        self.pooling = pooling
        self.max_length = max_length
        self.max_pair_length = max_pair_length
        self.epochs = epochs
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.head_lr_multiplier = head_lr_multiplier
        self.weight_decay = weight_decay
        self.warmup = warmup
        self.max_grad_norm = max_grad_norm
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.patience = patience
        self.eval_every = eval_every
        self.warm_start = warm_start
        self.freeze_embeddings = freeze_embeddings
        self.batch_tokens = batch_tokens
        self.device = device
        self.precision = precision
        self.n_threads = n_threads
        self.reuse_fit = reuse_fit
        self.random_state = random_state
        self.verbose = verbose

    def _build_module(self, encoder):
        from .neural.heads import CrossEncoder

        return CrossEncoder(encoder, self.pooling_)


class ContextMWA(_ContextRanker):
    __doc__ = f"""Multi-way attention over context (paper §2.2, Figure 2c; Tan et al., IJCAI 2018).

    One encoder reads the same concatenation as :class:`ContextConcat`, with the segment of every token
    kept. A :class:`~as2rank.neural.context.MultiwayAttention` layer per context lets the question and
    candidate tokens attend to the local-context tokens and, separately, to the global-context tokens
    with four scoring functions (concat, bilinear, dot, minus), mixed by an attention over the ways. The
    classifier (dense + tanh, dense, with dropout) reads the question and candidate tokens' own encodings
    beside each context's attended views, all averaged over those tokens (``summary="pair"``; Tan et al.
    aggregate each token's encoding with its attended views). Padding, special
    tokens and the other context's tokens never enter a context's attention. The attention adds
    ``O(query tokens × context tokens × attention_dim)`` work per row on top of the one encoder pass, so
    the cost stays close to :class:`ContextConcat`'s, not to :class:`ContextEnsemble`'s two passes.

    The attention layers start at random and learn at ``head_lr_multiplier × learning_rate``, as the
    head does.

    Parameters
    ----------
{_SHARED_PARAMS_DOC}
    contexts : tuple of {{"local", "global"}}, default=("local", "global")
        Contexts attended to (one multi-way attention layer each).
    attention_dim : int, default=16
        Size of the scoring space of the concat, dot and minus ways (their per-row tensors are
        query tokens × context tokens × ``attention_dim``).
    summary : {{"pair", "sequence"}}, default="pair"
        What the classifier reads beside the attended views: the mean encoding of the question and
        candidate tokens (``"pair"``), or the whole sequence pooled by ``pooling``, context tokens
        included (``"sequence"``, as :class:`ContextConcat` reads it). On WikiQA ``"pair"`` ranks better
        (``docs/benchmarks/context_summary.md``). ``pooling`` applies to ``"sequence"`` only, so
        ``pooling="cls"`` asks for ``summary="sequence"``.

    Attributes
    ----------
    model_ : torch.nn.Module
        :class:`~as2rank.neural.context.MultiwayContextEncoder`: ``model_.encoder``, ``model_.attention``
        (one layer per context) and ``model_.head``.
    tokenizer_ : transformers.PreTrainedTokenizerBase
    n_layers_ : int
    pooling_ : {{"cls", "mean"}}
    history_ : as2rank.neural.TrainingHistory
    fit_cache_hit_ : bool
        Whether the last ``fit`` reused an identical earlier fit's weights (``reuse_fit``), as in
        :class:`~as2rank.transformer.TransformerRanker`.

    Examples
    --------
    >>> from sklearn.pipeline import make_pipeline
    >>> from as2rank.context import ContextExtractor, ContextMWA
    >>> model = make_pipeline(ContextExtractor(global_method="cosine"), ContextMWA(random_state=0))
    >>> model.fit(X_train, y_train).predict(X_test)  # doctest: +SKIP
    """

    _needs_segments = True
    _head_modules = ("head", "attention")

    def __init__(
        self,
        model="minilm-l6",
        tokenizer=None,
        contexts=("local", "global"),
        attention_dim=16,
        summary="pair",
        num_layers=None,
        pooling="auto",
        max_length=256,
        max_pair_length=128,
        epochs=2,
        batch_size=32,
        learning_rate=2e-5,
        head_lr_multiplier=10.0,
        weight_decay=0.01,
        warmup=0.1,
        max_grad_norm=1.0,
        early_stopping="auto",
        validation_fraction=0.1,
        patience=2,
        eval_every=None,
        warm_start=False,
        freeze_embeddings=False,
        batch_tokens="auto",
        device="auto",
        precision="auto",
        n_threads=None,
        reuse_fit=True,
        random_state=None,
        verbose=False,
    ):
        self.model = model
        self.tokenizer = tokenizer
        self.contexts = contexts
        self.attention_dim = attention_dim
        self.summary = summary
        self.num_layers = num_layers
        self.pooling = pooling
        self.max_length = max_length
        self.max_pair_length = max_pair_length
        self.epochs = epochs
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.head_lr_multiplier = head_lr_multiplier
        self.weight_decay = weight_decay
        self.warmup = warmup
        self.max_grad_norm = max_grad_norm
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.patience = patience
        self.eval_every = eval_every
        self.warm_start = warm_start
        self.freeze_embeddings = freeze_embeddings
        self.batch_tokens = batch_tokens
        self.device = device
        self.precision = precision
        self.n_threads = n_threads
        self.reuse_fit = reuse_fit
        self.random_state = random_state
        self.verbose = verbose

    def _check_params(self):
        super()._check_params()
        from .neural.context import check_summary

        _check_number("attention_dim", self.attention_dim, 1, integer=True)
        check_summary(self.summary)
        if self.summary == "pair" and self.pooling == "cls":
            raise ValueError(
                "pooling='cls' pools the whole sequence, which summary='pair' does not read (it averages the "
                "question and candidate tokens): pass summary='sequence' to read the first token."
            )

    def _build_module(self, encoder):
        from .neural.context import MultiwayContextEncoder

        return MultiwayContextEncoder(encoder, self.pooling_, self._contexts(), int(self.attention_dim), self.summary)


class ContextEnsemble(_ContextRanker):
    __doc__ = f"""Context ensemble (paper §2.2, Figure 2b): two encoders, one over question + candidate + local
    context and one over question + candidate + global context.

    ``fit`` first trains each encoder for AS2 on its own, as a :class:`ContextConcat` with
    ``contexts=("local",)`` and ``("global",)`` (same parameters, same budget; with ``reuse_fit`` an
    identical earlier fit of those rankers in this process is reused). Their pooled encodings are then
    concatenated into a new feed-forward classifier (dropout, dense 2h → h + tanh, dropout, dense → 1),
    and the whole is fine-tuned for another ``epochs`` with only the top ``unfreeze_layers`` blocks of each
    encoder and the classifier trainable: the paper's gradual unfreezing, whose best setting was the top
    3 layers (we fine-tune with the top ``k`` unfrozen from the start; the paper does not describe a
    layer-by-layer schedule). Prediction runs both encoders: about twice the cost of one.

    Parameters
    ----------
{_SHARED_PARAMS_DOC}
    unfreeze_layers : int, default=3
        Top blocks of each encoder fine-tuned in the joint stage (0: the classifier only).

    Attributes
    ----------
    model_ : torch.nn.Module
        :class:`~as2rank.neural.context.ContextEnsembleModule`: ``model_.encoder`` (local),
        ``model_.global_encoder`` and ``model_.head``.
    tokenizer_ : transformers.PreTrainedTokenizerBase
    n_layers_ : int
    pooling_ : {{"cls", "mean"}}
    member_histories_ : dict
        ``{{"local": TrainingHistory, "global": TrainingHistory}}`` of the two encoders' own training.
    history_ : as2rank.neural.TrainingHistory
        The joint fine-tuning.
    fit_cache_hit_ : bool
        Whether the last ``fit`` reused an identical earlier fit's weights (``reuse_fit``), as in
        :class:`~as2rank.transformer.TransformerRanker`; the two encoders' own fits may be reused while the
        joint stage trains.
    """

    # Its two encoders are fitted on the whole training set before the joint stage: no chunked training.
    _streamable = False

    def __init__(
        self,
        model="minilm-l6",
        tokenizer=None,
        unfreeze_layers=3,
        num_layers=None,
        pooling="auto",
        max_length=256,
        max_pair_length=128,
        epochs=2,
        batch_size=32,
        learning_rate=2e-5,
        head_lr_multiplier=10.0,
        weight_decay=0.01,
        warmup=0.1,
        max_grad_norm=1.0,
        early_stopping="auto",
        validation_fraction=0.1,
        patience=2,
        eval_every=None,
        warm_start=False,
        freeze_embeddings=False,
        batch_tokens="auto",
        device="auto",
        precision="auto",
        n_threads=None,
        reuse_fit=True,
        random_state=None,
        verbose=False,
    ):
        self.model = model
        self.tokenizer = tokenizer
        self.unfreeze_layers = unfreeze_layers
        self.num_layers = num_layers
        self.pooling = pooling
        self.max_length = max_length
        self.max_pair_length = max_pair_length
        self.epochs = epochs
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.head_lr_multiplier = head_lr_multiplier
        self.weight_decay = weight_decay
        self.warmup = warmup
        self.max_grad_norm = max_grad_norm
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.patience = patience
        self.eval_every = eval_every
        self.warm_start = warm_start
        self.freeze_embeddings = freeze_embeddings
        self.batch_tokens = batch_tokens
        self.device = device
        self.precision = precision
        self.n_threads = n_threads
        self.reuse_fit = reuse_fit
        self.random_state = random_state
        self.verbose = verbose

    def _contexts(self):
        return CONTEXTS

    def _check_params(self):
        super()._check_params()
        _check_number("unfreeze_layers", self.unfreeze_layers, 0, integer=True)

    def _init_module(self, X, y, groups, eval_set):
        from .neural.context import ContextEnsembleModule

        params = {k: v for k, v in self.get_params(deep=False).items() if k != "unfreeze_layers"}
        members = {
            c: ContextConcat(**{**params, "contexts": (c,), "warm_start": False}).fit(X, y, groups=groups, eval_set=eval_set)
            for c in CONTEXTS
        }
        local = members["local"]
        self.tokenizer_, self.n_layers_, self.pooling_ = local.tokenizer_, local.n_layers_, local.pooling_
        self.member_histories_ = {c: m.history_ for c, m in members.items()}
        return ContextEnsembleModule(local.model_.encoder, members["global"].model_.encoder, self.pooling_)

    def _build_module(self, encoder):
        from .neural.context import ContextEnsembleModule

        # Same architecture for the global encoder; its weights come from the state being restored.
        return ContextEnsembleModule(encoder, copy.deepcopy(encoder), self.pooling_)

    def _set_trainable(self, module):
        from .neural.backbone import layer_list

        for encoder in (module.encoder, module.global_encoder):
            encoder.requires_grad_(False)
            layers = layer_list(encoder)
            if self.unfreeze_layers > len(layers):
                raise ValueError(f"unfreeze_layers={self.unfreeze_layers} but the encoders have {len(layers)} layers.")
            for layer in layers[len(layers) - int(self.unfreeze_layers) :]:
                layer.requires_grad_(True)

    def _encode(self, X):
        local, glob = (self._encode_contexts(X, (c,)) for c in CONTEXTS)
        encoded = {**local, **{f"global_{k}": v for k, v in glob.items() if k != "lengths"}}
        # Batches are cut to this width; the module then trims each input set to its own longest row.
        encoded["lengths"] = np.maximum(local["lengths"], glob["lengths"])
        return encoded
