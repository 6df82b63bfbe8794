"""The parameters every transformer ranker shares, declared once: names, defaults and accepted values.

Each transformer ranker's ``__init__`` declares its own parameters (backbone, heads, loss) and nothing else;
the training budget, optimizer, early-stopping, device, precision and bookkeeping parameters of
:data:`TRAINING_DEFAULTS` follow them in every signature. :func:`with_training_params` turns that declaration
into the ``__init__`` that runs: it has the full explicit signature (``inspect.signature``, ``get_params``,
``clone``, ``help`` and IDEs that introspect read it), binds its arguments against it (unknown names raise
``TypeError``) and stores each argument unchanged as an attribute of the same name, as scikit-learn's
estimator contract asks. A ranker whose measured default differs overrides it in ``_training_defaults``.
NumPy only: importable without torch.
"""

from __future__ import annotations

import functools
import inspect
from numbers import Integral, Real

from ..early_stopping import CONSTRAINTS as EARLY_STOPPING_CONSTRAINTS
from ..params import LOSSES, TRANSFORMER_PRECISIONS, Boolean, Interval, Options

__all__ = ["TRAINING_CONSTRAINTS", "TRAINING_DEFAULTS", "with_training_params"]

#: The shared parameters in signature order, with their defaults (``docs/benchmarks/defaults.md`` measures
#: the budget and optimizer rows).
TRAINING_DEFAULTS = {
    "epochs": 4,
    "batch_size": 32,
    "loss": "pointwise",
    "learning_rate": 5e-5,
    "head_lr_multiplier": 10.0,
    "weight_decay": 0.01,
    "warmup": 0.1,
    "max_grad_norm": 1.0,
    "early_stopping": "auto",
    "validation_fraction": None,
    "patience": 2,
    "eval_every": None,
    "warm_start": False,
    "freeze_embeddings": False,
    "batch_tokens": "auto",
    "device": "auto",
    "precision": "auto",
    "n_threads": None,
    "reuse_fit": True,
    "random_state": None,
    "verbose": False,
}

#: Accepted values of the shared parameters (``_parameter_constraints`` entries; ``warm_start``, ``device``,
#: ``reuse_fit``, ``random_state`` and ``verbose`` are checked where they are used).
TRAINING_CONSTRAINTS = {
    "epochs": [Interval(Integral, 1, None)],
    "batch_size": [Interval(Integral, 1, None)],
    "loss": [Options(LOSSES)],
    "learning_rate": [Interval(Real, 0, None, closed="neither")],
    "head_lr_multiplier": [Interval(Real, 0, None, closed="neither")],
    "weight_decay": [Interval(Real, 0, None)],
    "warmup": [Interval(Real, 0, 1)],
    "max_grad_norm": [Interval(Real, 0, None, closed="neither"), None],
    **EARLY_STOPPING_CONSTRAINTS,
    "eval_every": [Interval(Integral, 1, None), None],
    "freeze_embeddings": [Boolean()],
    "batch_tokens": [Options(("auto",)), Interval(Integral, 1, None)],
    "precision": [Options(TRANSFORMER_PRECISIONS)],
    "n_threads": [Interval(Integral, 1, None), None],
}


def with_training_params(own_init, overrides=None):
    """The ``__init__`` of a ranker that declares its own parameters in ``own_init``'s signature.

    Parameters
    ----------
    own_init : callable
        ``__init__(self, <own parameters with defaults>)``: a declaration, not called.
    overrides : dict, optional
        Shared parameters whose default differs for this ranker.

    Returns
    -------
    callable
        The ``__init__`` whose signature is ``own_init``'s followed by :data:`TRAINING_DEFAULTS` (with
        ``overrides``), all positional-or-keyword in that order.
    """
    overrides = dict(overrides or {})
    unknown = set(overrides) - set(TRAINING_DEFAULTS)
    if unknown:
        raise ValueError(f"Not shared training parameters: {sorted(unknown)}.")
    own = inspect.signature(own_init)
    clash = set(own.parameters) & set(TRAINING_DEFAULTS)
    if clash or any(p.kind is not p.POSITIONAL_OR_KEYWORD for p in own.parameters.values()):
        raise TypeError(f"{own_init.__qualname__} must take only its own named parameters (shared: {sorted(clash)}).")
    defaults = {**TRAINING_DEFAULTS, **overrides}
    shared = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=value)
              for name, value in defaults.items()]
    signature = own.replace(parameters=[*own.parameters.values(), *shared])

    @functools.wraps(own_init)
    def __init__(self, *args, **kwargs):
        arguments = signature.bind(self, *args, **kwargs)
        arguments.apply_defaults()
        for name, value in list(arguments.arguments.items())[1:]:
            setattr(self, name, value)

    __init__.__signature__ = signature
    return __init__
