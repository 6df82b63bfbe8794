"""Latency of multi-way attention against the concatenation, as the context page measures it, without the
page's accuracy runs (``context_latency.toml``).

    python benchmarks/studies/context_latency.py [--data wikiqa squad] [--train-questions N] [--rows N] [--rounds N]
                                                 [--encoders minilm-l6 base] [--profile] [--threads N]

``AS2RANK_BENCH_TAG`` names the machine's page apart (``-amx``, ``-amx-off``, ``-h100``, ``-h200``).
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness

import numpy as np
import torch
from harness import CACHE, experiment, fitted, log, subset_questions
from harness.contexts import config, latency, latency_batches, load_data, make, passes_seconds, with_context
from harness.library import autocast, encoder_states, resolve_device, resolve_model, to_device

#: Profiler events that make the host wait for the device: on a GPU the runtime's synchronisations (a read of
#: a device value is a copy and one of them), on the CPU the reads of a tensor's value that would be one there.
HOST_WAITS = {"cuda": ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize"),
              "cpu": ("aten::_local_scalar_dense",)}


def base_size_encoder(size: dict) -> str:
    """A directory holding a BERT encoder of ``size`` with random weights (seed 0) and the packaged
    all-MiniLM-L6-v2 tokenizer, written under ``benchmarks/cache/`` and written again whenever the copy there
    has other dimensions or another vocabulary size."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    folder = CACHE / "random-bert-base-size"
    tokenizer = AutoTokenizer.from_pretrained(resolve_model("minilm-l6")[0])
    wanted = {"vocab_size": len(tokenizer), **size}
    if (folder / "model.safetensors").exists() and (folder / "config.json").exists():
        saved = BertConfig.from_pretrained(folder)
        if all(getattr(saved, key) == value for key, value in wanted.items()):
            return str(folder)
    torch.manual_seed(0)
    BertModel(BertConfig(**wanted)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def run_dataset(name, args, rows, fit_log, model=None) -> dict:
    data = load_data(name, quick=False)
    X_train, y_train = subset_questions(*data["train"], args.train_questions)
    X_test = data["test"][0]
    models, frames = {}, {}
    for row in rows:
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


def profile_forward(est, batches, rounds: int) -> dict:
    """Where a forward pass's time goes: ms per sample of the whole module and of its encoder alone (median of
    ``rounds`` interleaved rounds over ``batches``, each timing after its own warm-up pass), then one profiled
    pass over them (its last step waits for the device once): kernels launched, host waits and memory copies per
    batch, and the 12 operators with the most self time on the device. On a GPU, the same module with its
    multi-way attention layers (if any) under ``torch.compile``."""
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
        "copies_per_batch": (sum(e.count for e in events if e.key.startswith("cudaMemcpy")) / len(batches)
                             if cuda else None),
        "top": [{"op": e.key[:80], "calls_per_batch": e.count / len(batches),
                 "ms_per_batch": _device_time(e, cuda) / 1000 / len(batches)} for e in top],
        "time_on": "device" if cuda else "host",
    })
    log(f"[profile] {type(est).__name__}: " + ", ".join(f"{k} {v:.4f}" for k, v in out["ms_per_sample"].items())
        + f" ms/sample; host waits/batch {out['host_waits_per_batch']:.1f}")
    return out


def run(exp, args, res):
    res.update(latency_batch=config()["latency"]["batch"], train_questions=args.train_questions, rounds=args.rounds,
               paper=exp.paper, datasets={}, fits=[])
    if "minilm-l6" in args.encoders:
        for name in args.data:
            log(f"== {name}")
            res["datasets"][name] = run_dataset(name, args, res["rows"], res["fits"])
    if "base" in args.encoders:
        model = base_size_encoder(exp.config["base_size"])
        res["base_size"] = {"config": exp.config["base_size"], "datasets": {}}
        for name in args.data:
            log(f"== {name}, paper-size encoder")
            res["base_size"]["datasets"][name] = run_dataset(name, args, res["rows"], res["fits"], model=model)


def checks(exp, res) -> list:
    """The configuration's checks, with the latency bound of the context page (``benchmarks/context.toml``)."""
    return exp.checks(res, bound=config()["defaults"]["mwa_over_concat"])


if __name__ == "__main__":
    experiment.main(__file__, run, checks=checks)
