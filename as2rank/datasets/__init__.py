"""Data set loaders returning ``X, y`` in the grouped-candidate format (a user's own table with
:func:`read_pairs`), and candidate expansion."""

from .asnq import load_asnq
from .expand import expand_candidates
from .parquet import load_parquet
from .sample import load_sample
from .squad import load_squad_sent
from .table import read_pairs
from .wikiqa import load_wikiqa

__all__ = ["read_pairs", "load_wikiqa", "load_squad_sent", "load_asnq", "load_parquet", "load_sample", "expand_candidates"]
