"""The version of as2rank: the one place it is written. The package's metadata reads it (``pyproject.toml``),
and every module that needs it (model directories, model cards, the command line, the server) imports it
from here."""

__version__ = "0.1.0"
