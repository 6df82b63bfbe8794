"""What the ``as2rank`` command promises about the user's files and its own messages, checked in one place.

* **No command writes over its own input** (:func:`check_no_overlap`): every output path (a file, or a directory
  of parts or of a model) is compared with every path the command reads (a table, a model directory or file, a
  directory of Parquet parts), by resolved path and by inode, so that a symbolic or hard link, an output inside an
  input directory and an output directory that holds an input are all refused before any work, even with
  ``--overwrite``.
* **A model directory replaces only what as2rank wrote** (:func:`check_model_output`): the seal of
  ``as2rank.json`` lists the model's own files; everything else in the directory is the user's and is kept, and a
  directory whose entries cannot be told apart is refused (:mod:`as2rank.files` refuses, at the write, a new entry
  whose name an entry of the user's holds).
* **The question id is said** (:func:`question_id_column`, :func:`similar_questions`): a table's own ``qid``
  column is used when no ``--qid`` is given; grouping by the question text says so, and warns about texts that
  differ only in invisible characters, spacing, case or Unicode form, which would each get their own rank 1.
* **One line per message** (:func:`error_line`, :func:`show_warning`, :class:`OneLineParser`): an error of any
  kind, the libraries' underneath included, is ``as2rank: error: ...``; a warning ``as2rank: warning: ...``,
  without a path into the library; a usage error one line too.

This module imports only the standard library at import time, so that the command starts fast.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

__all__ = ["BUNDLED", "PICKLE_SUFFIXES", "OneLineParser", "UsageError", "check_model_output", "check_no_overlap",
           "command_paths", "error_line", "is_failure", "is_model_path", "one_line", "question_id_column", "read_table",
           "say", "show_warning", "similar_questions"]

#: ``--data`` values that name a data set bundled with, or known to, as2rank rather than a table.
BUNDLED = ("sample", "squad", "wikiqa")

#: Suffixes of the pickle files that a model path may have, opened only with ``--allow-pickle`` (those of
#: ``as2rank.persistence.trust.PICKLE_FILE_SUFFIXES``, written out so that the command starts without NumPy).
PICKLE_SUFFIXES = (".joblib", ".pkl", ".pickle")
#: Errors that a user's input causes and whose message says what to do; any other is named by its type.
_USER_ERRORS = (ValueError, OSError, ImportError)


def is_failure(exc) -> bool:
    """Whether the command reports ``exc`` as an error: every ``Exception``, and the panic of a Rust extension
    (tokenizers, safetensors: pyo3's ``PanicException``, a ``BaseException`` so that ``except Exception`` does not
    hide it, recognised by name since its module is not importable). Ctrl-C, exits and any other
    ``BaseException`` pass through, with their usual behaviour."""
    return isinstance(exc, Exception) or any(c.__name__ == "PanicException" for c in type(exc).__mro__)


def one_line(exc, limit=None) -> str:
    """The message of an exception on one line (its type's name when it has none), cut at ``limit`` characters."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if limit is None or len(text) <= limit else text[: limit - 3] + "..."


# ----------------------------------------------------------------------------------------------- messages
class UsageError(ValueError):
    """A command line that argparse cannot parse (an unknown flag, a value of the wrong type)."""


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line (``as2rank: error: ...``, status 2) like every other
    error, instead of the usage text and a second line; ``--help`` is unchanged."""

    def error(self, message):
        """Raise :class:`UsageError` with ``message`` and where to read the usage."""
        raise UsageError(f"{message}; see {self.prog} --help")


def error_line(exc) -> str:
    """What the command prints for an exception: ``as2rank: error: <message>`` for the errors a user's input
    causes (which say what to do), and the exception's type before the message for any other (a library's own,
    such as safetensors' ``SafetensorError`` or a Rust panic), which ``AS2RANK_DEBUG=1`` shows in full."""
    if isinstance(exc, _USER_ERRORS):
        return f"as2rank: error: {one_line(exc)}"
    return f"as2rank: error: {type(exc).__name__}: {one_line(exc, 500)} (AS2RANK_DEBUG=1 shows the traceback)"


def show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """``warnings.showwarning`` for the command: one line, ``as2rank: warning: <message>``, without the file and line
    of the library that warned (the user can do nothing with them); its category when it is not a UserWarning."""
    kind = "" if category is UserWarning else f"{category.__name__}: "
    print(f"as2rank: warning: {kind}{one_line(message)}", file=sys.stderr if file is None else file)


# ----------------------------------------------------------------------------------------------- paths
def _identity(path):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _files_under(folder: Path, limit=100_000):
    """``(device, inode)`` of the regular files of a directory an input names (a model's, a table's parts)."""
    found = set()
    for root, _, names in os.walk(folder):
        for name in names:
            ident = _identity(os.path.join(root, name))
            if ident is not None:
                found.add(ident)
            if len(found) >= limit:
                return found
    return found


def is_model_path(model: str) -> bool:
    """Whether ``evaluate --model`` names a saved model, not a catalogue model: a directory, a pickle's name, or a
    path that is no catalogue model's name (an existing file, a name with a folder in it), which the model rules
    then judge."""
    from ..model_selection import get_ranker_names

    if Path(model).is_dir() or model.lower().endswith(PICKLE_SUFFIXES):
        return True
    if model.lower() in {name.lower() for name in get_ranker_names()}:
        return False
    return os.path.lexists(model) or "/" in model or os.sep in model


def command_paths(args):
    """``(inputs, outputs)`` of a parsed command line, as ``(flag, path)`` pairs: what :func:`check_no_overlap`
    compares (a path not given is None)."""
    get = args.__dict__.get
    inputs = {
        "rank": [("the model", get("model")), ("the table", get("data"))],
        "predict": [("--model", get("model")), ("--input", get("input"))],
        "select": [("the table", get("data"))],
        "fit": [("the table", get("data"))],
        "bench": [("--path", get("path"))],
        "serve": [("the model", get("model"))],
    }.get(args.command)
    if args.command == "evaluate":
        inputs = [("--model", get("model") if is_model_path(get("model")) else None),
                  ("--data", None if get("data") in BUNDLED else get("data")), ("--test", get("test")),
                  ("--path", get("path"))]
    outputs = [(f"--{name}", get(name)) for name in ("output", "plot", "save")]
    return inputs, outputs


def check_no_overlap(inputs, outputs) -> None:
    """Refuse, in one line, an output that would write over, into or around an input of the same command.

    Parameters
    ----------
    inputs : iterable of (str, path or None)
        ``(name, path)`` of what the command reads (a flag, or "the table"); paths that do not exist are skipped.
    outputs : iterable of (str, path or None)
        ``(flag, path)`` of what it writes: a file, or a directory that it creates or writes into.

    Raises
    ------
    ValueError
        If an output is an input (the same path, through a symbolic link, or a hard link to the same file), lies
        inside an input directory, holds an input (directly, or as a hard link at its top level), or two outputs
        are one path. Nothing has been read or written then.
    """
    ins = [(flag, Path(p)) for flag, p in inputs if p is not None and os.path.lexists(p)]
    outs = [(flag, Path(p)) for flag, p in outputs if p is not None]
    resolved = {flag: path.resolve() for flag, path in outs}
    for i, (flag, path) in enumerate(outs):
        for other, other_path in outs[:i]:
            if resolved[flag] == resolved[other]:
                raise ValueError(f"{flag} and {other} both name {str(path)!r}; give each output its own path.")
    identities = {}
    for flag, path in ins:
        real = path.resolve()
        identities[(flag, path)] = {_identity(real)} | (_files_under(real) if real.is_dir() else set())
    for out_flag, out in outs:
        target = resolved[out_flag]
        written = Path(os.path.abspath(out))  # as written: an input reached through a link inside the output
        out_files = {_identity(target)} if target.is_file() else set()
        if target.is_dir():
            out_files = {_identity(entry) for entry in target.iterdir() if entry.is_file()}
        for in_flag, source in ins:
            real = source.resolve()
            if target == real or (os.path.exists(target) and os.path.samefile(target, real)):
                why = "is"
            elif real.is_dir() and real in target.parents:
                why = "is inside"
            elif target in real.parents or written in Path(os.path.abspath(source)).parents:
                why = "holds"
            elif out_files & (identities[(in_flag, source)] - {None}):
                why = "holds a hard link to" if target.is_dir() else "is a hard link to"
            else:
                continue
            raise ValueError(
                f"{out_flag} {str(out)!r} {why} {in_flag} {str(source)!r}, which this command reads; as2rank never "
                "writes over, into or around its own input (not even with --overwrite). Choose another output path."
            )


def check_model_output(path, *, overwrite: bool = False) -> None:
    """Check, before a fit, that a model directory may be written at ``path`` without touching a file of the user's.

    A new or empty directory may; an as2rank model is replaced by the new one, with the user's entries beside it
    kept, when its seal says which entries are the model's (an unsealed or unreadable ``as2rank.json`` is refused:
    nothing would tell the user's files from the model's); a directory of the user's files takes the model's files
    beside them with ``overwrite``, unless it holds what the model writes (``README.md``, its card) or what the
    loader refuses beside a model (a pickle, a folder, a link), since the saved model would then not load.

    Raises
    ------
    ValueError
        One line naming the path and the entry in the way.
    """
    from ..files import directory_target
    from ..persistence import is_model_directory, read_meta
    from ..persistence.trust import CARD_FILE, PICKLE_SUFFIXES as REFUSED_SUFFIXES

    action = directory_target(path, is_model=is_model_directory, overwrite=overwrite)
    path = Path(path)
    if action == "replace":
        if not isinstance(read_meta(path).get("files"), dict):
            raise ValueError(
                f"{str(path)!r} is a model directory without a seal (its as2rank.json lists no files, as before "
                "as2rank sealed models), so which of its entries are yours cannot be told and nothing is written. "
                "Move your files out and delete it, or choose another directory."
            )
    elif action == "merge":
        names = sorted(p.name for p in path.iterdir())
        if CARD_FILE in names:
            raise ValueError(f"{str(path)!r} holds a {CARD_FILE} of yours, where the model writes its card; it is not "
                             "replaced and nothing is written. Move it away, or choose another directory.")
        pickle = next((n for n in names if n.lower().endswith(REFUSED_SUFFIXES)), None)
        if pickle is not None:
            raise ValueError(f"{str(path)!r} holds {pickle!r}, in a format that runs code when loaded: the loader "
                             "refuses a model directory holding one, so nothing is written. Move it away, or choose "
                             "another directory.")


# ----------------------------------------------------------------------------------------------- questions
def read_table(path, args, *, labels: bool):
    """``(X, y)`` of a user's table under the column flags of a parsed command line; ``labels``: the label column is
    required. Its questions are grouped by ``--qid``, else by its own ``qid`` column (not with ``--no-qid``), else
    by their text: the line that says which (when ``--qid`` was not given) and the warning of
    :func:`similar_questions` are kept for :func:`say`; ``args.qid_used`` is the column used (None: the text)."""
    from ..datasets import read_pairs

    qid = question_id_column(path, qid=args.qid, no_qid=args.no_qid,
                             taken=(args.question, args.candidate, args.label, args.position))
    X, y = read_pairs(path, question=args.question, candidate=args.candidate, label=args.label, qid=qid,
                      position=args.position)
    if labels and y is None:
        raise ValueError(f"{path}: no label column {args.label!r}; name it with --label.")
    args.qid_used = qid
    notes = args.__dict__.setdefault("notes", [])  # two tables grouped alike say it once
    if args.qid is None:
        by = (f"column {qid!r} (the table's own; --no-qid groups them by the question text)" if qid
              else f"the question text (column {args.question!r})")
        notes.append(f"grouping questions by {by}")
    warning = None if qid else similar_questions(X["question"])
    if warning:
        notes.append(f"warning: {warning}")
    args.notes = list(dict.fromkeys(notes))
    return X, y


def say(args) -> None:
    """Print the lines :func:`read_table` kept, ``as2rank: <line>``, once every check of the command has passed:
    a command refused by its input says one line, its error."""
    for line in args.__dict__.pop("notes", []):
        print(f"as2rank: {line}", file=sys.stderr, flush=True)


def question_id_column(path, *, qid=None, no_qid=False, taken=()):
    """The column that identifies a table's questions: ``qid`` (``--qid``); else the table's own ``qid`` column,
    unless ``no_qid`` or another flag names that column (``taken``); else None, the question text.

    Parameters
    ----------
    path : str or os.PathLike
    qid : str, default=None
    no_qid : bool, default=False
    taken : iterable of str, default=()
        The columns the other flags name.

    Returns
    -------
    str or None
    """
    if qid is not None or no_qid or "qid" in set(taken):
        return qid
    from ..datasets.table import table_columns

    return "qid" if "qid" in table_columns(path) else None


def similar_questions(questions):
    """A one-line warning when question texts that identify questions differ only in what a reader cannot see.

    Two texts are taken for one question written twice when they are equal after Unicode NFKC normalisation,
    removal of format characters (category Cf: zero-width spaces, joiners, byte-order marks, soft hyphens),
    collapsing whitespace (a non-breaking space, a trailing space) and casefolding, but differ as written: grouped
    by text, they are two questions, each with its own rank 1. Each distinct text is normalised once, by pandas'
    vectorised string methods.

    Parameters
    ----------
    questions : pandas.Series of str

    Returns
    -------
    str or None
        The warning (without the ``as2rank: warning:`` prefix), or None.
    """
    import re
    import unicodedata

    import numpy as np
    import pandas as pd

    codes, uniques = pd.factorize(questions)
    if len(uniques) < 2:
        return None
    texts = pd.Series(np.asarray(uniques, dtype=object), dtype=object)
    keys = texts.str.normalize("NFKC")
    invisible = "".join(sorted(c for c in set("".join(keys)) if unicodedata.category(c) == "Cf"))
    if invisible:
        keys = keys.str.replace(f"[{re.escape(invisible)}]", "", regex=True)
    keys = keys.str.split().str.join(" ").str.casefold().str.normalize("NFKC")
    twins = keys.duplicated(keep=False).to_numpy()
    if not twins.any():
        return None
    first_row = np.unique(codes, return_index=True)[1]
    a, b = np.flatnonzero((keys == keys[twins].iloc[0]).to_numpy())[:2]
    n_groups = keys[twins].nunique()
    return (
        f"{int(twins.sum())} question texts ({n_groups} group(s)) are equal but for invisible characters, spacing, "
        "case or Unicode form, and are ranked as separate questions, each with its own rank 1: e.g. "
        f"{texts[a]!r} (data row {first_row[a]}) and {texts[b]!r} (data row {first_row[b]}), "
        f"{_difference(texts[a], texts[b])}. Make their texts equal, or give the table a question id column (qid, or "
        "--qid NAME)."
    )


def _difference(a: str, b: str) -> str:
    """Where two texts first differ, with the characters named (they may be invisible)."""
    import unicodedata

    i = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))

    def char(text):
        if i >= len(text):
            return "the end of the text"
        return f"U+{ord(text[i]):04X} ({unicodedata.name(text[i], 'unnamed')})"

    return f"which differ at character {i + 1}: {char(a)} against {char(b)}"
