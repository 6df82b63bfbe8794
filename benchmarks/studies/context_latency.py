"""Latency of multi-way attention against the concatenation, as the context page measures it, without the
page's accuracy runs: ``ContextMWA`` vs ``ContextConcat`` (Han, Soldaini & Moschitti 2021, Table 2's latency).

    python benchmarks/studies/context_latency.py [--data wikiqa squad] [--train-questions N] [--rows N] [--rounds N]
                                                 [--encoders minilm-l6 base] [--profile]

The Concat and MWA rows of ``benchmarks/context.py`` (same estimators, lengths, contexts and latency
measurement: ``harness.contexts.latency``, forward passes of ``predict`` alone in batches of 128 test rows, with
dynamic and with fixed padding, median of interleaved rounds), fitted for one epoch on ``--train-questions``
training questions of each data set: a forward pass costs the same whatever the weights' values, so the
accuracy runs of the full page (three seeds, every row) are not needed to time them. Use it to re-measure the
latency after a change, and on a machine where the full page does not fit in the time at hand (a lent GPU).

``--encoders base`` times the same two estimators over an encoder of the paper's size (RoBERTa-base's
dimensions: 12 layers, hidden 768, 12 heads, feed-forward 3072; Han et al. 2021, §3) with random weights and
all-MiniLM-L6-v2's tokenizer, since no such checkpoint is available offline: the latency of a forward pass does
not depend on the weights' values, and the share of multi-way attention in it falls as the encoder grows.

``--profile`` adds, per data set and encoder, where a forward pass's time goes (dynamic padding, the same
batches): the encoder's passes timed alone against the whole module's, the kernels launched and the host
synchronisations per batch, and the operators with the most self time on the device (torch's profiler); on a GPU
also the MWA module with its multi-way attention layers compiled by ``torch.compile`` (a candidate fusion of its
small kernels, measured before the library adopts it).

Writes ``benchmarks/studies/results/context_latency.json`` and ``docs/studies/context_latency.md`` (``-<tag>``
with ``AS2RANK_BENCH_TAG``); ``python benchmarks/render.py context_latency`` renders the page again.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness

import numpy as np
import torch
from harness import CACHE, conclude, fitted, log, run_header, subset_questions
from harness.contexts import config, latency, latency_batches, load_data, make, passes_seconds, with_context
from harness.experiment import read_paper
from harness.library import autocast, encoder_states, resolve_device, to_device

LATENCY_BATCH, MWA_OVER_CONCAT = config()["latency"]["batch"], config()["defaults"]["mwa_over_concat"]
PAPER = read_paper("context.json")

ROWS = ("Concat", "MWA")
#: The paper's encoder dimensions (RoBERTa-base), for ``--encoders base``.
BASE_SIZE = {"num_hidden_layers": 12, "hidden_size": 768, "num_attention_heads": 12, "intermediate_size": 3072}


def base_size_encoder() -> str:
    """A directory holding a BERT encoder of :data:`BASE_SIZE` with random weights (seed 0) and the packaged
    all-MiniLM-L6-v2 tokenizer, written under ``benchmarks/cache/`` and written again whenever the copy there
    has other dimensions or another vocabulary size."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from harness.library import resolve_model

    folder = CACHE / "random-bert-base-size"
    tokenizer = AutoTokenizer.from_pretrained(resolve_model("minilm-l6")[0])
    wanted = {"vocab_size": len(tokenizer), **BASE_SIZE}
    if (folder / "model.safetensors").exists() and (folder / "config.json").exists():
        saved = BertConfig.from_pretrained(folder)
        if all(getattr(saved, key) == value for key, value in wanted.items()):
            return str(folder)
    torch.manual_seed(0)
    BertModel(BertConfig(**wanted)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def run_dataset(name, args, fit_log, model=None) -> dict:
    data = load_data(name, quick=False)
    X_train, y_train = subset_questions(*data["train"], args.train_questions)
    X_test = data["test"][0]
    models, frames = {}, {}
    for row in ROWS:
        est, method = make(row, 1, 0)
        if model is not None:
            est.set_params(model=model)
        models[row] = fitted(est, with_context(X_train, method)[0], y_train, fit_log)
        frames[row] = with_context(X_test, method)[0]
    n_rows = min(args.rows, len(X_test))
    out = {"n_train_questions": int(X_train["qid"].nunique()), "n_rows": n_rows,
           "latency": latency(models, frames, rounds=args.rounds, n_rows=n_rows)}
    if args.profile:
        out["profile"] = {row: profile_forward(est, latency_batches(est, frames[row].iloc[:n_rows], None), args.rounds)
                          for row, est in models.items()}
    return out


def _passes(call, batches, device) -> float:
    """Seconds of ``call(batch)`` over ``batches`` after one warm-up pass over all of them (first-call
    allocations; compilation of each shape where ``call`` is compiled)."""
    for batch in batches:
        call(batch)
    return passes_seconds(call, batches, device)


def _device_time(event, cuda: bool) -> float:
    """An averaged profiler event's self time on the device (microseconds): the GPU's where there is one."""
    if not cuda:
        return event.self_cpu_time_total
    return getattr(event, "self_device_time_total", None) or getattr(event, "self_cuda_time_total", 0.0)


#: Profiler events that make the host wait for the device: on a GPU the runtime's synchronisations (a read of
#: a device value is a copy and one of them), on the CPU the reads of a tensor's value that would be one there.
HOST_WAITS = {"cuda": ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize"),
              "cpu": ("aten::_local_scalar_dense",)}


def profile_forward(est, batches, rounds: int) -> dict:
    """Where a forward pass's time goes: ms per sample of the whole module and of its encoder alone (median of
    ``rounds`` interleaved rounds over ``batches``), then one profiled pass over them (its last step waits for the
    device once): kernels launched, host waits and memory copies per batch, and the 12 operators with the most self time on the device. On a GPU, the same module with
    its multi-way attention layers (if any) under ``torch.compile``."""
    from torch.profiler import ProfilerActivity, profile

    device = resolve_device("auto")
    predictor = est.predictor(device)
    module = predictor.module
    cuda = device.type == "cuda"
    batches = [to_device(b, device) for b in batches]
    n = sum(len(b["input_ids"]) for b in batches)
    calls = {"whole": module, "encoder": lambda b: encoder_states(module.encoder, b)}
    attention = getattr(module, "attention", None)
    if cuda and attention is not None:
        compiled = copy.deepcopy(module)
        for name in list(compiled.attention):
            compiled.attention[name] = torch.compile(compiled.attention[name], dynamic=True)
        calls["whole, attention compiled"] = compiled
    times = {name: [] for name in calls}
    out = {}
    with torch.no_grad(), autocast(device, predictor.dtype):
        for _ in range(rounds):
            for name, call in list(calls.items()):
                try:
                    times[name].append(1000 * _passes(call, batches, device) / n)
                except Exception as error:  # a compiler that fails on this machine: say so on the page
                    out["compile_error"] = f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
                    del calls[name], times[name]
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        with profile(activities=activities) as prof:
            for batch in batches:
                module(batch)
            if cuda:
                torch.cuda.synchronize()
    events = prof.key_averages()
    kernels = [e for e in events if str(getattr(e, "device_type", "")).endswith("CUDA")]
    top = sorted(events, key=lambda e: _device_time(e, cuda), reverse=True)[:12]
    out.update({
        "ms_per_sample": {name: float(np.median(t)) for name, t in times.items()},
        "kernels_per_batch": sum(e.count for e in kernels) / len(batches) if cuda else None,
        "host_waits_per_batch": sum(e.count for e in events if e.key in HOST_WAITS[device.type]) / len(batches),
        "copies_per_batch": sum(e.count for e in events if e.key.startswith("cudaMemcpy")) / len(batches) if cuda else None,
        "top": [{"op": e.key[:80], "calls_per_batch": e.count / len(batches),
                 "ms_per_batch": _device_time(e, cuda) / 1000 / len(batches)} for e in top],
        "time_on": "device" if cuda else "host",
    })
    log(f"[profile] {type(est).__name__}: " + ", ".join(f"{k} {v:.4f}" for k, v in out["ms_per_sample"].items())
        + f" ms/sample; host waits/batch {out['host_waits_per_batch']:.1f}")
    return out


def acceptance(res) -> list:
    paper = PAPER["table2"]
    checks = []
    runs = [("", res["datasets"])]
    if "base_size" in res:
        runs.append((" (paper-size encoder, random weights)", res["base_size"]["datasets"]))
    for label, datasets in runs:
        for name, data in datasets.items():
            for mode in ("fixed", "dynamic"):
                lat = {row: v["ms_per_sample"] for row, v in data["latency"][mode].items()}
                ratio = lat["MWA"] / lat["Concat"]
                checks.append({"check": f"{name}, {mode} padding{label}: MWA latency ≤ {MWA_OVER_CONCAT}× Concat "
                                        f"(paper {paper['MWA']['ms_per_sample'] / paper['Concat']['ms_per_sample']:.2f}×)",
                               "measured": f"{ratio:.2f}×", "pass": bool(ratio <= MWA_OVER_CONCAT)})
    return checks


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", nargs="+", choices=("wikiqa", "squad"), default=["wikiqa", "squad"])
    parser.add_argument("--train-questions", type=int, default=200, help="training questions of each fit (default 200)")
    parser.add_argument("--rows", type=int, default=512, help="test rows timed (default 512, as the context page)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--encoders", nargs="+", choices=("minilm-l6", "base"), default=["minilm-l6"],
                        help="the estimators' default encoder and/or one of the paper's size (random weights)")
    parser.add_argument("--profile", action="store_true", help="where each forward pass's time goes (see above)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    res = {**run_header("studies/context_latency.py", argv), "latency_batch": LATENCY_BATCH, "rows": list(ROWS),
           "train_questions": args.train_questions, "rounds": args.rounds, "paper": PAPER, "datasets": {}}
    fit_log = []
    if "minilm-l6" in args.encoders:
        for name in args.data:
            log(f"== {name}")
            res["datasets"][name] = run_dataset(name, args, fit_log)
    if "base" in args.encoders:
        model = base_size_encoder()
        res["base_size"] = {"config": BASE_SIZE, "datasets": {}}
        for name in args.data:
            log(f"== {name}, paper-size encoder")
            res["base_size"]["datasets"][name] = run_dataset(name, args, fit_log, model=model)
    res["fits"] = fit_log
    conclude(res, "context_latency", start, acceptance(res))


if __name__ == "__main__":
    main()
