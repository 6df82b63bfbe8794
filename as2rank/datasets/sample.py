"""A small real data set shipped with as2rank: SQuAD 2.0 dev articles converted to sentences."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

__all__ = ["load_sample"]

#: The packaged file, written by ``benchmarks/build_sample.py`` (see ``data/ATTRIBUTION.md``).
SAMPLE_PATH = Path(__file__).parent / "data" / "squad2-dev-sample-sent.tsv.gz"

_DTYPES = {
    "qid": "str",
    "question": "str",
    "candidate": "str",
    "position": "int64",
    "doc_id": "str",
    "doc_position": "int64",
    "title": "str",
    "label": "int64",
}


def load_sample():
    """Load the bundled sample: four SQuAD 2.0 dev articles as answer sentence selection (SQuAD-sent).

    The articles Normans, Computational_complexity_theory, Huguenot and Steam_engine (177 paragraphs,
    1,494 questions of which 725 are answerable) converted with :func:`load_squad_sent`: every question
    has the sentences of its paragraph as candidates, a sentence is positive when it contains an
    annotated answer, and unanswerable questions have no positive. It lets the examples and the
    ``as2rank`` command run offline with no download.

    SQuAD 2.0 is by Rajpurkar, Jia & Liang (2018), https://rajpurkar.github.io/SQuAD-explorer/, licensed
    CC BY-SA 4.0; the converted sample is shared under the same licence (see ``data/ATTRIBUTION.md``).

    Returns
    -------
    X : pandas.DataFrame
        Columns ``qid``, ``question``, ``candidate``, ``position``, ``doc_id`` (``"<title>#<paragraph>"``),
        ``doc_position`` and ``title``, as returned by :func:`load_squad_sent`.
    y : ndarray of int64, shape (n_rows,)
        0/1 labels.
    """
    # keep_default_na=False: a sentence such as "NA" or "null" is text, not a missing value.
    df = pd.read_csv(SAMPLE_PATH, sep="\t", dtype=_DTYPES, keep_default_na=False, encoding="utf-8")
    y = df.pop("label").to_numpy(dtype=np.int64)
    return df, y


def write_sample(X: pd.DataFrame, y, path=SAMPLE_PATH) -> None:
    """Write ``X, y`` in the format :func:`load_sample` reads (gzip'd TSV; used by the build script)."""
    df = X[[c for c in _DTYPES if c != "label"]].assign(label=np.asarray(y, dtype=np.int64))
    # mtime=0 makes the bytes depend on the content only, so re-running the build leaves git clean.
    df.to_csv(
        path,
        sep="\t",
        index=False,
        encoding="utf-8",
        lineterminator="\n",
        compression={"method": "gzip", "mtime": 0},
    )
