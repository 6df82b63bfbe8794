"""SQuAD (Rajpurkar et al., 2016, 2018) converted to answer sentence selection ("SQuAD-sent")."""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd

from ..data import check_ranking_data, ragged_arange
from ..text import split_sentences

__all__ = ["load_squad_sent"]


#: What a SQuAD path must name, for messages.
_EXPECTED = "a SQuAD v1.1/v2.0 JSON file such as dev-v2.0.json"


def _not_squad(path, why: str) -> ValueError:
    return ValueError(
        f"{os.fspath(path)!r} is not a SQuAD v1.1/v2.0 JSON file ({why}); expected "
        '{"data": [{"title": ..., "paragraphs": [{"context": ..., "qas": [{"id": ..., "question": ..., '
        '"answers": [{"text": ..., "answer_start": ...}]}]}]}]}.'
    )


def load_squad_sent(path):
    """Load a SQuAD v1.1 or v2.0 JSON file as an answer sentence selection data set (SQuAD-sent).

    Following Bonadiman & Moschitti (2020, §4.1), each paragraph is split into sentences with spaCy's
    rule-based ``sentencizer`` (:func:`as2rank.text.split_sentences`) and every question gets all the
    sentences of its paragraph as candidates, in paragraph order. A sentence is positive when it contains
    an annotated answer span (by character offsets ``answer_start .. answer_start + len(text)``); any
    annotator's answer counts, so a question can have several positive sentences. Unanswerable SQuAD 2.0
    questions (``is_impossible``; their ``plausible_answers`` are ignored) are kept with all-zero labels.

    Parameters
    ----------
    path : str or os.PathLike
        A SQuAD JSON file such as ``dev-v2.0.json`` or ``train-v1.1.json``.

    Returns
    -------
    X : pandas.DataFrame
        One row per (question, sentence) pair, questions in file order, with the columns ``qid`` (the
        SQuAD question id), ``question``, ``candidate`` (the sentence, without surrounding whitespace),
        ``position`` (sentence index in the paragraph), ``doc_id`` (``"<title>#<paragraph index>"``),
        ``doc_position`` (= ``position``) and ``title``.
    y : ndarray of int64, shape (n_rows,)
        1 for a sentence containing an answer, else 0.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    ValueError
        If ``path`` is a directory, or the file is not SQuAD JSON or holds no question.

    Notes
    -----
    An answer span that crosses a sentence boundary marks *every* sentence it overlaps as positive. Such
    spans come from sentencizer errors that cut a true answer sentence in two, so each fragment is part of
    the answer sentence; requiring full containment would instead leave those questions without any
    positive. On the four-article SQuAD 2.0 dev sample this concerns 4 answer spans of 2 questions
    ("#P", split after "#"; "ca. 2 million", split after "ca."). For a span inside one sentence the rule
    is exactly "the sentence contains the answer". Empty sentences (whitespace only) are dropped.
    Each paragraph is split once, however many questions it has.
    """
    if not os.path.exists(path):
        raise FileNotFoundError(f"No SQuAD file at {os.fspath(path)!r}: expected {_EXPECTED}.")
    if os.path.isdir(path):
        raise ValueError(f"{os.fspath(path)!r} is a directory: expected {_EXPECTED}.")
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise _not_squad(path, f"not valid JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise _not_squad(path, 'no top-level "data" list')

    # Flat per-sentence arrays over all paragraphs, per-question and per-answer arrays; the labels are then
    # computed for all answers at once.
    sentences, sent_para, sent_start, sent_end = [], [], [], []
    para_ids, para_titles = [], []
    qids, questions, q_para = [], [], []
    ans_q, ans_start, ans_end = [], [], []
    try:
        for a, article in enumerate(data["data"]):
            title = str(article.get("title", f"article {a}"))
            for p, paragraph in enumerate(article["paragraphs"]):
                context = paragraph["context"]
                for s, e in split_sentences(context):
                    if context[s:e].strip():
                        sentences.append(context[s:e].strip())
                        sent_para.append(len(para_ids))
                        sent_start.append(s)
                        sent_end.append(e)
                for qa in paragraph["qas"]:
                    if not qa.get("is_impossible", False):
                        for answer in qa["answers"]:
                            start = int(answer["answer_start"])
                            if start < 0:
                                raise ValueError(f"negative answer_start {start} in question {qa['id']!r}")
                            ans_q.append(len(qids))
                            ans_start.append(start)
                            ans_end.append(start + len(answer["text"]))
                    qids.append(str(qa["id"]))
                    questions.append(qa["question"])
                    q_para.append(len(para_ids))
                para_ids.append(f"{title}#{p}")
                para_titles.append(title)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise _not_squad(path, f"unexpected structure in article {a}: {type(exc).__name__}: {exc}") from None
    if not qids:
        raise ValueError(f"{os.fspath(path)!r} holds no question.")

    sent_para = np.asarray(sent_para, dtype=np.int64)
    sent_start, sent_end = np.asarray(sent_start, dtype=np.int64), np.asarray(sent_end, dtype=np.int64)
    ans_start, ans_end = np.asarray(ans_start, dtype=np.int64), np.asarray(ans_end, dtype=np.int64)
    n_sent = np.bincount(sent_para, minlength=len(para_ids))
    para_first_sentence = np.concatenate(([0], np.cumsum(n_sent)[:-1]))
    q_para = np.asarray(q_para, dtype=np.intp)
    q_size = n_sent[q_para]
    row_start = np.concatenate(([0], np.cumsum(q_size)))
    n_rows = int(row_start[-1])
    q_of_row = np.repeat(np.arange(len(qids)), q_size)
    position = ragged_arange(q_size)
    sentence_of_row = np.repeat(para_first_sentence[q_para], q_size) + position

    # A sentence is positive when it overlaps an answer span [start, end): the overlapping sentences run from
    # the first whose end is past `start` to the last that begins before `end`. Offsets are made global
    # (paragraph * stride + offset, increasing over the flat sentence arrays) so one searchsorted serves
    # every answer, and the runs are marked with a difference array over the rows.
    ans_q = np.asarray(ans_q, dtype=np.intp)
    ans_para = q_para[ans_q]
    stride = max(sent_end.max(initial=0), ans_end.max(initial=0)) + 1
    first = np.searchsorted(sent_para * stride + sent_end, ans_para * stride + ans_start, "right")
    last = np.searchsorted(sent_para * stride + sent_start, ans_para * stride + ans_end, "left") - 1
    first, last = first - para_first_sentence[ans_para], last - para_first_sentence[ans_para]
    hit = (first <= last) & (ans_end > ans_start)
    marks = np.zeros(n_rows + 1, dtype=np.int64)
    np.add.at(marks, row_start[ans_q[hit]] + first[hit], 1)
    np.add.at(marks, row_start[ans_q[hit]] + last[hit] + 1, -1)
    y = (np.cumsum(marks[:-1]) > 0).astype(np.int64)

    row_para = q_para[q_of_row]
    X = pd.DataFrame(
        {
            "qid": np.asarray(qids, dtype=object)[q_of_row],
            "question": np.asarray(questions, dtype=object)[q_of_row],
            "candidate": np.asarray(sentences, dtype=object)[sentence_of_row],
            "position": position,
            "doc_id": np.asarray(para_ids, dtype=object)[row_para],
            "doc_position": position,
            "title": np.asarray(para_titles, dtype=object)[row_para],
        }
    )
    X = X.astype({c: "str" for c in ("qid", "question", "candidate", "doc_id", "title")})
    check_ranking_data(X, y)
    return X, y
