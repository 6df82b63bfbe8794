import numpy as np
import pandas as pd
import pytest

from as2rank.metrics import (
    get_scorer,
    mean_average_precision,
    mean_reciprocal_rank,
    ndcg_at_k,
    paired_significance,
    precision_at_k,
    ranking_report,
)

# Two questions; rows of "a" are not contiguous.
GROUPS = np.array(["a", "a", "b", "a", "b", "b"])
Y = np.array([0, 1, 1, 1, 0, 0])
SCORES = np.array([0.9, 0.8, 0.1, 0.2, 0.5, 0.3])
# Ranked: a -> [0 (y0), 1 (y1), 3 (y1)]; b -> [4 (y0), 5 (y0), 2 (y1)]


def test_hand_computed_values():
    ap_a = (1 / 2 + 2 / 3) / 2
    ap_b = 1 / 3
    assert mean_average_precision(Y, SCORES, GROUPS) == pytest.approx((ap_a + ap_b) / 2)
    assert mean_reciprocal_rank(Y, SCORES, GROUPS) == pytest.approx((1 / 2 + 1 / 3) / 2)
    assert precision_at_k(Y, SCORES, GROUPS, k=1) == 0.0
    assert precision_at_k(Y, SCORES, GROUPS, k=2) == pytest.approx((1 / 2 + 0) / 2)
    dcg_a = 1 / np.log2(3) + 1 / np.log2(4)
    idcg_a = 1 + 1 / np.log2(3)
    dcg_b = 1 / np.log2(4)
    assert ndcg_at_k(Y, SCORES, GROUPS, k=10) == pytest.approx((dcg_a / idcg_a + dcg_b / 1.0) / 2)


def test_graded_ndcg_gains():
    y = np.array([2, 0, 1])
    s = np.array([0.1, 0.9, 0.5])
    g = np.zeros(3)
    dcg_lin = 0 + 1 / np.log2(3) + 2 / np.log2(4)
    idcg_lin = 2 + 1 / np.log2(3)
    assert ndcg_at_k(y, s, g, k=3) == pytest.approx(dcg_lin / idcg_lin)
    dcg_exp = 0 + 1 / np.log2(3) + 3 / np.log2(4)
    idcg_exp = 3 + 1 / np.log2(3)
    assert ndcg_at_k(y, s, g, k=3, gain="exponential") == pytest.approx(dcg_exp / idcg_exp)
    assert ndcg_at_k(y, s, g, k=1) == 0.0


def test_tie_policies():
    y = np.array([0, 1, 0, 0])
    s = np.zeros(4)  # everything tied
    g = np.zeros(4)
    assert mean_reciprocal_rank(y, s, g, ties="pessimistic") == pytest.approx(1 / 4)
    assert mean_reciprocal_rank(y, s, g, ties="optimistic") == 1.0
    assert mean_reciprocal_rank(y, s, g, ties="stable") == pytest.approx(1 / 2)
    # "stable" follows position when given, not the row order.
    assert mean_reciprocal_rank(y, s, g, ties="stable", position=[3, 0, 1, 2]) == 1.0


def test_no_positive_policy_and_per_group():
    g = np.array([1, 1, 2, 2])
    y = np.array([1, 0, 0, 0])
    s = np.array([1.0, 0.0, 1.0, 0.0])
    assert mean_average_precision(y, s, g) == 1.0
    assert mean_average_precision(y, s, g, no_positive="zero") == 0.5
    per = mean_average_precision(y, s, g, per_group=True)
    assert isinstance(per, pd.Series)
    assert per.index.tolist() == [1, 2]
    assert per.loc[1] == 1.0 and np.isnan(per.loc[2])
    with pytest.warns(RuntimeWarning, match="No question has a positive"):
        assert np.isnan(mean_average_precision(np.zeros(4), s, g))


def test_report_matches_individual_metrics():
    rep = ranking_report(Y, SCORES, GROUPS, k=(1, 2), ndcg_k=(3,))
    assert rep["map"] == mean_average_precision(Y, SCORES, GROUPS)
    assert rep["mrr"] == mean_reciprocal_rank(Y, SCORES, GROUPS)
    assert rep["p@2"] == precision_at_k(Y, SCORES, GROUPS, k=2)
    assert rep["ndcg@3"] == ndcg_at_k(Y, SCORES, GROUPS, k=3)
    assert rep["n_questions"] == 2 and rep["n_evaluated"] == 2


def test_bad_inputs():
    with pytest.raises(ValueError, match="ties"):
        mean_average_precision(Y, SCORES, GROUPS, ties="random")
    with pytest.raises(ValueError, match="no_positive"):
        mean_average_precision(Y, SCORES, GROUPS, no_positive="drop")
    with pytest.raises(ValueError, match="NaN"):
        mean_average_precision(Y, np.array([np.nan, 1, 1, 1, 1, 1]), GROUPS)
    with pytest.raises(ValueError, match="y_score"):
        mean_average_precision(Y, SCORES[:-1], GROUPS)
    with pytest.raises(ValueError, match="k must be"):
        precision_at_k(Y, SCORES, GROUPS, k=0)
    with pytest.raises(TypeError, match="numeric"):
        mean_average_precision(np.array(["a"] * 6), SCORES, GROUPS)
    with pytest.raises(ValueError, match="Unknown ranking scorer"):
        get_scorer("auc")


def test_get_scorer_names():
    assert get_scorer("MAP").metric is mean_average_precision
    assert get_scorer("p@3").kwargs["k"] == 3
    assert get_scorer("ndcg@10").kwargs["k"] == 10
    assert get_scorer("mrr", ties="stable").kwargs["ties"] == "stable"


def _trec_docno(policy, label, pos):
    # trec_eval orders equal scores by document id, descending; encode the tie policy in the id.
    if policy == "stable":
        return f"d{10**6 - pos:07d}"
    lead = 9 - label if policy == "pessimistic" else label
    return f"{int(lead)}_{10**6 - pos:07d}"


@pytest.mark.parametrize("policy", ["pessimistic", "optimistic", "stable"])
def test_agrees_with_trec_eval_on_random_runs(policy):
    pytrec_eval = pytest.importorskip("pytrec_eval")
    rng = np.random.default_rng(42)
    for _ in range(5):
        sizes = rng.integers(1, 30, size=60)
        groups = np.repeat(np.arange(len(sizes)), sizes)
        n = len(groups)
        y = rng.choice([0, 0, 0, 1, 2], size=n)
        scores = rng.integers(0, 6, size=n).astype(float)  # many ties
        perm = rng.permutation(n)  # rows of a group need not be contiguous
        groups, y, scores = groups[perm], y[perm], scores[perm]
        pos = np.empty(n, dtype=int)
        for g in np.unique(groups):
            rows = np.flatnonzero(groups == g)
            pos[rows] = rng.permutation(len(rows))
        qrels, run = {}, {}
        for i in range(n):
            q, d = str(groups[i]), _trec_docno(policy, y[i], pos[i])
            qrels.setdefault(q, {})[d] = int(y[i])
            run.setdefault(q, {})[d] = float(scores[i])
        measures = {"map", "recip_rank", "P_1", "P_5", "ndcg_cut_10"}
        ref = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)
        kw = {"ties": policy, "position": pos, "per_group": True}
        ours = {
            "map": mean_average_precision(y, scores, groups, **kw),
            "recip_rank": mean_reciprocal_rank(y, scores, groups, **kw),
            "P_1": precision_at_k(y, scores, groups, k=1, **kw),
            "P_5": precision_at_k(y, scores, groups, k=5, **kw),
            "ndcg_cut_10": ndcg_at_k(y, scores, groups, k=10, **kw),
        }
        answered = [q for q in np.unique(groups) if y[groups == q].max() > 0]
        assert answered
        for name, series in ours.items():
            for q in answered:
                assert series.loc[q] == pytest.approx(ref[str(q)][name], abs=1e-9), (name, q)


def test_paired_significance():
    rng = np.random.default_rng(0)
    a = pd.Series(rng.random(200))
    assert paired_significance(a, a) == 1.0
    b = a + 0.2 + rng.normal(0, 0.05, 200)
    assert paired_significance(a, b) < 0.01
    assert paired_significance(a, b, method="ttest") < 0.01
    noise = pd.Series(a.to_numpy() + rng.normal(0, 0.01, 200))
    assert paired_significance(a, noise) > 0.01
