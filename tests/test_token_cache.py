"""The token cache (:data:`as2rank.neural.tokens.TOKEN_CACHE`): the same texts under the same tokenizer and
truncation are tokenised once, a hit is always the asked texts' tokens (even when their hashes collide), and
the cache stays within its bounds."""

import numpy as np
import pytest

transformers = pytest.importorskip("transformers")

from as2rank.neural import tokens  # noqa: E402
from as2rank.neural.tokens import encode_pairs  # noqa: E402
from as2rank.neural.tokens import TOKEN_CACHE, distinct_tokens  # noqa: E402
from tests.test_transformer import SPECIAL, WORDS  # noqa: E402

QUESTIONS = ["the king", "the king", "a tower of"]
CANDIDATES = ["a tower", "the river and the king", "of the"]


@pytest.fixture
def tok():
    TOKEN_CACHE.clear()
    yield transformers.BertTokenizerFast(vocab={w: i for i, w in enumerate(SPECIAL + WORDS)})
    TOKEN_CACHE.clear()


def calls(monkeypatch):
    """Count the texts sent to the Rust tokenizer."""
    sent = []
    original = tokens._text_backend

    def backend(*args):
        inner = original(*args)

        class Counting:
            def encode_batch_fast(self, texts, **kwargs):
                sent.extend(texts)
                return inner.encode_batch(texts, **kwargs)

            encode_batch = encode_batch_fast

        return Counting()

    monkeypatch.setattr(tokens, "_text_backend", backend)
    return sent


def test_the_same_texts_are_tokenised_once(tok, monkeypatch):
    sent = calls(monkeypatch)
    first = encode_pairs(tok, QUESTIONS, CANDIDATES, max_length=16)
    assert len(sent) == 5 and TOKEN_CACHE.misses == 1
    again = encode_pairs(tok, list(QUESTIONS), list(CANDIDATES), max_length=16)  # equal texts, other objects
    assert len(sent) == 5 and TOKEN_CACHE.hits == 1
    for key in first:
        np.testing.assert_array_equal(again[key], first[key])
    np.testing.assert_array_equal(first["input_ids"], tok(QUESTIONS, CANDIDATES, padding=True, return_tensors="np")["input_ids"])


def test_other_texts_truncation_or_tokenizer_miss(tok, monkeypatch):
    sent = calls(monkeypatch)
    distinct_tokens(tok, [QUESTIONS])
    distinct_tokens(tok, [QUESTIONS], max_length=1)
    distinct_tokens(tok, [QUESTIONS + ["of"]])
    tok.truncation_side = "left"
    _, pool, _, lengths = distinct_tokens(tok, [QUESTIONS], max_length=1)
    assert TOKEN_CACHE.hits == 0 and len(TOKEN_CACHE) == 4 and len(sent) == 2 + 2 + 3 + 2
    assert pool.tolist() == tok(["king", "of"], add_special_tokens=False)["input_ids"][0] + tok(["of"], add_special_tokens=False)["input_ids"][0]
    tok.add_tokens(["king"])  # the same texts, another vocabulary
    _, pool, _, _ = distinct_tokens(tok, [QUESTIONS])
    assert TOKEN_CACHE.hits == 0 and pool[1] == tok.convert_tokens_to_ids("king")


def test_a_hash_collision_never_returns_other_texts_tokens(tok, monkeypatch):
    monkeypatch.setattr(tokens.pd.util, "hash_array", lambda values: np.zeros(1, dtype=np.uint64))
    _, first, _, _ = distinct_tokens(tok, [["the king"]])
    _, second, _, _ = distinct_tokens(tok, [["a tower"]])  # the same key: the stored texts tell them apart
    assert first.tolist() == tok("the king", add_special_tokens=False)["input_ids"]
    assert second.tolist() == tok("a tower", add_special_tokens=False)["input_ids"]


def test_the_cache_is_bounded_and_its_arrays_read_only(tok, monkeypatch):
    monkeypatch.setattr(TOKEN_CACHE, "max_entries", 2)
    for text in ("the", "king", "tower"):
        _, pool, _, lengths = distinct_tokens(tok, [[text]])
    assert len(TOKEN_CACHE) == 2
    distinct_tokens(tok, [["the"]])  # evicted first: tokenised again
    assert TOKEN_CACHE.hits == 0
    with pytest.raises(ValueError):
        pool[0] = 0
