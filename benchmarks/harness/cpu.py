"""What the CPU benchmark (``benchmarks/cpu_inference.py``) and the CPU studies share: the rows of the CPU page
(``[rows]`` of ``benchmarks/cpu_inference.toml``), one timed round of a row in a fresh process (the peer's or
:mod:`harness.predict_round`), the int8 settings of the untimed tables, and the logits of a module over encoded
rows."""

from __future__ import annotations

import contextlib
import functools
import json
import statistics
import subprocess
import sys
from pathlib import Path

from harness.experiment import load_config
from harness.machine import cpu_flags, timed_subprocess
from harness.paths import BENCHMARKS, CACHE

HARNESS = Path(__file__).resolve().parent
PEER_CACHE = CACHE / "peer-crossencoder"


@functools.cache
def config() -> dict:
    """``benchmarks/cpu_inference.toml``: the rows, the peer's settings, the untimed tables."""
    return load_config(BENCHMARKS / "cpu_inference.toml")


def peer_int8() -> str:
    """The peer's int8 export for this CPU: its AVX-512 VNNI configuration where the CPU has VNNI, else its AVX2
    one (uint8 weights, for the exact uint8 × uint8 kernels: the VNNI file's int8 weights would have their sums
    clamped by the uint8 × int8 kernels of a CPU without VNNI)."""
    return "avx512_vnni" if "avx512_vnni" in cpu_flags() else "avx2"


def named(table: dict) -> dict:
    """A table of rows with ``{int8}`` in their names filled with :func:`peer_int8`."""
    return {name.format(int8=peer_int8()): row for name, row in table.items()}


def rows() -> dict:
    """Row name -> ``[side, backend or precision]`` of the timed table."""
    return named(config()["rows"])


def cascade_rows() -> dict:
    """Row name -> ``[side, precision, alpha]`` (the peer: ``[side, backend]``) of the cascade's rounds on ~100 candidates."""
    return named(config()["cascade_rows"])


def reference() -> str:
    """The row every other is divided by: the peer's ONNX int8."""
    return config()["reference"].format(int8=peer_int8())


def run_row(name: str, args, work: Path, model_dir: Path, scores_file: Path | None, cascade: bool = False) -> dict:
    """One round of row ``name`` in a fresh process (``args.threads``, ``args.peer_python``): its JSON line plus
    the process's wall time and load; ``work`` holds ``pairs.json`` (the cascade's: ``cascade_pairs.json``),
    ``model_dir`` the fitted model, ``scores_file`` where the process writes its scores (if given)."""
    from harness.library import resolve_model

    side, setting, alpha = (*(cascade_rows() if cascade else rows())[name], None)[:3]
    peer = config()["peer"]
    pairs = work / ("cascade_pairs.json" if cascade else "pairs.json")
    if side == "peer":
        cmd = [args.peer_python, str(BENCHMARKS / "peer_crossencoder.py"), str(pairs), "--backend", setting,
               "--model", resolve_model("minilm-l6")[0], "--cache", str(PEER_CACHE), "--int8-config", peer_int8(),
               "--batch-size", str(peer["batch_size"]), "--max-length", str(peer["max_length"])]
    else:
        if setting == "int8-export":  # the same model saved without its int8 graphs
            setting, model_dir = "int8", model_dir.with_name(f"{model_dir.name}-{config()['exported']}")
        cmd = [sys.executable, str(HARNESS / "predict_round.py"), setting, "--model-dir", str(model_dir),
               "--pairs-file", str(pairs)]
        cmd += [] if alpha is None else ["--alpha", str(alpha)]
    cmd += (["--threads", str(args.threads)] if args.threads else []) + (["--scores", str(scores_file)] if scores_file else [])
    return timed_subprocess(name, cmd, args.threads)


def peer_environment(peer_python: str) -> dict:
    """Versions of the peer environment's packages that matter here (``versions``), and the ``transformers``
    requirement of its ``optimum-onnx`` (``optimum_onnx_requires``: why it cannot share as2rank's)."""
    code = ("import json, importlib.metadata as m; print(json.dumps({'versions': {p: m.version(p) for p in "
            "('sentence-transformers', 'transformers', 'torch', 'onnxruntime', 'optimum-onnx')}, "
            "'optimum_onnx_requires': next(r for r in m.requires('optimum-onnx') if r.startswith('transformers'))}))")
    return json.loads(subprocess.run([peer_python, "-c", code], capture_output=True, text=True, check=True).stdout)


def summarise(runs: dict, reference_row: str) -> dict:
    """Per row: median, min and max pairs/s over the rounds and the median same-round ratio to ``reference_row``."""
    ref = [r["pairs_per_s"] for r in runs[reference_row]]
    out = {}
    for name, row_runs in runs.items():
        pps = [r["pairs_per_s"] for r in row_runs]
        out[name] = {"median": statistics.median(pps), "min": min(pps), "max": max(pps),
                     "vs_reference": statistics.median(p / q for p, q in zip(pps, ref)),
                     "process_seconds": statistics.median(r["process_seconds"] for r in row_runs)}
    return out


@contextlib.contextmanager
def predicting_at(est, setting: str):
    """``est`` set to predict at a setting of the accuracy table; ``"int8-torch"`` hides ONNX Runtime from
    as2rank for the duration, so int8 runs on torch's kernels; ``"int8-u8s8"`` tells as2rank that this CPU's
    uint8 × int8 kernels sum exactly, so its int8 session runs them whatever they compute (their saturating
    16-bit pair sums on an x86 CPU without VNNI: what int8 would score if the library did not avoid them)."""
    from harness.library import INT8_COPIES, onnx_runtime

    available, exact = onnx_runtime.onnx_available, onnx_runtime.u8s8_sums_exact
    if setting == "int8-torch":
        onnx_runtime.onnx_available = lambda: False
    if setting == "int8-u8s8":
        onnx_runtime.u8s8_sums_exact = lambda: True
        INT8_COPIES.forget(est.model_)  # a session built on the other kernels is not reused, before or after
    try:
        yield est.set_params(precision=setting.partition("-")[0])
    finally:
        onnx_runtime.onnx_available, onnx_runtime.u8s8_sums_exact = available, exact
        if setting == "int8-u8s8":
            INT8_COPIES.forget(est.model_)


def scored(row, encoded):
    """The logits of ``row`` (``(module, autocast dtype, batch tokens, ...)``) for every encoded row, on the CPU."""
    import torch

    from harness.library import no_progress, predict_logits

    module, dtype, tokens = row[:3]
    return predict_logits(module, encoded, torch.device("cpu"), batch_tokens=tokens, dtype=dtype, progress=no_progress)
