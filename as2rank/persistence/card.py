"""Model cards: the ``README.md`` that :func:`as2rank.save <as2rank.persistence.save>` and the estimators'
``save_pretrained`` write in a model directory.

The card is a Hugging Face model card: a YAML metadata block between ``---`` lines (``library_name: as2rank``,
``pipeline_tag: text-ranking``, tags and, when metrics are given, a ``metrics`` list and a ``model-index``
entry), then Markdown: how to load the model, its class and parameters, the training data's size, the
metrics, notes and the versions of the packages it was saved with. The text depends only on the estimator,
the :class:`ModelCardData` and those versions (no date, no path), so saving the same model twice writes the
same card. Only the top-level directory gets a card; :func:`as2rank.load <as2rank.persistence.load>` ignores
it.
"""

from __future__ import annotations

import json
import math
import os
import platform
import re
import sys
from dataclasses import dataclass
from numbers import Integral, Real
from pathlib import Path

import numpy as np
import sklearn

from ..version import __version__
from .registry import LAYOUTS, SKLEARN_CLASSES, _is_estimator, class_name

__all__ = ["CARD_FILE", "ModelCardData", "render_card", "write_card"]

CARD_FILE = "README.md"
#: Classes whose models run on torch besides the transformer family (the classes of :data:`LAYOUTS`): the card
#: lists torch's version (and transformers' for the family) when the estimator holds one of them.
_TORCH_CLASSES = {"Cosinet", "ZeroShotRanker"}
#: Longest parameter value shown in full; longer ones are cut with "...".
_MAX_VALUE = 80
#: Plain YAML scalars that a parser would not read as a string.
_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "y", "n", "null"}


@dataclass
class ModelCardData:
    """What a model card says beyond the estimator itself: the training data and evaluation results.

    Every field is optional; the card leaves out what is ``None``. The fields are checked when the object is
    created and again when a card is written (a TypeError or ValueError).

    Parameters
    ----------
    train_questions : int, optional
        Questions in the training data.
    train_pairs : int, optional
        Question/candidate pairs (rows) in the training data.
    train_answered : int, optional
        Training questions with at least one correct candidate.
    data_name : str, optional
        The data set's name (``"WikiQA"``, ``"ASNQ"``): the training data, and the data the metrics were
        measured on.
    metrics : dict of str to float, optional
        Metric values by name, e.g. ``{"map": 0.91, "mrr": 0.92}`` (the ``map``, ``mrr``, ``p@1``, ... of
        :func:`~as2rank.metrics.ranking_report`); finite numbers.
    metrics_on : str, optional
        What the metrics were measured on, e.g. ``"5-fold grouped cross-validation"`` or
        ``"test split, 1,234 questions"``.
    notes : str, optional
        Free Markdown text, written under "Notes".
    model_name : str, optional
        The card's title, e.g. the benchmark suite's name of the model (``"Lexical+LR"``); default: the
        estimator's class.
    columns : dict of str to str, optional
        Which column of the user's training table held each of as2rank's (``{"question": "query", ...}``).

    Examples
    --------
    >>> import as2rank
    >>> from as2rank.datasets import load_sample
    >>> from as2rank.persistence.card import ModelCardData
    >>> X, y = load_sample()
    >>> card = ModelCardData.from_data(X, y, name="SQuAD 2.0 sample")
    >>> card.train_questions, card.train_pairs, card.train_answered
    (1494, 7307, 725)
    >>> card.metrics, card.metrics_on = {"map": 0.87, "mrr": 0.88}, "5-fold grouped cross-validation"
    >>> as2rank.save(model, "lexical-lr", card=card)      # doctest: +SKIP
    """

    train_questions: int | None = None
    train_pairs: int | None = None
    train_answered: int | None = None
    data_name: str | None = None
    metrics: dict[str, float] | None = None
    metrics_on: str | None = None
    notes: str | None = None
    model_name: str | None = None
    columns: dict[str, str] | None = None

    def __post_init__(self):
        _check(self)

    @classmethod
    def from_data(cls, X, y=None, name=None) -> ModelCardData:
        """The sizes of a training set: questions (distinct ``qid``), pairs (rows) and, given ``y``, answered
        questions.

        Parameters
        ----------
        X : pandas.DataFrame
            Grouped-candidate frame (see :func:`~as2rank.data.check_X`).
        y : array-like of shape (n_rows,), default=None
            Relevance labels; a question is answered when one of its labels is positive.
        name : str, default=None
            The data set's name (``data_name``).

        Returns
        -------
        ModelCardData
        """
        from ..data import check_ranking_data

        _, y, index = check_ranking_data(X, y, require_y=False, text_columns=())
        answered = None if y is None else int((index.max(y) > 0).sum())
        return cls(train_questions=index.n_groups, train_pairs=index.n_rows, train_answered=answered, data_name=name)


def write_card(estimator, path, card: ModelCardData | None = None) -> None:
    """Write :func:`render_card`'s text to ``path/README.md`` (atomically), replacing any file of that name.

    Parameters
    ----------
    estimator : estimator
        The saved estimator.
    path : str or os.PathLike
        Its model directory (existing).
    card : ModelCardData, optional
    """
    path = Path(path)
    temporary = path / f".{CARD_FILE}.tmp"
    temporary.write_text(render_card(estimator, card), encoding="utf-8")
    os.replace(temporary, path / CARD_FILE)


def render_card(estimator, card: ModelCardData | None = None) -> str:
    """The model card of an estimator: YAML metadata, then Markdown.

    Parameters
    ----------
    estimator : estimator
        An estimator that :func:`as2rank.save <as2rank.persistence.save>` supports.
    card : ModelCardData, optional
        The training data and evaluation results; without it the card has the metadata, the class, its
        parameters and the versions.

    Returns
    -------
    str

    Raises
    ------
    TypeError, ValueError
        If a field of ``card`` has the wrong type, or a metric is not a finite number.
    """
    card = card if card is not None else ModelCardData()
    if not isinstance(card, ModelCardData):
        raise TypeError(f"card must be an as2rank.persistence.card.ModelCardData, got {type(card).__name__}.")
    sizes, metrics = _check(card)
    title = card.model_name or class_name(estimator).rsplit(".", 1)[-1]
    nested = list(_nested_estimators(estimator))
    lines = ["---", *_front_matter(estimator, title, card, metrics), "---", "", f"# {title}", ""]
    lines += [
        "An answer sentence selection model saved by as2rank: it scores the candidate sentences of each question",
        "(a table with the columns `qid`, `question` and `candidate`) for ranking them.",
        "",
        "## Usage",
        "",
        "```python",
        "import as2rank",
        "",
        'model = as2rank.load("path/to/model")   # the directory of this file',
        "scores = model.predict(X)               # X: a pandas DataFrame, one row per question/candidate pair",
        "```",
        "",
        "## Model",
        "",
        f"`{_qualified(estimator)}`" + (f" (as2rank's `{card.model_name}`):" if card.model_name else ":"),
        "",
        *_parameter_table(estimator),
    ]
    for label, est in nested:
        lines += ["", f"### `{label}`: `{_qualified(est)}`", "", *_parameter_table(est)]
    if any(v is not None for v in sizes.values()) or card.data_name or card.columns:
        lines += ["", "## Training data", ""]
        if any(v is not None for v in sizes.values()) or card.data_name:
            lines.append(_training_sentence(card, sizes))
        if card.columns:
            lines += ["", "| as2rank's column | the training table's column |", "| --- | --- |"]
            lines += [f"| {_cell(k)} | {_cell(v)} |" for k, v in card.columns.items()]
    if metrics:
        where = ", ".join(s for s in (card.data_name, card.metrics_on) if s)
        lines += ["", "## Evaluation", "", *([f"On {where}:", ""] if where else [])]
        lines += ["| metric | value |", "| --- | --- |"]
        lines += [f"| {_cell(k)} | {_number_text(v)} |" for k, v in metrics.items()]
    if card.notes:
        lines += ["", "## Notes", "", card.notes.strip()]
    lines += ["", "## Versions", "", "| package | version |", "| --- | --- |"]
    lines += [f"| {name} | {version} |" for name, version in _versions(estimator, nested)]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------- checks
def _check(card: ModelCardData):
    """The sizes and metrics of ``card`` as plain ints and floats (a TypeError or ValueError if invalid)."""
    sizes = {}
    for name in ("train_questions", "train_pairs", "train_answered"):
        value = getattr(card, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, Integral) or value < 0):
            raise ValueError(f"ModelCardData.{name} must be a non-negative integer or None, got {value!r}.")
        sizes[name] = None if value is None else int(value)
    for name in ("data_name", "metrics_on", "notes", "metrics", "model_name", "columns"):
        value, kind = getattr(card, name), dict if name in ("metrics", "columns") else str
        if value is not None and not isinstance(value, kind):
            raise TypeError(f"ModelCardData.{name} must be a {kind.__name__} or None, got {type(value).__name__}.")
    for key, value in (card.columns or {}).items():
        if not (isinstance(key, str) and key and isinstance(value, str) and value):
            raise TypeError(f"ModelCardData.columns maps column names to column names (non-empty strings), got "
                            f"{key!r}: {value!r}.")
    metrics = {}
    for key, value in (card.metrics or {}).items():
        if not isinstance(key, str) or not key:
            raise TypeError(f"ModelCardData.metrics: metric names must be non-empty strings, got {key!r}.")
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, Real) or not math.isfinite(value):
            raise ValueError(f"ModelCardData.metrics[{key!r}] must be a finite number, got {value!r}.")
        metrics[key] = int(value) if isinstance(value, Integral) else float(value)
    return sizes, metrics


# ----------------------------------------------------------------------------------------------- metadata
def _front_matter(estimator, title, card, metrics) -> list:
    """The YAML lines of the metadata block (without the ``---`` lines)."""
    name = class_name(estimator)
    tags = ["answer-sentence-selection", "as2rank"]
    if name not in SKLEARN_CLASSES:
        tags.append(re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "-", name).lower())  # OverlapRankRanker: overlap-rank-ranker
    lines = ["library_name: as2rank", "pipeline_tag: text-ranking", "tags:", *(f"- {_yaml(t)}" for t in tags)]
    if metrics:
        dataset = card.data_name or "custom"
        lines += ["metrics:", *(f"- {_yaml(k)}" for k in metrics)]
        lines += [
            "model-index:",
            f"- name: {_yaml(title)}",
            "  results:",
            "  - task:",
            "      type: text-ranking",
            "      name: Answer Sentence Selection",
            "    dataset:",
            f"      type: {_yaml(dataset)}",
            f"      name: {_yaml(f'{dataset} ({card.metrics_on})' if card.metrics_on else dataset)}",
            "    metrics:",
        ]
        for key, value in metrics.items():
            lines += [f"    - type: {_yaml(key)}", f"      value: {_yaml(value)}"]
    return lines


def _yaml(value) -> str:
    """A YAML scalar: a number, a plain string where it reads back as the same string, else a JSON string
    (a valid YAML double-quoted scalar)."""
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = repr(value)
        # YAML 1.1 parsers (PyYAML) read 1e-05 as a string: give every float a decimal point.
        return text if "." in text else text.replace("e", ".0e")
    plain = re.fullmatch(r"[A-Za-z][A-Za-z0-9_.@/+-]*", value) and value.lower() not in _YAML_WORDS
    return value if plain else json.dumps(value)


# ----------------------------------------------------------------------------------------------- markdown
def _qualified(estimator) -> str:
    """``as2rank.lexical.baselines.OverlapRankRanker``, ``sklearn.pipeline.Pipeline``: how to import the class."""
    name = class_name(estimator)
    if name in SKLEARN_CLASSES:
        return ".".join(SKLEARN_CLASSES[name])
    return f"{type(estimator).__module__}.{name}"


def _nested_estimators(estimator, prefix=""):
    """``(label, estimator)`` for every estimator among the parameters, depth first; the label is the path of
    parameter names, list indices and step names (``steps.pointwiseranker.estimator``)."""

    def visit(value, label):
        if _is_estimator(value):
            yield label, value
            yield from _nested_estimators(value, f"{label}.")
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                if isinstance(item, tuple) and len(item) >= 2 and isinstance(item[0], str) and _is_estimator(item[1]):
                    yield from visit(item[1], f"{label}.{item[0]}")  # a named step
                else:
                    yield from visit(item, f"{label}.{i}")
        elif isinstance(value, dict):
            for key, item in value.items():
                yield from visit(item, f"{label}.{key}")

    for name, value in estimator.get_params(deep=False).items():
        yield from visit(value, f"{prefix}{name}")


def _parameter_table(estimator) -> list:
    params = estimator.get_params(deep=False)
    if not params:
        return ["No parameters."]
    return ["| parameter | value |", "| --- | --- |", *(f"| `{k}` | {_cell(_show(v))} |" for k, v in params.items())]


def _show(value) -> str:
    """A parameter value in Python syntax, estimators and other objects by class name (never an address)."""
    if _is_estimator(value):
        return type(value).__name__
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return repr(value)
    if isinstance(value, os.PathLike):
        return repr(os.fspath(value))
    if isinstance(value, list):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    if isinstance(value, tuple):
        return "(" + ", ".join(_show(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_show(k)}: {_show(v)}" for k, v in value.items()) + "}"
    return getattr(value, "__qualname__", type(value).__name__)  # a class or function by name, else its class


def _cell(text: str) -> str:
    """``text`` for a Markdown table cell: cut to :data:`_MAX_VALUE` characters, pipes escaped, in backticks."""
    text = " ".join(text.split())
    if len(text) > _MAX_VALUE:
        text = text[: _MAX_VALUE - 3] + "..."
    text = text.replace("|", "\\|")
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def _number_text(value) -> str:
    return str(value) if isinstance(value, int) else f"{value:.4f}"


def _training_sentence(card, sizes) -> str:
    parts, answered = [], sizes["train_answered"]
    if sizes["train_questions"] is not None:
        with_answer = f" ({answered:,} with a correct answer)" if answered is not None else ""
        parts.append(f"{sizes['train_questions']:,} questions{with_answer}")
    elif answered is not None:
        parts.append(f"{answered:,} questions with a correct answer")
    if sizes["train_pairs"] is not None:
        parts.append(f"{sizes['train_pairs']:,} question/candidate pairs")
    text = ", ".join(parts)
    if card.data_name:
        return f"{card.data_name}: {text}." if text else f"{card.data_name}."
    return f"{text[0].upper()}{text[1:]}."


def _versions(estimator, nested) -> list:
    """``(package, version)``: as2rank, Python, NumPy, scikit-learn, and torch and transformers where the
    estimator runs on them (read from the modules already imported: a card imports neither)."""
    names = {class_name(estimator)} | {class_name(est) for _, est in nested}
    versions = [("as2rank", __version__), ("python", platform.python_version()), ("numpy", np.__version__),
                ("scikit-learn", sklearn.__version__)]
    for package, classes in (("torch", _TORCH_CLASSES | set(LAYOUTS)), ("transformers", set(LAYOUTS))):
        if names & classes and package in sys.modules:
            versions.append((package, sys.modules[package].__version__))
    return versions
