"""Prediction speed of sentence-transformers' ``CrossEncoder`` on one CPU backend (the peer of the speed and CPU pages).

    python benchmarks/peer_crossencoder.py PAIRS.json --model DIR --cache DIR --backend onnx-int8
                                          [--int8-config avx512_vnni] [--batch-size 32] [--rounds 1] [--threads N] [--scores OUT.json]

Runs in the peer's own virtual environment (``sentence-transformers[onnx]``, whose ``optimum-onnx`` pins
``transformers`` < 4.58, so it cannot share as2rank's): it imports nothing from as2rank.
``benchmarks/cpu_inference.py`` starts it once per round and reads its output.

``PAIRS.json`` is a list of objects with ``question`` and ``candidate``. ``--model`` is a local BERT-style
checkpoint (the packaged all-MiniLM-L6-v2): a bi-encoder, so ``CrossEncoder`` gives it a new, untrained
classification head. That head is drawn once, with torch's seed 0, and saved in ``--cache`` with the ONNX
export and its int8 quantization, so every backend and every run scores with the same weights:

* ``torch``: ``CrossEncoder(cache)``, fp32 (its default backend);
* ``onnx``: ``CrossEncoder(cache, backend="onnx")``, fp32 ONNX Runtime;
* ``onnx-int8``: the same with ``model_kwargs={"file_name": ...}`` naming the file that
  ``export_dynamic_quantized_onnx_model(model, CONFIG, cache)`` writes, ``CONFIG`` given by ``--int8-config``:
  ``"avx512_vnni"`` (dynamic int8 for CPUs with AVX-512 VNNI, the fastest CPU path its efficiency guide
  documents) or ``"avx2"`` (its configuration for CPUs without VNNI: uint8 weights, which ONNX Runtime
  multiplies in its exact uint8 × uint8 kernels).

After one warm-up ``predict`` on the first 64 pairs, each of ``--rounds`` timed ``predict(pairs,
batch_size=B)`` calls (tokenisation included) prints one JSON line ``{backend, batch_size, pairs, seconds,
pairs_per_s}``. ``--threads`` sets torch's intra-op threads and ONNX Runtime's ``intra_op_num_threads``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

BACKENDS = ("torch", "onnx", "onnx-int8")
INT8_CONFIGS = ("avx512_vnni", "avx2")


def int8_file(cache: Path, config: str) -> Path | None:
    """The int8 export of ``config`` in ``cache`` (``onnx/model_<weight type>_<config>.onnx``), or None."""
    found = sorted((cache / "onnx").glob(f"model_q*int8_{config}.onnx"))
    return found[0] if found else None


def prepare(model: str, cache: Path, backend: str, max_length: int, int8_config: str = "avx512_vnni") -> None:
    """Write what ``backend`` loads into ``cache`` unless it is there: the seeded cross-encoder checkpoint,
    its ONNX export (``onnx/model.onnx``) and the int8 quantization of ``int8_config`` (:func:`int8_file`).

    Parameters
    ----------
    model : str
        The local checkpoint the cross-encoder starts from.
    cache : pathlib.Path
        The folder that keeps the three, reused by later runs.
    backend : str
        One of :data:`BACKENDS`.
    max_length : int
        The cross-encoder's maximum tokens per pair.
    """
    import torch
    from sentence_transformers import CrossEncoder, export_dynamic_quantized_onnx_model

    if not (cache / "config.json").exists():
        torch.manual_seed(0)
        CrossEncoder(model, num_labels=1, max_length=max_length, local_files_only=True).save_pretrained(str(cache))
    if backend != "torch" and not (cache / "onnx" / "model.onnx").exists():
        CrossEncoder(str(cache), backend="onnx", local_files_only=True).save_pretrained(str(cache))
    if backend == "onnx-int8" and int8_file(cache, int8_config) is None:
        onnx_model = CrossEncoder(str(cache), backend="onnx", local_files_only=True)
        export_dynamic_quantized_onnx_model(onnx_model, quantization_config=int8_config, model_name_or_path=str(cache))


def load(cache: Path, backend: str, max_length: int, threads: int | None, int8_config: str = "avx512_vnni"):
    """The ``CrossEncoder`` of ``backend`` from ``cache`` on the CPU.

    Parameters
    ----------
    cache : pathlib.Path
        A folder written by :func:`prepare`.
    backend : str
        One of :data:`BACKENDS`.
    max_length : int
        The maximum tokens per pair.
    threads : int or None
        ONNX Runtime's intra-op threads (None: its default, one per physical core).
    int8_config : str
        The int8 export that ``onnx-int8`` loads (one of :data:`INT8_CONFIGS`).

    Returns
    -------
    sentence_transformers.CrossEncoder
    """
    from sentence_transformers import CrossEncoder

    model_kwargs = {}
    if backend != "torch":
        import onnxruntime

        options = onnxruntime.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        model_kwargs = {"session_options": options, "provider": "CPUExecutionProvider",
                        "file_name": (str(int8_file(cache, int8_config).relative_to(cache)) if backend == "onnx-int8"
                                      else "onnx/model.onnx")}
    return CrossEncoder(str(cache), backend="onnx" if backend != "torch" else "torch", device="cpu",
                        max_length=max_length, local_files_only=True, model_kwargs=model_kwargs)


def main(argv=None) -> None:
    """Parse the command line, time the rounds and print one JSON line per round."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("pairs", type=Path, help="JSON list of {question, candidate}")
    parser.add_argument("--model", required=True, help="local checkpoint the cross-encoder starts from")
    parser.add_argument("--cache", type=Path, required=True, help="folder of the seeded checkpoint and its exports")
    parser.add_argument("--backend", choices=BACKENDS, required=True)
    parser.add_argument("--int8-config", choices=INT8_CONFIGS, default="avx512_vnni",
                        help="the int8 export of --backend onnx-int8 (default: avx512_vnni)")
    parser.add_argument("--batch-size", type=int, default=32, help="predict's batch_size (its default: 32)")
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--threads", type=int, default=None, help="intra-op threads (default: the libraries')")
    parser.add_argument("--scores", type=Path, default=None, help="write the last round's scores here (JSON list)")
    args = parser.parse_args(argv)

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    args.cache.mkdir(parents=True, exist_ok=True)
    prepare(args.model, args.cache, args.backend, args.max_length, args.int8_config)
    model = load(args.cache, args.backend, args.max_length, args.threads, args.int8_config)
    pairs = [(r["question"], r["candidate"]) for r in json.loads(args.pairs.read_text())]
    model.predict(pairs[:64], batch_size=args.batch_size, show_progress_bar=False)
    for _ in range(args.rounds):
        start = time.perf_counter()
        scores = model.predict(pairs, batch_size=args.batch_size, show_progress_bar=False)
        seconds = time.perf_counter() - start
        print(json.dumps({"backend": args.backend, "batch_size": args.batch_size, "pairs": len(pairs),
                          "seconds": seconds, "pairs_per_s": len(pairs) / seconds}), flush=True)
    if args.scores is not None:
        args.scores.write_text(json.dumps([float(s) for s in scores]))


if __name__ == "__main__":
    main()
