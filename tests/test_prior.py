"""The lexical prior (``as2rank.transformer.prior``) and ``TransformerRanker(lexical_prior=True)``, on tiny random models."""

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from as2rank.lexical.baselines import LexicalFeatures
from as2rank.transformer.prior import fit_lexical_prior, lexical_prior_logits

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from as2rank.neural.fitcache import FIT_CACHE  # noqa: E402
from as2rank.transformer.ranker import TransformerRanker  # noqa: E402
from tests.test_transformer import small, synthetic, tokenizer  # noqa: E402,F401


def test_prior_is_the_standardised_logistic_regression():
    """The folded coefficients give the decision function of StandardScaler -> LogisticRegression."""
    X, y = synthetic(n_questions=12)
    features, coef = fit_lexical_prior(X, y)
    F = features.transform(X)[list(LexicalFeatures.feature_names)].to_numpy()
    expected = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000)).fit(F, y > 0).decision_function(F)
    np.testing.assert_allclose(lexical_prior_logits(features, coef, X), expected, rtol=1e-5, atol=1e-5)


def test_prior_needs_both_classes():
    X, y = synthetic()
    with pytest.raises(ValueError, match="lexical_prior=False"):
        fit_lexical_prior(X, np.ones_like(y))


def test_prediction_is_network_logit_plus_prior(tokenizer):
    X, y = synthetic(n_questions=12)
    ranker = small(TransformerRanker, "bert", tokenizer, lexical_prior=True, segment_similarity=False).fit(X, y)
    prior = lexical_prior_logits(ranker.lexical_features_, ranker.lexical_coef_, X)
    encoded = ranker._encode(X)
    del encoded["prior"]
    from as2rank.neural.predict import predict_logits

    network = predict_logits(ranker.model_, encoded, torch.device("cpu"), batch_tokens=256, dtype=torch.float32,
                             progress=lambda b, n, d: b)
    np.testing.assert_allclose(ranker.predict(X), network + prior, rtol=1e-5, atol=1e-5)
    # The prior is the one fitted on the training rows, whatever rows are predicted.
    np.testing.assert_allclose(ranker.lexical_coef_, fit_lexical_prior(X, y)[1])


def test_prior_changes_training_and_is_off_by_switch(tokenizer):
    X, y = synthetic(n_questions=12)
    with_prior = small(TransformerRanker, "bert", tokenizer, lexical_prior=True).fit(X, y)
    without = small(TransformerRanker, "bert", tokenizer, lexical_prior=False).fit(X, y)
    assert not hasattr(without, "lexical_coef_")
    assert not np.allclose(with_prior.predict(X), without.predict(X))


def test_prior_survives_save_pretrained_and_pickle(tokenizer, tmp_path):
    import pickle

    X, y = synthetic(n_questions=12)
    ranker = small(TransformerRanker, "bert", tokenizer, lexical_prior=True).fit(X, y)
    ranker.save_pretrained(tmp_path / "m")
    loaded = TransformerRanker.from_pretrained(tmp_path / "m")
    np.testing.assert_allclose(loaded.predict(X), ranker.predict(X), atol=1e-6)
    np.testing.assert_allclose(pickle.loads(pickle.dumps(ranker)).predict(X), ranker.predict(X), atol=1e-6)


def test_continuing_needs_the_same_prior_setting(tokenizer):
    X, y = synthetic(n_questions=12)
    ranker = small(TransformerRanker, "bert", tokenizer, lexical_prior=True, warm_start=True).fit(X, y)
    with pytest.raises(ValueError, match="trained with a lexical prior"):
        ranker.set_params(lexical_prior=False).fit(X, y)
    with pytest.raises(ValueError, match="trained with a lexical prior"):
        ranker.partial_fit(X, y, total_rows=len(X))
    ranker.set_params(lexical_prior=True).fit(X, y)  # same setting: continues
    assert hasattr(ranker, "lexical_coef_")


def test_cache_hit_restores_the_prior_of_its_own_fit(tokenizer):
    """A reused fit without a prior leaves no prior behind from the estimator's previous fit."""
    X, y = synthetic(n_questions=12)
    FIT_CACHE.clear()
    ranker = small(TransformerRanker, "bert", tokenizer, lexical_prior=False)
    plain = ranker.fit(X, y).predict(X)
    ranker.set_params(lexical_prior=True).fit(X, y)
    assert hasattr(ranker, "lexical_coef_") and not ranker.fit_cache_hit_
    ranker.set_params(lexical_prior=False).fit(X, y)
    assert ranker.fit_cache_hit_ and not hasattr(ranker, "lexical_coef_")
    np.testing.assert_allclose(ranker.predict(X), plain, atol=1e-6)
    FIT_CACHE.clear()


def test_bad_lexical_prior(tokenizer):
    X, y = synthetic()
    with pytest.raises(ValueError, match="lexical_prior must be True or False"):
        small(TransformerRanker, "bert", tokenizer, lexical_prior="yes").fit(X, y)


def test_cascade_adds_the_prior_to_every_exit(tokenizer, tmp_path):
    from as2rank.transformer.cascade import CascadeTransformer

    X, y = synthetic(n_questions=12)
    cascade = small(CascadeTransformer, "bert", tokenizer, lexical_prior=True, exits=(2, 4, 6)).fit(X, y)
    prior = lexical_prior_logits(cascade.lexical_features_, cascade.lexical_coef_, X)
    encoded = cascade._encode(X)
    from as2rank.neural.predict import batch_tensors

    rows = np.arange(len(X))
    with torch.no_grad():
        exits = cascade.model_.eval().all_exits(batch_tensors(encoded, rows)).numpy()
        del encoded["prior"]
        plain = cascade.model_.all_exits(batch_tensors(encoded, rows)).numpy()
    np.testing.assert_allclose(exits, plain + prior[:, None], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(cascade.set_params(alpha=0.0).predict(X), exits[:, -1], rtol=1e-5, atol=1e-5)
    # With drops the cascade ranks by prior + exit logit: a dropped row scores below every survivor of its question.
    cascade.save_pretrained(tmp_path / "c")
    loaded = CascadeTransformer.from_pretrained(tmp_path / "c", alpha=0.3)
    np.testing.assert_allclose(loaded.predict(X), cascade.set_params(alpha=0.3).predict(X), atol=1e-6)


def _without_prior(ranker, X):
    """The fitted network's own scores of ``X``: the module run on the encoded rows less their ``prior``."""
    from as2rank.neural.predict import predict_logits

    encoded = ranker._encode(X)
    assert "prior" in encoded
    del encoded["prior"]
    return predict_logits(ranker.model_, encoded, torch.device("cpu"), batch_tokens=256, dtype=torch.float32,
                          progress=lambda b, n, d: b)


def _students(tokenizer):
    """Fitted DistilledRanker and Cerberus with a prior (and no segment similarity, whose cosine would join the
    prior's regression), and the frame they were fitted on."""
    from as2rank.transformer.cerberus import Cerberus, DistilledRanker

    X, y = synthetic(n_questions=12)
    teachers = [np.random.default_rng(0).normal(size=len(X)), np.where(y > 0, 1.0, -1.0)]
    plain = {"lexical_prior": True, "segment_similarity": False}
    distilled = small(DistilledRanker, "bert", tokenizer, teachers=teachers, **plain).fit(X, y)
    cerberus = small(Cerberus, "bert", tokenizer, teachers=teachers, body_layers=4, head_layers=1, **plain).fit(X, y)
    return X, y, distilled, cerberus


def test_students_add_the_prior_to_every_head(tokenizer, tmp_path):
    X, y, distilled, cerberus = _students(tokenizer)
    for model in (distilled, cerberus):
        np.testing.assert_allclose(model.lexical_coef_, fit_lexical_prior(X, y)[1])
        prior = lexical_prior_logits(model.lexical_features_, model.lexical_coef_, X)
        network = _without_prior(model, X)  # (rows,) for the student, (rows, heads) for Cerberus
        expected = network + prior if network.ndim == 1 else (network + prior[:, None]).mean(axis=1)
        np.testing.assert_allclose(model.predict(X), expected, rtol=1e-5, atol=1e-5)
        cls = type(model)
        model.save_pretrained(tmp_path / cls.__name__)
        np.testing.assert_allclose(cls.from_pretrained(tmp_path / cls.__name__).predict(X), model.predict(X), atol=1e-6)


def test_context_rankers_add_the_prior(tmp_path):
    from tests import test_context as tc

    from as2rank.transformer.context.rankers import ContextConcat, ContextExtractor, ContextMWA

    X, y = tc.synthetic(n_questions=12)
    X = ContextExtractor(max_global_sentences=2, max_global_tokens=12).fit_transform(X)
    import transformers

    tok = transformers.BertTokenizerFast(vocab={w: i for i, w in enumerate(tc.SPECIAL + tc.WORDS)})  # tc's vocabulary
    for cls in (ContextConcat, ContextMWA):
        ranker = tc.small(cls, tok, lexical_prior=True).fit(X, y)
        prior = lexical_prior_logits(ranker.lexical_features_, ranker.lexical_coef_, X)
        np.testing.assert_allclose(ranker.predict(X), _without_prior(ranker, X) + prior, rtol=1e-5, atol=1e-5)
        plain = tc.small(cls, tok, lexical_prior=False).fit(X, y)
        assert not hasattr(plain, "lexical_coef_") and not np.allclose(plain.predict(X), ranker.predict(X))
        ranker.save_pretrained(tmp_path / cls.__name__)
        np.testing.assert_allclose(cls.from_pretrained(tmp_path / cls.__name__).predict(X), ranker.predict(X), atol=1e-6)


@pytest.fixture
def checkpoint(tokenizer, tmp_path):
    """A tiny random BERT and its tokenizer saved to a directory: a ``model=`` that names files on disk."""
    import transformers

    from tests.test_transformer import tiny_config

    torch.manual_seed(0)
    path = tmp_path / "checkpoint"
    transformers.BertModel(tiny_config("bert", 2)).save_pretrained(path)  # two layers: int8 exports it to ONNX
    tokenizer.save_pretrained(path)
    return str(path)


def _sentence_cosines(path, X):
    """The cosine of each row's question and candidate embeddings (mean of the token encodings), computed
    directly from the checkpoint, one sentence at a time."""
    import transformers

    encoder, tok = transformers.AutoModel.from_pretrained(path).eval(), transformers.AutoTokenizer.from_pretrained(path)

    def embed(text):
        with torch.no_grad():
            hidden = encoder(**tok(text, return_tensors="pt", return_token_type_ids=False))[0][0]
        return torch.nn.functional.normalize(hidden.mean(0), dim=0).numpy()

    return np.array([embed(q) @ embed(c) for q, c in zip(X["question"], X["candidate"])])


def test_similarity_prior_adds_the_pretrained_encoders_cosine(checkpoint):
    X, y = synthetic(n_questions=12)
    ranker = small(TransformerRanker, "bert", None, model=checkpoint, similarity_prior=True,
                   segment_similarity=False).fit(X, y)
    cosines = _sentence_cosines(checkpoint, X)
    # The prior is the regression on the lexical features and the cosine, fitted on the training rows.
    features, coef = fit_lexical_prior(X, y, extra=cosines[:, None])
    assert len(ranker.lexical_coef_) == len(LexicalFeatures.feature_names) + 2
    np.testing.assert_allclose(ranker.lexical_coef_, coef, rtol=1e-4, atol=1e-4)
    encoded = ranker._encode(X)
    np.testing.assert_allclose(encoded["prior"], lexical_prior_logits(features, coef, X, cosines[:, None]), rtol=1e-4, atol=1e-4)
    # The similarity comes from the checkpoint as it was, not from the fine-tuned encoder.
    plain = small(TransformerRanker, "bert", None, model=checkpoint).fit(X, y)
    assert not np.allclose(ranker.predict(X), plain.predict(X))
    from as2rank.neural.fitcache import source_digests

    assert ranker.similarity_source_ == {"model": checkpoint, "tokenizer": None,
                                         "digests": list(source_digests(checkpoint, None))}


def test_similarity_prior_survives_save_pretrained_and_refuses_a_changed_checkpoint(checkpoint, tmp_path):
    import pickle

    import transformers

    from as2rank.transformer import similarity

    from tests.test_transformer import tiny_config

    X, y = synthetic(n_questions=12)
    ranker = small(TransformerRanker, "bert", None, model=checkpoint, similarity_prior=True).fit(X, y)
    scores = ranker.predict(X)
    ranker.save_pretrained(tmp_path / "m")
    np.testing.assert_allclose(TransformerRanker.from_pretrained(tmp_path / "m").predict(X), scores, atol=1e-6)
    np.testing.assert_allclose(pickle.loads(pickle.dumps(ranker)).predict(X), scores, atol=1e-6)
    torch.manual_seed(1)
    transformers.BertModel(tiny_config("bert", 2)).save_pretrained(checkpoint)  # other weights, same place
    # This process holds the checkpoint it loaded and checked: the scores stay those of the fit.
    np.testing.assert_array_equal(ranker.predict(X), scores)
    similarity._LOADED.clear()  # another process: it finds only the new files
    with pytest.raises(ValueError, match="not those the similarity prior was fitted with"):
        ranker.predict(X)


def test_similarity_prior_needs_the_lexical_prior_and_a_checkpoint_on_disk(tokenizer, checkpoint):
    X, y = synthetic()
    with pytest.raises(ValueError, match="needs lexical_prior=True"):
        small(TransformerRanker, "bert", None, model=checkpoint, similarity_prior=True, lexical_prior=False).fit(X, y)
    with pytest.raises(ValueError, match="files on disk|on disk"):
        small(TransformerRanker, "bert", tokenizer, similarity_prior=True).fit(X, y)  # a config: nothing to reload
    ranker = small(TransformerRanker, "bert", None, model=checkpoint, warm_start=True).fit(X, y)
    with pytest.raises(ValueError, match="similarity_prior=True but the fitted model was trained without"):
        ranker.set_params(similarity_prior=True).fit(X, y)


def test_similarity_prior_leaves_the_seeded_fit_as_it_is(checkpoint):
    """Whether the prior's encoder was loaded before in the process or not, a seeded fit gives the same model."""
    from as2rank.transformer import similarity

    X, y = synthetic(n_questions=12)
    FIT_CACHE.clear()
    similarity._LOADED.clear()
    first = small(TransformerRanker, "bert", None, model=checkpoint, similarity_prior=True, reuse_fit=False).fit(X, y)
    second = small(TransformerRanker, "bert", None, model=checkpoint, similarity_prior=True, reuse_fit=False).fit(X, y)
    np.testing.assert_array_equal(first.predict(X), second.predict(X))


def test_a_reused_fit_keeps_the_similarity_checkpoint_it_was_asked_for(checkpoint, tmp_path):
    """The fit cache keys initial weights by content: a copy of the checkpoint under another name trains
    afresh with the similarity prior, so that the prior names the files it was given."""
    import shutil

    X, y = synthetic(n_questions=12)
    FIT_CACHE.clear()
    copy = str(tmp_path / "copy")
    shutil.copytree(checkpoint, copy)
    first = small(TransformerRanker, "bert", None, model=checkpoint, similarity_prior=True).fit(X, y)
    second = small(TransformerRanker, "bert", None, model=copy, similarity_prior=True).fit(X, y)
    assert not second.fit_cache_hit_ and second.similarity_source_["model"] == copy
    np.testing.assert_allclose(second.predict(X), first.predict(X), atol=1e-6)
    again = small(TransformerRanker, "bert", None, model=copy, similarity_prior=True).fit(X, y)
    assert again.fit_cache_hit_ and again.similarity_source_["model"] == copy
    FIT_CACHE.clear()


@pytest.mark.slow  # int8 exports the model to ONNX Runtime twice (float32, then int8)
def test_similarity_prior_predicts_at_every_precision(checkpoint):
    # The similarity pass runs beside the int8 copy (in float) and under autocast; the scores stay close to fp32.
    from as2rank.neural import int8_supported

    X, y = synthetic(n_questions=12)
    ranker = small(TransformerRanker, "bert", None, model=checkpoint, similarity_prior=True).fit(X, y)
    fp32 = ranker.predict(X)
    for precision in ("auto", "int8") if int8_supported() else ("auto",):
        np.testing.assert_allclose(ranker.set_params(precision=precision).predict(X), fp32, atol=0.05)
    ranker.set_params(precision="fp32")
