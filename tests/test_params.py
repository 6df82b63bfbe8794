"""The declarative parameter constraints of :mod:`as2rank.params` and the estimators' tables."""

import inspect
from numbers import Integral, Real

import numpy as np
import pytest
from sklearn.base import BaseEstimator, clone
from sklearn.model_selection import GroupKFold

from as2rank.lexical.baselines import WordOverlapRanker
from as2rank.transformer.cascade import CascadeTransformer
from as2rank.transformer.cerberus import Cerberus, DistilledRanker
from as2rank.transformer.context.rankers import ContextConcat, ContextEnsemble, ContextMWA
from as2rank.transformer.context.features import ContextExtractor
from as2rank.cosinet.estimator import Cosinet
from as2rank.ensemble.linear import LinearEnsemble
from as2rank.params import (
    DEVICE_CONSTRAINTS,
    MODEL_CONSTRAINTS,
    RANDOM_STATE_CONSTRAINTS,
    TOKENIZER_CONSTRAINTS,
    Boolean,
    HasMethods,
    InstanceOf,
    Interval,
    Options,
    SequenceOf,
    check_param,
    validate_params,
)
from as2rank.pruning.sequential import SequentialRanker
from as2rank.transformer.ranker import TransformerRanker


@pytest.mark.parametrize(
    "constraint, good, bad",
    [
        (Interval(Integral, 8, None), [8, np.int64(512)], [7, 8.0, True, None, "8"]),
        (Interval(Real, 0, 1, closed="left"), [0, 0.5, np.float32(0.99)], [1.0, -0.1, np.nan, False]),
        (Interval(Real, 0, None, closed="neither"), [1e-5, 3], [0, -1.0, np.inf]),
        (Options(("auto", "cls")), ["auto", np.str_("cls")], ["max", None, 1, np.array(["auto"])]),
        (Boolean(), [True, np.False_], [0, 1, "True", None]),
        (InstanceOf(str), ["x"], [1, None]),
        (HasMethods(("fit", "predict")), [WordOverlapRanker()], [2, None, GroupKFold(2)]),
        (SequenceOf(Interval(Integral, 1, None)), [[1, 2], (3,), np.array([1, 4])], [[], [0], "12", np.ones((1, 1)), 2]),
    ],
)
def test_constraints_accept_and_refuse(constraint, good, bad):
    assert all(constraint.is_satisfied_by(v) for v in good)
    assert not any(constraint.is_satisfied_by(v) for v in bad)


def test_named_types_are_looked_up_once_their_module_is_imported():
    import collections
    import sys

    assert InstanceOf(("collections.OrderedDict",)).is_satisfied_by(collections.OrderedDict())
    assert not InstanceOf("collections.OrderedDict").is_satisfied_by({})
    named = InstanceOf((str, "as2rank_no_such_module.Thing"))
    assert named.is_satisfied_by("x") and not named.is_satisfied_by(object())
    assert "as2rank_no_such_module" not in sys.modules
    assert named.describe() == "an instance of str or as2rank_no_such_module.Thing"


@pytest.mark.parametrize(
    "constraints, good, bad",
    [
        (DEVICE_CONSTRAINTS, ["auto", "cpu", "cuda:1", 0], [None, -1, 1.5, True]),
        (RANDOM_STATE_CONSTRAINTS, [None, 0, np.int64(7), 2**32 - 1, np.random.RandomState(0)],
         [-1, 2**32, 1.5, True, np.random.default_rng(0)]),
        (MODEL_CONSTRAINTS, ["minilm-l6", "path/to/model"], [None, 3, object()]),
        (TOKENIZER_CONSTRAINTS, [None, "bert-base-uncased"], [3, object()]),
    ],
)
def test_shared_constraints_accept_and_refuse(constraints, good, bad):
    for value in good:
        check_param("x", value, constraints)
    for value in bad:
        with pytest.raises(ValueError, match="^x must be"):
            check_param("x", value, constraints)


@pytest.mark.parametrize(
    "constraints, message",
    [
        ([Interval(Integral, 8, None)], "an integer >= 8"),
        ([Interval(Integral, 1, None), None], "a positive integer or None"),
        ([Interval(Real, 0, None)], "a non-negative float"),
        ([Interval(Real, 0, 1, closed="right")], r"a float in \(0, 1\]"),
        ([Options(("auto",)), Boolean()], "'auto', True or False"),
        ([None, Options(("a", "b"))], r"None or one of \('a', 'b'\)"),
        ([SequenceOf(Interval(Real, 0, 1, closed="left"))], r"a non-empty sequence of floats in \[0, 1\)"),
    ],
)
def test_messages_name_the_parameter_the_accepted_values_and_the_value(constraints, message):
    with pytest.raises(ValueError, match=f"^x must be {message}, got 'bad'\\.$"):
        check_param("x", "bad", constraints)
    with pytest.raises(TypeError, match="Not a parameter constraint"):
        check_param("x", 1, [int])


def test_validate_params_checks_get_params_values():
    class Est(BaseEstimator):
        _parameter_constraints = {"a": [Interval(Integral, 1, None)], "not_a_param": [None]}

        def __init__(self, a=1, b=None):
            self.a, self.b = a, b

    validate_params(Est(), Est._parameter_constraints)  # parameters outside the table (b) are not checked
    with pytest.raises(ValueError, match="^a must be a positive integer, got 0.$"):
        validate_params(Est(a=0), Est._parameter_constraints)


@pytest.mark.parametrize(
    "est",
    [
        TransformerRanker(),
        CascadeTransformer(),
        Cerberus(teachers=["s"]),
        DistilledRanker(teachers=["s"]),
        ContextConcat(),
        ContextMWA(),
        ContextEnsemble(),
        Cosinet(),
        ContextExtractor(),
        LinearEnsemble(),
        SequentialRanker([WordOverlapRanker()] * 2),
    ],
    ids=type,
)
def test_tables_name_parameters_and_accept_the_defaults(est):
    table = type(est)._parameter_constraints
    assert set(table) <= set(est.get_params(deep=False))
    validate_params(est, table)


TRANSFORMER_RANKERS = [TransformerRanker, CascadeTransformer, Cerberus, DistilledRanker, ContextConcat, ContextMWA,
                       ContextEnsemble]


#: Shared training parameters whose default differs from TransformerRanker's (the budget measured for the class).
OWN_BUDGETS = {ContextEnsemble: {"epochs": 2, "learning_rate": 2e-5}}


@pytest.mark.parametrize("cls", TRANSFORMER_RANKERS, ids=lambda c: c.__name__)
def test_shared_training_parameters_follow_each_rankers_own(cls):
    """Every transformer ranker writes out the shared parameters after its own, in the order of
    ``TRAINING_CONSTRAINTS`` and with ``TransformerRanker``'s defaults (but its measured budget)."""
    from as2rank.transformer.parameters import TRAINING_CONSTRAINTS

    shared = list(TRAINING_CONSTRAINTS)
    names = list(inspect.signature(cls).parameters)
    assert names[-len(shared):] == shared
    assert len(set(names)) == len(names) and "model" == names[0]
    params = cls().get_params()
    assert set(params) == set(names)
    reference = TransformerRanker().get_params()
    expected = {**{k: reference[k] for k in shared}, **OWN_BUDGETS.get(cls, {})}
    assert {k: params[k] for k in shared} == expected
    # Every argument is stored unchanged, own or shared, keyword or positional; clone round-trips them.
    est = cls("some-model", epochs=7, verbose=True)
    assert (est.model, est.epochs, est.verbose) == ("some-model", 7, True)
    assert clone(est).get_params() == est.get_params()
    with pytest.raises(TypeError, match="epoch"):
        cls(epoch=3)


def test_context_ensemble_keeps_its_own_budget_defaults():
    assert (ContextEnsemble().epochs, ContextEnsemble().learning_rate) == (2, 2e-5)
    assert (ContextConcat().epochs, ContextConcat().learning_rate) == (4, 5e-5)
    assert TransformerRanker("m", None, 3).num_layers == 3

