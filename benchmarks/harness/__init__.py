"""The one harness every benchmark and study runs on.

An experiment is configuration (``benchmarks/<name>.toml``: its data, models, budgets, options and acceptance
checks; a paper's tables in ``benchmarks/papers/``) and a small module (``benchmarks/<name>.py``) holding only
what is unique to it; the harness does the rest:

- :mod:`harness.experiment`: the command line every experiment shares, its configuration, the run header, the
  acceptance checks (:mod:`harness.checks`, comparisons written as data), the page;
- :mod:`harness.store`: the cache of fitted models and the store of scores, each read back only while the
  library code it ran (:mod:`harness.fitcode`) is unchanged; ``--cached-only`` computes nothing;
- :mod:`harness.data`: the data sets, split as every benchmark splits them;
- :mod:`harness.measure`: scores, metrics, paired significance tests and timing rounds;
- :mod:`harness.pages`: results files, figures and pages (``python benchmarks/render.py``);
- :mod:`harness.machine`: the machine, the run header, the log;
- :mod:`harness.library`: every ``as2rank`` name the benchmarks use, in one table;
- :mod:`harness.teachers`: the teacher artefacts of the distillation benchmarks.
"""

from harness.data import expanded, first_questions, subset_questions, wikiqa_splits
from harness.fitcode import syntax
from harness.machine import cpu_flags, load_average, log, machine, run_header, session_calls, timed_subprocess, version
from harness.pages import conclude, figure_path, log_checks, pct, publish, pyplot, render_page, save_figure
from harness.paths import CACHE, DOCS, RESULTS, ROOT, SCORES, SHARED_DATA, STUDY_DOCS, STUDY_RESULTS, TAG, tagged
from harness.store import (cache_key, code_ledger, fitted, fitted_scores, jsonable, library_digest, read_fresh,
                           save_stored, training_params, write_text)

__all__ = ["STUDY_DOCS", "STUDY_RESULTS", "pct", "session_calls", "syntax", "CACHE", "DOCS", "RESULTS", "ROOT", "SCORES", "SHARED_DATA", "TAG", "cache_key", "code_ledger", "conclude",
           "cpu_flags", "expanded", "figure_path", "first_questions", "fitted", "fitted_scores", "jsonable",
           "library_digest", "load_average", "log", "log_checks", "machine", "publish", "pyplot", "read_fresh",
           "render_page", "run_header", "save_figure", "save_stored", "subset_questions", "tagged", "timed_subprocess",
           "training_params", "version", "wikiqa_splits", "write_text"]
