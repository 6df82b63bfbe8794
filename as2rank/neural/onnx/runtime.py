"""Prediction on ONNX Runtime: a fitted torch module exported once to ONNX (``torch.onnx.export``), its
matrix products in int8 for ``precision="int8"``, and run by an ``InferenceSession``.

Int8 is static quantization: weights are int8 per output column, and each matrix product's input is
rounded to a uint8 grid fixed by the range it took on calibration rows at fit time
(:mod:`as2rank.neural.onnx.calibration`). Before that the input is smoothed (SmoothQuant, Xiao et al., 2023,
https://arxiv.org/abs/2211.10438): input channel j is divided by a factor s_j and the weights it meets are
multiplied by it, the same product in exact arithmetic, so that the few channels of a transformer whose range
is far wider than the others' no longer set the grid's step for all of them. ONNX Runtime's integer kernels
(AVX-512 VNNI where the CPU has it) then compute a row's score from that row alone. Dynamic quantization,
which scales each input by the range of its whole batch, would make the score depend on the rows predicted
beside it. On x86 CPUs without AVX-512 VNNI, whose uint8 × int8 kernels clamp partial sums to 16 bits
(:func:`u8s8_sums_exact`), the int8 session asks ONNX Runtime for its exact uint8 × uint8 kernels instead
(``session.x64quantprecision``): the same scores, computed more slowly.

BERT-style self-attention blocks are exported as one ONNX Runtime node, ``com.microsoft.Attention`` (or
``QAttention`` in int8): the query, key and value projections as one matrix product, then the attention
itself. ONNX Runtime's own graph optimizer does not recognise the attention that the exporter writes, so
without it each block is some twenty nodes (``docs/studies/int8_operators.md`` times the other ways of writing
it).

:class:`OnnxModule` is called like the module it was exported from (a batch dict of tensors in, the logits
tensor out), so the one predict loop (:func:`as2rank.neural.predict.predict_batches`) runs it unchanged. An
export is checked against the torch module on a batch of another shape before it is used: a graph that traced
a shape as a constant, or any other disagreement, raises instead of scoring. The int8 graph is the checked
float32 graph with the integer operators in place of the float ones.

The exports take seconds, so the int8 graphs can be saved with the model (:func:`write_int8_copy`, which
``save_pretrained(path, int8=True)`` calls) and read back instead of exporting (``int8_copy(..., saved=)``).
Each records :func:`copy_digest` (as2rank's code, the weights, the int8 ranges and the inputs); graphs whose
digest is not the model's are never used.

Optional: needs ``onnxruntime``, ``onnx`` and ``onnxscript`` (``pip install as2rank[onnx]``).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import importlib.util
import platform
import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ..backbone import CARRIED
from .export import export_graph, padded, quiet

__all__ = ["FusedSelfAttention", "Int8Input", "Int8Linear", "OnnxCascade", "OnnxModule", "copy_digest", "cpu_session",
           "export_copy", "int8_copy", "onnx_available", "ranges_key", "u8s8_sums_exact", "write_int8_copy"]

#: Packages the export and the runtime need.
_PACKAGES = ("onnxruntime", "onnx", "onnxscript")
#: Largest difference between the exported float32 graph's logits and the torch module's that the check
#: accepts (float32 sums in another order differ by ~1e-6).
_EXPORT_TOLERANCE = 1e-3
#: Graph rewrites that ONNX Runtime's sessions skip here: its fused SkipLayerNormalization kernel (the residual
#: Add and the LayerNormalization after it, as one node) runs slower on the CPU than the two nodes it replaces
#: (``docs/studies/int8_operators.md``). Same arithmetic either way, up to the order of float sums.
DISABLED_FUSIONS = ("SkipLayerNormFusion",)
#: SmoothQuant's migration strength α: input channel j of an int8 matrix product is divided by ``s_j = peak_j ** α
#: / weight_peak_j ** (1 - α)`` (its largest absolute value on the calibration rows, and that of the weights it
#: meets), shifting the quantization error from the inputs to the weights. 0.8 reproduced float32 scores best
#: among the strengths the CPU prediction benchmark compares; ``None``: no smoothing.
SMOOTHING = 0.8


def onnx_available() -> bool:
    """Whether ONNX Runtime and the exporter's packages are installed."""
    return all(importlib.util.find_spec(name) is not None for name in _PACKAGES)


def u8s8_sums_exact() -> bool:
    """Whether ONNX Runtime's uint8 × int8 matrix products are exact on this CPU. x86 CPUs with AVX-512 VNNI
    sum the products in 32 bits; ONNX Runtime documents that other x86 CPUs (SSE4.1, AVX2, AVX-512 without
    VNNI) add each pair of neighbouring products in saturating 16-bit arithmetic (255 × 127 × 2 > 32,767),
    which would silently clamp the int8 model's sums. AVX-VNNI without AVX-512 counts as not exact: its
    kernels were not checked. Other architectures: exact."""
    if platform.machine().lower() not in ("x86_64", "amd64", "i386", "i686", "x86"):
        return True
    return bool(torch.cpu.get_capabilities().get("avx512_vnni", False))


def cpu_session(graph, *, threads: int = 1, spinning: bool = True, exact_integer_sums: bool = False):
    """An ONNX Runtime CPU ``InferenceSession`` of ``graph`` (bytes or a path) as as2rank runs its exports:
    ``threads`` intra-op threads, optionally not spinning, without :data:`DISABLED_FUSIONS`, and with
    ``exact_integer_sums`` on ONNX Runtime's exact uint8 × uint8 kernels instead of its uint8 × int8 ones (the
    int8 sessions' choice where :func:`u8s8_sums_exact` is False)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = int(threads)
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    if not spinning:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if exact_integer_sums:
        # ONNX Runtime rewrites the int8 weights as uint8 so that its u8u8 kernels run: the same products,
        # summed without the 16-bit clamp, slower (see u8s8_sums_exact).
        options.add_session_config_entry("session.x64quantprecision", "1")
    graph = graph if isinstance(graph, bytes) else str(graph)
    return ort.InferenceSession(graph, options, providers=["CPUExecutionProvider"],
                                disabled_optimizers=list(DISABLED_FUSIONS))


def _activation_quantization(low: float, high: float) -> tuple[float, int]:
    """Scale and zero point of uint8 activations over ``[low, high]`` widened to hold 0 (so that zero, the
    padding's value, is exact), as ONNX Runtime's ``DynamicQuantizeLinear`` computes them for a batch."""
    low, high = min(float(low), 0.0), max(float(high), 0.0)
    scale = (high - low) / 255.0 or 1.0
    return scale, int(np.clip(round(-low / scale), 0, 255))


def _smoothed_range(ranges, weight: torch.Tensor, alpha: float | None) -> tuple[float, float, np.ndarray | None]:
    """The range of a matrix product's smoothed input and the smoothing factors ``s`` (one per input channel):
    ``ranges`` holds each channel's low and high (shape (2, n_inputs)) or the whole input's (``[low, high]``,
    as models calibrated before per-channel ranges hold: no smoothing), ``weight`` is (out, in)."""
    r = np.asarray(ranges, dtype=np.float64)
    if r.ndim == 1 or alpha is None:
        return float(r[0].min()), float(r[1].max()), None
    peak = np.maximum(np.abs(r[0]), np.abs(r[1]))
    weight_peak = weight.detach().abs().amax(dim=0).double().cpu().numpy()
    usable = (peak > 0) & (weight_peak > 0)  # a channel never seen non-zero, or meeting zero weights: left as is
    s = np.ones_like(peak)
    s[usable] = peak[usable] ** alpha / weight_peak[usable] ** (1 - alpha)
    return float((r[0] / s).min()), float((r[1] / s).max()), s


def _weight_int8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 weights per output column: ``weight`` (out, in) as int8 of shape (in, out), and the
    scale of each column."""
    scale = weight.abs().amax(dim=1) / 127.0
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    return torch.round(weight / scale[:, None]).clamp(-127, 127).to(torch.int8).T.contiguous(), scale


class Int8Input(nn.Module):
    """A matrix product whose input is quantized with a fixed scale and zero point (static quantization) and
    whose weights are int8 per output column. Eagerly it computes the same arithmetic in float32 (what the
    tests compare the exported operators with); exported it writes ONNX Runtime's integer operators."""

    def _set_int8(self, weight: torch.Tensor, bias: torch.Tensor, ranges) -> None:
        """Quantize ``weight`` (out, in) for inputs of ``ranges`` (see :func:`_smoothed_range`)."""
        weight = weight.detach().float()
        low, high, smoothing = _smoothed_range(ranges, weight, SMOOTHING)
        scale, zero = _activation_quantization(low, high)
        self.register_buffer("scale", torch.tensor(scale, dtype=torch.float32))
        self.register_buffer("zero", torch.tensor(zero, dtype=torch.uint8))
        weight = weight if smoothing is None else weight * torch.from_numpy(smoothing).float()
        self.register_buffer("inverse", None if smoothing is None else torch.from_numpy(1 / smoothing).float())
        codes, column_scale = _weight_int8(weight)
        self.register_buffer("weight", codes)
        self.register_buffer("weight_scale", column_scale)
        self.register_buffer("bias", bias.detach().float().clone())

    def _smoothed(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` with each channel divided by its smoothing factor (a ``Mul`` node in the graph)."""
        return x if self.inverse is None else x * self.inverse

    def _quantized(self, x: torch.Tensor) -> torch.Tensor:
        """The ``QuantizeLinear`` node of the smoothed ``x`` (export only)."""
        return torch.onnx.ops.symbolic("QuantizeLinear", (self._smoothed(x), self.scale, self.zero),
                                       dtype=torch.uint8, shape=x.shape)

    def _product(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` smoothed, rounded to its uint8 grid, times the int8 weights, plus the bias (eager only)."""
        codes = torch.clamp(torch.round(self._smoothed(x) / self.scale) + self.zero.float(), 0, 255)
        return ((codes - self.zero.float()) * self.scale) @ (self.weight.float() * self.weight_scale) + self.bias


class Int8Linear(Int8Input):
    """A linear layer in int8 with a static input range (see :class:`Int8Input`), exported as
    ``QuantizeLinear`` then ``com.microsoft.MatMulIntegerToFloat``."""

    def __init__(self, linear: nn.Linear, ranges):
        super().__init__()
        bias = linear.bias if linear.bias is not None else torch.zeros(linear.out_features)
        self._set_int8(linear.weight, bias, ranges)

    def forward(self, x):
        """``x @ W.T + b`` in int8 (eager), or the ONNX Runtime node while the module is exported."""
        if not torch.onnx.is_in_onnx_export():
            return self._product(x)
        # No weight zero point (symmetric weights: 0, the operator's default).
        inputs = (self._quantized(x), self.weight, self.scale, self.weight_scale, self.zero, None, self.bias)
        return torch.onnx.ops.symbolic("com.microsoft::MatMulIntegerToFloat", inputs, dtype=torch.float32,
                                       shape=(*x.shape[:-1], self.weight.shape[1]), version=1)


class FusedSelfAttention(Int8Input):
    """A BERT-style self-attention block (separate ``query``, ``key`` and ``value`` projections, scaled dot
    products over the unmasked tokens) exported as one ONNX Runtime node: ``com.microsoft.Attention``, or,
    given the range of its input, ``QAttention`` (the three projections in int8 with a static input range,
    see :class:`Int8Input`). Takes and returns what the block it replaces does."""

    def __init__(self, block, input_range=None):
        super().__init__()
        self.num_heads = int(block.num_attention_heads)
        projections = (block.query, block.key, block.value)
        # Query, key and value side by side: (3 × hidden, hidden).
        weight = torch.cat([p.weight for p in projections]).detach()
        bias = torch.cat([p.bias for p in projections]).detach()
        self.int8 = input_range is not None
        if self.int8:
            self._set_int8(weight, bias, input_range)
        else:
            self.register_buffer("weight", weight.T.contiguous())
            self.register_buffer("bias", bias.clone())

    def forward(self, hidden_states, attention_mask=None, *args, **kwargs):
        """The attention block's output (eager), or the ONNX Runtime node while the module is exported."""
        rows, tokens, width = hidden_states.shape
        if attention_mask is None:
            keep = torch.ones((rows, tokens), dtype=torch.int32, device=hidden_states.device)
        else:
            # The encoder's 4-D mask (rows, 1, queries or 1, tokens), boolean (True: attend) or additive (0:
            # attend); query 0 is the first token, never padding, so its row is the padding mask.
            first = attention_mask[:, 0, 0, :]
            keep = (first if first.dtype == torch.bool else first == 0).to(torch.int32)
        if torch.onnx.is_in_onnx_export():
            attrs, shape = {"num_heads": self.num_heads}, (rows, tokens, self.bias.shape[0] // 3)
            if self.int8:
                inputs = (self._quantized(hidden_states), self.weight, self.bias, self.scale, self.weight_scale,
                          keep, self.zero)
                return torch.onnx.ops.symbolic("com.microsoft::QAttention", inputs, attrs, dtype=torch.float32,
                                               shape=shape, version=1), None
            inputs = (hidden_states, self.weight, self.bias, keep)
            return torch.onnx.ops.symbolic("com.microsoft::Attention", inputs, attrs, dtype=hidden_states.dtype,
                                           shape=shape, version=1), None
        qkv = self._product(hidden_states) if self.int8 else hidden_states @ self.weight + self.bias
        heads = qkv.view(rows, tokens, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)  # (3, rows, heads, tokens, d)
        scores = heads[0] @ heads[1].transpose(-1, -2) / heads.shape[-1] ** 0.5
        # The masked keys get ONNX Runtime's additive -10000.
        scores = scores + (1 - keep[:, None, None, :].to(scores.dtype)) * -10000.0
        context = torch.softmax(scores, dim=-1) @ heads[2]
        return context.transpose(1, 2).reshape(rows, tokens, -1), None


def _is_bert_self_attention(block) -> bool:
    """Whether ``block`` computes what :class:`FusedSelfAttention` does: bidirectional scaled dot-product
    attention over biased ``query``/``key``/``value`` projections of its input, nothing else."""
    linear = all(isinstance(getattr(block, n, None), torch.nn.Linear) and getattr(block, n).bias is not None
                 for n in ("query", "key", "value"))
    return (linear and hasattr(block, "num_attention_heads") and hasattr(block, "attention_head_size")
            and getattr(block, "scaling", block.attention_head_size**-0.5) == block.attention_head_size**-0.5
            and not getattr(block, "is_decoder", False) and not getattr(block, "is_causal", False)
            and getattr(block, "position_embedding_type", "absolute") == "absolute"
            and block.query.out_features == block.num_attention_heads * block.attention_head_size)


def export_copy(module, ranges: dict | None = None):
    """What is exported of ``module``: its BERT-style self-attention blocks (``<...>.attention.self``) as fused
    ``Attention`` nodes and, given ``ranges`` (``{name of a linear layer: the range of its input}``,
    :func:`~as2rank.neural.onnx.calibration.activation_ranges`), every linear layer with a range in int8 (an
    attention block takes its ``query``'s). A copy, or ``module`` itself where nothing changes; the export
    check compares the graph with the copy's eager arithmetic."""
    ranges = ranges or {}
    blocks = [name for name, block in module.named_modules()
              if name.endswith("attention.self") and _is_bert_self_attention(block)]
    linear = [name for name, layer in module.named_modules() if isinstance(layer, nn.Linear) and name in ranges
              and not any(name.startswith(f"{block}.") for block in blocks)]
    if not blocks and not linear:
        return module
    copied = copy.deepcopy(module)
    for name in blocks:
        block = FusedSelfAttention(copied.get_submodule(name), ranges.get(f"{name}.query"))
        copied.set_submodule(name, block)
    for name in linear:
        copied.set_submodule(name, Int8Linear(copied.get_submodule(name), ranges[name]))
    return copied


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
    ranges : dict, optional
        ``{name of a linear layer in module: [lows, highs]}``, the range of each channel of its input over
        calibration rows (:func:`~as2rank.neural.onnx.calibration.activation_ranges`; a whole-input ``[low, high]``
        is used without smoothing): those layers' matrix products run in int8, their input smoothed
        (``SMOOTHING``) and quantized with the fixed scale of its range (static quantization: a row's
        output does not depend on the other rows of its batch). ``None``: float32.
    threads : int
        ONNX Runtime's intra-op threads.
    spinning : bool, default=True
        Let ONNX Runtime's worker threads spin after a run, waiting for the next: faster for calls that follow
        each other directly; ``False`` where other work runs between calls and needs the cores (the cascade's
        segments, see :class:`OnnxCascade`).
    digest : str, optional
        What the graph computes (:func:`copy_digest`); :func:`write_int8_copy` records it in the graph's
        metadata, so that a saved graph is only used for the model it was exported from.

    Attributes
    ----------
    graph : bytes
        The ONNX graph the session runs.
    digest : str

    Raises
    ------
    ImportError
        Without the optional packages.
    RuntimeError
        If the exported float32 graph disagrees with the module (checked before its int8 twin is exported).
    """

    def __init__(self, module, example: dict, *, ranges: dict | None = None, threads: int, spinning: bool = True,
                 digest: str = ""):
        if not onnx_available():
            raise ImportError(
                "The ONNX Runtime backend needs onnxruntime, onnx and onnxscript: pip install as2rank[onnx]"
            )
        self.names = tuple(example)
        self.int8 = ranges is not None
        self.threads, self.spinning = int(threads), bool(spinning)
        module = module.to("cpu").eval()
        with tempfile.TemporaryDirectory() as folder, quiet():
            graph = Path(folder) / "model.onnx"
            export_graph(export_copy(module), padded(example, 1), graph)
            self.session = self._session(graph)
            self._check(module, self.session, example)
            if self.int8:
                # The same graph with the int8 operators in place of the float ones. Its scores are not compared
                # with torch's: a value on the edge of two uint8 steps may round either way, and the flip
                # carries through the layers (tests compare each int8 operator with its torch arithmetic).
                graph = Path(folder) / "model.int8.onnx"
                export_graph(export_copy(module, ranges), padded(example, 1), graph)
                self.session = self._session(graph, exact_integer_sums=not u8s8_sums_exact())
            self.graph, self.digest = graph.read_bytes(), digest

    @classmethod
    def from_graph(cls, graph: bytes, names, *, int8: bool, threads: int, digest: str, spinning: bool = True):
        """The module of a graph that :class:`OnnxModule` exported (its ``graph`` attribute), without exporting
        again; ``names`` are its inputs in order."""
        self = cls.__new__(cls)
        self.names, self.int8, self.threads, self.graph = tuple(names), bool(int8), int(threads), graph
        self.spinning, self.digest = bool(spinning), digest
        self.session = self._session(graph, exact_integer_sums=self.int8 and not u8s8_sums_exact())
        return self

    def _session(self, graph, exact_integer_sums: bool = False):
        return cpu_session(graph, threads=self.threads, spinning=self.spinning, exact_integer_sums=exact_integer_sums)

    def _check(self, module, session, example) -> None:
        """Compare the float32 graph with the module on a batch of another shape than the traced one."""
        batch = {k: v[:-1] for k, v in padded(example, 3).items()}
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


def int8_copy(module, example: dict, ranges: dict, threads: int, saved=None):
    """An int8 copy on ONNX Runtime of a module that declares ``onnx_exportable``: the module as one graph
    (:class:`OnnxModule`), or a cascade (a module with ``segments()``) as one graph per segment
    (:class:`OnnxCascade`).

    Parameters
    ----------
    module : torch.nn.Module
    example : dict of torch.Tensor
        A batch of at least two rows (see :class:`OnnxModule`).
    ranges : dict
        The input range of each linear layer of ``module``, by name (see :class:`OnnxModule`).
    threads : int
        ONNX Runtime's intra-op threads.
    saved : path, optional
        A folder that :func:`write_int8_copy` wrote: its graphs are used, without exporting, if they were
        exported from this module's code and weights, these ranges and these inputs (:func:`copy_digest`);
        otherwise (another model, another as2rank) the copy is exported again, with a warning.
    """
    digest = copy_digest(module, ranges, tuple(example))
    if saved is not None and Path(saved).is_dir():
        loaded = _read_copy(module, Path(saved), digest, example, threads)
        if loaded is not None:
            return loaded
        warnings.warn(f"The int8 graphs in {saved} were not exported from this model by this version of as2rank; "
                      "exporting them again.", stacklevel=3)
    if hasattr(module, "segments"):
        return OnnxCascade(module, example, ranges=ranges, threads=threads, digest=digest)
    return OnnxModule(module, example, ranges=ranges, threads=threads, digest=digest)


def copy_digest(module, ranges: dict, names) -> str:
    """A digest of what an int8 copy computes: the as2rank code that defines the module, its weights, the
    input ranges of its int8 layers and the names of its inputs."""
    digest = hashlib.blake2b(_source_digest().encode(), digest_size=20)
    digest.update(repr((type(module).__qualname__, list(names))).encode())
    digest.update(ranges_key(ranges))
    for name, tensor in module.state_dict().items():
        tensor = tensor.detach().to("cpu").contiguous()
        digest.update(repr((name, str(tensor.dtype), tuple(tensor.shape))).encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def ranges_key(ranges: dict) -> bytes:
    """What of the int8 ranges decides an int8 copy: the smoothing strength, and each layer's name, the shape
    of its ranges (whole input or per channel) and their values."""
    parts = [repr(SMOOTHING).encode()]
    for name in sorted(ranges):
        r = np.ascontiguousarray(ranges[name], dtype=np.float64)
        parts += [repr((name, r.shape)).encode(), r.tobytes()]
    return b"\0".join(parts)


@functools.lru_cache(maxsize=1)
def _source_digest() -> str:
    """Digest of the ``.py`` files of the installed as2rank (names and bytes)."""
    root = Path(__file__).resolve().parents[2]
    digest = hashlib.blake2b(digest_size=20)
    for file in sorted(root.rglob("*.py")):
        name = file.relative_to(root).as_posix().encode()
        digest.update(len(name).to_bytes(8, "little") + name + file.read_bytes())
    return digest.hexdigest()


def write_int8_copy(int8_module, folder) -> None:
    """Write the graphs of an int8 copy (what :func:`int8_copy` returned) to ``folder``: ``int8-<i>.onnx``, one
    per graph, each recording the copy's digest, its position and the number of graphs. Other files of
    ``folder`` named so are removed."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("int8-*.onnx"):
        old.unlink()
    graphs = int8_module.segments if isinstance(int8_module, OnnxCascade) else [int8_module]
    for i, graph in enumerate(graphs):
        (folder / f"int8-{i}.onnx").write_bytes(_stamped(graph.graph, graph.digest, part=(i, len(graphs))))


def _read_copy(module, folder: Path, digest: str, example: dict, threads: int):
    """The int8 copy of ``module`` from the graphs in ``folder``, or None unless they are all there and record
    ``digest``."""
    segments = list(module.segments()) if hasattr(module, "segments") else [None]
    graphs = []
    for i in range(len(segments)):
        file = folder / f"int8-{i}.onnx"
        if not file.is_file():
            return None
        graph = file.read_bytes()
        meta = _metadata(graph)
        if meta.get(_DIGEST) != digest or meta.get(_PART) != f"{i}/{len(segments)}":
            return None
        graphs.append(graph)
    if segments == [None]:
        return OnnxModule.from_graph(graphs[0], tuple(example), int8=True, threads=threads, digest=digest)
    # A segment's inputs, as OnnxCascade traces them: the token arrays for the first, then the hidden states.
    first = tuple(name for name, value in example.items() if value.ndim == 2)
    later = ("hidden", *(name for name in CARRIED if name in example))
    return OnnxCascade.from_graphs(module, graphs, [first] + [later] * (len(graphs) - 1),
                                   threads=threads, digest=digest)


#: Metadata keys of a graph written by :func:`write_int8_copy`.
_DIGEST, _PART = "as2rank.digest", "as2rank.part"


def _stamped(graph: bytes, digest: str, part: tuple) -> bytes:
    """The bytes of ``graph`` with ``digest`` and ``part`` (i, n) in its metadata."""
    import onnx

    model = onnx.load_from_string(graph)
    props = {p.key: p.value for p in model.metadata_props}
    props.update({_DIGEST: digest, _PART: f"{part[0]}/{part[1]}"})
    onnx.helper.set_model_props(model, props)
    return model.SerializeToString()


def _metadata(graph: bytes) -> dict:
    """The metadata of a graph file's bytes; empty if they are not an ONNX model (a truncated file) or if the
    graph reads tensors from other files (external data, which a saved graph of as2rank never has: such a
    graph could make ONNX Runtime read a file outside the model directory)."""
    import onnx
    from google.protobuf.message import DecodeError
    from onnx.external_data_helper import _get_all_tensors, uses_external_data

    try:
        model = onnx.load_from_string(graph)
    except DecodeError:
        return {}
    if any(uses_external_data(tensor) for tensor in _get_all_tensors(model)):
        return {}
    return {p.key: p.value for p in model.metadata_props}


class OnnxCascade:
    """A :class:`~as2rank.transformer.network.CascadeEncoder` whose exit segments run on ONNX Runtime, in int8: its
    ``cascade`` is the module's, with the drops decided as there and each segment's blocks and
    classifier computed by its graph. The segments' sessions do not spin between runs: the cascade's own work
    between them (the drops, the survivors' gathers) runs on torch's threads, which spinning ONNX Runtime
    workers would keep off the cores (the cascade rows of ``docs/benchmarks/cpu_inference.md``).

    Parameters
    ----------
    module : as2rank.transformer.network.CascadeEncoder
    example : dict of torch.Tensor
        A batch of at least two rows; its token arrays trace the first segment, and each segment's hidden
        states on them trace the next.
    ranges : dict
        The input range of each linear layer of ``module``, by its name in ``module`` (see
        :class:`OnnxModule`).
    threads : int
    digest : str, optional
        Recorded in every segment's graph (see :class:`OnnxModule`).
    """

    def __init__(self, module, example: dict, *, ranges: dict, threads: int, digest: str = ""):
        self.module = module.to("cpu").eval()
        self.segments = []
        by_layer = {self.module.get_submodule(name): r for name, r in ranges.items()}
        state = {k: v for k, v in example.items() if v.ndim == 2}  # what the cascade's chunks carry
        for segment in self.module.segments():
            # The same layers, named from the segment.
            own = {name: by_layer[layer] for name, layer in segment.named_modules() if layer in by_layer}
            self.segments.append(OnnxModule(segment, state, ranges=own, threads=threads, spinning=False, digest=digest))
            with torch.inference_mode():
                hidden, _ = segment(state)
            state = {"hidden": hidden, **{k: state[k] for k in CARRIED if k in state}}

    @classmethod
    def from_graphs(cls, module, graphs: list, names: list, *, threads: int, digest: str):
        """The cascade of the segment graphs an :class:`OnnxCascade` of ``module`` exported, without exporting
        again; ``names[i]`` are the inputs of graph ``i``."""
        self = cls.__new__(cls)
        self.module = module.to("cpu").eval()
        self.segments = [OnnxModule.from_graph(graph, inputs, int8=True, threads=threads, digest=digest, spinning=False)
                         for graph, inputs in zip(graphs, names, strict=True)]
        return self

    def cascade(self, *args, **kwargs):
        """:meth:`CascadeEncoder.cascade <as2rank.transformer.network.CascadeEncoder.cascade>` on the graphs."""
        return self.module.cascade(*args, segments=self.segments, **kwargs)


def _as_tuple(out) -> tuple:
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)
