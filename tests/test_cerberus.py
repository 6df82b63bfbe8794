"""Cerberus, the distillation baselines and LinearEnsemble, on tiny random BERT/RoBERTa/ELECTRA encoders."""

import copy
import math

import joblib
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from sklearn.base import BaseEstimator, clone  # noqa: E402
from sklearn.exceptions import NotFittedError  # noqa: E402
from sklearn.model_selection import GridSearchCV, GroupKFold  # noqa: E402

from as2rank.lexical.baselines import OverlapRankRanker, ReciprocalRankRanker, WordOverlapRanker  # noqa: E402
from as2rank.ensemble.calibration import platt_scaling  # noqa: E402
from as2rank.ensemble.linear import LinearEnsemble  # noqa: E402
from as2rank.ensemble.teachers import teacher_logits  # noqa: E402
from as2rank.transformer.cerberus import Cerberus, DistilledRanker  # noqa: E402
from as2rank.data import GroupIndex  # noqa: E402
from as2rank.metrics import get_scorer  # noqa: E402
from as2rank.transformer.distillation import CerberusEncoder  # noqa: E402
from as2rank.neural.losses import pointwise_distillation  # noqa: E402
from as2rank.neural.backbone import pool  # noqa: E402
from as2rank.transformer.network import feed_forward  # noqa: E402
from as2rank.transformer.ranker import TransformerRanker  # noqa: E402
from tests.contract import check_ranker_contract, check_sklearn_api  # noqa: E402
from tests.test_transformer import small, synthetic, tiny_config, tokenizer  # noqa: E402,F401


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def data():
    X, y = synthetic(n_questions=10)
    X = X.assign(teacher_score=np.random.default_rng(0).normal(size=len(X)) + 2 * y)
    return X, y


def teachers_for(X, y):
    """Three heterogeneous teachers: a rule ranker, a precomputed column and a score array."""
    return [WordOverlapRanker(), "teacher_score", ReciprocalRankRanker().predict(X)]


def cerberus(tokenizer, X, y, kind="bert", **params):
    """A tiny Cerberus with the paper's plain heads unless told otherwise (the segment similarity terms are tested
    in test_segment_similarity)."""
    params = {"segment_similarity": False, **params}
    return small(Cerberus, kind, tokenizer, teachers=teachers_for(X, y), body_layers=4, head_layers=2, **params)


def test_sklearn_api():
    check_sklearn_api(Cerberus())
    check_sklearn_api(DistilledRanker())
    check_sklearn_api(LinearEnsemble())
    # Teachers are calibrated on the whole training set: no chunked training is offered.
    assert not hasattr(Cerberus(), "partial_fit") and not hasattr(DistilledRanker(), "partial_fit")


def test_distillation_loss_equals_hand_computed_value():
    s, t, y, alpha, tau = 0.5, 2.0, 1.0, 0.3, 2.0
    sig = 1 / (1 + math.exp(-s))
    hard = -math.log(sig)
    p, q = 1 / (1 + math.exp(-t / tau)), 1 / (1 + math.exp(-s / tau))
    kl = p * math.log(p / q) + (1 - p) * math.log((1 - p) / (1 - q))
    expected = alpha * hard + (1 - alpha) * tau**2 * kl
    got = pointwise_distillation(torch.tensor([s]), torch.tensor([t]), torch.tensor([y]), alpha, tau)
    assert got.item() == pytest.approx(expected, rel=1e-6)
    # A negative pair, and the two-class softmax form of Eq. 1 (logits (0, s)) gives the same value.
    s, t, y = -1.2, 0.4, 0.0
    two = lambda z: torch.tensor([[0.0, z]])  # noqa: E731
    ce = torch.nn.functional.cross_entropy(two(s), torch.tensor([0]))
    kl = torch.nn.functional.kl_div(
        torch.log_softmax(two(s) / tau, dim=1), torch.softmax(two(t) / tau, dim=1), reduction="batchmean"
    )
    got = pointwise_distillation(torch.tensor([s]), torch.tensor([t]), torch.tensor([y]), alpha, tau)
    assert got.item() == pytest.approx((alpha * ce + (1 - alpha) * tau**2 * kl).item(), rel=1e-6)


def tiny_encoder(kind="bert"):
    torch.manual_seed(0)
    return transformers.AutoModel.from_config(tiny_config(kind)).eval()


def test_heads_start_as_copies_of_the_top_layers_and_the_body_keeps_the_bottom():
    encoder = tiny_encoder()
    original = copy.deepcopy(encoder)
    module = CerberusEncoder(encoder, body_layers=3, head_layers=2, n_heads=3, pooling="cls")
    assert len(module.encoder.encoder.layer) == 3 and module.encoder.config.num_hidden_layers == 3
    for depth in range(3):
        for name, value in original.encoder.layer[depth].state_dict().items():
            torch.testing.assert_close(module.encoder.encoder.layer[depth].state_dict()[name], value, rtol=0, atol=0)
    for i in range(3):
        for depth, block in enumerate(module.heads):
            state = block.block_state(i)
            for name, value in original.encoder.layer[3 + depth].state_dict().items():
                torch.testing.assert_close(state[name], value, rtol=0, atol=0)
    # The classifiers are initialised independently, as separate heads would be.
    assert not torch.equal(module.classifiers.dense_weight[0], module.classifiers.dense_weight[1])


def test_parameter_count_is_body_plus_k_heads():
    encoder = tiny_encoder()
    layer = sum(p.numel() for p in encoder.encoder.layer[0].parameters())
    classifier = sum(p.numel() for p in feed_forward(encoder.config.hidden_size, 2).parameters())
    body = sum(p.numel() for p in encoder.parameters()) - 6 * layer + 4 * layer
    module = CerberusEncoder(encoder, body_layers=4, head_layers=2, n_heads=3, pooling="mean")
    assert sum(p.numel() for p in module.encoder.parameters()) == body
    assert sum(p.numel() for p in module.parameters()) == body + 3 * (2 * layer + classifier)


@pytest.mark.parametrize("kind", ["bert", "roberta", "electra"])
def test_batched_heads_equal_heads_run_separately(kind, tokenizer, data):
    X, y = data
    # Without the lexical prior: the heads' logits are the network's alone (the prior's sum is tested in test_prior).
    est = cerberus(tokenizer, X, y, kind, pooling="mean", lexical_prior=False).fit(X, y)
    module = est.model_.eval()
    reference = copy.deepcopy(module.encoder)  # a body-shaped encoder whose blocks are the right class
    enc = est._encode(X)
    inputs = {k: torch.from_numpy(v) for k, v in enc.items() if k != "lengths"}
    with torch.inference_mode():
        body = module.encoder(**inputs).last_hidden_state
        separate = []
        for i in range(est.n_heads_):
            hidden = body
            for block in module.heads:
                layer = copy.deepcopy(reference.encoder.layer[0])
                layer.load_state_dict(block.block_state(i))
                hidden = layer(hidden, inputs["attention_mask"].bool()[:, None, None, :])
                hidden = hidden[0] if isinstance(hidden, tuple) else hidden
            classifier = feed_forward(hidden.shape[-1], 2).eval()
            classifier.load_state_dict(module.classifiers.classifier_state(i))
            separate.append(classifier(pool(hidden, inputs["attention_mask"], "mean")).squeeze(-1))
    heads = est.predict_heads(X)
    np.testing.assert_allclose(heads, torch.stack(separate, dim=1).numpy(), atol=1e-5, rtol=0)
    np.testing.assert_allclose(est.predict(X), heads.mean(axis=1), atol=1e-12, rtol=0)
    assert heads.shape == (len(X), 3) and np.ptp(heads, axis=1).max() > 0  # the heads have moved apart


def test_body_runs_once_per_input_and_the_heads_once_per_batch(tokenizer, data):
    X, y = data
    est = cerberus(tokenizer, X, y).fit(X, y)
    calls = {"body": [], "heads": []}
    body, heads = est.model_.encoder.encoder.layer, est.model_.heads
    hooks = [layer.register_forward_hook(lambda m, a, o: calls["body"].append(a[0].shape[0])) for layer in body]
    hooks += [block.register_forward_hook(lambda m, a, o: calls["heads"].append(a[0].shape[:2])) for block in heads]
    est.set_params(batch_tokens=200)  # several prediction batches
    est.predict(X)
    for h in hooks:
        h.remove()
    n_batches = len(calls["body"]) // 4
    assert n_batches > 1 and sum(calls["body"]) == 4 * len(X)  # each of the 4 body layers saw every row once
    assert len(calls["heads"]) == 2 * n_batches  # each of the 2 head blocks: one call per batch, all heads
    assert all(k == 3 for k, _ in calls["heads"]) and sum(n for _, n in calls["heads"][::2]) >= len(X)


def test_cpu_inference_runs_the_heads_over_row_blocks_with_equal_logits(tokenizer, data, monkeypatch):
    import as2rank.transformer.distillation as distillation

    X, y = data
    est = cerberus(tokenizer, X, y).fit(X, y)
    module = est.model_.eval()
    batch = {k: torch.from_numpy(v[:20]) for k, v in est._encode(X).items() if k != "lengths"}
    with torch.inference_mode():
        whole = module(batch)
        body = module.encoder(**batch).last_hidden_state
        assert module.head_rows(body) == 20  # tiny model: every row at once
        # Temporaries of 6 rows per block (the widest is n_heads × length × intermediate × element size).
        widest = 3 * body.shape[1] * module.heads[0].ffn_in_weight.shape[1] * body.element_size()
        monkeypatch.setattr(distillation, "_CPU_TEMP_BYTES", 6 * widest + 1)
        calls = []
        hooks = [block.register_forward_hook(lambda m, a, o: calls.append(a[0].shape[:2])) for block in module.heads]
        blocked = module(batch)
        for h in hooks:
            h.remove()
    assert module.head_rows(body) == 6
    torch.testing.assert_close(blocked, whole, rtol=0, atol=1e-5)
    length = body.shape[1]
    assert calls[::2] == [(3, 6 * length)] * 3 + [(3, 2 * length)]  # 4 row blocks, every call all 3 heads
    module.train()
    assert module.head_rows(body) == 20  # training steps keep whole batches


def test_gradient_of_one_head_does_not_reach_the_others(tokenizer, data):
    X, y = data
    est = cerberus(tokenizer, X, y).fit(X, y)
    module = est.model_.train()
    enc = est._encode(X)
    batch = {k: torch.from_numpy(v[:12]) for k, v in enc.items() if k != "lengths"}
    labels = torch.from_numpy((y[:12] > 0).astype(np.float32))
    logits = module(batch)
    pointwise_distillation(logits[:, 1], torch.zeros(12), labels, 0.5, 3.0).mean().backward()
    stacked = [p for name, p in module.named_parameters() if not name.startswith("encoder.")]
    assert all(p.grad[[0, 2]].abs().max() == 0 for p in stacked)
    assert all(p.grad[1].abs().max() > 0 for p in stacked if p.grad is not None)
    assert any(p.grad is not None and p.grad.abs().max() > 0 for p in module.encoder.parameters())
    # Through the estimator's own loss: a zero λ leaves its head without gradient.
    module.zero_grad()
    batch.update(labels=labels, teacher_logits=torch.from_numpy(teacher_logits(est.teachers, X, y)[:12]).float())
    est.set_params(head_weights=[1.0, 0.0, 2.0])
    est.compute_loss(module, batch, est.get_loss()).backward()
    assert all(p.grad[1].abs().max() == 0 and p.grad[[0, 2]].abs().max() > 0 for p in stacked)


def test_loss_is_the_weighted_sum_of_the_heads_kd_losses(tokenizer, data):
    X, y = data
    est = cerberus(tokenizer, X, y, head_weights=[0.5, 1.0, 2.0], kd_alpha=0.1, temperature=5.0).fit(X, y)
    module = est.model_.eval()
    enc = est._encode(X)
    batch = {k: torch.from_numpy(v) for k, v in enc.items() if k != "lengths"}
    t = torch.from_numpy(teacher_logits(est.teachers, X, y)).float()
    batch.update(labels=torch.from_numpy((y > 0).astype(np.float32)), teacher_logits=t)
    with torch.no_grad():
        logits = module(batch)
        expected = sum(w * pointwise_distillation(logits[:, i], t[:, i], batch["labels"], 0.1, 5.0).mean()
                       for i, w in enumerate([0.5, 1.0, 2.0]))
        assert est.compute_loss(module, batch, est.get_loss()).item() == pytest.approx(expected.item(), rel=1e-6)


@pytest.mark.parametrize("kind", ["bert", "roberta", "electra"])
def test_contract(kind, tokenizer, data):
    X, y = data
    fitted = check_ranker_contract(cerberus(tokenizer, X, y, kind), X, y, atol=1e-5)
    assert (fitted.body_layers_, fitted.head_layers_, fitted.n_heads_, fitted.n_layers_) == (4, 2, 3, 6)
    assert np.isfinite(fitted.history_.epoch_loss).all()


def test_default_split_is_b_minus_one_and_one_head_layer(tokenizer, data):
    X, y = data
    est = small(Cerberus, "bert", tokenizer, teachers=["teacher_score", WordOverlapRanker()]).fit(X, y)
    assert (est.body_layers_, est.head_layers_, est.n_heads_) == (5, 1, 2)
    assert len(est.model_.encoder.encoder.layer) == 5 and len(est.model_.heads) == 1


def test_grid_search_over_alpha_and_temperature_with_group_kfold(tokenizer, data):
    X, y = data
    teacher = small(TransformerRanker, "bert", tokenizer, num_layers=2).fit(X, y)
    est = small(Cerberus, "bert", tokenizer, teachers=[teacher, "teacher_score"], body_layers=1, head_layers=1)
    search = GridSearchCV(
        est, {"kd_alpha": [0.0, 0.9], "temperature": [1.0, 5.0]}, cv=GroupKFold(n_splits=2), scoring=get_scorer("map")
    )
    search.fit(X, y, groups=X["qid"])
    assert len(search.cv_results_["params"]) == 4 and np.isfinite(search.cv_results_["mean_test_score"]).all()
    # Clones share the fitted teacher instead of getting unfitted copies.
    assert search.best_estimator_.teachers[0] is teacher
    assert search.best_params_["kd_alpha"] in (0.0, 0.9)


def test_joblib_round_trip_and_save_pretrained(tokenizer, data, tmp_path):
    X, y = data
    est = cerberus(tokenizer, X, y, pooling="mean").fit(X, y)
    scores = est.predict(X)
    joblib.dump(est, tmp_path / "c.joblib")
    np.testing.assert_allclose(joblib.load(tmp_path / "c.joblib").predict(X), scores, atol=1e-6, rtol=0)
    est.save_pretrained(tmp_path / "m")
    loaded = Cerberus.from_pretrained(tmp_path / "m")
    assert loaded.teachers is None and (loaded.body_layers_, loaded.head_layers_, loaded.n_heads_) == (4, 2, 3)
    np.testing.assert_allclose(loaded.predict(X), scores, atol=1e-6, rtol=0)


def test_kd_alpha_one_trains_exactly_like_the_student_without_teacher(tokenizer, data):
    X, y = data
    for prior in (False, True):  # the pure student, and both with the lexical prior and segment similarity (their defaults)
        plain = small(TransformerRanker, "bert", tokenizer, lexical_prior=prior, segment_similarity=prior).fit(X, y)
        distilled = small(DistilledRanker, "bert", tokenizer, teachers=["teacher_score"], kd_alpha=1.0,
                          lexical_prior=prior, segment_similarity=prior).fit(X, y)
        np.testing.assert_allclose(distilled.predict(X), plain.predict(X), atol=1e-5, rtol=0)


def test_kd_sum_and_round_robin(tokenizer, data):
    X, y = data
    teachers = teachers_for(X, y)
    rr = small(DistilledRanker, "bert", tokenizer, teachers=teachers, multi_teacher="round_robin")
    logits = torch.tensor([0.3, -1.0])
    t = torch.tensor([[1.0, -2.0, 0.5], [0.0, 3.0, -1.0]])
    labels = torch.tensor([1.0, 0.0])
    module = lambda batch: logits  # noqa: E731
    batch = {"teacher_logits": t, "labels": labels, "step": 0, "draw": 0.5}
    expected_sum = sum(pointwise_distillation(logits, t[:, j], labels, 0.5, 3.0).mean() for j in range(3))
    summed = small(DistilledRanker, "bert", tokenizer, teachers=teachers)
    assert summed.compute_loss(module, batch, summed.get_loss()).item() == pytest.approx(expected_sum.item(), rel=1e-6)
    for step in range(5):  # KD_RR: batch t learns from teacher t mod 3
        one = pointwise_distillation(logits, t[:, step % 3], labels, 0.5, 3.0).mean()
        assert rr.compute_loss(module, {**batch, "step": step}, rr.get_loss()).item() == pytest.approx(one.item(), rel=1e-6)
    for strategy in ("sum", "round_robin"):
        est = small(DistilledRanker, "bert", tokenizer, teachers=teachers, multi_teacher=strategy)
        check_ranker_contract(est, X, y, atol=1e-5)


def test_platt_scaling_recovers_a_logistic_model_and_stays_finite_on_separable_scores():
    rng = np.random.default_rng(0)
    scores = rng.normal(size=20000) * 3 + 1
    y = rng.random(20000) < 1 / (1 + np.exp(-(0.5 * scores - 1.0)))
    a, b = platt_scaling(scores, y)
    assert a == pytest.approx(0.5, abs=0.03) and b == pytest.approx(-1.0, abs=0.05)
    a, b = platt_scaling(np.r_[np.zeros(50), np.ones(5)], np.r_[np.zeros(50), np.ones(5)])
    assert np.isfinite([a, b]).all() and 0 < a < 50
    assert platt_scaling(np.ones(5), [0, 1, 0, 0, 1])[0] == 0.0
    with pytest.raises(ValueError, match="positive and negative"):
        platt_scaling([0.1, 0.2], [1, 1])


def test_teacher_logits_calibrates_and_cross_fits(data):
    X, y = data
    logits = teacher_logits([OverlapRankRanker(), "teacher_score"], X, y)
    assert logits.shape == (len(X), 2)
    # Platt scaling is monotone: each teacher's ranking is kept.
    index = GroupIndex.from_frame(X)
    np.testing.assert_array_equal(index.rank(logits[:, 0]), index.rank(OverlapRankRanker().predict(X)))
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    from as2rank.lexical.baselines import LexicalFeatures, PointwiseRanker

    lexical = make_pipeline(LexicalFeatures(), PointwiseRanker(LogisticRegression()))
    oof = teacher_logits([lexical, "teacher_score"], X, y, cv=2)
    expected = np.empty(len(X))
    for train, test in GroupKFold(n_splits=2).split(X, y, index.codes):
        s = clone(lexical).fit(X.iloc[train], y[train]).predict(X.iloc[test])
        a, b = platt_scaling(s, y[test])
        expected[test] = a * s + b
    np.testing.assert_allclose(oof[:, 0], expected, rtol=1e-9)
    np.testing.assert_allclose(oof[:, 1], logits[:, 1], rtol=1e-9)  # precomputed scores are used as given
    # An unfitted ranker teacher is fine when it is cross-fitted.
    Cerberus(teachers=[lexical], teacher_cv=2)._validate_params()


def test_linear_ensemble(data):
    X, y = data
    rng = np.random.default_rng(1)
    good, noise = y + rng.normal(size=len(X)), rng.normal(size=len(X))
    rankers = [_Fixed(good), _Fixed(noise)]
    ens = LinearEnsemble(rankers).fit(X, y)
    index = GroupIndex.from_frame(X)
    alone = get_scorer("map").metric(y, good, index)
    assert ens.weights_[0] > ens.weights_[1] and ens.dev_score_ >= alone  # the grid holds (1, 0)
    assert ens.weights_.sum() == pytest.approx(1.0) and ens.calibration_.shape == (2, 2)
    fixed = LinearEnsemble(rankers, weights=[1, 3]).fit(X, y)
    np.testing.assert_allclose(fixed.weights_, [0.25, 0.75])
    a = fixed.calibration_
    np.testing.assert_allclose(fixed.predict(X), 0.25 * (a[0, 0] * good + a[0, 1]) + 0.75 * (a[1, 0] * noise + a[1, 1]))
    # Perfect ranker: every weight vector that keeps it on top scores 1; ties go to the most uniform.
    perfect = LinearEnsemble([_Fixed(y.astype(float)), _Fixed(noise)]).fit(X, y)
    assert perfect.dev_score_ == pytest.approx(1.0) and perfect.weights_[0] >= 0.5
    check_ranker_contract(LinearEnsemble([OverlapRankRanker(), ReciprocalRankRanker()], resolution=4), X, y)
    assert clone(ens).rankers[0] is rankers[0]


class _Fixed(BaseEstimator):
    """A fitted 'ranker' returning fixed scores for the rows of the frame it was built for."""

    def __init__(self, scores=None):
        self.scores = scores
        self.scores_ = np.asarray(scores)

    def fit(self, X, y):
        return self

    def predict(self, X):
        return self.scores_[X.index.to_numpy()]


def test_bad_inputs(tokenizer, data):
    X, y = data
    for teachers in (None, [], "teacher_score"):
        with pytest.raises(ValueError, match="teachers must be a non-empty list"):
            small(Cerberus, "bert", tokenizer, teachers=teachers).fit(X, y)
    with pytest.raises(ValueError, match=r"teachers\[1\] must be"):
        small(Cerberus, "bert", tokenizer, teachers=["teacher_score", {"a": 1}]).fit(X, y)
    with pytest.raises(NotFittedError, match=r"teachers\[0\] \(TransformerRanker\) is not fitted"):
        small(Cerberus, "bert", tokenizer, teachers=[TransformerRanker()]).fit(X, y)
    with pytest.raises(ValueError, match=r"teachers\[0\] has 3 scores for"):
        small(Cerberus, "bert", tokenizer, teachers=[[0.1, 0.2, 0.3]]).fit(X, y)
    with pytest.raises(ValueError, match="names the column 'nope'"):
        small(Cerberus, "bert", tokenizer, teachers=["nope"]).fit(X, y)
    for body, head in ((6, 1), (0, 2), (4, 3), (None, 6), (None, 0)):
        with pytest.raises(ValueError, match="body_layers|head_layers"):
            small(Cerberus, "bert", tokenizer, teachers=["teacher_score"], body_layers=body, head_layers=head).fit(X, y)
    with pytest.raises(ValueError, match="head_weights must be 1"):
        small(Cerberus, "bert", tokenizer, teachers=["teacher_score"], head_weights=[1, 1]).fit(X, y)
    with pytest.raises(ValueError, match="head_weights"):
        small(Cerberus, "bert", tokenizer, teachers=["teacher_score"], head_weights=[-1]).fit(X, y)
    with pytest.raises(ValueError, match="kd_alpha"):
        small(Cerberus, "bert", tokenizer, teachers=["teacher_score"], kd_alpha=1.5).fit(X, y)
    with pytest.raises(ValueError, match="temperature"):
        small(DistilledRanker, "bert", tokenizer, teachers=["teacher_score"], temperature=0).fit(X, y)
    with pytest.raises(ValueError, match="multi_teacher"):
        small(DistilledRanker, "bert", tokenizer, teachers=["teacher_score"], multi_teacher="mean").fit(X, y)
    warm = small(Cerberus, "bert", tokenizer, teachers=["teacher_score"], warm_start=True).fit(X, y)
    with pytest.raises(ValueError, match="warm_start continues a model with 1 heads"):
        warm.set_params(teachers=["teacher_score", "teacher_score"]).fit(X, y)
    with pytest.raises(ValueError, match="teacher_cv"):
        small(Cerberus, "bert", tokenizer, teachers=["teacher_score"], teacher_cv=1).fit(X, y)
    with pytest.raises(ValueError, match="rankers must be"):
        LinearEnsemble([]).fit(X, y)
    with pytest.raises(NotFittedError, match=r"rankers\[0\]"):
        LinearEnsemble([TransformerRanker()]).fit(X, y)
    with pytest.raises(ValueError, match="weights must be 2"):
        LinearEnsemble([WordOverlapRanker(), ReciprocalRankRanker()], weights=[1]).fit(X, y)
    with pytest.raises(ValueError, match="Unknown ranking scorer"):
        LinearEnsemble([WordOverlapRanker()], metric="auc").fit(X, y)


def test_suite_entry_is_a_valid_self_contained_cerberus():
    from as2rank.app.suite import select

    (entry,) = select(("transformers",), ["Cerberus"])
    est = entry.make(0)
    est._validate_params()  # unfitted teachers are valid: they are cross-fitted
    assert isinstance(est, Cerberus) and est.teacher_cv == 3 and len(est.teachers) == 2


def test_bfloat16_heads_follow_float32(tokenizer, data, bf16_anywhere):
    X, y = data
    est = cerberus(tokenizer, X, y).fit(X, y)
    fp32 = est.predict_heads(X)
    bf16 = est.set_params(precision="bf16").predict_heads(X)
    assert np.abs(bf16 - fp32).max() < 0.05 * np.abs(fp32).max() + 0.05


