"""Data set loaders returning ``X, y`` in the grouped-candidate format."""

from .wikiqa import load_wikiqa

__all__ = ["load_wikiqa"]
