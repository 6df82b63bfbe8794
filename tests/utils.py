"""Paths to the development data in ``../shared/data``; tests that need it skip when it is absent."""

from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def shared_path(*parts):
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} not available")
    return path


def wikiqa_path(split):
    return shared_path("wikiqa", f"WikiQA-{split}.tsv")
