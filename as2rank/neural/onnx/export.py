"""Export of a torch module that takes a batch dict to one ONNX graph (``torch.onnx.export``, dynamo), with
rows and tokens as dynamic axes, and the rewrite of the exported graph that ONNX Runtime runs faster.

The rewrite: the exporter writes an exact GELU as the standard ``Gelu`` operator, and ONNX Runtime's
CPU kernel for that operator is slower than its own ``com.microsoft.Gelu``, which computes the same
``x * Φ(x)`` (its erf-based form, not the tanh approximation). ONNX Runtime does not make that substitution
itself. Only ``Gelu`` nodes without the tanh approximation are rewritten; the export check of
:class:`~as2rank.neural.onnx.runtime.OnnxModule` runs on the rewritten graph.

Optional: needs ``onnx`` and ``onnxscript`` besides torch (``pip install as2rank[onnx]``).
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from pathlib import Path

import torch

__all__ = ["contrib_gelu", "export_graph", "padded", "quiet"]

#: The operator set of ONNX Runtime's own operators.
_CONTRIB = "com.microsoft"


class _Positional(torch.nn.Module):
    """The module with its batch dict as positional tensors (ONNX graphs take named positional inputs)."""

    def __init__(self, module, names):
        super().__init__()
        self.module = module
        self.names = tuple(names)

    def forward(self, *tensors):
        return self.module(dict(zip(self.names, tensors)))


def export_graph(module, example: dict, path: Path) -> None:
    """Write ``module`` (batch dict in) to ``path`` as an ONNX graph whose inputs are the keys of ``example``,
    with dynamic rows and tokens (the first two axes of a tensor of two or more axes), then rewrite its
    exact ``Gelu`` nodes as ONNX Runtime's."""
    import onnx

    rows, tokens = torch.export.Dim("rows"), torch.export.Dim("tokens")
    shapes = tuple({0: rows, 1: tokens} if v.ndim >= 2 else {0: rows} for v in example.values())
    torch.onnx.export(
        _Positional(module, example),
        tuple(example.values()),
        str(path),
        input_names=list(example),
        dynamic_shapes=(shapes,),  # forward(*tensors): one varargs entry
        dynamo=True,
        external_data=False,
        verbose=False,
    )
    graph = onnx.load(str(path))
    if contrib_gelu(graph):
        onnx.save(graph, str(path))


def contrib_gelu(graph) -> int:
    """Rewrite the standard exact ``Gelu`` nodes of ``graph`` (an ``onnx.ModelProto``, in place) as
    ``com.microsoft.Gelu``; the number rewritten."""
    exact = [node for node in graph.graph.node if node.op_type == "Gelu" and node.domain in ("", "ai.onnx")
             and all(a.name != "approximate" or a.s in (b"", b"none") for a in node.attribute)]
    for node in exact:
        node.domain = _CONTRIB
        del node.attribute[:]
    if exact and not any(o.domain == _CONTRIB for o in graph.opset_import):
        graph.opset_import.add(domain=_CONTRIB, version=1)
    return len(exact)


@contextlib.contextmanager
def quiet():
    """Silence the exporter's and the quantizer's log lines (notes on optional operators, advice to
    pre-process) and warnings for the duration of a build."""
    before = logging.root.manager.disable  # the process's own level, put back afterwards
    logging.disable(max(before, logging.WARNING))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(before)


def padded(batch: dict, columns: int) -> dict:
    """``batch`` with ``columns`` padding tokens (zeros, masked) after every row: traced and checked batches
    always hold padding, so no graph can specialise on an all-ones attention mask."""
    return {k: torch.nn.functional.pad(v, (0, 0) * (v.ndim - 2) + (0, columns)) if v.ndim >= 2 else v
            for k, v in batch.items()}
