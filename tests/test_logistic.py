"""``as2rank.logistic``: the regression on arrays behind the transformer rankers' prior (no torch needed)."""

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from as2rank.logistic import fit_logistic, logistic_logits


def _data(seed=0, n=200):
    rng = np.random.default_rng(seed)
    F = rng.normal(size=(n, 3)) * [1.0, 10.0, 0.1] + [0.0, 5.0, -2.0]
    positive = ((F - [0.0, 5.0, -2.0]) @ [1.0, 0.1, -5.0] + rng.normal(size=n)) > 0
    return F, positive


def test_folded_weights_give_the_standardised_regression_logits():
    F, positive = _data()
    coef = fit_logistic(F, positive, C=0.5)
    Z = (F - F.mean(axis=0)) / F.std(axis=0)
    expected = LogisticRegression(C=0.5, max_iter=1000).fit(Z, positive).decision_function(Z)
    np.testing.assert_allclose(logistic_logits(F, coef), expected, rtol=1e-5, atol=1e-5)
    assert coef.shape == (4,) and coef.dtype == np.float64
    assert logistic_logits(F, coef).dtype == np.float32


def test_a_constant_column_gets_no_weight_and_no_nan():
    F, positive = _data(seed=1)
    F = np.column_stack([F, np.full(len(F), 3.0)])
    coef = fit_logistic(F, positive)
    assert np.isfinite(coef).all()
    assert coef[3] == 0.0


def test_logits_refuse_columns_the_fit_did_not_see():
    F, positive = _data()
    coef = fit_logistic(F, positive)
    with pytest.raises(ValueError, match="fitted on 3 features, got 2"):
        logistic_logits(F[:, :2], coef)
