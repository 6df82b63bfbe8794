"""What loading a model directory trusts, enforced here (the docs page "Loading models you did not train").

A model directory may come from anyone. Loading it and predicting with it run no code of the directory's and
read no file outside it, except the packaged weights that as2rank itself names:

* **The path** (:func:`check_model_path`): decided from the path's own entry (``os.lstat``), before any byte
  is read: a directory is loaded pickle-free; a file only if it is named ``.joblib``, ``.pkl`` or ``.pickle``
  and the caller opted in (``allow_pickle=True``); a symbolic link, or any other file, is refused.
* **The tree** (:func:`check_tree`): regular files and folders only. A symbolic link (which could point
  anywhere), a device or a pipe anywhere in the directory is refused, and so is a file in a format that
  unpickles (``.bin``, ``.pt``, ``.pkl``, ``.joblib``, ``.kv``, ...), or an index of such weights
  (``pytorch_model.bin.index.json``): transformers and gensim would run it. Nothing is read before this check.
* **Integrity** (:func:`seal`, :func:`verify`): the top ``as2rank.json`` records the SHA-256 of every file
  saved with it and of its own content, and a directory without that seal is refused (whatever its
  ``format_version`` says). A file that was changed, truncated, swapped or added in a folder that
  a loader lists (the encoder's, the tokenizer's), or an edited ``as2rank.json``, is refused before anything is
  read, so a damaged directory never gives other scores than the model it was saved as. This is integrity,
  not authenticity: whoever rewrites the digests too writes a different model, which the other rules bound,
  and whose every file handed to another library is checked against the others
  (:mod:`as2rank.persistence.checks`).
* **References** (:func:`resolve_references`): a parameter or fitted attribute that a loaded model reads to
  predict and that names files or a model (a Cosinet's ``embeddings``, a ContextExtractor's ``encoder``, a
  lexical prior's ``similarity_source_``) must name packaged weights (an alias its class lists in
  ``registry.REFERENCES``) or a folder inside the directory, which is then checked as the checkpoint it must be
  (:func:`~as2rank.persistence.checks.check_checkpoint`; word vectors are files, never a folder); anything else
  (an absolute path, ``..``, a Hugging Face id, ``gensim:...``) is refused with a one-line error naming the
  parameter. Passing that parameter to :func:`~as2rank.persistence.load` is the user's own choice and is not
  checked. Parameters that only a new
  ``fit`` reads (the ``model`` of a fitted transformer, which loading replaces by the directory's ``encoder/``;
  a template step's ``model``) are read as written and followed only by that fit.
* **Classes and values**: only allow-listed classes are instantiated (``as2rank.persistence.registry``),
  JSON nests at most :data:`MAX_DEPTH` levels, and every fitted array is checked against what its estimator
  reads (:mod:`as2rank.persistence.schema`).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path, PurePosixPath

from ..params import CHECKPOINT_ALIASES
from .registry import REFERENCES

__all__ = ["FOLDER_CHECKS", "MAX_DEPTH", "PICKLE_FILE_SUFFIXES", "PICKLE_SUFFIXES", "check_model_path", "check_tree",
           "parse_json", "read_pickle", "resolve_references", "seal", "verify"]

META_FILE, CARD_FILE = "as2rank.json", "README.md"
#: Deepest nesting of lists and objects accepted in ``as2rank.json``.
MAX_DEPTH = 64
#: Suffixes of formats that run code when loaded (pickles, and code itself, which a checkpoint's ``auto_map``
#: would import): never read from, nor allowed in, a model directory.
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".joblib", ".ckpt", ".kv", ".npy", ".npz", ".h5",
                   ".msgpack", ".dill", ".py", ".pyc", ".so", ".dll", ".dylib")
#: Suffixes of the files :func:`check_model_path` accepts as a pickled model (with ``allow_pickle=True`` only).
PICKLE_FILE_SUFFIXES = (".joblib", ".pkl", ".pickle")
#: How a folder of the directory that a reference names is checked, by the role it plays (``"model"``: a
#: checkpoint, ``"tokenizer"``: a tokenizer), before anything reads it: registered by
#: :mod:`as2rank.persistence.checks` when it is imported (importing :mod:`as2rank.persistence` does). A folder of a
#: role without a check is refused.
FOLDER_CHECKS: dict = {}
#: Deepest folder nesting of a model directory (a pipeline of sequential rankers of pipelines stays far below).
_MAX_FOLDERS = 32
_CHUNK = 1 << 20


def _one_line(text) -> str:
    return " ".join(str(text).split())


# ----------------------------------------------------------------------------------------------- the path
def check_model_path(path, *, allow_pickle: bool = False) -> str:
    """What loading ``path`` means, decided from its own entry (``os.lstat``: no link is followed and no byte of
    it is read): the one decision of :func:`as2rank.load <as2rank.persistence.load>`, which every command makes
    through it.

    Parameters
    ----------
    path : str or os.PathLike
    allow_pickle : bool, default=False
        Accept a pickled model: a file named ``*.joblib``, ``*.pkl`` or ``*.pickle``. Loading one runs whatever
        code it holds, so it is the caller's explicit choice (``--allow-pickle`` on the command line).

    Returns
    -------
    {"directory", "pickle"}
        ``"directory"``: a folder, to load pickle-free; ``"pickle"``: a pickle file the caller opted into.

    Raises
    ------
    FileNotFoundError
        If nothing is at ``path``.
    ValueError
        One line: ``path`` is a symbolic link, a file of another name, a pickle without ``allow_pickle``, or
        neither a file nor a folder.
    """
    path = Path(path)
    try:
        mode = os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        raise FileNotFoundError(f"No model at {str(path)!r}.") from None
    if stat.S_ISLNK(mode):
        raise ValueError(f"{path} is a symbolic link; as2rank loads a model only from its own folder or file, never "
                         "through a link (pass the path it points to, if you trust it).")
    if stat.S_ISDIR(mode):
        return "directory"
    if not stat.S_ISREG(mode):
        raise ValueError(f"{path} is neither a model directory nor a file.")
    if not path.name.lower().endswith(PICKLE_FILE_SUFFIXES):
        raise ValueError(f"{path} is not a model: as2rank loads a model directory (written by as2rank.save), or a "
                         f"pickle named {', '.join('*' + s for s in PICKLE_FILE_SUFFIXES)} with allow_pickle=True.")
    if not allow_pickle:
        raise ValueError(f"{path} is a pickle: loading it runs any code it holds. Load it only from a source you "
                         "trust, with as2rank.load(path, allow_pickle=True) (--allow-pickle on the command line); "
                         "share models as directories (as2rank.save).")
    return "pickle"


def read_pickle(path):
    """The object pickled in the file ``path`` (:func:`joblib.load`), once :func:`check_model_path` accepted it
    with ``allow_pickle=True``: the one place as2rank unpickles. A damaged or foreign file is a one-line
    ValueError."""
    import joblib

    try:
        return joblib.load(path)
    except Exception as exc:  # a damaged or foreign file fails in many ways (EOFError, UnpicklingError, ...)
        raise ValueError(f"{path} cannot be unpickled ({type(exc).__name__}: {_one_line(exc)[:200]}).") from None


# ----------------------------------------------------------------------------------------------- the tree
def check_tree(path: Path) -> list[str]:
    """Every file of a model directory, relative and POSIX-style, after checking that the tree holds only
    regular files and folders (no links, devices or pipes) and no file that unpickles.

    Raises
    ------
    ValueError
        One line naming the first offending entry.
    """
    path = Path(path)
    if path.is_symlink():
        raise ValueError(f"{path} is a symbolic link; a model directory is loaded only from its own folder.")
    files = []
    for folder, dirs, names in os.walk(path):
        base = Path(folder)
        if len(base.relative_to(path).parts) > _MAX_FOLDERS:
            raise ValueError(f"{base} nests folders more than {_MAX_FOLDERS} deep; it is not an as2rank model directory.")
        for name in dirs + names:
            entry = base / name
            mode = os.lstat(entry).st_mode
            relative = entry.relative_to(path).as_posix()
            if stat.S_ISLNK(mode):
                raise ValueError(f"{path}: {relative} is a symbolic link; a model directory may hold only its own "
                                 "files and folders (a link could make as2rank read a file outside it).")
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise ValueError(f"{path}: {relative} is not a regular file or folder.")
            if stat.S_ISREG(mode):
                lower = name.lower()
                if lower.endswith(PICKLE_SUFFIXES):
                    raise ValueError(f"{path}: {relative} is in a format that runs code when loaded (a pickle, or "
                                     "code); a model directory holds only JSON, safetensors and text files, and is "
                                     "refused.")
                if lower.removesuffix(".index.json").endswith(PICKLE_SUFFIXES):
                    raise ValueError(f"{path}: {relative} indexes weights in a format that runs code when loaded (a "
                                     "torch pickle); a model directory holds its weights as safetensors only, and is "
                                     "refused.")
                files.append(relative)
    return sorted(files)


def parse_json(text: str, source) -> object:
    """``json.loads`` with duplicate keys and nesting beyond :data:`MAX_DEPTH` refused (``source`` names the
    file in messages)."""

    def pairs(items):
        keys = [k for k, _ in items]
        if len(set(keys)) != len(keys):
            raise ValueError(f"duplicate key {next(k for k in keys if keys.count(k) > 1)!r}")
        return dict(items)

    try:
        value = json.loads(text, object_pairs_hook=pairs)
    except RecursionError:
        value = None
        depth = MAX_DEPTH + 1
    else:
        depth = _depth(value)
    if depth > MAX_DEPTH:
        raise ValueError(f"{source} nests its values more than {MAX_DEPTH} levels deep; it is not an as2rank model file.")
    return value


def _depth(value) -> int:
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, (dict, list)):
            deepest = max(deepest, level)
            if level > MAX_DEPTH:
                break
            stack.extend((v, level + 1) for v in (node.values() if isinstance(node, dict) else node))
    return deepest


# ----------------------------------------------------------------------------------------------- integrity
def _file_digest(file: Path) -> str:
    digest = hashlib.sha256()
    with open(file, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _meta_digest(meta: dict) -> str:
    body = {k: v for k, v in meta.items() if k != "sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()).hexdigest()


def _sealed_files(path: Path) -> list[str]:
    """Every file but the top ``as2rank.json`` and card, relative (the tree is checked by :func:`check_tree`)."""
    files = (Path(folder, name).relative_to(path).as_posix() for folder, _, names in os.walk(path) for name in names)
    return sorted(f for f in files if f not in (META_FILE, CARD_FILE))


def seal(path: Path) -> None:
    """Record in ``path/as2rank.json`` the SHA-256 of every file of the directory (but that file and the card)
    and of its own content, rewriting it last (see the module docstring)."""
    path = Path(path)
    file = path / META_FILE
    meta = json.loads(file.read_text(encoding="utf-8"))
    meta["files"] = {name: _file_digest(path / name) for name in _sealed_files(path)}
    meta["sha256"] = _meta_digest(meta)
    temporary = path / f".{META_FILE}.tmp"
    temporary.write_text(json.dumps(meta, indent=2, ensure_ascii=False, allow_nan=False), encoding="utf-8")
    os.replace(temporary, file)


def verify(path: Path, meta: dict) -> None:
    """Check a model directory (its tree already checked by :func:`check_tree`) against the seal of its top
    ``as2rank.json``. The seal is required: a directory without one (saved before as2rank sealed its models, or
    whose seal was removed, whatever its ``format_version`` says) is refused, since nothing would then tell an
    edited file from a saved one. Files of the top folder that the seal does not list are the user's and
    are ignored (as2rank reads none); in every other folder they are refused, since a loader lists those.

    Raises
    ------
    ValueError
        One line naming the first file that differs from what was saved, or saying how to seal a directory
        that has no seal.
    """
    path = Path(path)
    if "files" not in meta and "sha256" not in meta:
        raise ValueError(f"{path / META_FILE} has no seal (no 'files' and 'sha256'): the model was saved before "
                         "as2rank sealed its models, or the seal was removed. If you trust its source, seal it with "
                         f"as2rank.persistence.trust.seal({str(path)!r}) and load it again.")
    listed = meta.get("files")
    if not isinstance(listed, dict) or not isinstance(meta.get("sha256"), str) or meta["sha256"] != _meta_digest(meta):
        raise ValueError(f"{path / META_FILE} was changed after the model was saved (its digest does not match its "
                         "content); to change a parameter, pass it to as2rank.load and save the model again.")
    present = set(_sealed_files(path))
    for name, expected in listed.items():
        if name not in present:
            raise ValueError(f"{path}: {name} is missing; the model directory is incomplete.")
        if _file_digest(path / name) != expected:
            raise ValueError(f"{path}: {name} is not the file that was saved (its SHA-256 differs); the model "
                             "directory is damaged or was edited.")
    extra = sorted(name for name in present - set(listed) if "/" in name)
    if extra:
        raise ValueError(f"{path}: {extra[0]} was not saved with the model; remove it (a loader would read it).")


def kept_entries(path: Path) -> list[str] | None:
    """Top-level entries of a model directory that are not part of the model (the user's own files), to carry
    into the directory that replaces it; None when the seal cannot tell them apart (a directory saved before
    sealing, or an ``as2rank.json`` that cannot be read), which :func:`as2rank.files.atomic_directory` refuses
    to replace rather than lose a file of the user's."""
    path = Path(path)
    try:
        meta = json.loads((path / META_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    listed = meta.get("files") if isinstance(meta, dict) else None
    if not isinstance(listed, dict):
        return None
    own = {PurePosixPath(name).parts[0] for name in listed} | {META_FILE, CARD_FILE}
    return sorted(p.name for p in path.iterdir() if p.name not in own and not p.name.startswith("."))


# ----------------------------------------------------------------------------------------------- references
def resolve_references(name: str, values: dict, path: Path, given=()) -> dict:
    """``values`` (decoded parameters or fitted attributes of one estimator of the class ``name``) with every
    reference that :data:`~as2rank.persistence.registry.REFERENCES` lists for the class resolved: a packaged
    alias stays as it is, a folder of the model directory becomes its path, anything else is refused.

    A dict-valued attribute (``similarity_source_``) is checked on its ``model`` and ``tokenizer`` entries. Names in
    ``given`` (parameters the user passed to ``load``) are not checked.

    Raises
    ------
    ValueError
        One line naming the parameter and the value.
    """
    out = dict(values)
    for key, aliases in REFERENCES.get(name, {}).items():
        if key not in out or key in given:
            continue
        value = out[key]
        if isinstance(value, dict):
            out[key] = {**value, **{k: _resolve(name, f"{key}[{k!r}]", value[k], aliases, path, k)
                                    for k in ("model", "tokenizer") if k in value}}
        else:
            out[key] = _resolve(name, key, value, aliases, path, "model")
    return out


def _resolve(owner: str, name, value, aliases, path: Path, role: str):
    """``value`` resolved (see :func:`resolve_references`); a folder of the directory is checked as what reads it
    (:data:`FOLDER_CHECKS`): a checkpoint (``role`` "model") or a tokenizer (``role`` "tokenizer") for checkpoint
    references; no folder may stand for word vectors (a file)."""
    if value is None or (isinstance(value, str) and value in aliases):
        return value
    if not isinstance(value, (str, os.PathLike)):
        return value  # a config or a tokenizer object saved with the model: no file to open
    text = os.fspath(value)
    part = PurePosixPath(text)
    checkpoint = tuple(aliases) == tuple(CHECKPOINT_ALIASES)
    inside = text and part.parts and not part.is_absolute() and ".." not in part.parts and "\\" not in text \
        and ":" not in text
    if checkpoint and inside and (path / text).is_dir() and role in FOLDER_CHECKS:
        FOLDER_CHECKS[role](path / text)
        return str(path / text)
    packaged = ", ".join(repr(a) for a in aliases) or "none"
    elsewhere = "a folder of the model directory" if checkpoint else "anything else a model directory may name"
    raise ValueError(
        f"{path / META_FILE}: the {owner}'s {name} names {text!r}, which is neither packaged weights "
        f"({packaged}) nor {elsewhere}; a model directory is refused when it would make as2rank "
        f"read files elsewhere. If you trust that source, pass it yourself: as2rank.load(path, {name.split('[')[0]}=...)."
    )
