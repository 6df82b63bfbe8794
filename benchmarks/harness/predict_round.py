"""One timed ``predict`` in a fresh process, the unit of the CPU benchmarks' rounds: load a model saved by
``save_pretrained`` at a precision, predict the first pairs to warm up (for int8 this builds the quantized copy),
then time one ``predict`` of all the pairs, tokenisation included, and print a JSON line (with the folder of the
library that ran, so that a caller running another checkout of it can check which one did).

    python benchmarks/harness/predict_round.py PRECISION --model-dir DIR --pairs-file PAIRS.json
                                               [--threads N] [--scores OUT.json] [--alpha A] [--warmup 64]

``PRECISION`` is a ``precision`` of the estimator, or ``int8-torch``: int8 on torch's kernels, ONNX Runtime
hidden from the library. ``--alpha``: the model is a ``CascadeTransformer``, predicting at that drop ratio.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness

#: Pairs of the warm-up call.
WARMUP_PAIRS = 64


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("precision")
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--pairs-file", type=Path, required=True)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--scores", type=Path, default=None)
    parser.add_argument("--alpha", type=float, default=None)
    parser.add_argument("--warmup", type=int, default=WARMUP_PAIRS)
    args = parser.parse_args(argv)
    import pandas as pd

    from harness.library import CascadeTransformer, TransformerRanker, as2rank, onnx_runtime

    precision = args.precision
    if precision == "int8-torch":  # the int8 path of an environment without ONNX Runtime
        onnx_runtime.onnx_available = lambda: False
        precision = "int8"
    X = pd.DataFrame(json.loads(args.pairs_file.read_text()))
    if args.alpha is None:
        est = TransformerRanker.from_pretrained(args.model_dir, precision=precision, n_threads=args.threads)
    else:
        est = CascadeTransformer.from_pretrained(args.model_dir, precision=precision, n_threads=args.threads, alpha=args.alpha)
    est.predict(X.head(args.warmup))
    start = time.perf_counter()
    scores = est.predict(X)
    seconds = time.perf_counter() - start
    print(json.dumps({"backend": precision, "pairs": len(X), "seconds": seconds, "pairs_per_s": len(X) / seconds,
                      "library": str(Path(as2rank.__file__).resolve().parent)}))
    if args.scores is not None:
        args.scores.write_text(json.dumps([float(s) for s in scores]))


if __name__ == "__main__":
    main()
