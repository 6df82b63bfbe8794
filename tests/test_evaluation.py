"""as2rank.metrics (comparison): hand-computed metrics of one run, per-question values, comparisons."""

import numpy as np
import pandas as pd
import pytest

from as2rank.metrics import compare, evaluate, per_question


@pytest.fixture
def run():
    # q1: positive ranked 2nd (AP 1/2); q2: positives ranked 1st and 3rd (AP (1 + 2/3) / 2); q3: no positive.
    X = pd.DataFrame({"qid": ["q1"] * 3 + ["q2"] * 3 + ["q3"] * 2, "position": [0, 1, 2, 0, 1, 2, 0, 1]})
    y = np.array([0, 1, 0, 1, 0, 1, 0, 0])
    scores = np.array([0.9, 0.5, 0.1, 0.8, 0.7, 0.6, 0.3, 0.2])
    return X, y, scores


def test_evaluate_hand_computed(run):
    X, y, scores = run
    out = evaluate(y, scores, X)
    assert out["map"] == pytest.approx((1 / 2 + (1 + 2 / 3) / 2) / 2)
    assert out["mrr"] == pytest.approx((1 / 2 + 1) / 2)
    assert out["p@1"] == pytest.approx(0.5)
    assert out["n_evaluated"] == 2
    assert set(evaluate(y, scores, X, metrics=("p@3",))) == {"p@3", "n_evaluated"}
    with pytest.raises(ValueError, match="Unknown metric"):
        evaluate(y, scores, X, metrics=("auc",))


def test_ties_follow_the_position_only_when_asked(run):
    X, y, _ = run
    flat = np.zeros(len(y))
    assert evaluate(y, flat, X, ties="stable")["p@1"] == pytest.approx(0.5)  # q2's first row is a positive
    assert evaluate(y, flat, X)["p@1"] == 0.0  # pessimistic: every positive below its tied negatives


def test_per_question_and_compare(run):
    X, y, scores = run
    ap = per_question(y, scores, X)
    assert list(ap.index) == ["q1", "q2", "q3"]
    np.testing.assert_allclose(ap.to_numpy(), [1 / 2, (1 + 2 / 3) / 2, np.nan])
    worse = per_question(y, -scores, X)
    tests = compare({"a": ap, "b": worse, "a again": ap}, "a")
    assert np.isnan(tests["a"]["p"]) and tests["a again"]["p"] == 1.0 and not tests["a again"]["differs"]
    assert 0 < tests["b"]["p"] <= 1
    with pytest.raises(KeyError, match="No run named"):
        compare({"a": ap}, "z")
    with pytest.raises(ValueError, match="per_question takes"):
        per_question(y, scores, X, metric="ndcg@10")
