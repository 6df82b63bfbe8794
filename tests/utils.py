"""Paths to the development data in ``../shared/data``; tests that need it skip when it is absent."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def shared_path(*parts):
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} not available")
    return path


def wikiqa_path(split):
    return shared_path("wikiqa", f"WikiQA-{split}.tsv")


def assert_whole_questions(chunks, frame):
    """Each chunk ``(X, y)`` of a stream holds whole questions of ``frame``, and no question is in two chunks."""
    seen = set()
    for X, y in chunks:
        qids = set(X["qid"])
        assert not qids & seen
        seen |= qids
        assert (X.groupby("qid").size() == frame[frame["qid"].isin(qids)].groupby("qid").size()).all()
        assert len(y) == len(X)


def one_question(n=128, seed=5, words=None):
    """One question ("big") with ``n`` random candidates of 2-13 words, positions 0..n-1."""
    words = words or "the a of in is was who what when where capital city river wrote built tower".split()
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "qid": "big",
            "question": "who wrote hamlet",
            "candidate": [" ".join(rng.choice(words, int(rng.integers(2, 14)))) for _ in range(n)],
            "position": np.arange(n),
        }
    )
