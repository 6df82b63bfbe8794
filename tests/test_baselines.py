import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV, GroupKFold, cross_validate
from sklearn.pipeline import make_pipeline

from as2rank.lexical.baselines import (
    LexicalFeatures,
    OverlapRankRanker,
    PointwiseRanker,
    ReciprocalRankRanker,
    WordOverlapRanker,
)
from as2rank.datasets import load_wikiqa
from as2rank.metrics import get_scorer, ranking_report

from .utils import wikiqa_path
from .contract import check_ranker_contract, check_sklearn_api


def lexical_pipeline():
    return make_pipeline(LexicalFeatures(), PointwiseRanker(LogisticRegression()))


RANKERS = [WordOverlapRanker(), ReciprocalRankRanker(), OverlapRankRanker(), PointwiseRanker(LogisticRegression())]


def synthetic(n_questions=40, seed=0):
    """Questions whose positive candidate repeats question words; negatives repeat fewer."""
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(60)]
    rows, labels = [], []
    for q in range(n_questions):
        qw = list(rng.choice(words, 5, replace=False))
        n = int(rng.integers(3, 8))
        pos = int(rng.integers(0, n))
        for p in range(n):
            k = 4 if p == pos else int(rng.integers(0, 3))
            cand = qw[:k] + list(rng.choice(words, 4))
            rows.append((f"q{q}", " ".join(qw), " ".join(cand), p))
            labels.append(int(p == pos))
    X = pd.DataFrame(rows, columns=["qid", "question", "candidate", "position"])
    return X, np.array(labels)


def test_word_overlap_hand_computed(toy):
    X, y = toy
    s = WordOverlapRanker().fit(X, y).predict(X)
    # "who wrote hamlet" vs "Shakespeare wrote Hamlet around 1600 ." -> {wrote, hamlet}
    assert s[:3].tolist() == [1.0, 2.0, 0.0]
    # "what is the capital of france" shares {is, the, capital, of, france} with row 5.
    assert s[5] == 5.0


def test_reciprocal_rank_uses_position(toy):
    X, _ = toy
    s = ReciprocalRankRanker().predict(X)
    np.testing.assert_allclose(s, 1 / (X["position"].to_numpy() + 1))


def test_without_position_rr_refuses_and_the_other_signals_read_no_order(toy):
    X, y = toy
    bare = X.drop(columns="position")
    # RR has no rank to read: the row order is not one.
    for call in (lambda: ReciprocalRankRanker().fit(bare, y), lambda: ReciprocalRankRanker().predict(bare)):
        with pytest.raises(ValueError, match=r"retrieval order, and X has no 'position' column.*read_pairs") as info:
            call()
        assert "\n" not in str(info.value)
    # WO+RR is plain word overlap, ties kept.
    np.testing.assert_array_equal(OverlapRankRanker().predict(bare), WordOverlapRanker().predict(bare))
    # The reciprocal_rank feature is 0 (no known rank); the others do not change.
    features = LexicalFeatures().fit(X)
    with_order, without = features.transform(X), features.transform(bare)
    assert (without["reciprocal_rank"] == 0).all()
    others = [c for c in LexicalFeatures.feature_names if c != "reciprocal_rank"]
    pd.testing.assert_frame_equal(without[others], with_order[others])


def test_overlap_rank_breaks_ties_by_position():
    X = pd.DataFrame(
        {
            "qid": [1, 1, 1],
            "question": ["a b c"] * 3,
            "candidate": ["a x", "b y", "a b"],
            "position": [1, 0, 2],
        }
    )
    ranks = OverlapRankRanker().predict_rank(X)
    # overlaps 1, 1, 2: "a b" first; among the ties the earlier position (row 1) first.
    assert ranks.tolist() == [3, 2, 1]


def test_rank_convenience():
    out = WordOverlapRanker().rank("who wrote hamlet", ["paris is big", "hamlet was written by shakespeare"], top_k=1)
    assert out["candidate"].tolist() == ["hamlet was written by shakespeare"]
    assert out["position"].tolist() == [1]
    with pytest.raises(ValueError, match="top_k"):
        WordOverlapRanker().rank("q", ["a"], top_k=0)


def test_lexical_features_columns_and_values(toy):
    X, y = toy
    lf = LexicalFeatures().fit(X)
    Xt = lf.transform(X)
    assert list(Xt.columns) == list(X.columns) + list(LexicalFeatures.feature_names)
    assert "overlap" not in X.columns  # input untouched
    # "who wrote hamlet" (3 tokens) vs "Shakespeare wrote Hamlet around 1600 ." (5 tokens, '.' dropped)
    row = Xt.iloc[1]
    assert row["overlap"] == 2
    assert row["overlap_question"] == pytest.approx(2 / 3)
    assert row["overlap_candidate"] == pytest.approx(2 / 5)
    idf = dict(zip(lf.vocabulary_, lf.idf_))
    assert row["idf_overlap"] == pytest.approx(idf["wrote"] + idf["hamlet"])
    assert row["reciprocal_rank"] == pytest.approx(1 / 2)
    # An unseen token gets the IDF of document frequency 0, above every seen token's.
    Xn = X.iloc[:1].assign(question="zebra", candidate="zebra")
    unseen = lf.transform(Xn)["idf_overlap"].iloc[0]
    assert unseen == pytest.approx(np.log(1 + X["candidate"].nunique()) + 1)
    assert unseen > lf.idf_.max()
    with pytest.raises(ValueError, match="already has"):
        lf.transform(Xt)


def test_pointwise_ranker_errors(toy):
    X, y = toy
    with pytest.raises(ValueError, match="no numeric feature columns"):
        PointwiseRanker(LogisticRegression()).fit(X, y)
    with pytest.raises(ValueError, match="needs an estimator"):
        PointwiseRanker().fit(X, y)
    with pytest.raises(TypeError, match="not numeric"):
        PointwiseRanker(LogisticRegression(), features=["candidate"]).fit(X, y)


def test_pointwise_ranker_regressor_and_multiclass():
    from sklearn.linear_model import Ridge

    X, y = synthetic()
    Xt = LexicalFeatures().fit_transform(X)
    s = PointwiseRanker(Ridge()).fit(Xt, y).predict(Xt)
    assert s.shape == (len(X),)
    graded = y * 2 + (Xt["overlap"].to_numpy() > 2)  # graded labels
    pr = PointwiseRanker(LogisticRegression()).fit(Xt, graded)
    # A multi-class classifier scores the expected label.
    expected = pr.estimator_.predict_proba(Xt[pr.features_].to_numpy()) @ pr.estimator_.classes_
    np.testing.assert_allclose(pr.predict(Xt), expected)


@pytest.mark.parametrize("est", RANKERS + [LexicalFeatures()], ids=lambda e: type(e).__name__)
def test_sklearn_api_checks(est):
    check_sklearn_api(est)


@pytest.mark.parametrize("est", RANKERS[:3] + [lexical_pipeline()], ids=lambda e: type(e).__name__)
def test_ranker_contract(est):
    X, y = synthetic()
    check_ranker_contract(est, X, y)


@pytest.mark.parametrize(
    "est, grid",
    [
        (WordOverlapRanker(), {"drop_punct": [False, True]}),
        (ReciprocalRankRanker(), {}),
        (OverlapRankRanker(), {"lowercase": [True, False]}),
        (lexical_pipeline(), {"pointwiseranker__estimator__C": [0.1, 10.0], "lexicalfeatures__drop_punct": [True, False]}),
    ],
    ids=lambda v: type(v).__name__ if not isinstance(v, dict) else "",
)
def test_grid_search_group_kfold(est, grid):
    X, y = synthetic(60)
    search = GridSearchCV(est, grid, cv=GroupKFold(5), scoring=get_scorer("map"))
    search.fit(X, y, groups=X["qid"])
    assert 0.0 <= search.best_score_ <= 1.0
    assert len(search.cv_results_["params"]) == max(1, int(np.prod([len(v) for v in grid.values()])))
    cv = cross_validate(
        clone(est), X, y, groups=X["qid"], cv=GroupKFold(3), scoring={"map": get_scorer("map"), "p@1": get_scorer("p@1")}
    )
    assert len(cv["test_map"]) == 3


def test_learned_pipeline_beats_chance_and_is_monotone_in_overlap():
    X, y = synthetic(80)
    model = lexical_pipeline().fit(X, y)
    assert model.score(X, y) > 0.9
    coef = model[-1].estimator_.coef_.ravel()
    assert coef[list(LexicalFeatures.feature_names).index("overlap")] > 0


def test_metadata_routing_routes_groups_to_fit():
    import sklearn

    X, y = synthetic(30)
    seen = {}

    class Spy(WordOverlapRanker):
        def fit(self, X, y=None, groups=None):
            seen["groups"] = groups
            return super().fit(X, y, groups)

    with sklearn.config_context(enable_metadata_routing=True):
        GridSearchCV(Spy(), {"drop_punct": [False]}, cv=GroupKFold(3), scoring=get_scorer("map")).fit(
            X, y, groups=X["qid"]
        )
    assert seen["groups"] is not None and len(seen["groups"]) == len(X)
    # A pipeline with LexicalFeatures accepts routed groups too.
    with sklearn.config_context(enable_metadata_routing=True):
        GridSearchCV(lexical_pipeline(), {"pointwiseranker__estimator__C": [1.0]}, cv=GroupKFold(3)).fit(
            X, y, groups=X["qid"]
        )


def test_wikiqa_test_paper_numbers():
    """Table 2/3 of Bonadiman & Moschitti (2020), clean protocol (243 answered questions)."""
    X, y = load_wikiqa(wikiqa_path("test"))

    def report(est, ties="pessimistic"):
        r = ranking_report(y, est.fit(X, y).predict(X), X["qid"], ties=ties, position=X["position"])
        assert r["n_evaluated"] == 243
        return {k: 100 * r[k] for k in ("map", "mrr", "p@1")}

    rr = report(ReciprocalRankRanker())
    assert rr["map"] == pytest.approx(64.21, abs=0.1)
    assert rr["mrr"] == pytest.approx(64.26, abs=0.1)
    assert rr["p@1"] == pytest.approx(46.09, abs=0.1)
    wo = report(WordOverlapRanker(), ties="pessimistic")
    assert wo["map"] == pytest.approx(51.02, abs=0.3)
    assert wo["p@1"] == pytest.approx(32.51, abs=0.5)
    worr = report(OverlapRankRanker())
    assert worr["map"] == pytest.approx(68.25, abs=0.5)
    assert worr["mrr"] == pytest.approx(69.43, abs=0.5)
    assert worr["p@1"] == pytest.approx(56.38, abs=0.5)


class _MustNotFit(LogisticRegression):
    """A classifier whose fit fails the test: label errors must come before the classifier is fitted."""

    def fit(self, X, y, sample_weight=None):
        raise AssertionError("the classifier was fitted")


@pytest.mark.parametrize(
    "labels, message",
    [
        ("zeros", r"needs labels of at least two classes .*all \d+ labels of y are 0\."),
        ("ones", r"needs labels of at least two classes .*all \d+ labels of y are 1\."),
        ("continuous", r"needs class labels: whole numbers, 0/1 or graded 0, 1, 2.*non-integer labels such as 0\.3"),
    ],
)
def test_pointwise_ranker_refuses_labels_a_classifier_cannot_learn(labels, message):
    X, y = synthetic()
    Xt = LexicalFeatures().fit_transform(X)
    y = {"zeros": np.zeros(len(y)), "ones": np.ones(len(y)), "continuous": np.where(y == 1, 0.7, 0.3)}[labels]
    with pytest.raises(ValueError, match=message):
        PointwiseRanker(_MustNotFit()).fit(Xt, y)
    with pytest.raises(ValueError, match=r"PointwiseRanker wraps a classifier \(LogisticRegression\)"):
        lexical_pipeline().fit(X, y)


def test_pointwise_ranker_label_rules_depend_on_the_estimator():
    from sklearn.linear_model import Ridge

    X, y = synthetic()
    Xt = LexicalFeatures().fit_transform(X)
    # A regressor learns continuous relevance; a classifier takes graded whole numbers, as floats too.
    continuous = np.where(y == 1, 0.7, 0.3)
    assert PointwiseRanker(Ridge()).fit(Xt, continuous).predict(Xt).shape == (len(X),)
    graded = (y * 2 + (Xt["overlap"].to_numpy() > 2)).astype(np.float64)
    pr = PointwiseRanker(LogisticRegression()).fit(Xt, graded)
    assert len(np.unique(graded)) > 2
    np.testing.assert_array_equal(pr.estimator_.classes_, np.unique(graded))
    scores = pr.predict(Xt)
    assert ((scores >= graded.min()) & (scores <= graded.max())).all()  # the expected label
