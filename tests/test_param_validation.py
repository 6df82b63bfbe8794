"""One validation gate: every estimator checks its parameters against its constraint table when ``fit`` (or a
method that needs no fit) is called, and refuses each invalid value generated from that table with a
``ValueError`` naming the parameter, before it reads the data or loads a model (in the spirit of scikit-learn's
``check_param_validation``)."""

from numbers import Integral, Real

import numpy as np
import pytest

import as2rank
from as2rank.params import Boolean, Interval, Options, SequenceOf, _as_constraint


class _Unheard:
    """A value no constraint accepts."""

    def __repr__(self):
        return "_Unheard()"


def _candidates(constraint):
    """Values that may fall outside ``constraint``: just beyond an interval's ends, an unknown option, a string
    for a flag, a sequence of invalid items."""
    if isinstance(constraint, Interval):
        step = 1 if issubclass(constraint.kind, Integral) else 1e-9
        out = [constraint.low - step if constraint.low is not None else None,
               constraint.high + step if constraint.high is not None else None,
               constraint.low if constraint.closed in ("neither", "right") else None,
               constraint.high if constraint.closed in ("neither", "left") else None,
               float("nan")]
        if issubclass(constraint.kind, Integral):
            out.append(1.5)
        return [v for v in out if v is not None]
    if isinstance(constraint, Options):
        return ["not-an-option"]
    if isinstance(constraint, Boolean):
        return ["yes"]
    if isinstance(constraint, SequenceOf):
        return [[v] for v in _candidates(constraint.item)]
    return []


def invalid_values(constraints) -> list:
    """Values that every constraint of ``constraints`` refuses."""
    constraints = [_as_constraint(c) for c in constraints]
    values = [_Unheard()] + [v for c in constraints for v in _candidates(c)]
    return [v for v in values if not any(c.is_satisfied_by(v) for c in constraints)]


#: Parameters that make a class's default instance pass its table (a required estimator has no default).
VALID = {"CalibratedRanker": {"estimator": as2rank.WordOverlapRanker()}}

ESTIMATORS = [getattr(as2rank, n) for n in as2rank.__all__
              if isinstance(getattr(as2rank, n), type) and hasattr(getattr(as2rank, n), "get_params")]
CASES = [(cls, name, value) for cls in ESTIMATORS for name, table in getattr(cls, "_parameter_constraints", {}).items()
         if name in cls().get_params(deep=False) for value in invalid_values(table)]


def test_every_estimator_has_a_constraint_table():
    missing = [cls.__name__ for cls in ESTIMATORS
               if cls().get_params(deep=False) and not getattr(cls, "_parameter_constraints", None)]
    assert not missing


@pytest.mark.parametrize("cls,name,value", CASES, ids=[f"{c.__name__}-{n}-{v!r}" for c, n, v in CASES])
def test_fit_refuses_each_invalid_value_of_its_table(cls, name, value, toy):
    X, y = toy
    est = cls(**VALID.get(cls.__name__, {})).set_params(**{name: value})
    method = est.fit
    with pytest.raises(ValueError, match=rf"^{name} must be "):
        method(X, y)


def test_the_gate_runs_before_the_data_is_read():
    """An invalid parameter is named even when the data is invalid too: the parameters are checked first."""
    with pytest.raises(ValueError, match="^lowercase must be"):
        as2rank.WordOverlapRanker(lowercase="yes").fit("not a frame")
    with pytest.raises(ValueError, match="^lowercase must be"):  # no fit needed to predict: checked there too
        as2rank.WordOverlapRanker(lowercase="yes").predict("not a frame")


def test_invalid_value_generation_covers_each_kind():
    assert 0 in invalid_values([Interval(Integral, 1, None)]) and 1.5 in invalid_values([Interval(Integral, 1, None)])
    assert all(v != 0.5 for v in invalid_values([Interval(Real, 0, 1)]))
    assert "not-an-option" in invalid_values([Options(("a", "b"))])
    assert "yes" in invalid_values([Boolean()])
    assert not any(v is None for v in invalid_values([Boolean(), None]))
    assert np.isnan(invalid_values([Interval(Real, 0, 1)])[-1])
