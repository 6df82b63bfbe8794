"""Same seed, same model: repeated fits, fits in a fresh process, thread timing, ``non_deterministic`` tags.

Offline and tiny: random word vectors for Cosinet, a random 2-layer BERT for the transformer rankers.
"""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from gensim.models import KeyedVectors
from sklearn.utils import get_tags

from as2rank.pruning.sequential import SequentialRanker
from as2rank.transformer.cascade import CascadeTransformer
from as2rank.ensemble.linear import LinearEnsemble
from as2rank.transformer.cerberus import Cerberus, DistilledRanker
from as2rank.transformer.context.rankers import ContextConcat, ContextEnsemble, ContextMWA
from as2rank.cosinet.estimator import Cosinet, _encode, _table
from as2rank.cosinet.network import CosinetNetwork
from as2rank.data import GroupIndex
from as2rank.neural import torch_threads
from as2rank.transformer.ranker import TransformerRanker
from tests.test_cosinet import WORDS, synthetic
from tests.test_transformer import MAX_LENGTH, SPECIAL, tiny_config
from tests.test_transformer import WORDS as BERT_WORDS
from tests.test_transformer import synthetic as bert_synthetic

ROOT = Path(__file__).resolve().parents[1]


def word_vectors():
    vectors = KeyedVectors(8)
    vectors.add_vectors(WORDS, np.random.default_rng(0).normal(size=(len(WORDS), 8)).astype(np.float32))
    return vectors


def small_cosinet(**params):
    # n_threads=2 takes torch's multi-threaded kernels even on a one-core machine.
    defaults = dict(embeddings=word_vectors(), n_filters=16, kernel_size=3, epochs=2, batch_size=4,
                    random_state=0, n_threads=2)
    return Cosinet(**{**defaults, **params})


def small_transformer(**params):
    import transformers

    tokenizer = transformers.BertTokenizerFast(vocab={w: i for i, w in enumerate(SPECIAL + BERT_WORDS)})
    defaults = dict(model=tiny_config("bert", layers=2), tokenizer=tokenizer, max_length=MAX_LENGTH, epochs=1,
                    batch_size=8, learning_rate=1e-3, random_state=0, device="cpu", precision="fp32",
                    n_threads=2, reuse_fit=False)
    return TransformerRanker(**{**defaults, **params})


def fit_and_predict():
    """Test scores of the small Cosinet and TransformerRanker: in the test process, and in a fresh one."""
    X, y = synthetic(24)
    X_bert, y_bert = bert_synthetic(12)
    return {
        "cosinet": small_cosinet().fit(X, y).predict(X),
        "transformer": small_transformer().fit(X_bert, y_bert).predict(X_bert),
    }


def assert_same_bits(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    assert np.array_equal(a.view(np.uint8), b.view(np.uint8)), f"max |diff| {np.abs(a - b).max():.3g}"


@pytest.fixture(scope="module")
def here():
    """:func:`fit_and_predict` in this process."""
    return fit_and_predict()


def test_two_fits_with_the_same_seed_predict_the_same_bits(here):
    again = fit_and_predict()
    for name in here:
        assert_same_bits(here[name], again[name])


@pytest.mark.slow
def test_a_fit_in_a_fresh_process_predicts_the_same_bits(here, tmp_path):
    out = tmp_path / "scores.npz"
    code = (
        "import numpy as np; from tests.test_reproducible import fit_and_predict; "
        f"np.savez({str(out)!r}, **fit_and_predict())"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=600)
    there = np.load(out)
    for name in here:
        assert_same_bits(here[name], there[name])


def test_the_fit_does_not_depend_on_the_callers_thread_setting():
    """``n_threads`` sets the count for the fit, whatever the caller's, and gives the caller's back."""
    X, y = synthetic(12)
    before = torch.get_num_threads()
    scores = []
    try:
        for caller in (1, 2):
            torch.set_num_threads(caller)
            scores.append(small_cosinet(precision="fp32").fit(X, y).predict(X))
            assert torch.get_num_threads() == caller
    finally:
        torch.set_num_threads(before)
    assert_same_bits(scores[0], scores[1])


def one_long_question(n_candidates=96):
    """One question whose many candidates share its words: their gradients meet in the same rows."""
    import pandas as pd

    rng = np.random.default_rng(1)
    question = " ".join(WORDS[:10])
    candidates = [" ".join(rng.choice(WORDS, 10)) for _ in range(n_candidates)]
    X = pd.DataFrame({"qid": "q", "question": question, "candidate": candidates, "position": range(n_candidates)})
    return X


def test_gradients_of_a_shared_question_are_summed_in_a_fixed_order():
    """The convolution output of a question's words is read once per candidate; the backward pass sums those
    reads. Summed by concurrent threads (atomic adds), the order, and so the last bits, would follow thread
    timing: identical inputs would give different gradients from one pass to the next."""
    X = one_long_question()
    index = GroupIndex.from_frame(X)
    kv = word_vectors()
    encoded = _encode(X, index, True, (1, 1))
    vectors = np.stack([kv[w] if w in kv else np.zeros(8, np.float32) for w in encoded.new_words])
    table = _table(vectors)
    encoded.relate(table, torch.device("cpu"))
    torch.manual_seed(0)
    # 64 filters x 960 candidate-side question words: above the size at which torch parallelises the sum.
    module = CosinetNetwork(dim=8, n_filters=64, kernel_size=3, rnn=None, rnn_hidden_size=None, dropout=0.0)
    batch = encoded.batch(np.array([0]))

    def gradients():
        module.zero_grad(set_to_none=True)
        module(batch, table).square().sum().backward()
        return torch.cat([p.grad.ravel() for p in module.parameters()])

    with torch_threads(2):
        reference = gradients()
        for _ in range(30):
            assert torch.equal(gradients(), reference)


NEURAL = [Cosinet, TransformerRanker, CascadeTransformer, Cerberus, DistilledRanker, ContextConcat, ContextMWA,
          ContextEnsemble]


@pytest.mark.parametrize("cls", NEURAL, ids=lambda c: c.__name__)
def test_non_deterministic_tag_follows_random_state(cls):
    assert get_tags(cls(random_state=None)).non_deterministic
    assert not get_tags(cls(random_state=0)).non_deterministic
    assert not get_tags(cls(random_state=np.random.RandomState(0))).non_deterministic


def test_non_deterministic_tag_of_composites():
    assert get_tags(SequentialRanker([Cosinet(random_state=0), TransformerRanker()])).non_deterministic
    seeded = SequentialRanker([Cosinet(random_state=0), TransformerRanker(random_state=1)])
    assert not get_tags(seeded).non_deterministic
    # Cross-fitted teachers are refitted inside fit; fitted teachers only score.
    assert get_tags(Cerberus(teachers=[Cosinet()], teacher_cv=3, random_state=0)).non_deterministic
    assert not get_tags(Cerberus(teachers=[Cosinet()], random_state=0)).non_deterministic
    assert not get_tags(LinearEnsemble()).non_deterministic
