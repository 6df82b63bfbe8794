"""The transformer family: the scaffold every transformer estimator is built on, its parameters, the lexical prior and segment similarity, the heads, TransformerRanker, CascadeTransformer, Cerberus and its distilled student, ZeroShotRanker and the context rankers."""

from . import saving  # noqa: F401  (registers the family's model-directory layout)
