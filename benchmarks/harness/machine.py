"""The machine a run measures on, the header every result file starts with, and the run's log."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import time

from harness.paths import NOTE

#: The instruction sets that choose torch's and ONNX Runtime's CPU kernels (bfloat16, int8).
CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16", "amx_int8")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def load_average() -> list:
    return [round(v, 2) for v in os.getloadavg()]


def _cpuinfo() -> tuple[str, set]:
    """The CPU's model name and its flags, from /proc/cpuinfo (the platform's name and none elsewhere)."""
    model, flags = platform.machine(), set()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name") and model == platform.machine():
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    return model, flags


def cpu_flags() -> list:
    """Which of :data:`CPU_FLAGS` this CPU has, sorted."""
    return sorted(set(CPU_FLAGS) & _cpuinfo()[1])


def machine() -> str:
    """CPU model, core count and the instruction-set flags that matter for torch on CPU, or the GPU."""
    model, flags = _cpuinfo()
    wanted = [f for f in CPU_FLAGS if f in flags]
    desc = f"{model}, {os.cpu_count()} cores" + (f" ({', '.join(wanted)})" if wanted else "")
    try:
        import torch

        if torch.cuda.is_available():
            desc += f"; GPU {torch.cuda.get_device_name(0)}"
    except ImportError:
        pass
    return desc


def version(package: str) -> str | None:
    """The installed version of ``package``, or None."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed(package)
    except PackageNotFoundError:
        return None


def run_header(script: str, argv) -> dict:
    """What every result file starts with: the command that made it, the date, the machine, torch and its
    CPU threads, and the load average at the start (``argv`` as given to ``main``; None: the process's)."""
    import shlex
    import sys

    import torch

    return {
        "command": (f"python benchmarks/{script} " + shlex.join(argv if argv is not None else sys.argv[1:])).strip(),
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "load_average_start": load_average(),
        **({"note": NOTE} if NOTE else {}),
    }


def timed_subprocess(name: str, cmd: list, threads: int | None, env: dict | None = None) -> dict:
    """Run one timed round of row ``name`` as the command ``cmd`` (with ``OMP_NUM_THREADS=threads`` when
    given, and the variables ``env`` besides): the last JSON line it prints, plus the process's wall time and the
    load average after it."""
    import subprocess

    from harness.store import computing

    computing(f"a timed round of {name}")
    env = {**os.environ, **({"OMP_NUM_THREADS": str(threads)} if threads else {}), **(env or {})}
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed ({' '.join(cmd)}):\n{proc.stderr[-3000:]}")
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")][-1]
    return {**json.loads(line), "process_seconds": time.perf_counter() - start, "load_after": load_average()}


@contextlib.contextmanager
def session_calls():
    """Record every call of an ONNX Runtime copy (``OnnxModule``) while open: yields the list that receives
    ``(module, its inputs, seconds)`` for each call."""
    from harness.library import onnx_runtime

    calls, call = [], onnx_runtime.OnnxModule.__call__

    def recorded(module, batch):
        start = time.perf_counter()
        out = call(module, batch)
        calls.append((module, {k: batch[k] for k in module.names}, time.perf_counter() - start))
        return out

    onnx_runtime.OnnxModule.__call__ = recorded
    try:
        yield calls
    finally:
        onnx_runtime.OnnxModule.__call__ = call
