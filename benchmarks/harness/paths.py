"""Where the benchmarks read and write: the shared data, the results, the pages, the caches, and the tag that
keeps another machine's files apart."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
#: The shared data folder; ``AS2RANK_SHARED_DATA`` points elsewhere (a copy carried to another machine).
SHARED_DATA = Path(os.environ.get("AS2RANK_SHARED_DATA", ROOT.parent / "shared" / "data"))
RESULTS = BENCHMARKS / "results"
DOCS = ROOT / "docs" / "benchmarks"
PAGES = BENCHMARKS / "pages"
#: The studies' results, templates and pages: a page whose template is in ``STUDY_PAGES`` is a study's.
STUDY_RESULTS = BENCHMARKS / "studies" / "results"
STUDY_PAGES = BENCHMARKS / "studies" / "pages"
STUDY_DOCS = ROOT / "docs" / "studies"
#: Fitted models (git-ignored, never committed).
CACHE = BENCHMARKS / "cache"
#: The test scores of the fits a page evaluates (committed, unlike ``CACHE``): a page whose fits take more
#: CPU hours than one run has gathers them over several runs, on whichever machines ran them (each recorded).
SCORES = RESULTS / "scores"
#: ``AS2RANK_BENCH_TAG`` (e.g. ``h100``) names a run's result files apart from the default machine's.
TAG = os.environ.get("AS2RANK_BENCH_TAG", "")
#: ``AS2RANK_BENCH_NOTE``: what the run's machine changed that no script can see (e.g. how the weights got
#: there); recorded in the result file and printed with its provenance.
NOTE = os.environ.get("AS2RANK_BENCH_NOTE", "")


def tagged(name: str, tag: str | None = None) -> str:
    """``name`` (``"cascade.json"``) with the run's tag (or ``tag``) before the extension (``"cascade-h100.json"``)."""
    tag = TAG if tag is None else tag
    if not tag:
        return name
    stem, dot, ext = name.rpartition(".")
    return f"{stem}-{tag}{dot}{ext}"
