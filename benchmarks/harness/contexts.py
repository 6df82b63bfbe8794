"""What the context benchmark (``benchmarks/context.py``) and the context studies share: the data with their
contexts, the estimator of each row of the tables (``[rows]`` of ``benchmarks/context.toml``), how often a
context holds the answer, and the latency of the forward passes."""

from __future__ import annotations

import functools
import time

import numpy as np
import pandas as pd

from harness.data import paragraph_splits, subset_questions, wikiqa_splits
from harness.experiment import load_config
from harness.machine import log
from harness.paths import BENCHMARKS
from harness.store import cached_file, library_digest


@functools.cache
def config() -> dict:
    """``benchmarks/context.toml``: the rows, budgets, lengths and latency settings."""
    return load_config(BENCHMARKS / "context.toml")


def rows(paper: bool = True) -> tuple:
    """The rows of the tables; at the library's strength, the earlier defaults' rows after them."""
    return tuple(name for name, row in config()["rows"].items() if not (paper and "variant_of" in row))


def make(row: str, epochs: int | None, seed: int, paper: bool = True, model: str = "minilm-l6"):
    """The estimator of a table row on the backbone ``model``, and the global-context method of the frame it
    reads (None: no contexts): the paper's pure model at one budget, or the library's estimator at its defaults
    (``epochs`` given: that many)."""
    from harness import library

    spec, cfg = config()["rows"][row], config()
    if "variant_of" in spec:  # an earlier default of the library, beside today's
        return make(spec["variant_of"], epochs, seed, paper, model)[0].set_params(**spec["params"]), "cosine"
    params = {k: tuple(v) if isinstance(v, list) else v for k, v in spec.get("params", {}).items()}
    if paper:
        lengths = cfg["paper_budget"]["context_lengths"] if spec.get("method") else {"max_length": cfg["paper_budget"]["no_context_length"]}
        budget = {"model": model, "epochs": epochs, "batch_size": cfg["paper_budget"]["batch_size"],
                  "learning_rate": cfg["backbones"][model]["learning_rate"], "random_state": seed}
        params.update(**cfg["paper_budget"]["pure"], **lengths, **budget)
    else:
        params.update(spec.get("library", {}), model=model, random_state=seed, **({"epochs": epochs} if epochs else {}))
    return getattr(library, spec["class"])(**params), spec.get("method") or None


def load_data(name: str, quick: bool = False, train_questions: int | None = None) -> dict:
    """``{"train", "dev", "test"}`` -> (X, y): answered questions only, whole questions (so every document is
    complete: its sentences are the question's candidates); WikiQA's splits, or the SQuAD sample's paragraphs
    split 70/30 with 10 % of the training paragraphs as dev; ``train_questions``: keep that many training
    questions (drawn with seed 0, the same for every row and seed)."""
    from harness.library import keep_answered, load_sample

    if name == "wikiqa":
        splits = wikiqa_splits()
        data = {"train": splits["train"], "dev": keep_answered(*splits["dev"]), "test": keep_answered(*splits["test"])}
    else:
        data = paragraph_splits(*load_sample(), dev_size=0.1)
    data = {k: (X.reset_index(drop=True), np.asarray(y)) for k, (X, y) in data.items()}
    if quick:
        sizes = {"train": 40, "dev": 10, "test": 30}
        data = {k: subset_questions(*v, sizes[k]) for k, v in data.items()}
    if train_questions:
        data["train"] = subset_questions(*data["train"], train_questions)
    return data


def with_context(X, method: str):
    """``X`` with its contexts (cached in ``benchmarks/cache/``, keyed by the library's code too), and the
    extractor's report."""
    from harness.library import ContextExtractor

    extractor = ContextExtractor(global_method=method)

    def extract():
        start = time.perf_counter()
        Xc, report = extractor.fit(X).transform(X, return_report=True)
        report["seconds"] = time.perf_counter() - start
        log(f"  {method} contexts of {len(X)} rows in {report['seconds']:.0f}s: {report['mean_global_sentences']:.2f} global sentences")
        return Xc, report

    # Read back from the cache even when just extracted: the frame's hash joins the fits' keys.
    return cached_file((extractor.get_params(), X, library_digest()), "ContextExtractor", extract)


def base_rate_loss(y) -> float:
    """Binary cross-entropy of the constant prediction ``mean(y)``: the training loss of a model that learned
    nothing beyond the share of right answers."""
    p = float(np.mean(np.asarray(y) > 0))
    return float(-(p * np.log(p) + (1 - p) * np.log(1 - p)))


def context_holds_answer(Xc, y, rows) -> dict:
    """For each of ``rows`` (wrong candidates), whether its local / global context contains a right candidate
    of the same question verbatim: ``{"local": bool array, "global": bool array}``."""
    rows = np.asarray(rows)
    frame = pd.DataFrame({"qid": Xc["qid"].to_numpy(), "text": Xc["candidate"].to_numpy(), "label": np.asarray(y)})
    frame["row"] = np.arange(len(frame))
    pairs = frame.iloc[rows].merge(frame[frame["label"] > 0], on="qid", suffixes=("", "_pos"))
    out = {}
    for column in ("local_context", "global_context"):
        context = Xc[column].to_numpy()[pairs["row"].to_numpy()]
        found = np.fromiter((a in c for a, c in zip(pairs["text_pos"], context)), dtype=bool, count=len(pairs))
        out[column.split("_")[0]] = np.isin(rows, pairs["row"].to_numpy()[found])
    return out


def answer_in_context(Xc, y) -> dict:
    """Share of the wrong candidates (label 0) whose local / global context contains a right candidate of the
    same question verbatim: how often the context points at the answer for a candidate that is not it."""
    wrong = np.flatnonzero(np.asarray(y) == 0)
    hits = context_holds_answer(Xc, y, wrong)
    n = max(len(wrong), 1)
    return {"wrong_candidates": len(wrong), "local": float(hits["local"].sum() / n), "global": float(hits["global"].sum() / n),
            "either": float((hits["local"] | hits["global"]).sum() / n)}


def wrong_picks(Xc, y, scores) -> dict:
    """The questions a model gets wrong at rank 1, and how many of its wrong picks have a right answer of the
    question in their local / global context (ties broken as the metrics break them: pessimistically).

    The macro ``wrong_picks_note`` of ``benchmarks/pages/_context.md.j2`` says how to read it."""
    from harness.library import GroupIndex

    index = GroupIndex(Xc["qid"].to_numpy(), Xc["position"].to_numpy())
    picks = index.sort(np.asarray(scores, dtype=np.float64), np.asarray(y))[index.starts]
    wrong = picks[np.asarray(y)[picks] == 0]
    hits = context_holds_answer(Xc, y, wrong)
    return {"questions": len(picks), "wrong": len(wrong), "local": int(hits["local"].sum()), "global": int(hits["global"].sum())}


# ----------------------------------------------------------------------------------------------- latency
def latency_batches(est, X, fixed_width):
    """Batches of ``config()["latency"]["batch"]`` rows, tokenised and built in advance (not timed): sorted by
    length and padded to each batch's longest row, or (``fixed_width``) padded to that many tokens."""
    import torch

    from harness.library import batch_tensors

    size = config()["latency"]["batch"]
    encoded = est.encode(X)
    lengths = encoded["lengths"]
    order = np.arange(len(X)) if fixed_width else np.argsort(lengths, kind="stable")
    batches = []
    for start in range(0, len(X), size):
        rows = order[start : start + size]
        if fixed_width is None:
            batches.append(batch_tensors(encoded, rows))
            continue
        batch = {}
        for key, value in encoded.items():
            if key.startswith("host_"):  # host-side arrays stay NumPy, as batch_tensors leaves them
                batch[key] = value[rows]
                continue
            if key == "lengths":
                continue
            if value.ndim == 1:  # per-row arrays (the lexical prior's logit) have no width to pad
                batch[key] = torch.from_numpy(np.ascontiguousarray(value[rows]))
                continue
            fill = est.tokenizer_.pad_token_id if key.endswith("input_ids") else 0
            padded = np.full((len(rows), fixed_width), fill, dtype=np.int64)
            padded[:, : value.shape[1]] = value[rows]
            batch[key] = torch.from_numpy(padded)
        batches.append(batch)
    return batches


def passes_seconds(call, batches, device) -> float:
    """Seconds of ``call(batch)`` over ``batches``, the device's queue drained before and after."""
    import torch

    from harness.store import computing

    computing("a timing")
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for batch in batches:
        call(batch)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def time_forward(est, batches, device, fixed: bool) -> float:
    """Seconds of the model's forward passes over ``batches``, as ``predict`` runs them (without gradients, under
    one autocast context)."""
    import torch

    from harness.library import autocast, to_device

    predictor = est.predictor(device)
    module = predictor.module
    if hasattr(module, "trim_padding"):
        module.trim_padding = not fixed  # the ensemble otherwise cuts each input to its longest row
    batches = [to_device(b, device) for b in batches]
    with torch.no_grad(), autocast(device, predictor.dtype):
        module({k: v[:8] for k, v in batches[0].items()})  # warm-up (first-call allocations)
        seconds = passes_seconds(module, batches, device)
    if hasattr(module, "trim_padding"):
        module.trim_padding = True
    return seconds


def forward_ops(est, batch, device) -> int:
    """Operators one forward pass issues: top-level aten calls, each about one kernel launch on a GPU (where
    a small model at batch 128 waits on launches more than on arithmetic, latency follows this count)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from harness.library import autocast, to_device

    predictor = est.predictor(device)
    batch = to_device(batch, device)
    with torch.no_grad(), autocast(device, predictor.dtype):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            predictor.module(batch)
    return sum(1 for e in prof.events() if e.name.startswith("aten::") and e.cpu_parent is None)


def latency(models: dict, frames: dict, rounds: int, n_rows: int) -> dict:
    """Per row, ms per sample of the forward passes (median of interleaved rounds) with dynamic padding and at
    the fixed length of the context models, and (dynamic) the operators of one forward pass."""
    from harness.library import resolve_device

    device = resolve_device("auto")
    out = {}
    for mode, width in (("dynamic", None), ("fixed", config()["paper_budget"]["context_lengths"]["max_length"])):
        prepared = {row: latency_batches(est, frames[row].iloc[:n_rows], width) for row, est in models.items()}
        times = {row: [] for row in models}
        for r in range(rounds):
            for row, est in models.items():
                times[row].append(1000 * time_forward(est, prepared[row], device, width is not None) / min(n_rows, len(frames[row])))
            log(f"[latency {mode}] round {r}: " + ", ".join(f"{row} {t[-1]:.2f}" for row, t in times.items()) + " ms/sample")
        out[mode] = {row: {"ms_per_sample": float(np.median(t)), "rounds": t} for row, t in times.items()}
        if mode == "dynamic":
            out["ops_per_forward"] = {row: forward_ops(est, prepared[row][0], device) for row, est in models.items()}
    return out
