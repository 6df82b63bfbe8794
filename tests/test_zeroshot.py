"""Ranking before training: ZeroShotRanker, and TransformerRanker fine-tuning from a cross-encoder's own head,
on tiny random checkpoints saved to disk."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import as2rank  # noqa: E402
from as2rank.transformer.ranker import TransformerRanker  # noqa: E402
from as2rank.transformer.zeroshot import ZeroShotRanker  # noqa: E402
from tests.contract import check_ranker_contract, check_sklearn_api  # noqa: E402
from tests.test_transformer import MAX_LENGTH, synthetic, tiny_config, tokenizer  # noqa: E402, F401 (a fixture)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def save_checkpoint(model, tokenizer, path):
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, tokenizer):
    """Tiny random checkpoints on disk: a sentence encoder, and cross-encoders (sequence classifiers) with one
    and two labels, of BERT and ELECTRA architectures."""
    root = tmp_path_factory.mktemp("checkpoints")
    torch.manual_seed(0)
    dirs = {"encoder": save_checkpoint(transformers.AutoModel.from_config(tiny_config("bert", 2)), tokenizer,
                                       root / "encoder")}
    for kind, labels in (("bert", 1), ("bert", 2), ("electra", 1), ("roberta", 2)):
        config = tiny_config(kind, 2)
        config.num_labels = labels
        model = transformers.AutoModelForSequenceClassification.from_config(config)
        dirs[kind, labels] = save_checkpoint(model, tokenizer, root / f"{kind}-{labels}")
    return dirs


def own_scores(path, X):
    """The checkpoint's own scores of the pairs of ``X``, computed with transformers alone: the logit of a
    one-label head, logit[1] - logit[0] of a two-label one."""
    model = transformers.AutoModelForSequenceClassification.from_pretrained(path).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    enc = tokenizer(list(X["question"]), list(X["candidate"]), truncation="longest_first", max_length=MAX_LENGTH,
                    padding=True, return_tensors="pt",
                    return_token_type_ids=getattr(model.config, "type_vocab_size", 0) > 1)
    with torch.inference_mode():
        logits = model(**enc).logits.double()
    return (logits[:, 0] if logits.shape[1] == 1 else logits[:, 1] - logits[:, 0]).numpy()


def small(path, **params):
    return ZeroShotRanker(**{"model": path, "max_length": MAX_LENGTH, "device": "cpu", "precision": "fp32", **params})


def small_transformer(path, **params):
    defaults = dict(model=path, lexical_prior=False, segment_similarity=False, max_length=MAX_LENGTH, epochs=1,
                    batch_size=8, learning_rate=1e-3, random_state=0, device="cpu", precision="fp32")
    return TransformerRanker(**{**defaults, **params})


# ----------------------------------------------------------------------------------------------- ZeroShotRanker
@pytest.mark.parametrize("checkpoint", [("bert", 1), ("bert", 2), ("electra", 1), ("roberta", 2)])
def test_cross_encoder_scores_are_the_checkpoints_own(checkpoints, checkpoint):
    X, _ = synthetic()
    ranker = small(checkpoints[checkpoint]).fit(X)
    assert ranker.mode_ == "cross-encoder"
    np.testing.assert_allclose(ranker.predict(X), own_scores(checkpoints[checkpoint], X), rtol=0, atol=1e-5)
    # Batching by another token budget changes nothing.
    np.testing.assert_allclose(ranker.set_params(batch_tokens=40).predict(X), ranker.predict(X), rtol=0, atol=1e-5)


def test_bi_encoder_scores_are_mean_pooled_cosines(checkpoints):
    X, _ = synthetic()
    path = checkpoints["encoder"]
    ranker = small(path).fit(X)
    assert ranker.mode_ == "bi-encoder"
    model = transformers.AutoModel.from_pretrained(path).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)

    def embed(texts):
        enc = tokenizer(list(texts), truncation=True, max_length=MAX_LENGTH, padding=True, return_tensors="pt")
        with torch.inference_mode():
            hidden = model(**enc).last_hidden_state.double()
        mask = enc["attention_mask"].double().unsqueeze(-1)
        return ((hidden * mask).sum(1) / mask.sum(1)).numpy()

    q, c = embed(X["question"]), embed(X["candidate"])
    expected = (q * c).sum(1) / np.linalg.norm(q, axis=1) / np.linalg.norm(c, axis=1)
    np.testing.assert_allclose(ranker.predict(X), expected, rtol=0, atol=1e-5)
    # Forced on a cross-encoder, the bi-encoder reads its encoder and ignores its head.
    forced = small(checkpoints["bert", 1], mode="bi-encoder").fit(X)
    assert forced.mode_ == "bi-encoder" and np.all(np.abs(forced.predict(X)) <= 1 + 1e-6)


def test_fit_without_labels_and_the_contract(checkpoints, toy):
    X, y = synthetic()
    for path in (checkpoints["encoder"], checkpoints["bert", 2]):
        unlabeled = small(path).fit(X)  # no labels: nothing to learn, the ranking is the checkpoint's
        assert not hasattr(unlabeled, "lexical_coef_")
        check_ranker_contract(small(path), X, y, atol=1e-6)  # labels: the lexical regression too (the default)
        fitted = check_ranker_contract(small(path, lexical=False), X, y, atol=1e-6)
        np.testing.assert_allclose(fitted.predict(X), unlabeled.predict(X), rtol=0, atol=1e-6)
    ranked = small(checkpoints["encoder"]).fit(toy[0]).rank("who wrote hamlet", ["hamlet", "paris", "the king"])
    assert list(ranked.columns) == ["candidate", "score", "position"] and len(ranked) == 3


def test_predict_before_fit_raises():
    from sklearn.exceptions import NotFittedError

    X, _ = synthetic()
    with pytest.raises(NotFittedError):
        ZeroShotRanker().predict(X)
    tags = ZeroShotRanker().__sklearn_tags__()
    assert tags.requires_fit and not tags.target_tags.required


def test_lexical_learns_only_from_labels(checkpoints):
    X, y = synthetic()
    zero = small(checkpoints["encoder"], lexical=False).fit(X, y)
    lexical = small(checkpoints["encoder"]).fit(X, y)
    assert lexical.lexical_coef_.shape == (8,)  # six lexical features, the zero-shot score, the intercept
    assert not np.allclose(lexical.predict(X), zero.predict(X))
    # Without labels it learns nothing; a refit without it drops what an earlier fit learned.
    assert not hasattr(small(checkpoints["encoder"]).fit(X), "lexical_coef_")
    assert not hasattr(lexical.set_params(lexical=False).fit(X, y), "lexical_coef_")


@pytest.mark.parametrize("checkpoint", ["encoder", ("roberta", 2)])
@pytest.mark.parametrize("lexical", [False, True])
def test_save_load_and_pickle_round_trips(checkpoints, checkpoint, lexical, tmp_path):
    import pickle

    X, y = synthetic()
    ranker = small(checkpoints[checkpoint], lexical=lexical).fit(X, y)
    expected = ranker.predict(X)
    as2rank.save(ranker, tmp_path / "a")
    ranker.save_pretrained(tmp_path / "b")
    for loaded in (as2rank.load(tmp_path / "a"), ZeroShotRanker.from_pretrained(tmp_path / "b"),
                   pickle.loads(pickle.dumps(ranker))):
        assert type(loaded) is ZeroShotRanker and loaded.mode_ == ranker.mode_
        assert hasattr(loaded, "lexical_coef_") == lexical
        np.testing.assert_allclose(loaded.predict(X), expected, rtol=0, atol=1e-6)


def test_sklearn_api_and_grid_search(checkpoints):
    from sklearn.base import clone
    from sklearn.model_selection import GridSearchCV, GroupKFold

    check_sklearn_api(ZeroShotRanker())
    ranker = small(checkpoints["encoder"])
    assert clone(ranker).get_params() == ranker.get_params()
    X, y = synthetic(n_questions=12)
    search = GridSearchCV(ranker, {"lexical": [False, True]}, cv=GroupKFold(n_splits=3))
    search.fit(X, y, groups=X["qid"])
    assert search.best_params_["lexical"] in (False, True) and np.isfinite(search.cv_results_["mean_test_score"]).all()
    assert search.predict(X).shape == (len(X),)


def test_bad_input(checkpoints, tokenizer):
    X, y = synthetic()
    with pytest.raises(ValueError, match="mode"):
        small(checkpoints["encoder"], mode="cross").fit(X)
    with pytest.raises(ValueError, match="sequence-classification head"):
        small(checkpoints["encoder"], mode="cross-encoder").fit(X)
    with pytest.raises(ValueError, match="tokenizer"):
        ZeroShotRanker(model=tiny_config("bert", 2), device="cpu").fit(X)
    with pytest.raises(ValueError, match="model must be"):
        ZeroShotRanker(model=3, device="cpu").fit(X)
    with pytest.raises(ValueError, match="max_length"):
        small(checkpoints["encoder"], max_length=4).fit(X)
    with pytest.raises(ValueError, match="lexical"):
        small(checkpoints["encoder"], lexical=1).fit(X)
    with pytest.raises(ValueError, match="both correct and wrong"):
        small(checkpoints["encoder"]).fit(X, np.zeros(len(X)))
    with pytest.raises(ValueError, match="candidate"):
        small(checkpoints["encoder"]).fit(X.drop(columns="candidate"))
    with pytest.raises(ValueError, match="rows"):
        small(checkpoints["encoder"]).fit(X, y[:-1])
    # A config builds a random encoder: with a tokenizer it ranks, as a bi-encoder.
    assert ZeroShotRanker(model=tiny_config("bert", 2), tokenizer=tokenizer, device="cpu").fit(X).mode_ == "bi-encoder"


def head_config(kind, tokenizer, labels=1):
    """A tiny config of an architecture beyond those of ``tiny_config``."""
    common = dict(vocab_size=tokenizer.vocab_size, num_hidden_layers=2, num_attention_heads=2,
                  max_position_embeddings=MAX_LENGTH + 2, num_labels=labels)
    if kind == "distilbert":
        return transformers.DistilBertConfig(**{**common, "n_layers": 2, "n_heads": 2}, dim=32, hidden_dim=64)
    config = {"deberta-v2": transformers.DebertaV2Config, "mpnet": transformers.MPNetConfig,
              "albert": transformers.AlbertConfig}[kind]
    return config(**common, hidden_size=32, intermediate_size=64, pad_token_id=0,
                  **({"embedding_size": 16} if kind == "albert" else {}))


@pytest.mark.parametrize("kind", ["deberta-v2", "mpnet"])
def test_other_heads_it_reads(kind, tmp_path, tokenizer):
    X, _ = synthetic()
    model = transformers.AutoModelForSequenceClassification.from_config(head_config(kind, tokenizer))
    path = save_checkpoint(model, tokenizer, tmp_path / kind)
    np.testing.assert_allclose(small(path).fit(X).predict(X), own_scores(path, X), rtol=0, atol=1e-5)


def test_heads_it_cannot_read_are_refused(tmp_path, tokenizer):
    X, _ = synthetic()
    config = tiny_config("bert", 2)
    config.num_labels = 3
    model = transformers.AutoModelForSequenceClassification.from_config(config)
    three = save_checkpoint(model, tokenizer, tmp_path / "3")
    with pytest.raises(ValueError, match="3 labels"):
        small(three).fit(X)
    paths = {}
    for kind in ("distilbert", "albert"):  # a classifier on a pre-classifier layer; a pooler that is a bare Linear
        model = transformers.AutoModelForSequenceClassification.from_config(head_config(kind, tokenizer))
        paths[kind] = save_checkpoint(model, tokenizer, tmp_path / kind)
        with pytest.raises(ValueError, match="does not read"):
            small(paths[kind]).fit(X)
    with pytest.raises(ValueError, match="does not read"):  # the same check when TransformerRanker builds its model
        small_transformer(paths["distilbert"]).fit(X, np.arange(len(X)) % 2)


# ----------------------------------------------------------------------------------------------- TransformerRanker
@pytest.mark.parametrize("checkpoint", [("bert", 1), ("electra", 1), ("roberta", 2)])
def test_transformer_ranker_starts_from_the_checkpoints_head(checkpoints, checkpoint):
    X, y = synthetic()
    path = checkpoints[checkpoint]
    # A learning rate far below float32's resolution: the steps run but cannot move a weight, so the fitted
    # model scores as the model before training.
    untrained = small_transformer(path, learning_rate=1e-30, weight_decay=0.0).fit(X, y)
    assert untrained.pooling_ == "classifier" and untrained.model_.head is None
    np.testing.assert_allclose(untrained.predict(X), own_scores(path, X), rtol=0, atol=1e-5)


def test_transformer_ranker_fine_tunes_the_head_and_saves_a_cross_encoder(checkpoints, tmp_path):
    X, y = synthetic()
    path = checkpoints["bert", 2]
    ranker = small_transformer(path).fit(X, y)
    start = transformers.AutoModelForSequenceClassification.from_pretrained(path)
    trained = ranker.model_.encoder.classifier.weight.detach()
    assert not torch.allclose(trained, start.classifier.weight)  # the head was trained, not replaced or frozen
    assert ranker.model_.head is None and ranker.head_modules == ()  # a pretrained head learns at the base rate
    assert not np.allclose(ranker.predict(X), own_scores(path, X), atol=1e-3)
    # The saved encoder is a cross-encoder checkpoint again, with the fine-tuned head: its own scores are the
    # ranker's, and the estimator loads back equal.
    ranker.save_pretrained(tmp_path / "m")
    np.testing.assert_allclose(own_scores(tmp_path / "m" / "encoder", X), ranker.predict(X), rtol=0, atol=1e-5)
    loaded = as2rank.load(tmp_path / "m")
    assert loaded.pooling_ == "classifier"
    np.testing.assert_allclose(loaded.predict(X), ranker.predict(X), rtol=0, atol=1e-6)
    # A zero-shot ranker on it ranks as the fine-tuned model.
    np.testing.assert_allclose(small(str(tmp_path / "m" / "encoder")).fit(X).predict(X), ranker.predict(X), atol=1e-5)


def test_transformer_ranker_with_prior_and_similarity_on_a_cross_encoder(checkpoints):
    import pickle

    X, y = synthetic()
    ranker = small_transformer(checkpoints["bert", 1], lexical_prior=True, segment_similarity=True).fit(X, y)
    assert ranker.pooling_ == "classifier" and ranker.model_.similarity is not None
    restored = pickle.loads(pickle.dumps(ranker))
    np.testing.assert_allclose(restored.predict(X), ranker.predict(X), rtol=0, atol=1e-6)


def test_explicit_pooling_drops_the_head_for_a_new_one(checkpoints):
    X, y = synthetic()
    ranker = small_transformer(checkpoints["bert", 1], pooling="cls", num_layers=1).fit(X, y)
    assert ranker.pooling_ == "cls" and ranker.model_.head is not None and ranker.n_layers_ == 1
    assert type(ranker.model_.encoder).__name__ == "BertModel"


def test_models_that_would_drop_the_head_refuse_it(checkpoints):
    from as2rank.transformer.cascade import CascadeTransformer

    X, y = synthetic()
    with pytest.raises(ValueError, match="score head, which this estimator would drop"):
        CascadeTransformer(model=checkpoints["bert", 1], exits=(1, 2), max_length=MAX_LENGTH, epochs=1,
                           device="cpu", random_state=0).fit(X, y)


@pytest.mark.slow  # int8 exports the model to ONNX Runtime twice (float32, then int8)
def test_int8_copy_reads_the_checkpoints_head(checkpoints):
    from as2rank.neural import int8_supported

    if not int8_supported():
        pytest.skip("this CPU has no int8 kernels")
    X, y = synthetic()
    ranker = small_transformer(checkpoints["bert", 1], lexical_prior=True, segment_similarity=True).fit(X, y)
    exact = ranker.predict(X)
    # The int8 copies replace the linear layers (the checkpoint's classifier among them) and read the head alike.
    np.testing.assert_allclose(ranker.set_params(precision="int8").predict(X), exact, rtol=0, atol=0.05)
