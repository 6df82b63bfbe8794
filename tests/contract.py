"""The estimator contract of DESIGN §2, checked on grouped-candidate data.

scikit-learn's ``check_estimator`` generates numeric 2-D arrays, which a ranker of question/candidate
text cannot take: with the tags our estimators declare (``two_d_array=False``, ``string=True``) it runs
only its cloneability check. ``check_sklearn_api`` runs the data-independent API checks of scikit-learn
directly, and ``check_ranker_contract`` the data-dependent ones on grouped data.
"""

import pickle
import warnings

import joblib
import numpy as np
from sklearn.base import clone
from sklearn.utils import estimator_checks as ec

import as2rank
from as2rank.base import predict_rank
from as2rank.data import GroupIndex

# scikit-learn checks that need no data, so they apply to our estimators as they are.
DATA_INDEPENDENT_CHECKS = (
    "check_estimator_cloneable",
    "check_estimator_repr",
    "check_no_attributes_set_in_init",
    "check_valid_tag_types",
    "check_estimator_tags_renamed",
    "check_mixin_order",
    "check_do_not_raise_errors_in_init_or_set_params",
    "check_parameters_default_constructible",
    "check_get_params_invariance",
    "check_set_params",
)


def check_sklearn_api(estimator):
    name = type(estimator).__name__
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = ec.check_estimator(estimator, on_fail=None, on_skip=None)
    assert {r["check_name"]: r["status"] for r in results}.get("check_estimator_cloneable") == "passed"
    for check in DATA_INDEPENDENT_CHECKS:
        getattr(ec, check)(name, clone(estimator))


def check_ranker_contract(estimator, X, y, *, atol=1e-12):
    """Fit/predict contract on grouped data; returns the fitted estimator.

    ``atol`` bounds score differences caused by floating-point summation order alone.
    """
    # Hash the parameters of unfitted clones, so fitted sub-estimators (pipeline steps) compare equal.
    params_before = joblib.hash(clone(estimator).get_params())
    fitted = clone(estimator)
    assert fitted.fit(X, y) is fitted
    assert joblib.hash(clone(fitted).get_params()) == params_before, "fit must not change constructor parameters"

    fitted_state = dict(vars(fitted))
    scores = fitted.predict(X)
    assert scores.shape == (len(X),) and scores.dtype.kind == "f"
    # Row order of X does not change any row's score.
    perm = np.random.default_rng(0).permutation(len(X))
    np.testing.assert_allclose(fitted.predict(X.iloc[perm]), scores[perm], atol=atol, rtol=0)

    ranks = fitted.predict_rank(X) if hasattr(fitted, "predict_rank") else predict_rank(fitted, X)
    index = GroupIndex.from_frame(X)
    for g in range(index.n_groups):
        rows = index.codes == g
        assert sorted(ranks[rows]) == list(range(1, rows.sum() + 1))
        # Higher score never ranks lower.
        s, r = scores[rows], ranks[rows]
        assert np.all(np.diff(s[np.argsort(r)]) <= atol)

    assert 0.0 <= fitted.score(X, y) <= 1.0
    ranked = as2rank.rank(fitted, X)
    assert len(ranked) == len(X)
    assert_state_unchanged(fitted, fitted_state, "predict, predict_rank, score and rank")
    for restored in (pickle.loads(pickle.dumps(fitted)), _joblib_round_trip(fitted)):
        np.testing.assert_allclose(restored.predict(X), scores, atol=atol, rtol=0)
    return fitted


def assert_state_unchanged(est, before: dict, calls: str) -> None:
    """``vars(est)`` holds the same attributes, bound to the same objects, as ``before``: only ``fit`` (and
    ``partial_fit``, loading) sets state on an estimator."""
    after = vars(est)
    added, removed = sorted(set(after) - set(before)), sorted(set(before) - set(after))
    rebound = sorted(k for k in set(after) & set(before) if after[k] is not before[k])
    assert not (added or removed or rebound), f"{calls} changed {type(est).__name__}: added {added}, removed {removed}, rebound {rebound}"


def _joblib_round_trip(est):
    import io

    buf = io.BytesIO()
    joblib.dump(est, buf)
    buf.seek(0)
    return joblib.load(buf)
