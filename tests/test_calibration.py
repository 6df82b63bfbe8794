"""The one calibration of the package (as2rank.ensemble.calibration): Platt scaling and the calibration maps, by
hand, and the estimators that calibrate (CalibratedRanker, LinearEnsemble, the teachers' logits) doing it
through them. NumPy, SciPy and scikit-learn only: the file runs without torch."""

import numpy as np
import pandas as pd
import pytest
from sklearn.linear_model import LogisticRegression

from as2rank import OverlapRankRanker, PointwiseRanker, WordOverlapRanker
from as2rank.answer import CalibratedRanker
from as2rank.ensemble.calibration import apply_calibration, fit_calibration, platt_scaling
from as2rank.ensemble.linear import LinearEnsemble
from as2rank.ensemble.teachers import teacher_logits


def _platt_gradient(scores, y, a, b):
    """The gradient of Platt's loss (cross-entropy against the smoothed targets) at ``(a, b)``, the slope's
    in units of the scores' standard deviation."""
    scores, positive = np.asarray(scores, dtype=np.float64), np.asarray(y) > 0
    n_pos, n_neg = positive.sum(), (~positive).sum()
    target = np.where(positive, (n_pos + 1) / (n_pos + 2), 1 / (n_neg + 2))
    residual = 1 / (1 + np.exp(-(a * scores + b))) - target
    return np.array([residual @ scores / scores.std(), residual.sum()])


def test_platt_scaling_by_hand():
    # One negative at -1, one positive at 1: targets 1/3 and 2/3, so a·1 + b = log 2 and -a + b = -log 2.
    a, b = platt_scaling([-1.0, 1.0], [0, 1])
    assert a == pytest.approx(np.log(2), abs=1e-4) and b == pytest.approx(0.0, abs=1e-4)
    # Constant scores: slope 0 and the log-odds of the smoothed prior, exactly.
    assert platt_scaling([0.5, 0.5, 0.5, 0.5], [1, 0, 0, 0]) == (0.0, float(np.log(2 / 4)))
    # Any data: the loss is stationary at the answer, whatever the scale of the scores.
    rng = np.random.default_rng(7)
    scores = rng.normal(size=200) * 2 + 0.3
    y = (rng.random(200) < 1 / (1 + np.exp(-(1.3 * scores - 0.4)))).astype(int)
    for scale in (1.0, 1000.0):
        a, b = platt_scaling(scores * scale, y)
        np.testing.assert_allclose(_platt_gradient(scores * scale, y, a, b), 0.0, atol=1e-3)
    # The values it gave before calibration had one home (the teachers' module): unchanged.
    assert platt_scaling(scores, y) == pytest.approx((1.2102560858240405, -0.28171823677131314), rel=1e-6)
    with pytest.raises(ValueError, match="finite"):
        platt_scaling([0.0, np.nan], [0, 1])
    with pytest.raises(ValueError, match="positive and negative"):
        platt_scaling([0.0, 1.0], [0, 0])


def test_calibration_maps_by_hand():
    sigmoid = np.array([2.0, -1.0])
    np.testing.assert_allclose(apply_calibration(sigmoid, [0.0, 0.5, 1.0]),
                               [1 / (1 + np.e), 0.5, np.e / (1 + np.e)], rtol=1e-15)
    knots = np.array([[0.0, 1.0, 2.0], [0.1, 0.5, 0.9]])  # linear between knots, constant beyond them
    np.testing.assert_allclose(apply_calibration(knots, [-1.0, 0.5, 1.5, 3.0]), [0.1, 0.3, 0.7, 0.9], rtol=1e-15)
    # Isotonic: the violating pair (1: positive, 2: negative) is pooled to its mean.
    iso = fit_calibration([0.0, 1.0, 2.0, 3.0], [0, 1, 0, 1], "isotonic")
    np.testing.assert_array_equal(iso, [[0.0, 1.0, 2.0, 3.0], [0.0, 0.5, 0.5, 1.0]])
    platt = fit_calibration([-1.0, 1.0], [0, 1], "sigmoid")
    assert platt.shape == (2,) and tuple(platt) == platt_scaling([-1.0, 1.0], [0, 1])
    with pytest.raises(ValueError, match="correct and wrong candidates"):
        fit_calibration([0.0, 1.0], [1, 1], "sigmoid")


def _table(n_questions=40, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for q in range(n_questions):
        good = int(rng.integers(4))
        for j in range(4):
            words = "who wrote the play" if j == good else " ".join(rng.choice(["a", "the", "play", "cat"], 3))
            rows.append({"qid": f"q{q}", "question": "who wrote the play", "candidate": words,
                         "f": float(j == good) + rng.normal(), "label": int(j == good)})
    frame = pd.DataFrame(rows)
    return frame.drop(columns="label"), frame["label"].to_numpy()


def test_every_calibrating_estimator_uses_the_one_calibration():
    X, y = _table()
    ranker = PointwiseRanker(LogisticRegression(), features=["f"]).fit(X, y)
    scores = ranker.predict(X)
    for method in ("sigmoid", "isotonic"):
        model = CalibratedRanker(ranker, method=method, cv="prefit").fit(X, y)
        np.testing.assert_array_equal(model.calibration_, fit_calibration(scores, y, method))
        np.testing.assert_array_equal(model.predict_proba(X)[:, 1], apply_calibration(model.calibration_, scores))
    members = [ranker, OverlapRankRanker()]
    ensemble = LinearEnsemble(members, resolution=4).fit(X, y)
    np.testing.assert_array_equal(ensemble.calibration_, [platt_scaling(m.predict(X), y) for m in members])
    logits = teacher_logits([WordOverlapRanker(), "f"], X, y)
    for j, s in enumerate([WordOverlapRanker().predict(X), X["f"].to_numpy()]):
        a, b = platt_scaling(s, y)
        np.testing.assert_array_equal(logits[:, j], a * s + b)
