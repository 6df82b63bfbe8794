"""The model a server holds: the fitted estimator, what ``/info`` says about it, and the one scoring call that the
inference worker makes for a batch of requests.

Nothing here imports a web framework: :mod:`as2rank.serve.batching` and the command line use it as well.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pandas as pd

from ..answer.ranker import CalibratedRanker
from ..base import check_scores
from ..ensemble.calibration import apply_calibration
from ..version import __version__

__all__ = ["BatchScores", "ServedModel", "load_served_model", "pair_frame"]

#: Bytes of a model card read for ``/info`` (a card is a few kilobytes; the rest is not shown).
_CARD_BYTES = 64 << 10
#: Characters of each card section shown by ``/info``.
_SECTION_CHARS = 2000
#: The card sections that ``/info`` summarises, by heading.
_SECTIONS = {"Training data": "training_data", "Evaluation": "evaluation", "Notes": "notes"}
#: The frame of the warm-up call: one question, two candidates.
_WARM_UP = ("who wrote the book", ["The book was written by a writer.", "It has three chapters."])


def pair_frame(questions, candidates) -> pd.DataFrame:
    """One grouped-candidate frame for several requests: request ``i``'s question with each of its candidates, under
    ``qid`` ``i``, with ``position`` the candidate's index in its request (its retrieval order, which rank-reading
    models such as RR use), as :func:`as2rank.data.make_frame` builds the frame of one request.

    Parameters
    ----------
    questions : sequence of str
    candidates : sequence of sequences of str
        One list per question.

    Returns
    -------
    pandas.DataFrame
        Columns ``qid``, ``question``, ``candidate`` and ``position``; a RangeIndex, requests one after the other.
    """
    sizes = np.fromiter((len(c) for c in candidates), dtype=np.int64, count=len(candidates))
    starts = np.repeat(np.cumsum(sizes) - sizes, sizes)
    flat = [text for texts in candidates for text in texts]
    return pd.DataFrame({
        "qid": np.repeat(np.arange(len(sizes), dtype=np.int64), sizes),
        "question": np.repeat(np.asarray(list(questions), dtype=object), sizes),
        "candidate": np.asarray(flat, dtype=object) if flat else np.empty(0, dtype=object),
        "position": np.arange(int(sizes.sum()), dtype=np.int64) - starts,
    })


class BatchScores:
    """What one call of the model gave for a batch: per row, the ranking score and (a calibrated model) the
    probability that the candidate answers; per question (a calibrated model), the probability that its top candidate
    answers it and the row of that candidate.

    Attributes
    ----------
    scores : ndarray of float64 of shape (n_rows,)
    probabilities : ndarray of float64 of shape (n_rows,) or None
    answer_probability : ndarray of float64 of shape (n_questions,) or None
    answer_row : ndarray of int of shape (n_questions,) or None
        Positions in the frame (not in the question).
    """

    def __init__(self, scores, probabilities=None, answer_probability=None, answer_row=None):
        self.scores = scores
        self.probabilities = probabilities
        self.answer_probability = answer_probability
        self.answer_row = answer_row


class ServedModel:
    """A fitted estimator with what the server says about it.

    Parameters
    ----------
    estimator : fitted estimator with ``predict``
        Any as2rank ranker, pipeline or fitted search. A
        :class:`~as2rank.answer.ranker.CalibratedRanker` also gives probabilities and answers ``/answer``.
    name : str, default=None
        Shown by ``/info``; default the card's title, else the estimator's class.
    seal_sha256 : str, default=None
        The digest of the seal of the directory the model was loaded from (``sha256`` of its ``as2rank.json``).
    card : dict, default=None
        The model card's summary (:func:`load_served_model` reads it from the directory's ``README.md``).
    source : str, default=None
        Where the model was loaded from (for messages; ``/info`` does not show paths).

    Attributes
    ----------
    calibrated : bool
        Whether the model gives probabilities and can abstain (a CalibratedRanker).
    """

    def __init__(self, estimator, *, name=None, seal_sha256=None, card=None, source=None):
        if not hasattr(estimator, "predict"):
            raise TypeError(f"The model to serve must have predict; got a {type(estimator).__name__}.")
        self.estimator = estimator
        self.calibrated = isinstance(estimator, CalibratedRanker)
        self.card = card
        self.name = name or (card or {}).get("title") or type(estimator).__name__
        self.seal_sha256 = seal_sha256
        self.source = source

    def score(self, frame: pd.DataFrame) -> BatchScores:
        """Score a frame of whole questions with one call of the model (its own batching runs inside).

        A calibrated model is called through ``predict_answer(return_scores=True)``: the same prediction gives the
        ranking scores, the candidates' probabilities (its calibration map applied to those scores, as
        ``predict_proba`` computes them) and each question's answer probability and top row.
        """
        if not self.calibrated:
            return BatchScores(check_scores(self.estimator.predict(frame), len(frame)))
        answers, scores = self.estimator.predict_answer(frame, return_scores=True)
        scores = check_scores(scores, len(frame))
        by_qid = answers.set_index("qid").reindex(np.arange(frame["qid"].iloc[-1] + 1))
        return BatchScores(scores, apply_calibration(self.estimator.calibration_, scores),
                           by_qid["probability"].to_numpy(dtype=np.float64), by_qid["row"].to_numpy(dtype=np.int64))

    def warm_up(self) -> None:
        """One call of the model on a tiny request: loads what a first prediction loads (torch, kernels, an int8
        graph) so that the first real request does not pay for it, and shows that the model can score text."""
        question, candidates = _WARM_UP
        self.score(pair_frame([question], [candidates]))

    def threshold(self, target_precision=None, target_coverage=None) -> float:
        """The answer threshold: the model's own, or the one chosen for a target on its held-out questions
        (:meth:`~as2rank.answer.ranker.CalibratedRanker.threshold_for`; a ValueError when none reaches it)."""
        if target_precision is None and target_coverage is None:
            return float(self.estimator.threshold_)
        report = self.estimator.threshold_for(target_precision=target_precision, target_coverage=target_coverage)
        return float(report["threshold"])

    def describe(self) -> dict:
        """What ``/info`` says about the model."""
        cls = type(self.estimator)
        return {
            "name": self.name,
            "class": f"{cls.__module__}.{cls.__qualname__}",
            "calibrated": self.calibrated,
            "score": "probability" if self.calibrated else "model score",
            "threshold": float(self.estimator.threshold_) if self.calibrated else None,
            "seal_sha256": self.seal_sha256,
            "as2rank_version": __version__,
            "card": self.card,
        }


def load_served_model(path, *, allow_pickle=False) -> ServedModel:
    """Load a saved model for serving, under the library's trust rules, with its seal's digest and card summary.

    The model is loaded as ``as2rank rank`` loads it (:func:`as2rank.app.scale.load_model`): a sealed directory
    pickle-free, a pickle only with ``allow_pickle``; every failure is one line naming the path. The seal's digest is
    read before and after loading: a directory replaced meanwhile (a new ``fit --output``) is refused rather than
    described by the other model's seal.

    Parameters
    ----------
    path : str or os.PathLike
    allow_pickle : bool, default=False

    Returns
    -------
    ServedModel

    Raises
    ------
    FileNotFoundError, ValueError
        One line: nothing at ``path``, a damaged or edited directory, a pickle without ``allow_pickle``, ...
    """
    from ..app.scale import load_model
    from ..persistence import read_meta

    path = Path(path)
    directory = path.is_dir() and not path.is_symlink()
    before = read_meta(path).get("sha256") if directory else None
    estimator = load_model(path, allow_pickle=allow_pickle)
    seal = None
    if directory:
        seal = read_meta(path).get("sha256")
        if seal != before:
            raise ValueError(f"{path} was replaced while it was loaded; start the server again.")
    return ServedModel(estimator, seal_sha256=seal, card=read_card_summary(path) if directory else None,
                       source=str(path))


def read_card_summary(path) -> dict | None:
    """The summary of a model directory's card (``README.md``, written by :func:`as2rank.save`): its title and the
    text of its "Training data", "Evaluation" and "Notes" sections, each cut at a few thousand characters; None when
    there is no card. The card is text for people, outside the seal: it is shown, never interpreted; a link or
    anything but a regular file is not read."""
    file = Path(path) / "README.md"
    try:
        if file.is_symlink() or not file.is_file():
            return None
        fd = os.open(file, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as f:
            text = f.read(_CARD_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return None
    text = re.sub(r"\A---\n.*?\n---\n", "", text, flags=re.S)  # the YAML metadata block
    summary, section, lines = {}, None, {}
    for line in text.splitlines():
        if line.startswith("# ") and "title" not in summary:
            summary["title"] = line[2:].strip()
        elif line.startswith("## "):
            section = _SECTIONS.get(line[3:].strip())
            if section:
                lines[section] = []
        elif section:
            lines[section].append(line)
    for key, body in lines.items():
        content = "\n".join(body).strip()
        if content:
            summary[key] = content if len(content) <= _SECTION_CHARS else content[: _SECTION_CHARS - 3] + "..."
    return summary or None
