"""Rebuild the sample shipped in ``as2rank/datasets/data/`` from ``../shared/data/squad``.

Usage, from the repository root::

    python benchmarks/build_sample.py [path/to/squad-v2.0-dev-sample.json]

Converts the SQuAD 2.0 dev sample with :func:`as2rank.datasets.load_squad_sent` and writes it where
:func:`as2rank.datasets.load_sample` reads it. Re-running it on the same input rewrites identical bytes.
"""

from __future__ import annotations

import sys
from pathlib import Path

from harness import SHARED_DATA
from harness.library import load_squad_sent, SAMPLE_PATH, write_sample

DEFAULT_SOURCE = SHARED_DATA / "squad" / "squad-v2.0-dev-sample.json"


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    source = Path(argv[0]) if argv else DEFAULT_SOURCE
    X, y = load_squad_sent(source)
    write_sample(X, y, SAMPLE_PATH)
    answered = (X.assign(y=y).groupby("qid")["y"].max() > 0).sum()
    print(
        f"{source} -> {SAMPLE_PATH}: {X['qid'].nunique()} questions ({answered} answerable), "
        f"{X[['doc_id', 'doc_position']].drop_duplicates().shape[0]} sentences in "
        f"{X['doc_id'].nunique()} paragraphs, {len(X)} rows, {int(y.sum())} positives, "
        f"{SAMPLE_PATH.stat().st_size:,} bytes"
    )


if __name__ == "__main__":
    main()
