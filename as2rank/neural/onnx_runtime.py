"""Prediction on ONNX Runtime: a fitted torch module exported once to ONNX (``torch.onnx.export``), its
matrix products quantized to int8 for ``precision="int8"`` (ONNX Runtime's dynamic quantization, whose
kernels use AVX-512 VNNI where the CPU has it), and run by an ``InferenceSession``.

BERT-style self-attention blocks are exported as ONNX Runtime's fused ``com.microsoft.Attention`` operator
(one node: the query, key and value projections as one matrix product, then the attention itself), which
dynamic quantization turns into ``QAttention``; ONNX Runtime's own graph optimizer does not recognise the
attention that the exporter writes, so without it each block is some twenty nodes.

:class:`OnnxModule` is called like the module it was exported from (a batch dict of tensors in, the logits
tensor out), so the one predict loop (:func:`as2rank.neural.predict.predict_batches`) runs it unchanged. An
export is checked against the torch module on a batch of another shape before it is used: a graph that
traced a shape as a constant, or any other disagreement, raises instead of scoring.

Optional: needs ``onnxruntime``, ``onnx`` and ``onnxscript`` (``pip install as2rank[onnx]``).
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import logging
import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch

__all__ = ["OnnxCascade", "OnnxModule", "int8_copy", "onnx_available"]

#: Packages the export and the runtime need.
_PACKAGES = ("onnxruntime", "onnx", "onnxscript")
#: Largest difference between the exported float32 graph's logits and the torch module's that the check
#: accepts (float32 sums in another order differ by ~1e-6).
_EXPORT_TOLERANCE = 1e-3
#: Graph rewrites that ONNX Runtime's sessions skip here: its fused SkipLayerNormalization kernel (the residual
#: Add and the LayerNormalization after it, as one node) ran slower on the CPU of ``docs/benchmarks/cpu_inference.md``
#: than the two nodes it replaces. Same arithmetic either way.
DISABLED_FUSIONS = ("SkipLayerNormFusion",)


def onnx_available() -> bool:
    """Whether ONNX Runtime and the exporter's packages are installed."""
    return all(importlib.util.find_spec(name) is not None for name in _PACKAGES)


class _FusedSelfAttention(torch.nn.Module):
    """A BERT-style self-attention block (separate ``query``, ``key`` and ``value`` projections, scaled dot
    products over the unmasked tokens) as ONNX Runtime's ``com.microsoft.Attention`` node, for export only:
    called eagerly it returns a placeholder. Takes and returns what the block it replaces does."""

    def __init__(self, block):
        super().__init__()
        self.num_heads = int(block.num_attention_heads)
        projections = (block.query, block.key, block.value)
        # Attention's weights are (hidden, 3 × hidden): query, key, value side by side.
        self.weight = torch.nn.Parameter(torch.cat([p.weight for p in projections]).T.contiguous().detach())
        self.bias = torch.nn.Parameter(torch.cat([p.bias for p in projections]).detach())

    def forward(self, hidden_states, attention_mask=None, *args, **kwargs):
        rows, tokens, _ = hidden_states.shape
        if attention_mask is None:
            keep = torch.ones((rows, tokens), dtype=torch.int32)
        else:
            # The encoder's 4-D mask (rows, 1, queries or 1, tokens), boolean (True: attend) or additive (0:
            # attend); query 0 is the first token, never padding, so its row is the padding mask.
            first = attention_mask[:, 0, 0, :]
            keep = (first if first.dtype == torch.bool else first == 0).to(torch.int32)
        out = torch.onnx.ops.symbolic(
            "com.microsoft::Attention", (hidden_states, self.weight, self.bias, keep), {"num_heads": self.num_heads},
            dtype=hidden_states.dtype, shape=(rows, tokens, self.weight.shape[1] // 3), version=1,
        )
        return out, None


def _is_bert_self_attention(block) -> bool:
    """Whether ``block`` computes what :class:`_FusedSelfAttention` does: bidirectional scaled dot-product
    attention over biased ``query``/``key``/``value`` projections of its input, nothing else."""
    linear = all(isinstance(getattr(block, n, None), torch.nn.Linear) and getattr(block, n).bias is not None
                 for n in ("query", "key", "value"))
    return (linear and hasattr(block, "num_attention_heads") and hasattr(block, "attention_head_size")
            and getattr(block, "scaling", block.attention_head_size**-0.5) == block.attention_head_size**-0.5
            and not getattr(block, "is_decoder", False) and not getattr(block, "is_causal", False)
            and getattr(block, "position_embedding_type", "absolute") == "absolute"
            and block.query.out_features == block.num_attention_heads * block.attention_head_size)


def _with_fused_attention(module):
    """A copy of ``module`` whose BERT-style self-attention blocks (``<...>.attention.self``) export as fused
    ``Attention`` nodes, or ``module`` itself where it has none; the export check compares the graph with
    ``module`` either way."""
    names = [name for name, block in module.named_modules()
             if name.endswith("attention.self") and _is_bert_self_attention(block)]
    if not names:
        return module
    fused = copy.deepcopy(module)
    for name in names:
        parent, _, attr = name.rpartition(".")
        setattr(fused.get_submodule(parent), attr, _FusedSelfAttention(fused.get_submodule(name)))
    return fused


class _Positional(torch.nn.Module):
    """The module with its batch dict as positional tensors (ONNX graphs take named positional inputs)."""

    def __init__(self, module, names):
        super().__init__()
        self.module = module
        self.names = tuple(names)

    def forward(self, *tensors):
        return self.module(dict(zip(self.names, tensors)))


class OnnxModule:
    """A fitted module on ONNX Runtime, called like the module: ``onnx_module(batch)`` -> its output tensor
    (or tuple of tensors).

    Parameters
    ----------
    module : torch.nn.Module
        Maps a batch dict of tensors to a float tensor, or a tuple of them, whose first axis is the batch's
        rows; every input's first two axes (rows, then tokens where it has more than one) may vary between
        batches.
    example : dict of torch.Tensor
        A batch (CPU) of at least two rows whose keys are the inputs every batch will have; tensors of two
        or more axes are (rows, tokens, ...) arrays that zeros pad along the tokens. The export traces it
        padded; the check runs the module and the graph on it with one row fewer and more padding.
    quantize : bool
        Quantize the graph's matrix products to int8 (dynamic: activations are quantized per batch).
    threads : int
        ONNX Runtime's intra-op threads.

    Raises
    ------
    ImportError
        Without the optional packages.
    RuntimeError
        If the exported float32 graph disagrees with the module.
    """

    def __init__(self, module, example: dict, *, quantize: bool, threads: int):
        if not onnx_available():
            raise ImportError(
                "The ONNX Runtime backend needs onnxruntime, onnx and onnxscript: pip install as2rank[onnx]"
            )
        self.names = tuple(example)
        self.quantize = quantize
        self.threads = int(threads)
        module = module.to("cpu").eval()
        with tempfile.TemporaryDirectory() as folder, _quiet():
            graph = Path(folder) / "model.onnx"
            _export(_Positional(_with_fused_attention(module), self.names), _padded(example, 1), graph)
            self._check(module, self._session(graph), example)
            if quantize:
                from onnxruntime.quantization import QuantType, quantize_dynamic

                quantized = Path(folder) / "model.int8.onnx"
                quantize_dynamic(graph, quantized, weight_type=QuantType.QInt8, per_channel=True)
                graph = quantized
            self.session = self._session(graph)

    def _session(self, graph: Path):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        return ort.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"],
                                    disabled_optimizers=list(DISABLED_FUSIONS))

    def _check(self, module, session, example) -> None:
        """Compare the float32 graph with the module on a batch of another shape than the traced one."""
        batch = {k: v[:-1] for k, v in _padded(example, 3).items()}
        with torch.inference_mode():
            expected = _as_tuple(module(batch))
        got = session.run(None, {k: v.numpy() for k, v in batch.items()})
        for mine, theirs in zip(got, expected, strict=True):
            theirs = theirs.float().numpy()
            if mine.shape != theirs.shape or not np.allclose(mine, theirs, atol=_EXPORT_TOLERANCE, rtol=0):
                same = mine.shape == theirs.shape
                gap = np.abs(mine - theirs).max() if same else f"shape {mine.shape} vs {theirs.shape}"
                raise RuntimeError(
                    f"The ONNX export of the model disagrees with the torch model (largest difference {gap}); "
                    "predict with another precision."
                )

    def __call__(self, batch: dict) -> torch.Tensor:
        missing = set(self.names) - set(batch)
        if missing:
            raise ValueError(f"The batch lacks the inputs {sorted(missing)} the exported model takes.")
        feeds = {name: batch[name].numpy() for name in self.names}
        outputs = tuple(torch.from_numpy(out) for out in self.session.run(None, feeds))
        return outputs[0] if len(outputs) == 1 else outputs


def int8_copy(module, example: dict, threads: int):
    """An int8 copy on ONNX Runtime of a module that declares ``onnx_exportable``: the module as one graph
    (:class:`OnnxModule`), or a cascade (a module with ``segments()``) as one graph per segment
    (:class:`OnnxCascade`).

    Parameters
    ----------
    module : torch.nn.Module
    example : dict of torch.Tensor
        A batch of at least two rows (see :class:`OnnxModule`).
    threads : int
        ONNX Runtime's intra-op threads.
    """
    if hasattr(module, "segments"):
        return OnnxCascade(module, example, threads=threads)
    return OnnxModule(module, example, quantize=True, threads=threads)


class OnnxCascade:
    """A :class:`~as2rank.neural.heads.CascadeEncoder` whose exit segments run on ONNX Runtime, in int8: its
    ``cascade`` is the module's, with the drops decided as there and each segment's blocks and
    classifier computed by its graph.

    Parameters
    ----------
    module : as2rank.neural.heads.CascadeEncoder
    example : dict of torch.Tensor
        A batch of at least two rows; its token arrays trace the first segment, and each segment's hidden
        states on them trace the next.
    threads : int
    """

    def __init__(self, module, example: dict, *, threads: int):
        self.module = module.to("cpu").eval()
        self.segments = []
        state = {k: v for k, v in example.items() if v.ndim == 2}  # what the cascade's chunks carry
        for segment in self.module.segments():
            self.segments.append(OnnxModule(segment, state, quantize=True, threads=threads))
            with torch.inference_mode():
                hidden, _ = segment(state)
            state = {"hidden": hidden, "attention_mask": state["attention_mask"]}

    def cascade(self, *args, **kwargs):
        """:meth:`CascadeEncoder.cascade <as2rank.neural.heads.CascadeEncoder.cascade>` on the graphs."""
        return self.module.cascade(*args, segments=self.segments, **kwargs)


@contextlib.contextmanager
def _quiet():
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


def _padded(batch: dict, columns: int) -> dict:
    """``batch`` with ``columns`` padding tokens (zeros, masked) after every row: traced and checked batches
    always hold padding, so no graph can specialise on an all-ones attention mask."""
    return {k: torch.nn.functional.pad(v, (0, 0) * (v.ndim - 2) + (0, columns)) if v.ndim >= 2 else v
            for k, v in batch.items()}


def _as_tuple(out) -> tuple:
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def _export(module, example: dict, path: Path) -> None:
    """Export ``module`` (positional tensors) with dynamic rows and tokens."""
    rows, tokens = torch.export.Dim("rows"), torch.export.Dim("tokens")
    shapes = tuple({0: rows, 1: tokens} if v.ndim >= 2 else {0: rows} for v in example.values())
    torch.onnx.export(
        module,
        tuple(example.values()),
        str(path),
        input_names=list(example),
        dynamic_shapes=(shapes,),  # forward(*tensors): one varargs entry
        dynamo=True,
        external_data=False,
        verbose=False,
    )
