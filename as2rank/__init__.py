"""as2rank: answer sentence selection with scikit-learn estimators.

Heavy dependencies (torch, transformers) load only when a neural estimator is first used.
"""

from importlib import import_module

from .version import __version__  # noqa: F401 (as2rank.__version__)

# Public name -> module that defines it; resolved on first access so `import as2rank` stays fast.
_LAZY = {
    "WordOverlapRanker": "lexical.baselines",
    "ReciprocalRankRanker": "lexical.baselines",
    "OverlapRankRanker": "lexical.baselines",
    "LexicalFeatures": "lexical.baselines",
    "PointwiseRanker": "lexical.baselines",
    "Cosinet": "cosinet.estimator",
    "TransformerRanker": "transformer.ranker",
    "CascadeTransformer": "transformer.cascade",
    "SequentialRanker": "pruning.sequential",
    "tune_alpha": "pruning.rules",
    "Cerberus": "transformer.cerberus",
    "DistilledRanker": "transformer.cerberus",
    "LinearEnsemble": "ensemble.linear",
    "ContextExtractor": "transformer.context.features",
    "ContextConcat": "transformer.context.rankers",
    "ContextEnsemble": "transformer.context.rankers",
    "ContextMWA": "transformer.context.rankers",
    "ZeroShotRanker": "transformer.zeroshot",
    "CalibratedRanker": "answer.ranker",
    "RankerMixin": "base",
    "predict_rank": "base",
    "rank": "base",
    "RankerSelector": "model_selection.selector",
    "get_ranker": "model_selection.catalogue",
    "get_ranker_names": "model_selection.catalogue",
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
