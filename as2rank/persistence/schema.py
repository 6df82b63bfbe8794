"""The fitted state a loaded estimator must hold: every saved value checked against the kind, dtype, shape and
finiteness that its estimator reads, before the estimator is returned (:func:`check_fitted`).

A value that was edited into something prediction cannot use (a NaN weight, a coefficient vector of the wrong
length, a string where a count belongs, a fitted attribute removed) is a one-line ``ValueError`` at load,
never NaN scores, equal scores or a traceback at predict. Every class that saves has an entry in
:data:`RULES`; its rules read the attributes as :func:`~as2rank.persistence.load` decoded them. On top, every
float in the fitted state (arrays, NumPy and Python floats, in lists and dicts) must be finite.
"""

from __future__ import annotations

import math
from numbers import Integral

import numpy as np

__all__ = ["RULES", "check_fitted"]


class _Invalid(ValueError):
    pass


def _fail(name, why):
    raise _Invalid(f"{name} {why}")


def _get(attrs, name):
    if name not in attrs:
        _fail(name, "is missing")
    return attrs[name]


def _int(attrs, name, low=0):
    value = _get(attrs, name)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, Integral) or value < low:
        _fail(name, f"must be an integer >= {low}, got {value!r}")
    return int(value)


def _array(attrs, name, shape=None, kinds="f"):
    """An ndarray of one of ``kinds`` (numpy dtype kinds) whose shape matches ``shape`` (None entries: any)."""
    value = _get(attrs, name)
    if not isinstance(value, np.ndarray) or value.dtype.kind not in kinds:
        kind = value.dtype if isinstance(value, np.ndarray) else type(value).__name__
        _fail(name, f"must be an array of dtype kind {kinds!r}, got {kind}")
    if shape is not None and (value.ndim != len(shape) or any(s is not None and s != n for s, n in zip(shape, value.shape))):
        _fail(name, f"must have shape {tuple('any' if s is None else s for s in shape)}, got {value.shape}")
    return value


def _strings(attrs, name, nonempty=True):
    value = _get(attrs, name)
    items = value.tolist() if isinstance(value, np.ndarray) else value
    if not isinstance(items, (list, tuple)) or not all(isinstance(v, str) for v in items) or (nonempty and not items):
        _fail(name, f"must be a {'non-empty ' if nonempty else ''}list of strings")
    return list(items)


def _choice(attrs, name, options):
    value = _get(attrs, name)
    if not isinstance(value, str) or value not in options:
        _fail(name, f"must be one of {options}, got {value!r}")
    return value


def _optional(check, attrs, name, *args, **kwargs):
    return None if attrs.get(name) is None else check(attrs, name, *args, **kwargs)


# ----------------------------------------------------------------------------------------------- scikit-learn
def _classifier(a):
    n = _int(a, "n_features_in_", 1)
    classes = _array(a, "classes_", (None,), "iufbUO")
    if len(classes) < 2 or len(set(classes.tolist())) != len(classes):
        _fail("classes_", f"must hold at least two distinct classes, got {classes.tolist()!r}")
    k = 1 if len(classes) == 2 else len(classes)
    coef = _array(a, "coef_", None)
    if coef.shape != (k, n) and not (k == 1 and coef.shape == (n,)):
        _fail("coef_", f"must have shape ({k}, {n}), got {coef.shape}")
    intercept = _get(a, "intercept_")
    if not isinstance(intercept, np.ndarray):
        if k != 1 or isinstance(intercept, (bool, np.bool_)) or not isinstance(intercept, (float, int, np.number)):
            _fail("intercept_", f"must be an array of shape ({k},)")
    elif intercept.shape not in ((k,), ()) or intercept.dtype.kind != "f":
        _fail("intercept_", f"must be a float array of shape ({k},), got {intercept.dtype} {intercept.shape}")


def _regressor(a):
    n = _int(a, "n_features_in_", 1)
    coef = _array(a, "coef_", None)
    if coef.shape != (n,) and not (coef.ndim == 2 and coef.shape[1] == n):
        _fail("coef_", f"must have shape ({n},) or (n_targets, {n}), got {coef.shape}")
    intercept = _get(a, "intercept_")
    targets = 1 if coef.ndim == 1 else coef.shape[0]
    if isinstance(intercept, np.ndarray):
        _array(a, "intercept_", (targets,))
    elif coef.ndim != 1 or isinstance(intercept, (bool, np.bool_)) or not isinstance(intercept, (float, int, np.number)):
        _fail("intercept_", f"must be a number or an array of shape ({targets},)")


def _scaler(*names):
    def rule(a):
        n = _int(a, "n_features_in_", 1)
        for name in names:
            _optional(_array, a, name, (n,))

    return rule


# ----------------------------------------------------------------------------------------------- as2rank
def _lexical_features(a):
    vocabulary = _get(a, "vocabulary_")
    idf = _array(a, "idf_", (None,))
    if not isinstance(vocabulary, dict) or not all(isinstance(k, str) for k in vocabulary):
        _fail("vocabulary_", "must map words (str) to rows of idf_")
    rows = list(vocabulary.values())
    if not all(isinstance(r, Integral) and not isinstance(r, bool) and 0 <= r < len(idf) for r in rows):
        _fail("vocabulary_", f"must map every word to a row of idf_ (0..{len(idf) - 1})")
    if not isinstance(_get(a, "unseen_idf_"), (float, np.floating)):
        _fail("unseen_idf_", "must be a float")


def _pointwise(a):
    features = _strings(a, "features_")
    estimator = _get(a, "estimator_")
    n = getattr(estimator, "n_features_in_", None)
    if n is None and hasattr(estimator, "steps"):
        n = getattr(estimator.steps[0][1], "n_features_in_", None)
    if n is not None and n != len(features):
        _fail("features_", f"names {len(features)} features but the fitted classifier reads {n}")


def _cosinet(a):
    words = _array(a, "vocabulary_", (None,), "UO")
    _array(a, "word_vectors_", (len(words), None))
    if not isinstance(_get(a, "module_config_"), dict):
        _fail("module_config_", "must be an object of the network's settings")


def _ensemble(a):
    calibration = _array(a, "calibration_", (None, 2))
    _array(a, "weights_", (len(calibration),))


def _sequential(a):
    steps = _get(a, "steps_")
    if not isinstance(steps, list) or not steps or not all(hasattr(s, "predict") for s in steps):
        _fail("steps_", "must be a non-empty list of fitted rankers")


def _lexical(a):
    """The lexical prior's coefficients, and its features: None (a prior without lexical columns) or fitted
    LexicalFeatures."""
    _optional(_array, a, "lexical_coef_", (None,))
    features = a.get("lexical_features_")
    if features is not None and not (hasattr(features, "transform") and hasattr(features, "feature_names")):
        _fail("lexical_features_", "must be the prior's fitted LexicalFeatures")


def _prior(a):
    _lexical(a)
    source = a.get("similarity_source_")
    if source is not None and (not isinstance(source, dict) or not isinstance(source.get("model"), str)
                               or not isinstance(source.get("digests"), list)):
        _fail("similarity_source_", "must record the encoder's name and digests")


def _transformer(*extra):
    def rule(a):
        n = _int(a, "n_layers_", 1)
        if "pooling_" in a or "pooling_" in extra:
            _choice(a, "pooling_", ("cls", "mean", "classifier"))
        if "exits_" in extra:
            exits = _get(a, "exits_")
            if (not isinstance(exits, (list, tuple)) or not exits or not all(isinstance(e, Integral) for e in exits)
                    or sorted(set(exits)) != list(exits) or exits[0] < 1 or exits[-1] != n):
                _fail("exits_", f"must be increasing layer numbers ending at n_layers_ ({n}), got {exits!r}")
        if "body_layers_" in extra:
            body, head = _int(a, "body_layers_", 1), _int(a, "head_layers_", 0)
            _int(a, "n_heads_", 1)
            if body + head != n:
                _fail("n_layers_", f"must be body_layers_ + head_layers_ ({body + head}), got {n}")
        _prior(a)

    return rule


def _zeroshot(a):
    _choice(a, "mode_", ("bi-encoder", "cross-encoder"))
    if not isinstance(_get(a, "model_"), dict) or not a["model_"]:
        _fail("model_", "must be the saved network's weights")
    if not hasattr(_get(a, "config_"), "to_dict"):
        _fail("config_", "must be the saved network's transformers configuration")
    if _get(a, "tokenizer_") is None or isinstance(a["tokenizer_"], (str, dict, list)):
        _fail("tokenizer_", "must be the saved network's tokenizer")
    _lexical(a)


def _calibrated(a):
    if not hasattr(_get(a, "estimator_"), "predict"):
        _fail("estimator_", "must be a fitted ranker")
    calibration = _array(a, "calibration_", None)
    if calibration.ndim == 2 and calibration.shape[0] == 2 and calibration.shape[1] >= 1:
        if (np.diff(calibration[0]) < 0).any() or (calibration[1] < 0).any() or (calibration[1] > 1).any():
            _fail("calibration_", "must hold isotonic knots: increasing scores, probabilities in [0, 1]")
    elif calibration.shape != (2,):
        _fail("calibration_", f"must have shape (2,) or (2, n_knots), got {calibration.shape}")
    _array(a, "trigger_coef_", (4,))
    for name in ("trigger_intercept_", "threshold_"):
        if isinstance(_get(a, name), (bool, np.bool_)) or not isinstance(a[name], (float, int, np.number)):
            _fail(name, "must be a number")
    if not 0 <= a["threshold_"] <= 1:
        _fail("threshold_", f"must lie in [0, 1], got {a['threshold_']!r}")
    n = len(_array(a, "holdout_confidence_", (None,)))
    _array(a, "holdout_correct_", (n,), "b")
    _array(a, "holdout_answerable_", (n,), "b")
    if not isinstance(_get(a, "threshold_report_"), dict):
        _fail("threshold_report_", "must be an object")


#: Class name (as in ``as2rank.json``) -> the rule its fitted state must pass.
RULES = {
    **{f"sklearn.linear_model.{n}": _classifier for n in ("LogisticRegression", "SGDClassifier", "RidgeClassifier")},
    "sklearn.svm.LinearSVC": _classifier,
    **{f"sklearn.linear_model.{n}": _regressor for n in ("LinearRegression", "Ridge", "SGDRegressor")},
    "sklearn.preprocessing.StandardScaler": _scaler("mean_", "var_", "scale_"),
    "sklearn.preprocessing.MinMaxScaler": _scaler("scale_", "min_", "data_min_", "data_max_", "data_range_"),
    "sklearn.pipeline.Pipeline": lambda a: None,  # its steps are estimators, checked as they load
    **{n: lambda a: None for n in ("WordOverlapRanker", "ReciprocalRankRanker", "OverlapRankRanker")},
    "LexicalFeatures": _lexical_features,
    "PointwiseRanker": _pointwise,
    "Cosinet": _cosinet,
    "LinearEnsemble": _ensemble,
    "SequentialRanker": _sequential,
    "ContextExtractor": lambda a: None,
    "ZeroShotRanker": _zeroshot,
    "CalibratedRanker": _calibrated,
    **{n: _transformer("pooling_") for n in ("TransformerRanker", "DistilledRanker", "ContextConcat", "ContextEnsemble",
                                              "ContextMWA")},
    "CascadeTransformer": _transformer("exits_"),
    "Cerberus": _transformer("pooling_", "body_layers_"),
}


def check_fitted(name: str, attrs: dict, source) -> None:
    """Check the decoded fitted attributes ``attrs`` of a saved estimator of class ``name``.

    Parameters
    ----------
    name : str
        The class as ``as2rank.json`` names it.
    attrs : dict
        Fitted attribute name -> decoded value (empty for an estimator saved unfitted: nothing to check).
    source : path
        The file the values come from, for messages.

    Raises
    ------
    ValueError
        One line naming the attribute and what it must be.
    """
    if not attrs:
        return
    try:
        RULES[name](attrs)
        _finite(attrs, "")
    except _Invalid as exc:
        raise ValueError(f"{source}: the saved {name.rsplit('.', 1)[-1]}'s fitted {exc}; the model is damaged or was "
                         "edited.") from None


def _finite(value, name):
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "fc" and not np.isfinite(value).all():
            _fail(name.lstrip(".") or "state", f"holds {int((~np.isfinite(value)).sum())} non-finite value(s)")
    elif isinstance(value, (float, np.floating)):
        if not math.isfinite(value):
            _fail(name.lstrip("."), f"must be finite, got {value!r}")
    elif isinstance(value, dict):
        for k, v in value.items():
            _finite(v, f"{name}.{k}")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _finite(v, f"{name}[{i}]")
