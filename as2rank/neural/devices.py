"""Devices, numeric precision, seeding and torch thread counts, shared by every neural estimator."""

from __future__ import annotations

import contextlib
import warnings

import numpy as np
import torch
from sklearn.utils import check_random_state

from ..params import DTYPE_PRECISIONS, TRANSFORMER_PRECISIONS, check_precision

__all__ = [
    "PRECISIONS",
    "autocast",
    "autocast_dtype",
    "call_seed",
    "cpu_bf16_supported",
    "int8_supported",
    "resolve_device",
    "resolve_precision",
    "seeded",
    "to_device",
    "torch_threads",
]

#: Values of ``precision`` that :func:`resolve_precision` resolves (:data:`as2rank.params.DTYPE_PRECISIONS`;
#: the transformer estimators accept more, :data:`as2rank.params.TRANSFORMER_PRECISIONS`).
PRECISIONS = DTYPE_PRECISIONS


def resolve_device(device="auto") -> torch.device:
    """The torch device an estimator's ``device`` parameter names.

    Parameters
    ----------
    device : {"auto", "cpu", "cuda", "cuda:<n>", "mps"} or torch.device, default="auto"
        ``"auto"`` is CUDA when available, else the CPU.

    Returns
    -------
    torch.device

    Raises
    ------
    ValueError
        If the name is not a device, or names a device this machine does not have.
    """
    if isinstance(device, str) and device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"device must be 'auto', 'cpu', 'cuda', 'cuda:<n>' or a torch.device, got {device!r}.") from exc
    if resolved.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device={device!r} but CUDA is not available on this machine; use device='auto' or 'cpu'.")
        if resolved.index is not None and resolved.index >= torch.cuda.device_count():
            raise ValueError(f"device={device!r} but only {torch.cuda.device_count()} CUDA device(s) are visible.")
    elif resolved.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device={device!r} but MPS is not available on this machine.")
    return resolved


def autocast_dtype(precision, device: torch.device, *, training: bool = False,
                   options=TRANSFORMER_PRECISIONS) -> torch.dtype:
    """The autocast dtype of a transformer estimator's ``precision`` on ``device`` (float32: no autocast).

    Parameters
    ----------
    precision : {"auto", "fp32", "bf16", "fp16", "int8"}
        ``"auto"``: bfloat16 where the device computes it natively, else float16 on CUDA and float32 on the
        CPU; ``"bf16"`` where it is not native falls back to float32 with a warning; ``"fp16"`` needs CUDA;
        ``"int8"`` (CPU only) trains as ``"auto"`` and predicts with quantized float32 modules (no autocast;
        float32 with a warning where the CPU has no int8 kernels).
    device : torch.device
    training : bool, default=False
        Whether the dtype is for training (``"int8"`` then means ``"auto"``).
    options : tuple of str, default=TRANSFORMER_PRECISIONS
        The values the caller accepts; without ``"fp16"`` (no loss scaling), ``"auto"`` on CUDA without
        bfloat16 is float32.

    Returns
    -------
    torch.dtype

    Raises
    ------
    ValueError
        For an unknown value, or one the device cannot run.
    """
    check_precision(precision, options)
    cuda = device.type == "cuda"
    if precision == "fp16" and not cuda:
        raise ValueError("precision='fp16' needs a CUDA device; use 'bf16', 'int8' or 'fp32' on the CPU.")
    if precision == "int8":
        if cuda:
            raise ValueError("precision='int8' is quantization for the CPU; use 'auto', 'bf16' or 'fp16' on CUDA.")
        if not training and int8_supported():
            return torch.float32
        if not training:
            warnings.warn(
                "precision='int8' but this CPU has no int8 kernels (x86 with AVX2+ or ARM); predicting in float32.",
                RuntimeWarning,
                stacklevel=4,
            )
            return torch.float32
        precision = "auto"
    if precision == "fp32":
        return torch.float32
    if precision == "fp16":
        return torch.float16
    bf16 = torch.cuda.is_bf16_supported() if cuda else cpu_bf16_supported()
    if precision == "auto":
        if cuda:
            return torch.bfloat16 if bf16 else (torch.float16 if "fp16" in options else torch.float32)
        return torch.bfloat16 if bf16 else torch.float32
    if not bf16:  # "bf16" where the hardware lacks it: emulation would be slower than float32
        warnings.warn(
            f"precision='bf16' but this {device.type.upper()} has no native bfloat16 support; running in float32.",
            RuntimeWarning,
            stacklevel=4,
        )
        return torch.float32
    return torch.bfloat16


def resolve_precision(precision, device: torch.device) -> torch.dtype:
    """The dtype of :class:`~as2rank.cosinet.estimator.Cosinet`'s low-precision products: :func:`autocast_dtype` over
    the values of :data:`PRECISIONS`, float32 where the device has no native bfloat16 (Cosinet has no loss
    scaling for float16)."""
    return autocast_dtype(precision, device, options=PRECISIONS)


def cpu_bf16_supported() -> bool:
    """Whether this CPU computes bfloat16 matrix products natively (AVX512-BF16 or AMX, through oneDNN).

    Elsewhere bfloat16 autocast still runs, but emulated and slower than float32.
    """
    return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())


def int8_supported() -> bool:
    """Whether this CPU runs int8 linear layers (x86 with AVX2 or better, or ARM)."""
    engines = torch.backends.quantized.supported_engines
    if "x86" in engines or "fbgemm" in engines:
        return torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")
    return "qnnpack" in engines


def autocast(device: torch.device, dtype: torch.dtype | None):
    """Mixed-precision context for the forward pass: ``torch.autocast`` in ``dtype``, or nothing for
    float32/``None``."""
    if dtype is None or dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


@contextlib.contextmanager
def seeded(random_state, device: torch.device | None = None):
    """Seed torch from ``random_state`` for the duration of a ``with`` block, leaving the global RNG as it was.

    Parameter initialisation and dropout draw from torch's global generators; forking them keeps an
    estimator's ``fit`` repeatable without changing the random stream of the caller's code.

    Parameters
    ----------
    random_state : None, int or numpy.random.RandomState
        As in scikit-learn; ``None`` draws fresh entropy.
    device : torch.device, default=None
        A CUDA device whose generator is forked and seeded too.

    Yields
    ------
    numpy.random.Generator
        A generator for the estimator's own draws (batch order), derived from the same seed.
    """
    seed = int(check_random_state(random_state).randint(np.iinfo(np.int32).max))
    cuda_devices = [device] if device is not None and device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda_devices):
        torch.manual_seed(seed)
        yield np.random.default_rng(seed)


def call_seed(random_state, call: int):
    """The ``random_state`` of the ``call``-th (0-based) ``partial_fit`` call of an estimator.

    The first call uses the estimator's own, so that one call on all the data draws what ``fit`` draws; each
    later call gets a distinct, repeatable seed derived from an integer ``random_state`` and the call number
    (so that chunks of equal size are not shuffled alike). ``None`` and ``RandomState`` instances pass
    through (fresh entropy, or the instance's own stream).
    """
    if call == 0 or not isinstance(random_state, (int, np.integer)) or isinstance(random_state, bool):
        return random_state
    return np.random.RandomState(np.random.SeedSequence([int(random_state), int(call)]).generate_state(4))


def to_device(batch, device: torch.device):
    """Move the tensors of a (nested) batch to ``device``; other values pass through unchanged."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(v, device) for v in batch)
    return batch


@contextlib.contextmanager
def torch_threads(n_threads):
    """Limit torch to ``n_threads`` intra-op CPU threads inside a ``with`` block, then restore the previous count.

    The neural estimators' ``n_threads`` parameter. torch's thread count is a setting of the whole process;
    ``None`` leaves it as it is, which is already right in most parallel settings: all cores in a plain
    process, ``cpu_count // n_jobs`` in the worker processes of joblib's default backend (joblib sets
    ``OMP_NUM_THREADS`` there), one thread in Dask worker processes (the nanny sets ``OMP_NUM_THREADS=1``), and
    what the launcher sets (``OMP_NUM_THREADS``) under ``torchrun``/``accelerate launch``.

    The count is part of what a seeded ``fit`` computes: matrix products and reductions split their sums
    among the threads, so two fits with the same ``random_state`` give the same bits with the same count,
    whatever the machine's load, but may differ in the last bits with different counts, and training
    amplifies such differences. An integer ``n_threads`` makes the count independent of the process's own
    setting (a joblib worker's ``OMP_NUM_THREADS``, for instance).

    Parameters
    ----------
    n_threads : int or None

    Raises
    ------
    ValueError
        If ``n_threads`` is not ``None`` or a positive integer.
    """
    if n_threads is None:
        yield
        return
    if isinstance(n_threads, bool) or not isinstance(n_threads, (int, np.integer)) or n_threads < 1:
        raise ValueError(f"n_threads must be None or a positive integer, got {n_threads!r}.")
    before = torch.get_num_threads()
    torch.set_num_threads(int(n_threads))
    try:
        yield
    finally:
        torch.set_num_threads(before)
