"""CascadeTransformer and α tuning, on tiny random BERT/RoBERTa/ELECTRA encoders (the torch-free pruning code and
SequentialRanker: tests/test_pruning.py)."""

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from sklearn.model_selection import GridSearchCV, GroupKFold  # noqa: E402

from as2rank.pruning.rules import simulate_cascade, tune_alpha  # noqa: E402
from as2rank.transformer.cascade import CascadeTransformer, default_exits  # noqa: E402
from as2rank.neural.backbone import masked_mean  # noqa: E402
from as2rank.neural.fitcache import FIT_CACHE  # noqa: E402
from as2rank.transformer.network import segment_cosine  # noqa: E402
from tests import utils  # noqa: E402
from tests.contract import check_ranker_contract, check_sklearn_api  # noqa: E402
from tests.test_transformer import WORDS, small, synthetic, tokenizer  # noqa: E402,F401


def one_question(n=128, seed=5):
    return utils.one_question(n, seed, words=WORDS)


@pytest.fixture(scope="module")
def fitted(tokenizer):
    X, y = synthetic()
    return small(CascadeTransformer, "bert", tokenizer).fit(X, y)


def test_sklearn_api():
    check_sklearn_api(CascadeTransformer())


def test_default_exits():
    assert default_exits(12) == (4, 6, 8, 10, 12)
    assert default_exits(6) == (2, 3, 4, 5, 6)
    assert default_exits(2) == (1, 2)


@pytest.mark.parametrize("kind", ["bert", "roberta", "electra"])
def test_contract_with_drops(kind, tokenizer):
    X, y = synthetic()
    est = small(CascadeTransformer, kind, tokenizer, alpha=0.3)
    fitted = check_ranker_contract(est, X, y, atol=1e-5)
    assert fitted.exits_ == (2, 3, 4, 5, 6)
    assert fitted.predict(X, return_cost=True)[1]["relative_cost"] < 1


@pytest.mark.parametrize("kind", ["bert", "roberta", "electra"])
def test_alpha_zero_equals_full_encoder_and_final_classifier(kind, tokenizer):
    X, y = synthetic()
    est = small(CascadeTransformer, kind, tokenizer).fit(X, y)
    scores, cost = est.predict(X, return_cost=True)
    assert cost["relative_cost"] == 1.0
    enc = est._encode(X)
    module = est.model_.eval()
    with torch.inference_mode():
        inputs = {k: torch.from_numpy(v) for k, v in enc.items() if k not in ("lengths", "prior")}
        hidden = module.encoder(**inputs).last_hidden_state
        expected = module.classifiers[-1](masked_mean(hidden, inputs["attention_mask"])).squeeze(-1).numpy()
        similarity = (module.similarity[-1].weight * segment_cosine(hidden, inputs)).numpy()
    # The last classifier's logit plus its similarity term and the lexical prior's (both on by default).
    np.testing.assert_allclose(scores, expected + similarity + enc["prior"], atol=1e-5, rtol=0)


def test_exit_sampling_all_trains_every_exit_on_every_batch(tokenizer):
    import torch.nn.functional as F

    X, y = synthetic()
    est = small(CascadeTransformer, "bert", tokenizer, exit_sampling="all")
    check_ranker_contract(est, X, y, atol=1e-5)
    est.fit(X, y)
    enc = est._encode(X)
    batch = {k: torch.from_numpy(v) for k, v in enc.items() if k != "lengths"}
    batch["labels"] = torch.from_numpy((y > 0).astype(np.float32))
    module = est.model_.eval()
    with torch.no_grad():
        expected = np.mean([
            float(F.binary_cross_entropy_with_logits(module(batch, e), batch["labels"])) for e in range(5)
        ])
        assert float(est.compute_loss(module, batch, est.get_loss())) == pytest.approx(expected, rel=1e-5)
        np.testing.assert_allclose(module.all_exits(batch)[:, 2].numpy(), module(batch, 2).numpy(), atol=1e-6)
        # The paper's scheme: the batch's uniform draw picks one of the five exits, each a fifth of [0, 1).
        uniform = est.set_params(exit_sampling="uniform")
        for draw, e in ((0.0, 0), (0.19, 0), (0.2, 1), (0.5, 2), (0.99, 4)):
            loss = F.binary_cross_entropy_with_logits(module(batch, e), batch["labels"])
            assert float(uniform.compute_loss(module, {**batch, "draw": draw}, uniform.get_loss())) == pytest.approx(float(loss), rel=1e-6)
    with pytest.raises(ValueError, match="exit_sampling"):
        small(CascadeTransformer, "bert", tokenizer, exit_sampling="round-robin").fit(X, y)


def test_floor_rule_128_candidates(fitted):
    X = one_question()
    scores, report = fitted.set_params(alpha=0.3).predict(X, return_cost=True)
    assert report["survivors"].tolist() == [128, 90, 63, 45, 32]
    assert report["rows_per_layer"].tolist() == [128, 128, 90, 63, 45, 32]
    assert report["relative_cost"] == pytest.approx((2 * 128 + 90 + 63 + 45 + 32) / (6 * 128))
    # Rows dropped earlier rank below every row that went further.
    logits = fitted.predict_exits(X)
    ranks = fitted.predict_rank(X)
    reached = np.argsort(ranks)  # best first
    assert np.all(np.diff(scores[reached]) <= 0)
    final = np.isclose(scores, logits[:, -1], atol=1e-5)
    assert final.sum() >= 32 and ranks[final].max() <= final.sum()


@pytest.mark.parametrize("batch_tokens", [16384, 64])
def test_per_exit_alpha_and_several_questions_per_batch(fitted, batch_tokens):
    # batch_tokens=64: many small length-sorted chunks per batch, the survivors packed again after each drop.
    X = pd.concat([one_question(40, seed=1).assign(qid="a"), one_question(17, seed=2).assign(qid="b")])
    alpha = [0.5, 0.0, 0.25, 0.1]
    fitted.set_params(alpha=alpha, batch_tokens=batch_tokens)
    scores, cost = fitted.predict(X, return_cost=True)
    # Per question: 40 -> 20 -> 20 -> 15 -> 14 and 17 -> 9 -> 9 -> 7 -> 7.
    assert cost["survivors"].tolist() == [57, 29, 29, 22, 21]
    sim, report = simulate_cascade(fitted.predict_exits(X), X["qid"], alpha, fitted.exits_, X["position"])
    np.testing.assert_allclose(scores, sim, atol=1e-5)
    assert report["rows_per_layer"].tolist() == [57, 57, 29, 29, 22, 21]
    fitted.set_params(alpha=0.0, batch_tokens="auto")


def test_exit_layer_scores_with_one_classifier(fitted):
    X, _ = synthetic()
    fitted.set_params(exit_layer=3)
    scores, cost = fitted.predict(X, return_cost=True)
    assert cost["relative_cost"] == pytest.approx(3 / 6)
    fitted.set_params(exit_layer=None)
    np.testing.assert_allclose(scores, fitted.predict_exits(X)[:, 1], atol=1e-5)
    with pytest.raises(ValueError, match="exit_layer"):
        fitted.set_params(exit_layer=1).predict(X)
    fitted.set_params(exit_layer=None)


def test_pickle_and_save_pretrained(fitted, tmp_path):
    import pickle

    X = one_question(30)
    fitted.set_params(alpha=0.3)
    scores = fitted.predict(X)
    restored = pickle.loads(pickle.dumps(fitted))
    assert next(restored.model_.parameters()).device.type == "cpu"
    np.testing.assert_allclose(restored.predict(X), scores, atol=1e-6)
    fitted.save_pretrained(tmp_path / "ct")
    loaded = CascadeTransformer.from_pretrained(tmp_path / "ct", device="cpu")
    assert loaded.exits_ == fitted.exits_ and loaded.alpha == 0.3
    np.testing.assert_allclose(loaded.predict(X), scores, atol=1e-6)
    fitted.set_params(alpha=0.0)


def test_custom_exits_and_bad_params(tokenizer):
    X, y = synthetic()
    est = small(CascadeTransformer, "bert", tokenizer, exits=(1, 4), alpha=[0.5]).fit(X, y)
    assert est.n_layers_ == 4 and len(est.model_.encoder.encoder.layer) == 4
    with pytest.raises(ValueError, match="exits"):
        small(CascadeTransformer, "bert", tokenizer, exits=(3, 2)).fit(X, y)
    with pytest.raises(ValueError, match="only 6 layers"):
        small(CascadeTransformer, "bert", tokenizer, exits=(2, 8)).fit(X, y)
    with pytest.raises(ValueError, match="alpha"):
        small(CascadeTransformer, "bert", tokenizer, alpha=1.0).fit(X, y)
    with pytest.raises(ValueError, match="alpha"):
        est.set_params(alpha=[0.1, 0.2]).predict(X)


def test_grid_search_over_alpha_trains_once_per_fold(tokenizer):
    X, y = synthetic(n_questions=9)
    FIT_CACHE.clear()
    search = GridSearchCV(
        small(CascadeTransformer, "bert", tokenizer), {"alpha": [0, 0.1, 0.2, 0.3]}, cv=GroupKFold(3), refit=False
    )
    search.fit(X, y, groups=X["qid"])
    assert FIT_CACHE.misses == 3 and FIT_CACHE.hits == 9
    assert np.isfinite(search.cv_results_["mean_test_score"]).all()


def test_tune_alpha_respects_budget(fitted):
    X, _ = synthetic(n_questions=4, min_size=20, max_size=30, seed=7)
    y = np.random.default_rng(0).random(len(X)) < 0.2
    best, table = tune_alpha(fitted, X, y, grid=(0.0, 0.3, 0.5), max_relative_cost=0.7)
    assert len(best) == 4 and len(table) == 3**4
    row = table[table["alpha"] == best].iloc[0]
    assert row["relative_cost"] <= 0.7
    assert row["p@1"] == table[table["relative_cost"] <= 0.7]["p@1"].max()
    with pytest.raises(ValueError, match="budget"):
        tune_alpha(fitted, X, y, grid=(0.0,), max_relative_cost=0.5)


def test_chunked_layers_score_like_whole_questions(fitted):
    """Length-sorted chunks (batch_tokens) change neither the exit logits nor the rows each layer runs."""
    X = pd.concat([one_question(60, seed=3).assign(qid="a"), one_question(25, seed=4).assign(qid="b")])
    results = {}
    for batch_tokens in (40, 200, 1_000_000):
        fitted.set_params(alpha=[0.3, 0.2, 0.0, 0.5], batch_tokens=batch_tokens)
        cost = fitted.predict(X, return_cost=True)[1]
        results[batch_tokens] = (cost["rows_per_layer"].tolist(), fitted.predict_exits(X))
    for batch_tokens in (40, 200):
        assert results[batch_tokens][0] == results[1_000_000][0]
        np.testing.assert_allclose(results[batch_tokens][1], results[1_000_000][1], atol=1e-5)
    fitted.set_params(alpha=0.0, batch_tokens="auto")


def test_cascade_module_chunks_match_one_chunk(tokenizer):
    """With drops: the same survivors and logits in chunks as in one padded batch.

    Random token ids (not the fixture's tokenizer) and linear classifiers, so that no two rows tie: tied
    rows may fall either way at a drop when chunks round differently (1e-7). The encoder is a pure fit's
    (no prior: the batch below carries none).
    """
    module = small(CascadeTransformer, "bert", tokenizer, lexical_prior=False).fit(*synthetic()).model_
    torch.manual_seed(0)
    module.classifiers = torch.nn.ModuleList(torch.nn.Linear(32, 1) for _ in module.exits)
    with torch.no_grad():
        for classifier in module.classifiers:
            classifier.weight.mul_(100.0)  # scores spread over tens of units: no near-ties
    rng = np.random.default_rng(0)
    n, width = 80, 30
    lengths = rng.integers(4, width + 1, n)
    mask = (np.arange(width) < lengths[:, None]).astype(np.int64)
    ids = rng.integers(5, module.encoder.config.vocab_size, (n, width)) * mask
    questions = (np.arange(width) < rng.integers(1, 4, n)[:, None]).astype(np.int64)  # the similarity term's mask
    batch = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask),
             "token_type_ids": torch.zeros(n, width, dtype=torch.int64), "question_mask": torch.from_numpy(questions)}
    codes = np.repeat([0, 1], [50, 30])
    with torch.inference_mode():
        full = module.all_exits(batch).numpy()
        one, rows_one = module.cascade(batch, codes, [0.3, 0.2, 0.0, 0.5], 4)
        chunked, rows_chunked = module.cascade(batch, codes, [0.3, 0.2, 0.0, 0.5], 4, chunk_tokens=100)
        # the CPU's way: each chunk keeps its own survivors, cut to their real lengths
        exact, rows_exact = module.cascade(batch, codes, [0.3, 0.2, 0.0, 0.5], 4, chunk_tokens=100,
                                           lengths=lengths, exact_widths=True)
    one, chunked, exact = one.numpy(), chunked.numpy(), exact.numpy()
    assert min(np.diff(np.sort(full[:, e])).min() for e in range(5)) > 1e-4  # far above the rounding (~1e-5 here)
    for got in (chunked, exact):
        assert np.array_equal(np.isnan(got), np.isnan(one))
        np.testing.assert_allclose(got, one, atol=1e-4)
    assert rows_chunked.tolist() == rows_exact.tolist() == rows_one.tolist() == [80, 80, 56, 45, 45, 23]  # 50 -> 35 -> 28 -> 14, 30 -> 21 -> 17 -> 9


def test_survivor_chunks_repack_survivors_under_the_token_budget():
    from as2rank.transformer.network import _survivor_chunks

    hidden = [torch.arange(3 * 5 * 2, dtype=torch.float32).reshape(3, 5, 2),
              100 + torch.arange(2 * 6 * 2, dtype=torch.float32).reshape(2, 6, 2)]
    kept = np.array([0, 2, 4])  # rows 0 and 2 of the first chunk, row 1 of the second
    lengths = np.array([2, 4, 6])
    # A budget of 8 padded tokens: rows of lengths 2 and 4 (2 x 4), then the row of 6 alone.
    spans, states = _survivor_chunks(hidden, kept, lengths, chunk_tokens=8)
    assert spans == [(0, 2, 4), (2, 3, 6)]
    torch.testing.assert_close(states[0], hidden[0][[0, 2], :4])
    torch.testing.assert_close(states[1], hidden[1][[1], :6])
    # A budget that holds them all: one chunk across both old chunks, the narrower rows padded with zeros.
    spans, states = _survivor_chunks(hidden, kept, lengths, chunk_tokens=18)
    assert spans == [(0, 3, 6)]
    expected = torch.cat([torch.nn.functional.pad(hidden[0][[0, 2]], (0, 0, 0, 1)), hidden[1][[1]]])
    torch.testing.assert_close(states[0], expected)
    assert _survivor_chunks(hidden, kept, lengths)[0] == [(0, 3, 6)]  # no budget: one chunk
    assert all(s.is_contiguous() for s in states)


def test_cascade_packs_survivors_into_fewer_chunks(fitted, monkeypatch):
    """After drops, the survivors run in full chunks: fewer segment calls than chunks that only shrink."""
    from as2rank.transformer import network

    X, _ = synthetic()
    calls = []
    original = network.ExitSegment.forward
    monkeypatch.setattr(network.ExitSegment, "forward",
                        lambda self, state: calls.append((self.stop, state["attention_mask"].shape[0])) or original(self, state))
    fitted.set_params(alpha=0.5, batch_tokens=256, device="cpu")
    fitted.predict(X)
    fitted.set_params(alpha=0.0, batch_tokens="auto")
    first = [rows for stop, rows in calls if stop == fitted.exits_[0]]
    last = [rows for stop, rows in calls if stop == fitted.exits_[-1]]
    assert sum(last) < sum(first) and len(last) < len(first)


def test_token_cost_weights_the_row_cost_by_tokens(fitted, monkeypatch):
    X, _ = synthetic()
    fitted.set_params(alpha=0.0)
    assert fitted.predict(X, return_cost=True)[1]["relative_token_cost"] == 1.0  # every row through every layer
    fitted.set_params(exit_layer=3)
    assert fitted.predict(X, return_cost=True)[1]["relative_token_cost"] == pytest.approx(3 / 6)  # every row through 3 of 6
    fitted.set_params(exit_layer=None)
    # Hand-computed: rows that reached exits 6, 2 and 4 (of exits 2..6), of their own token lengths.
    rows = X[X["qid"] == X["qid"].iloc[0]].head(3)
    lengths = fitted._encode(rows)["lengths"]
    logits = np.full((3, 5), np.nan)
    logits[0, :], logits[1, :1], logits[2, :3] = 1.0, 1.0, 1.0
    monkeypatch.setattr(fitted, "_run", lambda *args: (logits, np.zeros(6, dtype=np.int64)))
    cost = fitted.predict(rows, return_cost=True)[1]
    expected = (6 * lengths[0] + 2 * lengths[1] + 4 * lengths[2]) / (6 * lengths.sum())
    assert cost["relative_token_cost"] == pytest.approx(expected)
    assert lengths.min() < lengths.max() and expected != pytest.approx((6 + 2 + 4) / 18)
