"""Local and global context of answer candidates (Han, Soldaini & Moschitti 2021, §2.1).

:class:`ContextExtractor` is a scikit-learn transformer that adds each candidate's **local context** (the
``k`` sentences before and after it in its document, §2.1.1) and **global context** (the sentences of the
document most similar to the question and candidate, §2.1.2: n-gram overlap, Eq. 1, or embedding cosine,
Eq. 2) as the columns ``local_context`` and ``global_context``, which the rankers of
:mod:`as2rank.transformer.context.rankers` read. It works on NumPy, pandas and SciPy sparse arrays; only the ``"cosine"``
method loads a sentence encoder (and torch) when it runs.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Mapping
from numbers import Integral

import numpy as np
import pandas as pd
import scipy.sparse as sp
from sklearn.base import BaseEstimator, TransformerMixin

from ...data import check_ranking_data, check_X, ragged_arange, require_columns
from ...params import DEVICE_CONSTRAINTS, InstanceOf, Interval, Options, ParameterMixin, validated
from ...persistence import PersistenceMixin
from ...text import bag_of_words, tokenize

__all__ = ["CONTEXTS", "check_contexts", "GLOBAL_METHODS", "ContextExtractor"]

#: The two kinds of context, in the order they enter a model's input: ``ContextExtractor`` adds them as
#: the columns ``local_context`` and ``global_context``.
CONTEXTS = ("local", "global")

#: Values of ``ContextExtractor(global_method=...)``.
GLOBAL_METHODS = ("ngram", "cosine")

#: Longest input of the global-context sentence encoder (the sentence-transformers setting of all-MiniLM-L6-v2).
_ENCODER_MAX_LENGTH = 256

#: Pairs scored per chunk when ranking global-context sentences (bounds the memory of the pair matrices).
_PAIR_CHUNK = 1 << 16


def _runs(sorted_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start and length of each run of equal values in ``sorted_keys``."""
    starts = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])
    return starts, np.diff(np.r_[starts, len(sorted_keys)])


def _group_rank(sorted_keys: np.ndarray) -> np.ndarray:
    """0-based rank of each entry inside its run of equal ``sorted_keys``."""
    return ragged_arange(_runs(sorted_keys)[1])


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
    from ...neural.backbone import load_backbone

    return load_backbone(name)



def check_contexts(contexts) -> tuple:
    """``contexts`` validated, in input order (local before global)."""
    ok = isinstance(contexts, (tuple, list)) and len(contexts) > 0 and len(set(contexts)) == len(contexts)
    if not ok or any(c not in CONTEXTS for c in contexts):
        raise ValueError(f"contexts must be a non-empty tuple of 'local' and/or 'global', got {contexts!r}.")
    return tuple(c for c in CONTEXTS if c in contexts)


class ContextExtractor(ParameterMixin, PersistenceMixin, TransformerMixin, BaseEstimator):
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
    as spaCy word and punctuation tokens (a ranker's wordpiece tokenizer splits the same text into more).

    ``transform`` returns a copy of ``X`` with ``local_context`` and ``global_context`` added (replaced if
    present); no other column and no row order change; ``transform(X, return_report=True)`` also returns a
    report of the contexts it built.

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

    Notes
    -----
    The report of ``transform(X, return_report=True)`` is a dict: ``mean_local_sentences``,
    ``mean_global_sentences`` (the paper reports ~3 with h=5 on ASNQ), ``mean_global_tokens`` and ``n_rows``.

    Examples
    --------
    >>> import pandas as pd
    >>> from as2rank.transformer.context.features import ContextExtractor
    >>> X = pd.DataFrame({"qid": ["q"] * 3, "question": ["who wrote hamlet"] * 3,
    ...                   "candidate": ["Hamlet is a play.", "Shakespeare wrote it.", "It is long."],
    ...                   "doc_id": ["d"] * 3, "doc_position": [0, 1, 2]})
    >>> Xc = ContextExtractor(max_global_sentences=1).fit_transform(X)
    >>> Xc.loc[1, "local_context"], Xc.loc[1, "global_context"]
    ('Hamlet is a play. It is long.', 'Hamlet is a play.')
    """

    # Accept ``groups`` when metadata routing sends it through a pipeline (it is only validated).
    __metadata_request__fit = {"groups": True}
    _parameter_constraints = {
        "local_window": [Interval(Integral, 0, None)],
        "global_method": [Options(GLOBAL_METHODS)],
        "max_global_sentences": [Interval(Integral, 0, None)],
        "max_global_tokens": [Interval(Integral, 1, None)],
        "documents": [None, InstanceOf(Mapping, description="a mapping {doc_id: [sentences]}")],
        "encoder": [InstanceOf(str, description="a model alias, path or Hugging Face id (str)")],
        "batch_tokens": [Interval(Integral, 1, None)],
        "device": DEVICE_CONSTRAINTS,
    }

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
        self._keep_params(locals())

    @validated
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
        self._check_document_columns(X)
        return self

    @validated
    def transform(self, X, return_report: bool = False):
        """Add the ``local_context`` and ``global_context`` columns.

        Parameters
        ----------
        X : pandas.DataFrame
            Grouped-candidate frame with the document columns that ``fit`` checked.

        return_report : bool, default=False
            Also return the report of the contexts built (see the class's Notes).

        Returns
        -------
        X_out : pandas.DataFrame
            A copy of ``X`` with the two columns (other columns and the row order unchanged).
        report : dict
            Only with ``return_report=True``.
        """
        X = check_X(X)
        self._check_document_columns(X)
        docs = self._document_table(X)
        local_rows, local_sents = self._local(docs)
        global_rows, global_sents = self._global(X, docs)
        n = len(X)
        global_tokens = np.bincount(global_rows, weights=docs["tokens"][global_sents], minlength=n)
        report = {
            "mean_local_sentences": float(len(local_rows) / n),
            "mean_global_sentences": float(len(global_rows) / n),
            "mean_global_tokens": float(global_tokens.mean()),
            "n_rows": n,
        }
        out = X.assign(
            local_context=_join(local_rows, docs["text"][local_sents], n),
            global_context=_join(global_rows, docs["text"][global_sents], n),
        )
        return (out, report) if return_report else out

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.two_d_array = False
        tags.input_tags.string = True
        tags.requires_fit = False
        return tags

    # ----------------------------------------------------------------- documents
    def _check_document_columns(self, X):
        needed = ("doc_id",) if self.documents is not None else ("doc_id", "doc_position")
        require_columns(X.columns, needed, lambda missing: (
            f"ContextExtractor needs each candidate's document: X lacks the column(s) {missing}. Give X the "
            "columns 'doc_id' and 'doc_position' (sentence index in its document; load_wikiqa and load_squad_sent "
            "return both), or pass documents={doc_id: [sentences]} and a 'doc_id' column."
        ))
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
            pos = ragged_arange(sizes)
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
        pair_sent = np.repeat(docs["starts"][docs["row_doc"]], sizes) + ragged_arange(sizes)
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
        """Unit-length embeddings of ``texts`` from ``encoder`` with its own pooling, in float32."""
        import torch

        from ...neural import resolve_device
        from ...neural.backbone import native_pooling
        from ...neural.predict import sentence_embeddings
        from ...neural.predict import no_progress

        encoder, tokenizer = _sentence_encoder(self.encoder)
        device = resolve_device(self.device)
        max_length = min(_ENCODER_MAX_LENGTH, encoder.config.max_position_embeddings)
        out = sentence_embeddings(encoder.to(device), tokenizer, texts, device=device, dtype=torch.float32,
                                  max_length=max_length, batch_tokens=self.batch_tokens, progress=no_progress,
                                  pooling=native_pooling(self.encoder))
        return out.astype(np.float32)

