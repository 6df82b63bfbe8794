"""The model directory's file format: ``as2rank.json``, and how an estimator's values are written to it and read
back (the other half of :mod:`as2rank.persistence` is its face, :mod:`as2rank.persistence.api`: save, load and
the estimators' ``save_pretrained``/``from_pretrained``).

A model directory holds ``as2rank.json`` (the format version, the class, its parameters and fitted attributes as
JSON: :func:`write_meta`, :func:`read_meta`), the numeric arrays of those in ``arrays.safetensors``, the weights
of torch modules in ``*.safetensors`` files (:func:`write_torch`, :func:`read_safetensors`), nested estimators
(a ``PointwiseRanker``'s classifier, a ``SequentialRanker``'s steps, a ``Pipeline``'s steps) in subdirectories
of the same format, and a model card, ``README.md`` (:mod:`as2rank.persistence.card`; top level only, not
read by loading). The transformer family adds ``encoder/`` (a transformers model and its tokenizer),
``heads.safetensors`` and, if saved so, int8 graphs (``onnx/``): its layout (``as2rank.transformer.saving``,
registered in ``as2rank.persistence.registry.LAYOUTS``), written and read with the same :class:`Writer` and
:class:`Reader`.

Nothing in it is a pickle: :class:`Reader` decodes tensors, numbers and strings, and instantiates only as2rank
classes and an allow-list of scikit-learn estimators (``SKLEARN_CLASSES``), looked up by name
(``as2rank.persistence.registry``), never imported from a path written in the file. A directory is opened
(:func:`open_model`) only after the checks of :mod:`as2rank.persistence.trust` (the path, the tree, the seal),
and every value read is checked: safetensors files by their headers (``as2rank.persistence.formats``),
weights for finiteness (:func:`check_tensors`), configurations and tokenizers against each other
(``as2rank.persistence.checks``), fitted values against what their estimator reads
(:mod:`as2rank.persistence.schema`).

This module imports only NumPy (safetensors when arrays are written or read, torch when a module's weights
are): lexical models save and load without torch.
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import numpy as np

from ..params import TRAINING_ONLY_PARAMS, param_names
from ..version import __version__
from .checks import (build_config, check_config, check_loaded_tokenizer, check_network_state, check_params,
                     load_tokenizer)
from .formats import one_line, safetensors_header
from .registry import LAYOUTS, SKLEARN_CLASSES, _is_estimator, class_name, resolve_class
from .schema import check_fitted
from .trust import check_model_path, check_tree, parse_json, resolve_references, verify

__all__ = ["ARRAYS_FILE", "FORMAT_VERSION", "HEADS_FILE", "INT8_FOLDER", "META_FILE", "Reader", "Writer",
           "check_class", "check_tensors", "is_model_directory", "open_model", "read_estimator", "read_meta",
           "read_safetensors", "set_nested_params", "write_estimator", "write_meta", "write_torch"]

#: Version of the directory format written by this as2rank; directories of a newer version are refused.
#: A directory without a ``format_version`` is version 0 and is read as version 1. Version 2 seals the
#: directory (:func:`as2rank.persistence.trust.seal`).
FORMAT_VERSION = 2
#: The file that names a model directory's class, parameters and fitted attributes.
META_FILE = "as2rank.json"
#: The numeric arrays of ``as2rank.json``'s values, by key.
ARRAYS_FILE = "arrays.safetensors"
#: The weights of a transformer-family model but its encoder's (its heads).
HEADS_FILE = "heads.safetensors"
#: The folder of a transformer-family model's int8 graphs.
INT8_FOLDER = "onnx"

#: Fitted attributes that describe a past run rather than the model (the training history).
_UNSAVED_ATTRS = ("history_", "member_histories_")

#: Fitted attributes that directories written before they became public name privately, by class: read under
#: their public names.
_RENAMED_ATTRS = {"LexicalFeatures": {"_unseen_idf": "unseen_idf_"}, "ZeroShotRanker": {"_config": "config_"}}


# ----------------------------------------------------------------------------------------------- as2rank.json
def write_meta(path, name, params, fitted) -> None:
    """Write ``as2rank.json`` (atomically): the format version, the as2rank version, the class ``name``
    (``registry.class_name``), the encoded ``params`` and ``fitted`` attributes
    (``None``: not fitted)."""
    meta = {"format_version": FORMAT_VERSION, "as2rank_version": __version__, "class": name, "params": params,
            "fitted": fitted}
    temporary = path / f".{META_FILE}.tmp"
    temporary.write_text(json.dumps(meta, indent=2, ensure_ascii=False, allow_nan=False), encoding="utf-8")
    os.replace(temporary, path / META_FILE)


def read_meta(path) -> dict:
    """``as2rank.json`` of a model directory, checked.

    Parameters
    ----------
    path : str or os.PathLike
        The model directory.

    Returns
    -------
    dict
        ``format_version``, ``class``, ``params`` and ``fitted`` (``None`` when not fitted).

    Raises
    ------
    ValueError
        If ``as2rank.json`` is missing, not JSON of the expected shape, or of a newer format version.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"No model at {str(path)!r}.")
    file = path / META_FILE
    what = "the as2rank.json of a directory written by save_pretrained"
    if not path.is_dir() or not file.is_file():
        raise ValueError(f"{path} is not an as2rank model directory: {file} is missing; expected {what}.")
    try:
        meta = parse_json(file.read_text(encoding="utf-8"), file)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"{file} is not valid JSON ({one_line(exc)}); expected {what}.") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("class"), str) or not isinstance(meta.get("params"), dict):
        raise ValueError(f"{file} lacks a 'class' name and a 'params' object; expected {what}.")
    version = meta.get("format_version", 0)
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise ValueError(f"{file} has an invalid format_version {version!r}; expected {what}.")
    if version > FORMAT_VERSION:
        raise ValueError(
            f"{file} has format version {version}, but as2rank {__version__} reads format version "
            f"{FORMAT_VERSION} at most; upgrade as2rank to load it."
        )
    fitted = meta.get("fitted")
    if fitted is not None and not isinstance(fitted, dict):
        raise ValueError(f"{file}: 'fitted' must be an object or null; expected {what}.")
    return {**meta, "format_version": version, "fitted": fitted}


def open_model(path) -> dict:
    """``as2rank.json`` of a model directory about to be loaded, after the checks of
    :mod:`as2rank.persistence.trust`, in this order: the path (a folder, not a link), the tree (no links, no
    pickles; nothing is read before it), then the seal (required; every file as saved)."""
    path = Path(path)
    check_model_path(path)  # a folder (a file or a link is refused, pickles included)
    check_tree(path)
    meta = read_meta(path)
    # The seal's digest covers the file as written: without the keys read_meta fills in for older versions.
    verify(path, json.loads((path / META_FILE).read_text(encoding="utf-8")))
    return meta


def is_model_directory(path) -> bool:
    """Whether ``path`` is an as2rank model directory (it has an ``as2rank.json``): what
    :func:`~as2rank.persistence.save` may replace."""
    return (Path(path) / META_FILE).is_file()


def check_class(meta, cls, path) -> None:
    """Raise ``ValueError`` unless the directory ``path``, whose ``as2rank.json`` is ``meta``, holds a ``cls``
    (a class's ``from_pretrained`` loads only its own class; :func:`~as2rank.persistence.load` loads any)."""
    if meta["class"] != class_name(cls):
        raise ValueError(f"{path} holds a {meta['class']}, not a {cls.__name__}; load it with as2rank.load.")


# ----------------------------------------------------------------------------------------------- values
def _module_types():
    """Classes of torch tensors, transformers configs and tokenizers, when those packages are in use."""
    torch, hf = sys.modules.get("torch"), sys.modules.get("transformers")
    return (torch.Tensor if torch else (), hf.PretrainedConfig if hf else (), hf.PreTrainedTokenizerBase if hf else ())


def _safe_name(name, path) -> str:
    if not isinstance(name, str) or not name or name.startswith(".") or "/" in name or "\\" in name:
        raise ValueError(f"{path / META_FILE} refers to the file {name!r}, which is not a plain name in {path}.")
    return name


class Writer:
    """Encodes values as JSON for one model directory: numeric arrays go to ``arrays.safetensors``, torch
    modules to ``<key>.safetensors`` and estimators to subdirectories named by their key."""

    def __init__(self, path: Path, owner, *, strict: bool = False):
        self.path, self.owner, self.strict, self.arrays = path, owner, strict, {}

    def fail(self, key, value, why=""):
        """Raise the ``ValueError`` of a value (``key``: where it is) that cannot be saved pickle-free."""
        raise ValueError(
            f"{type(self.owner).__name__}: {key.split('.', 1)[1]} is a {type(value).__name__}{why}, which cannot be "
            "saved pickle-free; save this model with joblib.dump instead (and load such files only from a "
            "trusted source)."
        )

    def encode(self, value, key):
        """``value`` as JSON, its arrays, weights and nested estimators written beside (``key``, such as
        ``"fitted.coef_"``, names them); raises ``ValueError`` (:meth:`fail`) for a value that only pickling
        saves, and for anything but plain values, arrays and weights when ``strict``."""
        tensor, config, tokenizer = _module_types()
        if value is None or isinstance(value, (bool, str)):
            return value
        if isinstance(value, int) and not isinstance(value, np.integer):
            return int(value)
        if isinstance(value, float) and not isinstance(value, np.floating):
            return value if math.isfinite(value) else {"__type__": "float", "value": repr(value)}
        if isinstance(value, np.generic) and value.dtype.kind in "biuf":
            item = value.item()
            if isinstance(item, float) and not math.isfinite(item):
                item = repr(item)
            return {"__type__": "numpy", "dtype": value.dtype.name, "value": item}
        if isinstance(value, np.str_):
            return str(value)
        if isinstance(value, np.ndarray):
            return self.encode_array(value, key)
        if isinstance(value, list):
            return [self.encode(v, f"{key}.{i}") for i, v in enumerate(value)]
        if isinstance(value, tuple):
            return {"__type__": "tuple", "items": [self.encode(v, f"{key}.{i}") for i, v in enumerate(value)]}
        if isinstance(value, dict) and value and all(isinstance(v, tensor) for v in value.values()):
            # A torch module's weights, as an estimator's state protocol gives them (CPU tensors by name).
            write_torch(value, self.path / f"{key}.safetensors")
            return {"__type__": "module", "file": f"{key}.safetensors"}
        if isinstance(value, dict):
            if all(isinstance(k, str) for k in value) and "__type__" not in value:
                return {k: self.encode(v, f"{key}.{i}") for i, (k, v) in enumerate(value.items())}
            items = [[self.encode(k, f"{key}.{i}k"), self.encode(v, f"{key}.{i}")] for i, (k, v) in enumerate(value.items())]
            return {"__type__": "dict", "items": items}
        if isinstance(value, os.PathLike):
            return {"__type__": "path", "value": os.fspath(value)}
        if self.strict:
            self.fail(key, value)
        if _is_estimator(value):
            write_estimator(value, self.path / key)
            return {"__type__": "estimator", "path": key}
        if isinstance(value, config):
            return {"__type__": "transformers_config", "value": self.encode(value.to_dict(), key)}
        if isinstance(value, tokenizer):
            value.save_pretrained(self.path / key)
            return {"__type__": "tokenizer", "path": key}
        gensim = type(value).__module__.startswith("gensim.")
        if key == "params.embeddings" and gensim and hasattr(self.owner, "vocabulary_"):
            # A Cosinet's in-memory word vectors: saved as the vectors of the fitted vocabulary (as pickling
            # does); read back as None, which its state protocol turns into those vectors.
            return {"__type__": "fitted_vectors"}
        self.fail(key, value)

    def encode_array(self, value, key):
        """A NumPy array as JSON: numbers kept for ``arrays.safetensors`` (little-endian), strings inline."""
        kind = value.dtype.kind
        if kind in "biuf" and value.dtype.itemsize <= 8:
            if value.dtype.byteorder == ">":
                value = value.astype(value.dtype.newbyteorder("<"))
            self.arrays[key] = np.ascontiguousarray(value)
            return {"__type__": "ndarray", "key": key}
        if kind == "U" or (kind == "O" and all(isinstance(v, str) for v in value.ravel())):
            return {"__type__": "strings", "dtype": value.dtype.str, "shape": list(value.shape),
                    "data": [str(v) for v in value.ravel()]}
        self.fail(key, value, f" of dtype {value.dtype}")

    def write(self, name, params, fitted) -> None:
        """Write the arrays gathered by :meth:`encode`, then ``as2rank.json`` (:func:`write_meta`)."""
        if self.arrays:
            from safetensors.numpy import save_file

            save_file(self.arrays, str(self.path / ARRAYS_FILE))
        write_meta(self.path, name, params, fitted)


class Reader:
    """Decodes the values of one model directory's ``as2rank.json``."""

    def __init__(self, path: Path):
        self.path, self._arrays = path, None

    def arrays(self) -> dict:
        """The directory's ``arrays.safetensors``, read (and checked) on first use."""
        if self._arrays is None:
            from safetensors.numpy import load_file

            self._arrays = read_safetensors(self.path / ARRAYS_FILE, load_file)
        return self._arrays

    def decode(self, value, key=""):
        """The value that :meth:`Writer.encode` wrote as ``value``: arrays and weights read from their files,
        nested estimators loaded (:func:`read_estimator`), configurations and tokenizers checked first."""
        if isinstance(value, list):
            return [self.decode(v) for v in value]
        if not isinstance(value, dict):
            return value
        kind = value.get("__type__")
        if kind is None:
            return {k: self.decode(v, k) for k, v in value.items()}
        if kind == "ndarray":
            try:
                return self.arrays()[value["key"]]
            except KeyError:
                raise ValueError(f"{self.path / ARRAYS_FILE} lacks the array {value['key']!r}.") from None
        if kind == "strings":
            if np.dtype(value["dtype"]).kind not in "OU":
                raise ValueError(f"{self.path / META_FILE}: {value['dtype']!r} is not a string dtype.")
            data = np.empty(len(value["data"]), dtype=np.dtype(value["dtype"]))
            data[:] = value["data"]
            return data.reshape(value["shape"])
        if kind == "numpy":
            dtype = np.dtype(value["dtype"])
            if dtype.kind not in "biuf":
                raise ValueError(f"{self.path / META_FILE}: {value['dtype']!r} is not a numeric dtype.")
            return dtype.type(value["value"])
        if kind == "float":
            return float(value["value"])
        if kind == "tuple":
            return tuple(self.decode(v) for v in value["items"])
        if kind == "dict":
            return {_hashable(self.decode(k)): self.decode(v) for k, v in value["items"]}
        if kind == "path":
            return Path(value["value"])
        if kind == "estimator":
            sub = self.path / _safe_name(value["path"], self.path)
            meta = read_meta(sub)
            return read_estimator(resolve_class(meta["class"], sub / META_FILE), sub, meta, {})
        if kind == "module":
            from safetensors.torch import load_file

            file = self.path / _safe_name(value["file"], self.path)
            state = read_safetensors(file, load_file)
            check_tensors(state, file)
            return state
        if kind == "transformers_config":
            source = self.path / META_FILE
            return build_config(check_config(self.decode(value["value"]), source, saved_object=True), source)
        if kind == "tokenizer":
            return load_tokenizer(self.path / _safe_name(value["path"], self.path))
        if kind == "fitted_vectors":
            return None
        raise ValueError(f"{self.path / META_FILE} holds a value of unknown type {kind!r}.")


def _hashable(key):
    return tuple(_hashable(k) for k in key) if isinstance(key, (list, tuple)) else key


def read_safetensors(file: Path, load_file) -> dict:
    """The tensors of a safetensors ``file``, read by ``load_file`` (safetensors' NumPy or torch loader) once
    its header is checked (``formats.safetensors_header``); a missing or damaged file
    is a one-line ``ValueError``."""
    if not file.is_file():
        raise ValueError(f"{file} is missing: the model directory is incomplete.")
    safetensors_header(file)  # its metadata names nothing, its tensors lie in it
    try:
        return load_file(str(file))
    except Exception as exc:  # safetensors raises its own error type on a damaged file
        raise ValueError(f"{file} is not a readable safetensors file ({one_line(exc)}).") from None


def check_tensors(state, source) -> None:
    """Raise ``ValueError`` (naming ``source``) unless every floating tensor of a state dict (safetensors read
    back) is finite: a NaN weight would score NaN."""
    for name, tensor in state.items():
        values = tensor.detach().float().numpy() if hasattr(tensor, "detach") else np.asarray(tensor)
        if values.dtype.kind == "f" and not np.isfinite(values).all():
            raise ValueError(f"{source}: the weight {name!r} holds non-finite values; the model is damaged or was edited.")


def write_torch(state_dict, file: Path) -> None:
    """Write a torch module's weights (``state_dict``) to the safetensors ``file``, as CPU copies."""
    from safetensors.torch import save_file

    # Copies on the CPU: a model trained on a GPU loads on a machine without one, and no two tensors share memory.
    save_file({k: v.detach().to("cpu", copy=True).contiguous() for k, v in state_dict.items()}, str(file))


# ----------------------------------------------------------------------------------------------- estimators
def write_estimator(estimator, path: Path) -> None:
    """Write ``estimator`` into the folder ``path``, fitted or not (nested estimators: unfitted templates keep
    their parameters): its class's layout if it has one (``registry.LAYOUTS``), else its parameters and the
    public fitted attributes of its state (``__getstate__``). Neither sealed nor atomic: that is
    :func:`~as2rank.persistence.write_model`'s part."""
    name = class_name(estimator)
    path.mkdir(parents=True, exist_ok=True)
    if name in LAYOUTS and hasattr(estimator, "model_"):
        LAYOUTS[name][0](estimator, path)
        return
    sklearn = name in SKLEARN_CLASSES
    writer = Writer(path, estimator)
    # Parameters that act on training only (callbacks) are not part of a model: a loaded one has their defaults.
    params = {k: writer.encode(v, f"params.{k}") for k, v in estimator.get_params(deep=False).items()
              if k not in TRAINING_ONLY_PARAMS}
    if name in LAYOUTS:
        fitted = None
    else:
        # The estimator's own state protocol (what pickling saves: a torch module as CPU tensors); its public
        # fitted attributes are saved.
        attrs = {k: v for k, v in estimator.__getstate__().items()
                 if k.endswith("_") and not k.startswith("_") and k not in _UNSAVED_ATTRS}
        writer.strict = sklearn
        fitted = {k: writer.encode(v, f"fitted.{k}") for k, v in attrs.items()}
    writer.write(name, params, fitted)


def read_estimator(cls, path: Path, meta: dict, params: dict):
    """The ``cls`` estimator of the directory ``path`` whose ``as2rank.json`` is ``meta`` (:func:`open_model`
    checked it), with ``params`` overriding the saved parameters (those ``cls`` does not have go to its nested
    estimators, :func:`set_nested_params`); every value read is checked before the estimator gets it.

    Raises
    ------
    ValueError
        One line naming the file, if the directory does not describe a ``cls``.
    """
    if meta["class"] in LAYOUTS and meta["fitted"] is not None:
        return LAYOUTS[meta["class"]][1](cls, path, params, meta)
    own = set(param_names(cls))
    reader = Reader(path)
    try:
        saved = resolve_references(meta["class"], reader.decode(meta["params"]), path, given=params)
        fitted = resolve_references(meta["class"], reader.decode(meta["fitted"] or {}), path)
        renamed = _RENAMED_ATTRS.get(meta["class"], {})
        fitted = {renamed.get(k, k): v for k, v in fitted.items()}
        check_fitted(meta["class"], fitted, path / META_FILE)
        if isinstance(fitted.get("model_"), dict) and "config_" in fitted:  # a ZeroShotRanker's network, as saved
            check_network_state(fitted["config_"], fitted["model_"], path / META_FILE)
            check_loaded_tokenizer(fitted.get("tokenizer_"), getattr(fitted["config_"], "vocab_size", None), path)
        est = cls(**{**saved, **{k: v for k, v in params.items() if k in own}})
        state = {**est.__getstate__(), **fitted}
        state.update(_SKLEARN_RESTORES.get(meta["class"], lambda state: {})(state))
    except (KeyError, TypeError, AttributeError, IndexError) as exc:
        raise ValueError(f"{path / META_FILE} does not describe a {cls.__name__} ({one_line(exc)}).") from None
    # The estimator's own state protocol sets what was read (as unpickling does): it rebuilds a torch module
    # from its weights.
    est.__setstate__(state)
    set_nested_params(est, {k: v for k, v in params.items() if k not in own})
    check_params(est, path / META_FILE)
    return est


def _children(value):
    """The estimators held by a value (directly, or in lists, tuples and dicts)."""
    if _is_estimator(value):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _children(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _children(v)


def set_nested_params(est, params: dict) -> None:
    """Set each of ``params`` on every estimator nested in ``est`` that has that parameter."""
    done = set()

    def visit(node):
        for child in _children(list(vars(node).values())):
            names = child.get_params(deep=False)
            child.set_params(**{k: v for k, v in params.items() if k in names})
            done.update(k for k in params if k in names)
            visit(child)

    if params:
        visit(est)
    unknown = sorted(set(params) - done)
    if unknown:
        raise ValueError(f"{type(est).__name__} and the estimators it holds have no parameter {', '.join(unknown)}.")


# ----------------------------------------------------------------------------------------------- scikit-learn
def _restore_ridge(state) -> dict:
    from sklearn.preprocessing import LabelBinarizer

    if "classes_" not in state:
        return {}
    return {"_label_binarizer": LabelBinarizer(pos_label=1, neg_label=-1).fit(state["classes_"])}


#: Private state that prediction needs, rebuilt from the public fitted attributes (added to the state given to
#: the estimator's ``__setstate__``).
_SKLEARN_RESTORES = {"sklearn.linear_model.RidgeClassifier": _restore_ridge}
