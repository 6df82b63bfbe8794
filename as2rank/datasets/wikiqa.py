"""The WikiQA corpus (Yang et al., 2015) in the grouped-candidate format."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd

from ..data import check_ranking_data, require_columns

__all__ = ["load_wikiqa"]

_COLUMNS = ["QuestionID", "Question", "DocumentID", "DocumentTitle", "SentenceID", "Sentence", "Label"]

#: What a WikiQA path must name, for messages.
_EXPECTED = "an official WikiQA TSV file such as WikiQA-test.tsv"


def load_wikiqa(path):
    """Load an official WikiQA TSV file (``WikiQA-train.tsv``, ``WikiQA-dev.tsv``, ``WikiQA-test.tsv``).

    WikiQA is distributed by Microsoft Research under its own research licence and is not shipped with
    as2rank: pass the path of your copy.

    Parameters
    ----------
    path : str or os.PathLike
        A TSV with the columns QuestionID, Question, DocumentID, DocumentTitle, SentenceID, Sentence,
        Label.

    Returns
    -------
    X : pandas.DataFrame
        Columns ``qid``, ``question``, ``candidate``, ``position`` (sentence index in the summary
        paragraph), ``doc_id`` (DocumentID) and ``doc_position`` (= ``position``: the candidates of a
        question are the sentences of one paragraph, in order), ``title``. One row per sentence, in file
        order.
    y : ndarray of shape (n_rows,)
        0/1 labels.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    ValueError
        If ``path`` is a directory or not a WikiQA TSV (not UTF-8 text, malformed lines, missing columns,
        malformed SentenceID or Label).

    Notes
    -----
    All 633 test questions are returned; the "clean" protocol of the literature evaluates the 243 with a
    correct answer, which the metrics do by default (``no_positive="skip"``), or use
    :func:`as2rank.data.keep_answered`.
    """
    if not os.path.exists(path):
        raise FileNotFoundError(f"No WikiQA file at {os.fspath(path)!r}: expected {_EXPECTED}.")
    if os.path.isdir(path):
        raise ValueError(f"{os.fspath(path)!r} is a directory: expected {_EXPECTED}.")
    try:
        df = pd.read_csv(path, sep="\t", quoting=3, keep_default_na=False, dtype=str, encoding="utf-8")
    except (UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        reason = " ".join(str(exc).split())  # one line
        raise ValueError(
            f"{os.fspath(path)!r} is not a WikiQA TSV (UTF-8, tab-separated, header {' '.join(_COLUMNS)}): {reason}"
        ) from None
    require_columns(df.columns, _COLUMNS,
                    lambda missing: f"{os.fspath(path)!r} is not a WikiQA TSV: missing column(s) {missing}.")
    sentence_id = df["SentenceID"].str.rsplit("-", n=1)
    position = pd.to_numeric(sentence_id.str[1], errors="coerce")
    if position.isna().any():
        bad = df.loc[position.isna(), "SentenceID"].iloc[0]
        raise ValueError(f"Malformed SentenceID {bad!r}: expected D<doc>-<position>.")
    labels = pd.to_numeric(df["Label"], errors="coerce")
    if labels.isna().any():
        raise ValueError(f"Non-numeric Label in {os.fspath(path)!r}.")
    position = position.to_numpy(dtype=np.int64)
    X = pd.DataFrame(
        {
            "qid": df["QuestionID"].to_numpy(),
            "question": df["Question"].to_numpy(),
            "candidate": df["Sentence"].to_numpy(),
            "position": position,
            "doc_id": df["DocumentID"].to_numpy(),
            "doc_position": position,
            "title": df["DocumentTitle"].to_numpy(),
        }
    )
    y = labels.to_numpy(dtype=np.int64)
    check_ranking_data(X, y)
    return X, y
