"""What loading a model directory trusts, enforced here (the docs page "Loading models you did not train").

A model directory may come from anyone. Loading it and predicting with it run no code of the directory's and
read no file outside it, except the packaged weights that as2rank itself names:

* **The tree** (:func:`check_tree`): regular files and folders only. A symbolic link (which could point
  anywhere), a device or a pipe anywhere in the directory is refused, and so is a file in a format that
  unpickles (``.bin``, ``.pt``, ``.pkl``, ``.joblib``, ``.kv``, ...): transformers and gensim would run it.
* **Integrity** (:func:`seal`, :func:`verify`): the top ``as2rank.json`` records the SHA-256 of every file
  saved with it and of its own content. A file that was changed, truncated, swapped or added in a folder that
  a loader lists (the encoder's, the tokenizer's), or an edited ``as2rank.json``, is refused before anything is
  read, so a damaged directory never gives other scores than the model it was saved as. This is integrity,
  not authenticity: whoever rewrites the digests too writes a different model, which the other rules bound.
* **References** (:func:`resolve_references`): a parameter or fitted attribute that a loaded model reads to
  predict and that names files or a model (a Cosinet's ``embeddings``, a ContextExtractor's ``encoder``, a
  lexical prior's ``similarity_source_``) must name packaged weights (an alias its class lists in
  ``registry.REFERENCES``) or a folder inside the directory; anything else (an absolute path, ``..``, a Hugging
  Face id, ``gensim:...``) is refused with a one-line error naming the parameter. Passing that parameter to
  :func:`~as2rank.persistence.load` is the user's own choice and is not checked. Parameters that only a new
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

from .registry import REFERENCES

__all__ = ["MAX_DEPTH", "PICKLE_SUFFIXES", "check_tree", "parse_json", "resolve_references", "seal", "verify"]

META_FILE, CARD_FILE = "as2rank.json", "README.md"
#: Deepest nesting of lists and objects accepted in ``as2rank.json``.
MAX_DEPTH = 64
#: Suffixes of formats that run code when loaded (pickles, and code itself, which a checkpoint's ``auto_map``
#: would import): never read from, nor allowed in, a model directory.
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".joblib", ".ckpt", ".kv", ".npy", ".npz", ".h5",
                   ".msgpack", ".dill", ".py", ".pyc", ".so", ".dll", ".dylib")
#: Deepest folder nesting of a model directory (a pipeline of sequential rankers of pipelines stays far below).
_MAX_FOLDERS = 32
_CHUNK = 1 << 20


def _one_line(text) -> str:
    return " ".join(str(text).split())


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
                if name.lower().endswith(PICKLE_SUFFIXES):
                    raise ValueError(f"{path}: {relative} is in a format that runs code when loaded (a pickle, or "
                                     "code); a model directory holds only JSON, safetensors and text files, and is "
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
    """Check a sealed directory (its tree already checked by :func:`check_tree`) against its ``as2rank.json`` (a
    directory saved before sealing, or a nested part of one, has nothing to check). Files of the top folder that the seal does not list are the user's and
    are ignored (as2rank reads none); in every other folder they are refused, since a loader lists those.

    Raises
    ------
    ValueError
        One line naming the first file that differs from what was saved.
    """
    if "files" not in meta and "sha256" not in meta:
        return
    path = Path(path)
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


def kept_entries(path: Path) -> list[str]:
    """Top-level entries of a model directory that are not part of the model (the user's own files), to carry
    into the directory that replaces it; none for a directory saved before sealing."""
    path = Path(path)
    try:
        meta = json.loads((path / META_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    listed = meta.get("files") if isinstance(meta, dict) else None
    if not isinstance(listed, dict):
        return []
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
            out[key] = {**value, **{k: _resolve(name, f"{key}[{k!r}]", value[k], aliases, path)
                                    for k in ("model", "tokenizer") if k in value}}
        else:
            out[key] = _resolve(name, key, value, aliases, path)
    return out


def _resolve(owner: str, name, value, aliases, path: Path):
    if value is None or (isinstance(value, str) and value in aliases):
        return value
    if not isinstance(value, (str, os.PathLike)):
        return value  # a config or a tokenizer object saved with the model: no file to open
    text = os.fspath(value)
    part = PurePosixPath(text)
    inside = text and not part.is_absolute() and ".." not in part.parts and "\\" not in text and ":" not in text
    if inside and (path / text).is_dir():
        return str(path / text)
    packaged = ", ".join(repr(a) for a in aliases) or "none"
    raise ValueError(
        f"{path / META_FILE}: the {owner}'s {name} names {text!r}, which is neither packaged weights "
        f"({packaged}) nor a folder of the model directory; a model directory is refused when it would make as2rank "
        f"read files elsewhere. If you trust that source, pass it yourself: as2rank.load(path, {name.split('[')[0]}=...)."
    )
