"""``segment_similarity``: the trained ``w × cos(question mean, candidate mean)`` term of the transformer rankers'
logits (tiny random models): the question mask, the logit computed by hand, the weight's start at the prior's
regression coefficient, the cascade's exits, persistence and continuation."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from as2rank.transformer.cascade import CascadeTransformer  # noqa: E402
from as2rank.neural.backbone import LayerStack, masked_mean  # noqa: E402
from as2rank.neural.tokens import question_mask  # noqa: E402
from as2rank.transformer.network import SegmentSimilarity  # noqa: E402
from as2rank.transformer.prior import fit_lexical_prior, lexical_prior_logits  # noqa: E402
from as2rank.transformer.ranker import TransformerRanker  # noqa: E402
from tests.test_transformer import small, synthetic, tokenizer  # noqa: E402,F401


def cosines(hidden, attention_mask, qmask):
    """The cosine of the question's and the candidate's mean encodings, row by row, in plain torch."""
    out = []
    for h, m, q in zip(hidden, attention_mask.bool(), qmask.bool()):
        a, b = h[m & q].mean(0), h[m & ~q].mean(0)
        out.append(float(a @ b / (a.norm() * b.norm())))
    return np.array(out)


def hidden_of(module, enc):
    batch = {k: torch.from_numpy(v) for k, v in enc.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
    with torch.inference_mode():
        return module.encoder(**batch).last_hidden_state, batch["attention_mask"]


def test_question_mask_ends_at_the_first_separator(tokenizer):
    sep = tokenizer.sep_token_id
    ids = np.array([[2, 7, 8, sep, 9, sep, 0, 0],     # [CLS] q q [SEP] c [SEP] pad pad
                    [2, 7, sep, sep, 9, 9, sep, 0]])  # RoBERTa-style double separator
    np.testing.assert_array_equal(question_mask(ids, tokenizer),
                                  [[1, 1, 1, 1, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0, 0, 0]])
    no_sep = transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer.backend_tokenizer)
    with pytest.raises(ValueError, match="separator"):
        question_mask(ids, no_sep)


def test_logit_is_head_plus_weighted_cosine_plus_prior(tokenizer):
    X, y = synthetic()
    ranker = small(TransformerRanker, "bert", tokenizer, pooling="mean").fit(X, y)
    module = ranker.model_.eval()
    assert isinstance(module.similarity, SegmentSimilarity)
    enc = ranker._encode(X)
    np.testing.assert_array_equal(enc["question_mask"], question_mask(enc["input_ids"], tokenizer))
    hidden, mask = hidden_of(module, enc)
    with torch.inference_mode():
        head = module.head(masked_mean(hidden, mask)).squeeze(-1).numpy()
    cos = cosines(hidden, mask, torch.from_numpy(enc["question_mask"]))
    prior = lexical_prior_logits(ranker.lexical_features_, ranker.lexical_coef_, X)
    expected = head + module.similarity.weight.item() * cos + prior
    np.testing.assert_allclose(ranker.predict(X), expected, atol=1e-5, rtol=0)
    assert module.similarity.weight.item() != 0.0


@pytest.mark.parametrize("lexical_prior", [True, False])
def test_weight_starts_at_the_regression_coefficient_of_the_pretrained_cosine(tokenizer, lexical_prior):
    """With a learning rate too small to move anything, the fitted weight and prior are the regression's on the
    cosines of the (unchanged) pretrained encoder; the cosine's coefficient is not left in the prior."""
    X, y = synthetic(n_questions=12)
    ranker = small(TransformerRanker, "bert", tokenizer, pooling="mean", learning_rate=1e-12, weight_decay=0.0,
                   early_stopping=False, lexical_prior=lexical_prior).fit(X, y)
    module = ranker.model_.eval()
    enc = ranker._encode(X)
    hidden, mask = hidden_of(module, enc)
    cos = cosines(hidden, mask, torch.from_numpy(enc["question_mask"]))[:, None]
    features, coef = fit_lexical_prior(X, y, extra=cos, lexical=lexical_prior)
    np.testing.assert_allclose(module.similarity.weight.item(), coef[-2], rtol=1e-4)
    if lexical_prior:
        np.testing.assert_allclose(ranker.lexical_coef_, np.delete(coef, -2), rtol=1e-4, atol=1e-6)
    else:
        assert not hasattr(ranker, "lexical_coef_")


def test_off_builds_the_plain_head(tokenizer):
    X, y = synthetic()
    ranker = small(TransformerRanker, "bert", tokenizer, segment_similarity=False).fit(X, y)
    assert ranker.model_.similarity is None and "question_mask" not in ranker._encode(X)
    assert not any(isinstance(m, SegmentSimilarity) for m in ranker.model_.modules())


def test_cascade_exits_each_weigh_their_own_layer(tokenizer):
    X, y = synthetic(n_questions=12)
    ranker = small(CascadeTransformer, "bert", tokenizer, exits=(2, 4, 6), learning_rate=1e-12, weight_decay=0.0,
                   early_stopping=False).fit(X, y)
    module = ranker.model_.eval()
    weights = [term.weight.item() for term in module.similarity]
    assert len(weights) == 3 and np.allclose(weights, weights[-1], rtol=1e-4) and weights[-1] != 0.0
    enc = ranker._encode(X)
    batch = {k: torch.from_numpy(v) for k, v in enc.items() if k != "lengths"}
    stack, mask = LayerStack(module.encoder), batch["attention_mask"]
    prior = lexical_prior_logits(ranker.lexical_features_, ranker.lexical_coef_, X)
    with torch.inference_mode():
        got = module.all_exits(batch).numpy()
        hidden, start = stack.embed(batch), 0
        for i, stop in enumerate(module.exits):
            hidden, start = stack.run(hidden, mask, start, stop), stop
            head = module.classifiers[i](masked_mean(hidden, mask)).squeeze(-1).numpy()
            cos = cosines(hidden, mask, batch["question_mask"])
            np.testing.assert_allclose(got[:, i], head + weights[i] * cos + prior, atol=1e-4, rtol=0)


def test_save_and_load_keep_the_term(tokenizer, tmp_path):
    X, y = synthetic()
    ranker = small(TransformerRanker, "bert", tokenizer).fit(X, y)
    ranker.save_pretrained(tmp_path / "m")
    loaded = TransformerRanker.from_pretrained(tmp_path / "m")
    assert loaded.model_.similarity.weight.item() == ranker.model_.similarity.weight.item()
    np.testing.assert_allclose(loaded.predict(X), ranker.predict(X), atol=1e-5)


def test_continuing_with_the_other_setting_raises(tokenizer):
    X, y = synthetic()
    ranker = small(TransformerRanker, "bert", tokenizer).fit(X, y)
    with pytest.raises(ValueError, match="segment_similarity"):
        ranker.set_params(segment_similarity=False, warm_start=True).fit(X, y)


def test_students_weigh_each_head_s_cosine(tokenizer, tmp_path):
    """Cerberus: every head adds w_i × the cosine of its own last block's encodings (the logits with the term
    minus those without it, weights zeroed, are w_i × the cosines computed through segment_cosines); each w_i
    starts at the regression's coefficient of the pretrained cosine, as DistilledRanker's one w does. Saved
    and loaded with the terms."""
    from as2rank.lexical.baselines import ReciprocalRankRanker, WordOverlapRanker
    from as2rank.transformer.cerberus import Cerberus, DistilledRanker

    X, y = synthetic(n_questions=12)
    teachers = [WordOverlapRanker(), ReciprocalRankRanker()]
    tiny_lr = dict(learning_rate=1e-12, weight_decay=0.0, lexical_prior=False, early_stopping=False)
    cerberus = small(Cerberus, "bert", tokenizer, teachers=teachers, body_layers=4, head_layers=2,
                     segment_similarity=True, **tiny_lr).fit(X, y)
    student = small(DistilledRanker, "bert", tokenizer, teachers=teachers, segment_similarity=True, **tiny_lr).fit(X, y)
    weights = [term.weight.item() for term in cerberus.model_.similarity]
    assert len(weights) == 2 and weights[0] == pytest.approx(weights[1]) and weights[0] != 0
    # Both started from the same pretrained encoder's last-layer cosines: the same regression coefficient.
    assert student.model_.similarity.weight.item() == pytest.approx(weights[0], rel=1e-4)
    module = cerberus.model_.eval()
    batch = {k: torch.from_numpy(v) for k, v in cerberus.encode(X).items() if k != "lengths"}
    with torch.inference_mode():
        full, cos = module(batch), module.segment_cosines(batch)
        saved = [term.weight.clone() for term in module.similarity]
        for term in module.similarity:
            term.weight.zero_()
        plain = module(batch)
        for term, w in zip(module.similarity, saved):
            term.weight.copy_(w)
    np.testing.assert_allclose((full - plain).numpy(), (cos * torch.stack(saved)).numpy(), atol=1e-5)
    assert cos.shape == (len(X), 2) and (cos.abs() <= 1 + 1e-6).all()
    # Saved and loaded with the terms; a student built without them has none.
    cerberus.save_pretrained(tmp_path / "c")
    np.testing.assert_allclose(Cerberus.from_pretrained(tmp_path / "c").predict(X), cerberus.predict(X), atol=1e-5)


@pytest.mark.parametrize("name", ["ContextConcat", "ContextMWA", "ContextEnsemble"])
def test_context_rankers_compare_the_question_and_candidate_segments_only(name, tokenizer, monkeypatch):
    """The context rankers' term reads the question's and the candidate's segments of the concatenation, never
    the contexts'; off, the module has no term and the batches no masks."""
    from as2rank.transformer.context import rankers
    from as2rank.transformer.context.features import ContextExtractor
    from as2rank.transformer.context.network import SEGMENTS
    from tests import test_context

    cls = getattr(rankers, name)
    X, y = test_context.synthetic()
    X = ContextExtractor(max_global_sentences=2, max_global_tokens=12).fit_transform(X)
    ranker = test_context.small(cls, tokenizer, segment_similarity=True).fit(X, y)
    encoded = ranker.encode(X)
    assert ranker.model_.similarity is not None and ranker.model_.similarity.weight.item() != 0
    with monkeypatch.context() as patch:  # the segment of every token, which ContextConcat's batches leave out
        patch.setattr(cls, "_needs_segments", True)
        segments = ranker.encode(X)["segments"]
    np.testing.assert_array_equal(encoded["question_mask"], segments == SEGMENTS["question"])
    np.testing.assert_array_equal(encoded["candidate_mask"], segments == SEGMENTS["candidate"])
    hidden, attention = hidden_of(ranker.model_.eval(), encoded)
    expected = []
    for h, q, c in zip(hidden, encoded["question_mask"].astype(bool), encoded["candidate_mask"].astype(bool)):
        a, b = h[torch.from_numpy(q)].mean(0), h[torch.from_numpy(c)].mean(0)
        expected.append(float(a @ b / (a.norm() * b.norm())))
    batch = {k: torch.from_numpy(v) for k, v in encoded.items() if k != "lengths"}
    with torch.inference_mode():
        np.testing.assert_allclose(ranker.model_.segment_cosines(batch)[:, 0].numpy(), expected, atol=1e-5)
    if name == "ContextConcat":  # off: no term, no masks
        plain = test_context.small(cls, tokenizer, segment_similarity=False).fit(X, y)
        assert plain.model_.similarity is None and "candidate_mask" not in plain.encode(X)
