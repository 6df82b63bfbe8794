"""Model selection: the catalogue of named models and choosing among them by measurement on the user's data.

:func:`~as2rank.model_selection.catalogue.get_ranker` builds a catalogue model by name
(:func:`~as2rank.model_selection.catalogue.get_ranker_names` lists them);
:class:`~as2rank.model_selection.selector.RankerSelector` cross-validates candidates by question groups and
chooses the cheapest one not significantly below the best, within a latency budget. Importing this package
imports neither torch nor transformers.
"""

from .catalogue import ENTRIES, SuiteEntry, get_entry, get_ranker, get_ranker_names
from .selector import DEFAULT_CANDIDATES, GPU_CANDIDATES, RankerSelector

__all__ = ["RankerSelector", "DEFAULT_CANDIDATES", "GPU_CANDIDATES", "get_ranker", "get_ranker_names", "get_entry",
           "SuiteEntry", "ENTRIES"]
