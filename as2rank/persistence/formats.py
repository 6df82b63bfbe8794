"""The two binary formats a model directory holds, checked before a library reads them (see
:mod:`as2rank.persistence.checks`): safetensors files (:func:`safetensors_header`, from the header alone) and the
int8 ONNX graphs of ``onnx/`` (:func:`check_onnx_folder`). Neither may name another file: safetensors metadata is
``{"format": "pt"}`` or nothing, and no tensor of a graph reads external data."""

from __future__ import annotations

import json
import math
import re
import struct
from pathlib import Path

from .trust import parse_json

__all__ = ["FLOAT_DTYPES", "check_onnx_folder", "one_line", "safetensors_header"]

_DTYPES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
           "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "U32": 4, "U64": 8}
#: Safetensors dtypes of floating tensors.
FLOAT_DTYPES = ("F64", "F32", "F16", "BF16")
_MAX_HEADER = 100 << 20


def one_line(exc, limit=300) -> str:
    """An exception's message on one line, at most ``limit`` characters."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ----------------------------------------------------------------------------------------------- safetensors
def safetensors_header(file) -> dict:
    """The tensors of a safetensors file, from its header alone: ``{name: (dtype, shape)}``, after checking that
    every tensor's bytes lie in the file, back to back, as many as its dtype and shape say, and that the
    metadata, if any, is ``{"format": "pt"}`` (the only metadata as2rank and transformers write; transformers
    reads this field to pick a loader).

    Raises
    ------
    ValueError
        One line naming the file.
    """
    file = Path(file)
    bad = f"{file} is not a readable safetensors file"
    size = file.stat().st_size
    with open(file, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise ValueError(f"{bad} (it is truncated).")
        (length,) = struct.unpack("<Q", head)
        if length > min(size - 8, _MAX_HEADER):
            raise ValueError(f"{bad} (its header overruns the file).")
        header = _parse_header(f.read(length), bad)
    metadata = header.pop("__metadata__", None)
    if metadata not in (None, {"format": "pt"}):
        raise ValueError(f"{file}: its metadata {json.dumps(metadata)[:200]} is not what as2rank saves "
                         "({\"format\": \"pt\"}); the model directory was edited, and is refused.")
    tensors, spans = {}, []
    for name, entry in header.items():
        try:
            dtype, shape, (begin, end) = entry["dtype"], entry["shape"], entry["data_offsets"]
            ok = (dtype in _DTYPES and isinstance(shape, list) and all(type(n) is int and n >= 0 for n in shape)
                  and type(begin) is int and type(end) is int and 0 <= begin <= end
                  and end - begin == math.prod(shape) * _DTYPES[dtype])
        except (TypeError, KeyError, ValueError):
            ok = False
        if not ok:
            raise ValueError(f"{bad} (the entry of {name!r} is not a tensor of a known dtype inside the file).")
        tensors[name] = (dtype, tuple(shape))
        spans.append((begin, end))
    position = 0
    for begin, end in sorted(spans):
        if begin != position:
            raise ValueError(f"{bad} (its tensors overlap or leave gaps).")
        position = end
    if position != size - 8 - length:
        raise ValueError(f"{bad} (its size is not that of its tensors).")
    return tensors


def _parse_header(raw: bytes, bad: str) -> dict:
    try:
        header = parse_json(raw.decode("utf-8"), "its header")
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"{bad} ({one_line(exc)}).") from None
    if not isinstance(header, dict):
        raise ValueError(f"{bad} (its header is not an object).")
    return header


# ----------------------------------------------------------------------------------------------- int8 graphs
def check_onnx_folder(folder) -> bool:
    """Check the int8 graphs saved with a model: ``int8-<i>.onnx`` files only, each an ONNX model none of whose
    tensors (initializers, sparse ones, node attributes, in every subgraph, function and training graph)
    reads external data, which names a file by path. A file that is not an ONNX model passes: prediction reads
    graphs with the same parser, never uses one it cannot read, and exports again.

    Returns
    -------
    bool
        Whether the graphs may be used: False where the ``onnx`` package is missing (they could not be read
        then, and are not).

    Raises
    ------
    ValueError
        One line naming the first graph refused.
    """
    folder = Path(folder)
    files = (p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    unknown = sorted(f for f in files if not re.fullmatch(r"int8-\d+\.onnx", f))
    if unknown:
        raise ValueError(f"{folder}: {unknown[0]} is not an int8 graph that as2rank saves; it is refused.")
    try:
        import onnx
    except ImportError:
        return False
    for file in sorted(folder.glob("int8-*.onnx")):
        try:
            model = onnx.load_from_string(file.read_bytes())
        except Exception:  # protobuf's DecodeError: a damaged graph, which prediction never uses (it exports again)
            continue
        if any(_external(t) for t in _model_tensors(model)):
            raise ValueError(f"{file}: a tensor of the graph reads external data (a file named by path), which "
                             "as2rank never saves; the graph is refused.")
    return True


def _external(tensor) -> bool:
    """Whether a tensor reads its data from a file (ONNX Runtime follows the location it names)."""
    from onnx import TensorProto

    return tensor.data_location == TensorProto.EXTERNAL or len(tensor.external_data) > 0


def _model_tensors(model):
    """Every tensor of an ONNX model: its graph's, its functions', its training graphs' (and their subgraphs')."""
    yield from _graph_tensors(model.graph)
    for function in model.functions:
        yield from _node_tensors(function.node)
    for info in model.training_info:
        yield from _graph_tensors(info.initialization)
        yield from _graph_tensors(info.algorithm)


def _graph_tensors(graph):
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield from (sparse.values, sparse.indices)
    yield from _node_tensors(graph.node)


def _node_tensors(nodes):
    for node in nodes:
        for attribute in node.attribute:
            if attribute.HasField("t"):
                yield attribute.t
            yield from attribute.tensors
            sparse = list(attribute.sparse_tensors)
            if attribute.HasField("sparse_tensor"):
                sparse.append(attribute.sparse_tensor)
            for tensor in sparse:
                yield from (tensor.values, tensor.indices)
            if attribute.HasField("g"):
                yield from _graph_tensors(attribute.g)
            for graph in attribute.graphs:
                yield from _graph_tensors(graph)
