"""The version of as2rank (written to model directories and cards)."""

__version__ = "0.1.0"
