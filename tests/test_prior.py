"""The lexical prior (``as2rank.prior``) and ``TransformerRanker(lexical_prior=True)``, on tiny random models."""

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from as2rank.baselines import LexicalFeatures
from as2rank.prior import fit_lexical_prior, lexical_prior_logits

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from as2rank.neural.fitcache import FIT_CACHE  # noqa: E402
from as2rank.transformer import TransformerRanker  # noqa: E402
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
    ranker = small(TransformerRanker, "bert", tokenizer, lexical_prior=True).fit(X, y)
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
    from as2rank.cascade import CascadeTransformer

    X, y = synthetic(n_questions=12)
    cascade = small(CascadeTransformer, "bert", tokenizer, lexical_prior=True, exits=(2, 4, 6)).fit(X, y)
    prior = lexical_prior_logits(cascade.lexical_features_, cascade.lexical_coef_, X)
    encoded = cascade._encode(X)
    from as2rank.neural.backbone import batch_tensors

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
    """Fitted DistilledRanker and Cerberus with a prior, and the frame they were fitted on."""
    from as2rank.cerberus import Cerberus, DistilledRanker

    X, y = synthetic(n_questions=12)
    teachers = [np.random.default_rng(0).normal(size=len(X)), np.where(y > 0, 1.0, -1.0)]
    distilled = small(DistilledRanker, "bert", tokenizer, teachers=teachers, lexical_prior=True).fit(X, y)
    cerberus = small(Cerberus, "bert", tokenizer, teachers=teachers, body_layers=4, head_layers=1, lexical_prior=True).fit(X, y)
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

    from as2rank.context import ContextConcat, ContextExtractor, ContextMWA

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
