"""The classes a model directory may name: as2rank's estimators by name, and an allow-list of scikit-learn
estimators. Loading imports a class only through this table, never from a path written in a file."""

from __future__ import annotations

from importlib import import_module

from ..params import CHECKPOINT_ALIASES, WORD_VECTOR_ALIASES

__all__ = ["AS2RANK_CLASSES", "LAYOUTS", "REFERENCES", "SKLEARN_CLASSES", "class_name", "register_layout",
           "resolve_class"]

#: as2rank classes that a model directory may name, and their modules.
AS2RANK_CLASSES = {
    name: module
    for module, names in {
        "lexical.baselines": ("WordOverlapRanker", "ReciprocalRankRanker", "OverlapRankRanker", "LexicalFeatures",
                      "PointwiseRanker"),
        "cosinet.estimator": ("Cosinet",),
        "transformer.ranker": ("TransformerRanker",),
        "transformer.cascade": ("CascadeTransformer",),
        "pruning.sequential": ("SequentialRanker",),
        "transformer.cerberus": ("Cerberus", "DistilledRanker"),
        "ensemble.linear": ("LinearEnsemble",),
        "transformer.context.features": ("ContextExtractor",),
        "transformer.context.rankers": ("ContextConcat", "ContextEnsemble", "ContextMWA"), "transformer.zeroshot": ("ZeroShotRanker",),
        "answer.ranker": ("CalibratedRanker",),
    }.items()
    for name in names
}
#: What a loaded model reads again to predict and that names files, by class: ``{name: aliases}``, the parameters
#: and fitted attributes that may name only these packaged weights or a folder of the model directory
#: (:func:`as2rank.persistence.trust.resolve_references`). A Cosinet reads its ``embeddings`` for words unseen in
#: fit, a ContextExtractor loads its ``encoder`` to transform, and every transformer-family ranker loads its
#: similarity prior's encoder (``similarity_source_``, a dict whose ``model`` and ``tokenizer`` are checked).
REFERENCES = {
    "Cosinet": {"embeddings": WORD_VECTOR_ALIASES},
    "ContextExtractor": {"encoder": CHECKPOINT_ALIASES},
    **{name: {"similarity_source_": CHECKPOINT_ALIASES} for name, module in AS2RANK_CLASSES.items()
       if module.startswith("transformer.") and name not in ("ContextExtractor", "ZeroShotRanker")},
}
#: Classes whose fitted model directories have a layout of their own, by name: ``(write(estimator, folder),
#: read(cls, path, params, meta))``, registered by the package that defines them when it is imported (the
#: transformer family's ``encoder/`` and ``heads.safetensors``: :mod:`as2rank.transformer.saving`). Loading a
#: class imports its module first, so its layout is registered before it is looked up.
LAYOUTS: dict = {}
#: scikit-learn estimators whose fitted state is arrays and plain values: saved as their ``get_params()`` and
#: their public fitted attributes (``coef_``, ``classes_``, ...).
SKLEARN_CLASSES = {
    f"sklearn.{module}.{name}": (f"sklearn.{module}", name)
    for module, names in {
        "linear_model": ("LogisticRegression", "SGDClassifier", "RidgeClassifier", "LinearRegression", "Ridge",
                         "SGDRegressor"),
        "svm": ("LinearSVC",),
        "preprocessing": ("StandardScaler", "MinMaxScaler"),
        "pipeline": ("Pipeline",),
    }.items()
    for name in names
}
def register_layout(names, write, read) -> None:
    """Register the model-directory layout of the classes ``names`` (see :data:`LAYOUTS`)."""
    for name in names:
        LAYOUTS[name] = (write, read)


def class_name(obj) -> str:
    """The name under which an estimator (or class) is written to ``as2rank.json``; a ValueError for a class
    that is neither an as2rank class nor an allow-listed scikit-learn estimator."""
    cls = obj if isinstance(obj, type) else type(obj)
    name = cls.__name__
    if cls.__module__ == f"as2rank.{AS2RANK_CLASSES.get(name)}":
        return name
    for key, (module, attr) in SKLEARN_CLASSES.items():
        if attr == name and cls.__module__.startswith("sklearn.") and getattr(import_module(module), attr) is cls:
            return key
    raise ValueError(
        f"A {name} cannot be saved pickle-free: only as2rank estimators and the scikit-learn estimators "
        f"{', '.join(n.rsplit('.', 1)[1] for n in SKLEARN_CLASSES)} can; save this model with joblib.dump "
        "instead (and load such files only from a trusted source)."
    )


def resolve_class(name, source="as2rank.json") -> type:
    """The class a model directory names (``source``: that file, for messages): an as2rank class or an
    allow-listed scikit-learn estimator; any other name is a ValueError (nothing else is ever imported)."""
    if isinstance(name, str) and name in AS2RANK_CLASSES:
        return getattr(import_module(f"as2rank.{AS2RANK_CLASSES[name]}"), name)
    if isinstance(name, str) and name in SKLEARN_CLASSES:
        module, attr = SKLEARN_CLASSES[name]
        return getattr(import_module(module), attr)
    raise ValueError(
        f"{source} names the class {name!r}, which is neither an as2rank estimator nor an allow-listed "
        "scikit-learn estimator; refusing to load it."
    )


def _is_estimator(value) -> bool:
    return not isinstance(value, type) and hasattr(value, "get_params") and hasattr(value, "fit")
