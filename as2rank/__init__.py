"""as2rank: answer sentence selection with scikit-learn estimators.

Heavy dependencies (torch, transformers) load only when a neural estimator is first used.
"""

from importlib import import_module

__version__ = "0.1.0"

# Public name -> module that defines it; resolved on first access so `import as2rank` stays fast.
_LAZY = {
    "WordOverlapRanker": "baselines",
    "ReciprocalRankRanker": "baselines",
    "OverlapRankRanker": "baselines",
    "LexicalFeatures": "baselines",
    "PointwiseRanker": "baselines",
    "Cosinet": "cosinet",
    "TransformerRanker": "transformer",
    "CascadeTransformer": "cascade",
    "SequentialRanker": "pruning",
    "tune_alpha": "pruning",
    "Cerberus": "cerberus",
    "DistilledRanker": "cerberus",
    "LinearEnsemble": "ensemble",
    "ContextExtractor": "context_features",
    "ContextConcat": "context",
    "ContextEnsemble": "context",
    "ContextMWA": "context",
    "ZeroShotRanker": "zeroshot",
    "RankerMixin": "base",
    "predict_rank": "base",
    "rank": "base",
    "RankerSelector": "selection",
    "get_scorer": "metrics",
    "ranking_report": "metrics",
    "load": "persistence",
    "save": "persistence",
}

__all__ = sorted(_LAZY)


def __getattr__(name):
    if name in _LAZY:
        value = getattr(import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'as2rank' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
