"""Shared helpers of the benchmark scripts: where the data is, and which machine ran them."""

from __future__ import annotations

import os
import platform
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"
RESULTS = ROOT / "benchmarks" / "results"
DOCS = ROOT / "docs" / "benchmarks"


def machine() -> str:
    """CPU model, core count and the instruction-set flags that matter for torch on CPU, or the GPU."""
    model = platform.machine()
    flags = set()
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
    wanted = [f for f in ("avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8") if f in flags]
    desc = f"{model}, {os.cpu_count()} cores" + (f" ({', '.join(wanted)})" if wanted else "")
    try:
        import torch

        if torch.cuda.is_available():
            desc += f"; GPU {torch.cuda.get_device_name(0)}"
    except ImportError:
        pass
    return desc
