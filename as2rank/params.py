"""Torch-free validation of estimator parameters: declarative constraint tables, and the option values that
the neural estimators accept.

Every estimator inherits :class:`ParameterMixin`: its ``__init__`` keeps its arguments as parameters, its class
declares ``_parameter_constraints``, a dict ``{parameter: [constraint, ...]}`` in the style of scikit-learn's (a
subclass extends its base's dict), and ``_check_rules`` (the checks that relate several parameters, kept as code).
Its public methods that use the parameters (``fit``, ``partial_fit``; ``predict`` or ``transform`` where no fit is
required) are decorated with :func:`validated`: the one gate, which checks the table (:func:`validate_params`),
then the rules. A value is valid if any listed
constraint accepts it: :class:`Interval` (finite numbers in a range), :class:`Options` (fixed values such as
``"auto"``), :class:`Boolean`, :class:`InstanceOf` (also of types named, such as ``"torch.device"``, so that
checking imports nothing), :class:`HasMethods`, :class:`SequenceOf` (one value per stage) or ``None``.
:func:`check_param` checks one value against such a list, e.g. a function's argument.

The estimators validate their parameters before importing torch, so the option tables (``precision``,
``pooling``, ``summary``) live here rather than in :mod:`as2rank.neural`, which re-exports them (e.g.
:data:`as2rank.neural.PRECISIONS`).
"""

from __future__ import annotations

import functools
import inspect
import math
import sys
from numbers import Integral, Real

import numpy as np

__all__ = [
    "DEVICE_CONSTRAINTS",
    "DTYPE_PRECISIONS",
    "LOSSES",
    "MODEL_CONSTRAINTS",
    "POOLINGS",
    "CHECKPOINT_ALIASES",
    "RANDOM_STATE_CONSTRAINTS",
    "SUMMARIES",
    "TOKENIZER_CONSTRAINTS",
    "TRANSFORMER_PRECISIONS",
    "WORD_VECTOR_ALIASES",
    "Boolean",
    "HasMethods",
    "InstanceOf",
    "Interval",
    "Options",
    "ParameterMixin",
    "SequenceOf",
    "check_param",
    "check_precision",
    "param_names",
    "validate_params",
    "validated",
]

#: Values of ``precision`` that name one compute dtype: float32 (``"fp32"``), bfloat16 (``"bf16"``) or the
#: faster of the two that the device computes natively (``"auto"``); :class:`~as2rank.cosinet.estimator.Cosinet`'s
#: values, resolved by :func:`as2rank.neural.resolve_precision`.
DTYPE_PRECISIONS = ("auto", "fp32", "bf16")

#: Values of ``precision`` of the transformer estimators: the dtype values (as autocast), float16 autocast
#: with loss scaling (``"fp16"``, CUDA only) and an int8 copy of the model for prediction (``"int8"``, CPU
#: only: the linear layers in int8).
TRANSFORMER_PRECISIONS = (*DTYPE_PRECISIONS, "fp16", "int8")

#: Values of ``pooling`` of the transformer estimators: the backbone's own pooling (``"auto"``: mean for
#: sentence-transformers checkpoints, else CLS), the first token (``"cls"``) or the mean over tokens
#: (``"mean"``); :data:`as2rank.neural.backbone.POOLINGS`.
POOLINGS = ("auto", "cls", "mean")
#: Names of the packaged checkpoints (``model=`` aliases, :data:`as2rank.neural.models.MODEL_ALIASES`): the
#: only checkpoints a model directory may name besides its own folders (:mod:`as2rank.persistence.trust`).
CHECKPOINT_ALIASES = ("minilm-l6", "mpnet-base")
#: Names of the packaged word vectors (``Cosinet(embeddings=...)``, :data:`as2rank.cosinet.word_vectors.NAMES`): the
#: only word vectors a model directory may name (:mod:`as2rank.persistence.trust`).
WORD_VECTOR_ALIASES = ("glove-6b-50d", "minilm-l6-wordpiece")
#: Training losses of the neural rankers (``loss``): per pair, or over each question's candidates.
LOSSES = ("pointwise", "listwise")
#: Parameters that act on training only and are never saved with a model (a loaded model has their defaults, and a
#: fit is reused from the fit cache only without them): the neural estimators' ``callbacks``.
TRAINING_ONLY_PARAMS = ("callbacks",)

#: Values of ``ContextMWA(summary=...)``: what its classifier reads beside the attended views;
#: :data:`as2rank.transformer.context.network.SUMMARIES`.
SUMMARIES = ("pair", "sequence")


def check_precision(precision, supported) -> None:
    """Raise ``ValueError`` unless ``precision`` is one of ``supported``.

    Parameters
    ----------
    precision : object
        An estimator's ``precision`` parameter.
    supported : tuple of str
        :data:`DTYPE_PRECISIONS` or :data:`TRANSFORMER_PRECISIONS`.
    """
    check_param("precision", precision, [Options(supported)])


class _Constraint:
    """One kind of accepted value in a parameter-constraint table (see :func:`validate_params`)."""

    def is_satisfied_by(self, value) -> bool:
        """Whether ``value`` is accepted."""
        raise NotImplementedError

    def alternatives(self) -> list:
        """Descriptions of the accepted values, for error messages (e.g. ``["True", "False"]``)."""
        raise NotImplementedError

    def describe(self, plural: bool = False) -> str:
        """The accepted values in words, as one noun phrase (``plural`` for the items of a sequence)."""
        text = " or ".join(self.alternatives())
        return f"values that are each {text}" if plural else text

    def __repr__(self):
        return f"{type(self).__name__}({self.describe()})"


class _NoneConstraint(_Constraint):
    """``None``: written as ``None`` in a constraint list."""

    def is_satisfied_by(self, value) -> bool:
        return value is None

    def alternatives(self) -> list:
        return ["None"]


class Interval(_Constraint):
    """Finite real numbers or integers in a range; booleans are never numbers here.

    Parameters
    ----------
    kind : {numbers.Integral, numbers.Real}
        ``Integral`` accepts integers (Python or NumPy); ``Real`` accepts floats and integers.
    low, high : float, default=None
        The bounds; ``None`` leaves that side unbounded.
    closed : {"both", "left", "right", "neither"}, default="both"
        Which bounds belong to the interval.

    Examples
    --------
    >>> Interval(Real, 0, 1, closed="left").is_satisfied_by(1.0)
    False
    >>> Interval(Integral, 8, None).describe()
    'an integer >= 8'
    """

    def __init__(self, kind, low=None, high=None, *, closed="both"):
        if kind not in (Integral, Real):
            raise ValueError(f"kind must be numbers.Integral or numbers.Real, got {kind!r}.")
        if closed not in ("both", "left", "right", "neither"):
            raise ValueError(f"closed must be one of ('both', 'left', 'right', 'neither'), got {closed!r}.")
        self.kind, self.low, self.high, self.closed = kind, low, high, closed

    def is_satisfied_by(self, value) -> bool:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, self.kind) or not math.isfinite(value):
            return False
        if self.low is not None and (value < self.low if self.closed in ("both", "left") else value <= self.low):
            return False
        return self.high is None or (value <= self.high if self.closed in ("both", "right") else value < self.high)

    def alternatives(self) -> list:
        return [self.describe()]

    def describe(self, plural: bool = False) -> str:
        noun = ("integer" if self.kind is Integral else "float") + ("s" if plural else "")
        left, right = self.closed in ("both", "left"), self.closed in ("both", "right")
        if self.low is None and self.high is None:
            phrase = noun
        elif self.high is None:
            if (self.low == 0 and not left) or (self.kind is Integral and self.low == 1 and left):
                phrase = f"positive {noun}"
            elif self.low == 0:
                phrase = f"non-negative {noun}"
            else:
                phrase = f"{noun} {'>=' if left else '>'} {self.low}"
        elif self.low is None:
            phrase = f"{noun} {'<=' if right else '<'} {self.high}"
        else:
            phrase = f"{noun} in {'[' if left else '('}{self.low}, {self.high}{']' if right else ')'}"
        if plural:
            return phrase
        return ("an " if phrase[0] in "aeiou" else "a ") + phrase


class Options(_Constraint):
    """A fixed set of values (strings such as ``"auto"``), compared by type and equality.

    Parameters
    ----------
    values : iterable
        The accepted values, in the order the error message lists them.
    """

    def __init__(self, values):
        self.values = tuple(values)

    def is_satisfied_by(self, value) -> bool:
        return any(isinstance(value, type(option)) and value == option for option in self.values)

    def alternatives(self) -> list:
        return [repr(self.values[0])] if len(self.values) == 1 else [f"one of {self.values}"]


class Boolean(_Constraint):
    """``True`` or ``False`` (Python or NumPy booleans; not 0 or 1)."""

    def is_satisfied_by(self, value) -> bool:
        return isinstance(value, (bool, np.bool_))

    def alternatives(self) -> list:
        return ["True", "False"]


class InstanceOf(_Constraint):
    """Instances of a type (or of one of several types).

    Parameters
    ----------
    types : type, str or tuple of them
        A str names a type of a package that checking must not import (``"torch.device"``, the importable
        module, a dot, the type's name): it accepts instances of that type once the module is imported, which
        it must be for such an instance to exist.
    description : str, default=None
        The accepted values in words, e.g. ``"a mapping {doc_id: [sentences]}"``; by default the type names.

    Examples
    --------
    >>> InstanceOf("torch.device").describe()
    'an instance of torch.device'
    """

    def __init__(self, types, description=None):
        self.types = types
        names = " or ".join(t if isinstance(t, str) else t.__name__ for t in self._listed())
        self.description = description or f"an instance of {names}"

    def _listed(self) -> tuple:
        return self.types if isinstance(self.types, tuple) else (self.types,)

    def is_satisfied_by(self, value) -> bool:
        types = []
        for t in self._listed():
            if isinstance(t, str):
                module, _, name = t.rpartition(".")
                t = getattr(sys.modules[module], name, None) if module in sys.modules else None
            if t is not None:
                types.append(t)
        return isinstance(value, tuple(types))

    def alternatives(self) -> list:
        return [self.description]


class HasMethods(_Constraint):
    """Objects with the given callable methods (e.g. a splitter's ``split``).

    Parameters
    ----------
    methods : str or tuple of str
    description : str, default=None
        The accepted values in words; by default "an object with a ... method".
    """

    def __init__(self, methods, description=None):
        self.methods = (methods,) if isinstance(methods, str) else tuple(methods)
        s = "s" if len(self.methods) > 1 else ""
        self.description = description or f"an object with {' and '.join(self.methods)} method{s}"

    def is_satisfied_by(self, value) -> bool:
        return all(callable(getattr(value, method, None)) for method in self.methods)

    def alternatives(self) -> list:
        return [self.description]


class SequenceOf(_Constraint):
    """A non-empty list, tuple or 1-D array whose items each satisfy one constraint (e.g. one value per stage).

    Parameters
    ----------
    item : constraint or None
        What each item must be.
    """

    def __init__(self, item):
        self.item = _as_constraint(item)

    def is_satisfied_by(self, value) -> bool:
        if isinstance(value, np.ndarray):
            if value.ndim != 1:
                return False
        elif not isinstance(value, (list, tuple)):
            return False
        return len(value) > 0 and all(self.item.is_satisfied_by(v) for v in value)

    def alternatives(self) -> list:
        return [f"a non-empty sequence of {self.item.describe(plural=True)}"]


def _as_constraint(constraint) -> _Constraint:
    """``constraint`` as a constraint object (``None`` stands for :class:`_NoneConstraint`)."""
    if constraint is None:
        return _NoneConstraint()
    if isinstance(constraint, _Constraint):
        return constraint
    raise TypeError(f"Not a parameter constraint: {constraint!r}.")


#: ``device`` of the torch estimators, as :func:`as2rank.neural.resolve_device` reads it: a name (whether this
#: machine has the device is checked there), a ``torch.device`` or an accelerator's index (``torch.device(0)``).
DEVICE_CONSTRAINTS = [
    InstanceOf(str, "a device name such as 'auto', 'cpu' or 'cuda:0'"),
    InstanceOf("torch.device", "a torch.device"),
    Interval(Integral, 0, None),
]
#: ``random_state`` of the torch estimators: what :func:`sklearn.utils.check_random_state` seeds a
#: ``RandomState`` from (booleans aside).
RANDOM_STATE_CONSTRAINTS = [None, Interval(Integral, 0, 2**32 - 1), InstanceOf(np.random.RandomState)]
#: ``model`` of the transformer estimators, as :func:`as2rank.neural.backbone.load_backbone` loads it.
MODEL_CONSTRAINTS = [
    InstanceOf((str, "transformers.PretrainedConfig"),
               "a model alias, path or Hugging Face id (str) or a transformers.PretrainedConfig"),
]
#: ``tokenizer`` of the transformer estimators: None (the model's own), a name as for ``model``, or a tokenizer.
TOKENIZER_CONSTRAINTS = [
    None,
    InstanceOf((str, "transformers.PreTrainedTokenizerBase"),
               "a tokenizer name or path (str) or a transformers.PreTrainedTokenizerBase"),
]


def _short_repr(value, limit: int = 100) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def check_param(name: str, value, constraints) -> None:
    """Raise ``ValueError`` unless one of ``constraints`` accepts ``value``.

    Parameters
    ----------
    name : str
        The parameter's (or argument's) name, for the message.
    value : object
    constraints : list
        Constraint objects (:class:`Interval`, :class:`Options`, :class:`Boolean`, :class:`InstanceOf`,
        :class:`HasMethods`, :class:`SequenceOf`) or ``None`` (accepts ``None``); the value is valid if any
        of them accepts it.

    Raises
    ------
    ValueError
        ``"<name> must be <the accepted values>, got <value>."``
    """
    constraints = [_as_constraint(c) for c in constraints]
    if any(c.is_satisfied_by(value) for c in constraints):
        return
    alternatives = [text for c in constraints for text in c.alternatives()]
    accepted = alternatives[0] if len(alternatives) == 1 else f"{', '.join(alternatives[:-1])} or {alternatives[-1]}"
    raise ValueError(f"{name} must be {accepted}, got {_short_repr(value)}.")


def validate_params(estimator, constraints) -> None:
    """Check an estimator's parameters against its constraint table (``_parameter_constraints``).

    Parameters
    ----------
    estimator : BaseEstimator
        Its ``get_params(deep=False)`` values are checked.
    constraints : dict
        ``{parameter name: [constraint, ...]}`` (see :func:`check_param`). Parameters absent from the table
        are not checked; entries that the estimator does not take as parameters are skipped, so a base class
        may list parameters that not every subclass takes.

    Raises
    ------
    ValueError
        For the first parameter, in table order, that no listed constraint accepts.
    """
    params = estimator.get_params(deep=False)
    for name, allowed in constraints.items():
        if name in params:
            check_param(name, params[name], allowed)


def param_names(cls) -> list:
    """The parameters of an estimator class, as its ``__init__`` declares them (every one is written out).

    Parameters
    ----------
    cls : type

    Returns
    -------
    list of str
        In declaration order.
    """
    signature = inspect.signature(cls.__init__)
    return [p.name for p in list(signature.parameters.values())[1:] if p.kind is not p.VAR_KEYWORD]


class ParameterMixin:
    """Mixin of every as2rank estimator: its ``__init__`` arguments kept as its parameters, their accepted values
    (``_parameter_constraints``) and the rules that relate several of them (``_check_rules``), checked by
    :func:`validated` before a decorated method runs."""

    #: ``{parameter: [constraint, ...]}`` (see :func:`check_param`); a subclass extends its base's dict.
    _parameter_constraints: dict = {}

    def _keep_params(self, arguments: dict) -> None:
        """Set each argument of ``__init__`` as the attribute of its name: ``arguments`` is ``locals()`` on the first
        line of ``__init__``, which runs no other code (scikit-learn's contract: no logic, no validation there). A
        subclass may keep its own parameters and hand the rest to ``super().__init__``."""
        for name, value in arguments.items():
            if name != "self":
                setattr(self, name, value)

    def _check_rules(self) -> None:
        """Checks that relate several parameters, run after every parameter passed its table; none here (a class
        that extends its base's rules calls ``super()._check_rules()``)."""

    def _validate_params(self) -> None:
        """Check the parameters against the class's table (:func:`validate_params`), then by its rules."""
        validate_params(self, self._parameter_constraints)
        self._check_rules()


def validated(method):
    """Decorate a public method of a :class:`ParameterMixin` estimator so that its parameters are checked before
    it runs: the one place an estimator's parameters are validated."""

    @functools.wraps(method)
    def checked(self, *args, **kwargs):
        self._validate_params()
        return method(self, *args, **kwargs)

    return checked
