"""Context for answer sentence selection on WikiQA and the SQuAD sample: the shape of Tables 2-4 of Han,
Soldaini & Moschitti (2021).

    python benchmarks/context.py [--quick] [--seeds 0 1 2] [--epochs N] [--data wikiqa squad] [--threads N] [--render]

Data. WikiQA: documents are the summary paragraphs (all sentences of a DocumentID, which are exactly the
candidates of its question); training on the answered questions of WikiQA-train minus the dev split of
``_common.wikiqa_splits()``, early stopping on that dev split (answered questions), test on the answered
questions of WikiQA-test (the clean protocol). SQuAD: the bundled SQuAD 2.0 sample (SQuAD-sent), documents
are the paragraphs; its paragraphs are split 70/30 into train and test (``GroupShuffleSplit(test_size=0.3,
random_state=0)`` on ``doc_id``, as ``as2rank bench`` does) and 10% of the train paragraphs form the dev
split; answered questions only for training, dev and test.

Contexts: ``ContextExtractor`` with the paper's settings (``local_window=1``, ``h=5`` global sentences within
128 tokens), ``global_method="cosine"`` (all-MiniLM-L6-v2 sentence embeddings) for Table 2 and both methods
for the Table 4 analog; the extracted frames are cached in ``benchmarks/cache/``.

Models (the Table 2 rows), one backbone (``minilm-l6``) and, per data set, one training budget for all
(``budget()``; epochs: ``EPOCHS``), every one the paper's model without the lexical prior
(``lexical_prior=False``): No context = ``TransformerRanker(max_length=128)``; Local / Global = ``ContextConcat`` with
``contexts=("local",)`` / ``("global",)``; Concat = ``ContextConcat()``; Ensemble = ``ContextEnsemble()``
(whose two member encoders are the Local and Global fits, reused from the in-process fit cache when they were
trained in the same run); MWA = ``ContextMWA()``; plus MWA over n-gram global context (Table 4). Context
models read at most 256 tokens, 128 of them reserved for the question and candidate. Every fit goes
through ``_common.fitted()``, so a re-run retrains nothing unchanged. P@1, MAP and MRR are means ± standard
deviations over the seeds; p-values: paired randomisation test (9,999 sign flips) of per-question AP and
P@1, each averaged over the seeds, against the no-context row.

Latency (seed 0 models, one run, interleaved rounds, median): ``predict``'s forward passes alone on test
rows in batches of 128 (tokenisation and batch building excluded), per sample, (a) with dynamic padding
(rows sorted by length, each batch padded to its longest row: the context tokens show) and (b) at fixed
length (every model, the no-context one included, padded to 256 tokens: the paper's setting). Mean input
tokens per pair (both inputs for the ensemble) explain the dynamic figures.

``--quick``: 1 seed, 1 epoch, 40 train / 10 dev / 30 test questions per data set, one latency round on 128
rows: an end-to-end check, not a result. Writes ``benchmarks/results/context.json`` and
``docs/benchmarks/context.md`` (``--render`` rewrites the Markdown from the JSON, first adding to the JSON the
fields added since its run, from the same splits).
"""

from __future__ import annotations

import argparse
import json
import time

import joblib
import numpy as np
import pandas as pd
import torch
from _common import CACHE, DOCS, RESULTS, acceptance_section, fitted, jsonable, load_average, log, log_checks, run_header, tagged, wikiqa_splits

from as2rank.context import ContextConcat, ContextEnsemble, ContextExtractor, ContextMWA
from as2rank.data import GroupIndex, keep_answered
from as2rank.metrics import mean_average_precision, paired_significance, precision_at_k, ranking_report
from as2rank.neural import autocast, resolve_device, to_device
from as2rank.neural.backbone import batch_tensors
from as2rank.neural.fitcache import FIT_CACHE
from as2rank.transformer import TransformerRanker

#: Input lengths of the context models: the whole input, and the share reserved for question + candidate
#: (= the no-context model's max_length, so the pair is encoded alike in every row of the table).
CONTEXT_LENGTHS = {"max_length": 256, "max_pair_length": 128}
NO_CONTEXT_LENGTH = 128
#: Training epochs of every model, per data set (``--epochs`` overrides both). SQuAD's training split is small
#: (67 steps an epoch at batch 32) and the context models leave the base-rate plateau later than the
#: no-context one (``benchmarks/context_budget.py``, seed 1): ContextConcat(contexts=("local",)) ended a
#: 2-epoch budget at loss 0.52 (base rate 0.53; test P@1 47.9) and a 4-epoch one at 0.23 (P@1 79.5); dev MAP
#: of both it and the no-context model levels off from the third epoch, and 6 epochs gained nothing on dev.
EPOCHS = {"wikiqa": 2, "squad": 4}
LATENCY_BATCH = 128
METRICS = ("p@1", "map", "mrr")

# Table 2 (ASNQ test, RoBERTa-base): P@1, MAP, MRR, latency per sample as printed (fixed batch of 128, one GPU).
PAPER_T2 = {
    "No context": (0.596, 0.685, 0.706, 5.49),
    "Local": (0.653, 0.732, 0.752, 5.62),
    "Global": (0.622, 0.698, 0.722, 5.67),
    "Concat": (0.631, 0.726, 0.743, 5.76),
    "Ensemble": (0.668, 0.743, 0.765, 7.41),
    "MWA": (0.661, 0.742, 0.758, 5.82),
}
# Table 4 (ASNQ test, MWA): global context by n-gram overlap vs cosine similarity.
PAPER_T4 = {"MWA (n-gram)": (0.638, 0.725, 0.746), "MWA": (0.661, 0.742, 0.758)}
# Footnote 3: global sentences selected on average with h=5 (ASNQ).
PAPER_GLOBAL_SENTENCES = {"ngram": 3.02, "cosine": 2.85}

#: Rows of the tables in fit order: the ensemble comes right after Local and Global, so that its member
#: encoders are those fits (in-process fit cache) rather than trained again.
ROWS = ("No context", "Local", "Global", "Ensemble", "Concat", "MWA", "MWA (n-gram)")


def budget(epochs: int, seed: int) -> dict:
    """The one training budget of every model (the budget ``benchmarks/cascade.py`` selected on WikiQA dev)."""
    return {"epochs": epochs, "batch_size": 32, "learning_rate": 1e-4, "random_state": seed}


def epochs_for(name: str, args) -> int:
    return args.epochs or EPOCHS[name]


def epochs_text(epochs) -> str:
    """A budget's epochs as the page prints them (one number, or one per data set)."""
    if isinstance(epochs, int):
        return str(epochs)
    return ", ".join(f"{n} on {name}" for name, n in epochs.items()) if len(set(epochs.values())) > 1 else str(next(iter(epochs.values())))


def make(row: str, epochs: int, seed: int):
    """The estimator of a table row, and the global-context method of the frame it reads."""
    b = budget(epochs, seed)
    if row == "No context":
        return TransformerRanker(max_length=NO_CONTEXT_LENGTH, lexical_prior=False, **b), None
    if row in ("Local", "Global"):
        return ContextConcat(contexts=(row.lower(),), lexical_prior=False, **CONTEXT_LENGTHS, **b), "cosine"
    if row == "Concat":
        return ContextConcat(lexical_prior=False, **CONTEXT_LENGTHS, **b), "cosine"
    if row == "Ensemble":
        return ContextEnsemble(**CONTEXT_LENGTHS, **b), "cosine"
    return ContextMWA(lexical_prior=False, **CONTEXT_LENGTHS, **b), "ngram" if row == "MWA (n-gram)" else "cosine"


# ----------------------------------------------------------------------------------------------- data
def subset_questions(X, y, n, seed=0):
    qids = np.sort(np.random.default_rng(seed).choice(X["qid"].unique(), size=min(n, X["qid"].nunique()), replace=False))
    keep = X["qid"].isin(qids).to_numpy()
    return X[keep].reset_index(drop=True), y[keep]


def load_data(name: str, quick: bool) -> dict:
    """``{"train", "dev", "test"}`` -> (X, y): answered questions only, whole questions (so every document is
    complete: its sentences are the question's candidates)."""
    from sklearn.model_selection import GroupShuffleSplit

    if name == "wikiqa":
        splits = wikiqa_splits()
        data = {"train": splits["train"], "dev": keep_answered(*splits["dev"]), "test": keep_answered(*splits["test"])}
    else:
        from as2rank.datasets import load_sample

        X, y = load_sample()
        train, test = next(GroupShuffleSplit(n_splits=1, test_size=0.3, random_state=0).split(X, y, groups=X["doc_id"]))
        Xtr, ytr = X.iloc[train], y[train]
        fit, dev = next(GroupShuffleSplit(n_splits=1, test_size=0.1, random_state=0).split(Xtr, ytr, groups=Xtr["doc_id"]))
        data = {
            "train": keep_answered(Xtr.iloc[fit], ytr[fit]),
            "dev": keep_answered(Xtr.iloc[dev], ytr[dev]),
            "test": keep_answered(X.iloc[test], y[test]),
        }
    data = {k: (X.reset_index(drop=True), np.asarray(y)) for k, (X, y) in data.items()}
    if quick:
        sizes = {"train": 40, "dev": 10, "test": 30}
        data = {k: subset_questions(*v, sizes[k]) for k, v in data.items()}
    return data


def with_context(X, method: str):
    """``X`` with its contexts (cached on disk), and the extractor's report."""
    extractor = ContextExtractor(global_method=method)
    path = CACHE / f"ContextExtractor-{joblib.hash((extractor.get_params(), X))}.joblib"
    if path.exists():
        return joblib.load(path)
    start = time.perf_counter()
    Xc = extractor.fit_transform(X)
    report = {**extractor.report_, "seconds": time.perf_counter() - start}
    CACHE.mkdir(parents=True, exist_ok=True)
    joblib.dump((Xc, report), path)
    log(f"  {method} contexts of {len(X)} rows in {report['seconds']:.0f}s: {report['mean_global_sentences']:.2f} global sentences")
    # The frame as read back: its hash (part of the fitted-model cache keys) is then the same in later runs.
    return joblib.load(path)


def base_rate_loss(y) -> float:
    """Binary cross-entropy of the constant prediction ``mean(y)``: the training loss of a model that learned
    nothing beyond the share of right answers."""
    p = float(np.mean(np.asarray(y) > 0))
    return float(-(p * np.log(p) + (1 - p) * np.log(1 - p)))


def near_base_rate(loss: float, base_rate: float) -> bool:
    """Whether a fit's final training loss ended within 10% of the base-rate loss: it learned next to nothing."""
    return loss >= 0.9 * base_rate


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

    See :func:`wrong_picks_note` for how to read it."""
    index = GroupIndex(Xc["qid"].to_numpy(), Xc["position"].to_numpy())
    picks = index.sort(np.asarray(scores, dtype=np.float64), np.asarray(y))[index.starts]
    wrong = picks[np.asarray(y)[picks] == 0]
    hits = context_holds_answer(Xc, y, wrong)
    return {"questions": len(picks), "wrong": len(wrong), "local": int(hits["local"].sum()), "global": int(hits["global"].sum())}


# ----------------------------------------------------------------------------------------------- evaluation
def per_question(y, scores, X, metric):
    fn = {"map": mean_average_precision, "p@1": precision_at_k}[metric]
    return fn(y, scores, X["qid"].to_numpy(), position=X["position"].to_numpy(), per_group=True)


def evaluate(y, scores, X) -> dict:
    rep = ranking_report(y, scores, X["qid"].to_numpy(), position=X["position"].to_numpy(), k=(1,), ndcg_k=())
    return {m: float(rep[m]) for m in METRICS}


def mean_tokens(est, X) -> float:
    """Mean input tokens per pair (all inputs of the model: both for the ensemble)."""
    encoded = est._encode(X)
    return float(sum(v.sum() for k, v in encoded.items() if k.endswith("attention_mask")) / len(X))


def latency_batches(est, X, fixed_width):
    """Batches of ``LATENCY_BATCH`` rows, tokenised and built in advance (not timed)."""
    encoded = est._encode(X)
    lengths = encoded["lengths"]
    order = np.arange(len(X)) if fixed_width else np.argsort(lengths, kind="stable")
    batches = []
    for start in range(0, len(X), LATENCY_BATCH):
        rows = order[start : start + LATENCY_BATCH]
        if fixed_width is None:
            batches.append(batch_tensors(encoded, rows))
            continue
        batch = {}
        for key, value in encoded.items():
            if key == "lengths":
                continue
            fill = est.tokenizer_.pad_token_id if key.endswith("input_ids") else 0
            padded = np.full((len(rows), fixed_width), fill, dtype=np.int64)
            padded[:, : value.shape[1]] = value[rows]
            batch[key] = torch.from_numpy(padded)
        batches.append(batch)
    return batches


def time_forward(est, batches, device, fixed: bool) -> float:
    """Seconds of the model's forward passes over ``batches`` (as ``predict`` runs them)."""
    module = est._module_on(device)
    if hasattr(module, "trim_padding"):
        module.trim_padding = not fixed  # the ensemble otherwise cuts each input to its longest row
    batches = [to_device(b, device) for b in batches]
    with torch.inference_mode(), autocast(device, est._compute_dtype(device)):
        module({k: v[:8] for k, v in batches[0].items()})  # warm-up (first-call allocations)
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for batch in batches:
            module(batch)
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
    if hasattr(module, "trim_padding"):
        module.trim_padding = True
    return seconds


def forward_ops(est, batch, device) -> int:
    """Operators one forward pass issues: top-level aten calls, each about one kernel launch on a GPU (where
    a small model at batch 128 waits on launches more than on arithmetic, latency follows this count)."""
    from torch.profiler import ProfilerActivity, profile

    module = est._module_on(device)
    batch = to_device(batch, device)
    with torch.inference_mode(), autocast(device, est._compute_dtype(device)):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            module(batch)
    return sum(1 for e in prof.events() if e.name.startswith("aten::") and e.cpu_parent is None)


def latency(models: dict, frames: dict, rounds: int, n_rows: int) -> dict:
    device = resolve_device("auto")
    out = {}
    for mode, width in (("dynamic", None), ("fixed", CONTEXT_LENGTHS["max_length"])):
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


def run_dataset(name, args, fit_log) -> dict:
    log(f"== {name}")
    data = load_data(name, args.quick)
    frames, extraction = {}, {}
    for split, (X, _) in data.items():
        for method in ("ngram", "cosine"):
            frames[(split, method)], extraction[f"{split}/{method}"] = with_context(X, method)
    res = {
        "n": {split: {"questions": int(X["qid"].nunique()), "rows": len(X)} for split, (X, _) in data.items()},
        "base_rate_loss": base_rate_loss(data["train"][1]),
        "extraction": extraction,
        "answer_in_context": {m: answer_in_context(frames[("test", m)], data["test"][1]) for m in ("ngram", "cosine")},
        "rows": {},
    }
    y_train, y_dev, y_test = (data[s][1] for s in ("train", "dev", "test"))
    X_test_plain = data["test"][0]
    per_q = {row: {"map": [], "p@1": []} for row in ROWS}
    seed0 = {}
    for row in ROWS:
        runs = []
        for seed in args.seeds:
            est, method = make(row, epochs_for(name, args), seed)
            X_train = data["train"][0] if method is None else frames[("train", method)]
            X_dev = data["dev"][0] if method is None else frames[("dev", method)]
            X_test = X_test_plain if method is None else frames[("test", method)]
            model = fitted(est, X_train, y_train, fit_log, eval_set=(X_dev, y_dev))
            fit_log[-1].update(data=name, row=row, seed=seed)
            scores = model.predict(X_test)
            picks = wrong_picks(frames[("test", method or "cosine")], y_test, scores)
            runs.append({"seed": seed, **evaluate(y_test, scores, X_test), "wrong_picks": picks})
            for m in ("map", "p@1"):
                per_q[row][m].append(per_question(y_test, scores, X_test, m))
            if seed == args.seeds[0]:
                seed0[row] = (model, X_test)
            log(f"[{name}] {row} seed {seed}: " + " ".join(f"{m} {runs[-1][m]:.4f}" for m in METRICS))
        res["rows"][row] = {
            "runs": runs,
            **{m: float(np.mean([r[m] for r in runs])) for m in METRICS},
            **{f"{m}_std": float(np.std([r[m] for r in runs])) for m in METRICS},
            "tokens_per_pair": mean_tokens(seed0[row][0], seed0[row][1]),
        }
    base = {m: pd.concat(per_q["No context"][m], axis=1).mean(axis=1) for m in ("map", "p@1")}
    for row in ROWS[1:]:
        for m in ("map", "p@1"):
            res["rows"][row][f"p_{m}"] = paired_significance(pd.concat(per_q[row][m], axis=1).mean(axis=1), base[m])
    log(f"[{name}] in-process fit cache hits so far: {FIT_CACHE.hits} (ensemble members served by this run's Local/Global fits)")
    models = {row: model for row, (model, _) in seed0.items()}
    frames_test = {row: X for row, (_, X) in seed0.items()}
    res["latency"] = latency(models, frames_test, rounds=1 if args.quick else 3, n_rows=128 if args.quick else 512)
    res["latency_rows"] = min(128 if args.quick else 512, len(X_test_plain))
    return res


# ----------------------------------------------------------------------------------------------- checks
def acceptance(res) -> list:
    checks = []
    if "wikiqa" in res["datasets"]:
        rows = res["datasets"]["wikiqa"]["rows"]
        mwa, base = rows["MWA"], rows["No context"]
        delta = mwa["p@1"] - base["p@1"]
        checks.append((
            "WikiQA: MWA P@1 above the no-context TransformerRanker (same backbone and budget; paper: +6.5 on ASNQ); "
            "significant only if p < 0.05",
            f"{100 * mwa['p@1']:.2f} vs {100 * base['p@1']:.2f} (Δ {100 * delta:+.2f}, p={mwa['p_p@1']:.3f})",
            delta > 0,
        ))
    for name, data in res["datasets"].items():
        for mode in ("fixed", "dynamic"):
            lat = {row: v["ms_per_sample"] for row, v in data["latency"][mode].items()}
            ratio = lat["MWA"] / lat["Concat"]
            checks.append((f"{name}, {mode} padding: MWA latency ≤ 1.2× Concat (paper 1.01×)", f"{ratio:.2f}×", ratio <= 1.2))
            ratio = lat["MWA"] / lat["Ensemble"]
            checks.append((f"{name}, {mode} padding: MWA latency below Ensemble (paper 0.79×)", f"{ratio:.2f}×", ratio < 1))
    return [{"check": c, "measured": m, "pass": bool(ok)} for c, m, ok in checks]


# ----------------------------------------------------------------------------------------------- report
def pct(v):
    return f"{100 * v:.2f}"


def pval(p):
    return "–" if p is None else f"{p:.3f}" + ("*" if p < 0.05 else "")


def markdown(res) -> str:
    b = res["budget"]
    lines = [
        "# Context for answer sentence selection (Han, Soldaini & Moschitti 2021, Tables 2–4)",
        "",
        f"Measured {res['date']} on {res['machine']}; torch {res['torch']} with {res['torch_threads']} CPU thread(s), "
        f"precision `auto`. Load average at start {res['load_average_start']}, at end {res['load_average_end']}: the "
        "machine is shared, so times are noisy; compare them as ratios inside one table.",
        f"Command: `{res['command']}`" + (" (**quick mode**: " + res["quick"] + ")" if res["quick"] else "") + ".",
        f"Wall time of this run: {res['wall_seconds'] / 60:.1f} min (fits read from `benchmarks/cache/` where cached).",
        "",
        "Backbone `minilm-l6` (all-MiniLM-L6-v2, 6 layers, hidden 384, mean pooling) for every model; the paper used "
        "RoBERTa-base on ASNQ (and an in-house set) on GPUs. One training budget for every model: "
        f"`epochs={epochs_text(b['epochs'])}, batch_size={b['batch_size']}, learning_rate={b['learning_rate']}`, seeds "
        f"{res['seeds']}, early stopping on the dev split (best epoch restored), other parameters at their defaults. "
        f"No context: `TransformerRanker(max_length={NO_CONTEXT_LENGTH})`; context models: `max_length=256`, of which "
        "128 are reserved for the question and candidate. Global context for Table 2: cosine (Eq. 2) with the "
        "MiniLM sentence encoder (the paper's Table 2 uses its cosine context too: its MWA row equals Table 4's "
        "cosine row); `local_window=1`, `max_global_sentences=5`, `max_global_tokens=128`." + mwa_summary_note(res["fits"]),
        "",
        "p: paired randomisation test (9,999 sign flips) of per-question P@1 and AP, each averaged over the seeds, "
        "against the no-context row; * = p < 0.05. Latency: forward passes of `predict` alone (tokenisation and "
        "batch building excluded), batches of 128 test rows, seed-0 models, median of interleaved rounds, in ms per "
        "sample; **dynamic** = rows sorted by length, each batch padded to its longest row (the context tokens "
        "show); **fixed** = every model, the no-context one included, padded to 256 tokens (the paper's setting). "
        "×: relative to the no-context row of the same column. ops / forward: top-level torch operators one forward "
        "pass of a batch issues (about one kernel launch each on a GPU, where this 6-layer model at batch 128 is "
        "bound more by launches than by arithmetic, so latency there follows this count more than the tokens).",
        "",
    ]
    for name, data in res["datasets"].items():
        n = data["n"]
        title = {"wikiqa": "WikiQA", "squad": "SQuAD 2.0 sample (paragraphs)"}[name]
        lat = data["latency"]
        base_lat = {mode: lat[mode]["No context"]["ms_per_sample"] for mode in ("dynamic", "fixed")}
        ops = lat.get("ops_per_forward", {})
        lines += [
            f"## {title}: Table 2 analog",
            "",
            f"Train {n['train']['questions']} questions / {n['train']['rows']} pairs, dev {n['dev']['questions']} / "
            f"{n['dev']['rows']}, test {n['test']['questions']} / {n['test']['rows']} (answered questions). Latency on "
            f"{data['latency_rows']} test rows.",
            "",
            "| model | P@1 | MAP | MRR | p P@1 | p AP | tokens / pair | latency dynamic (ms) | × | latency fixed (ms) | × | "
            "ops / forward | paper (ASNQ) P@1 / MAP / MRR | paper latency × |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for row in ROWS:
            r = data["rows"][row]
            paper = PAPER_T2.get(row) or PAPER_T4.get(row)
            cells = [f"{pct(r[m])} ± {pct(r[m + '_std'])}" for m in METRICS]
            dyn, fix = lat["dynamic"][row]["ms_per_sample"], lat["fixed"][row]["ms_per_sample"]
            paper_cells = " / ".join(f"{100 * v:.1f}" for v in paper[:3]) if paper else "–"
            paper_lat = f"{paper[3] / PAPER_T2['No context'][3]:.2f}" if paper and len(paper) > 3 else "–"
            lines.append(
                f"| {row} | {' | '.join(cells)} | {pval(r.get('p_p@1'))} | {pval(r.get('p_map'))} | "
                f"{r['tokens_per_pair']:.0f} | {dyn:.2f} | {dyn / base_lat['dynamic']:.2f} | {fix:.2f} | "
                f"{fix / base_lat['fixed']:.2f} | {ops.get(row, '–')} | {paper_cells} | {paper_lat} |"
            )
        rows = data["rows"]
        lines += [
            "",
            f"### {title}: Table 4 analog (MWA, global context by n-gram overlap vs cosine similarity)",
            "",
            "| global context | P@1 | MAP | MRR | global sentences (test) | global tokens (test) | paper (ASNQ) P@1 / MAP / "
            "MRR | paper global sentences |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for method, row in (("ngram", "MWA (n-gram)"), ("cosine", "MWA")):
            r, ext = rows[row], data["extraction"][f"test/{method}"]
            paper = PAPER_T4[row]
            lines.append(
                f"| {'n-gram (Eq. 1)' if method == 'ngram' else 'cosine (Eq. 2)'} | "
                + " | ".join(f"{pct(r[m])} ± {pct(r[m + '_std'])}" for m in METRICS)
                + f" | {ext['mean_global_sentences']:.2f} | {ext['mean_global_tokens']:.1f} | "
                + " / ".join(f"{100 * v:.1f}" for v in paper)
                + f" | {PAPER_GLOBAL_SENTENCES[method]} |"
            )
        lines += [
            "",
            "Average global sentences selected (h=5, ≤128 spaCy tokens), per split: "
            + "; ".join(f"{k}: {v['mean_global_sentences']:.2f}" for k, v in data["extraction"].items())
            + ". Average local sentences: "
            + "; ".join(f"{k}: {v['mean_local_sentences']:.2f}" for k, v in data["extraction"].items() if k.endswith("cosine"))
            + ".",
            "",
        ]
        if all("wrong_picks" in r for row in rows.values() for r in row["runs"]):
            lines += wrong_picks_table(data)
        if "answer_in_context" in data:
            lines += [
                "Wrong test candidates whose context holds a right answer of the same question verbatim: "
                + "; ".join(f"{m} global context: local {100 * a['local']:.1f}%, global {100 * a['global']:.1f}%, "
                            f"either {100 * a['either']:.1f}% (of {a['wrong_candidates']})"
                            for m, a in data["answer_in_context"].items())
                + ".",
                "",
            ]
    lines += [
        "## Fits",
        "",
        "Times of the run that trained each model (read from `benchmarks/cache/` since when marked cached), with the "
        "load average then; the ensemble's time is its joint stage when its members came from the fit cache.",
        "",
        "Final loss: the mean binary cross-entropy of the last training epoch; base rate: the loss of the constant "
        "prediction of the share of right answers in the training split ("
        + ", ".join(f"{name} {d['base_rate_loss']:.3f}" for name, d in res["datasets"].items()) + "), i.e. of a model "
        "that learned nothing else.",
        "",
        "| data | row | seed | class | fit time | training pairs/s | final loss | × base rate | load average after | cached |",
        "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for f in res["fits"]:
        base = res["datasets"][f["data"]]["base_rate_loss"]
        loss = f.get("final_epoch_loss", float("nan"))
        lines.append(f"| {f.get('data')} | {f.get('row')} | {f.get('seed')} | {f.get('model')} | "
                     f"{f.get('fit_seconds', float('nan')):.0f} s | {f.get('pairs_per_second') or float('nan'):.1f} | "
                     f"{loss:.3f} | {loss / base:.2f} | {f.get('load_average')} | {'yes' if f.get('cached') else 'no'} |")
    lines += ["", untrained_note(res)]
    lines += acceptance_section(res["acceptance"], "Acceptance checks (as measured)")
    lines += ["", "## Notes", ""] + [f"- {n}" for n in NOTES] + [""]
    return "\n".join(lines)


def mwa_summary_note(fits) -> str:
    """Which ``ContextMWA(summary=...)`` the MWA rows of a run are, from its fit records (a fit recorded
    before the option existed is ``"sequence"``, the only model there was): a sentence with a leading space,
    or "" for a run without MWA."""
    summaries = sorted({f.get("summary") or f.get("params", {}).get("summary", "sequence") for f in fits
                        if f.get("model") == "ContextMWA" or str(f.get("row", "")).startswith("MWA")})
    if not summaries:
        return ""
    what = {"pair": "the question and candidate tokens' mean encoding", "sequence": "the pooled whole sequence, context tokens included"}
    return " MWA rows: " + "; ".join(f'`ContextMWA(summary="{s}")` (beside the attended views, its classifier reads {what[s]})' for s in summaries) + (
        ", measured before `pair` became the default ([the comparison](context_summary.md))." if summaries == ["sequence"] else "."
    )


def wrong_picks_note(base, over_seeds: bool = False) -> str:
    """How to read :func:`wrong_picks` figures, with ``base``, the shares among all wrong test candidates
    (:func:`answer_in_context`)."""
    return (
        f"Wrong picks: test questions whose top-ranked candidate is wrong{' (mean over seeds)' if over_seeds else ''}, "
        "and the share of those picks whose "
        "local / global context (the contexts the row reads; the cosine ones for the no-context row) holds a right answer of the "
        f"question verbatim; among all wrong test candidates the shares are {100 * base['local']:.1f}% / "
        f"{100 * base['global']:.1f}%. Any ranker's wrong picks resemble the answer, so they sit above those "
        "shares; a context row whose wrong picks hold the answer in their context more often than the "
        "no-context row's is drawn to the answer's neighbours by the context."
    )


def wrong_picks_table(data) -> list:
    """Per row: the test questions it ranks a wrong candidate first, and how often that pick's context holds the
    right answer, beside the share among all wrong candidates (:func:`answer_in_context`)."""
    lines = [
        wrong_picks_note(data["answer_in_context"]["cosine"], over_seeds=True),
        "",
        "| model | questions wrong at rank 1 | pick's local context holds the answer | pick's global context holds the answer |",
        "| --- | ---: | ---: | ---: |",
    ]
    for row in ROWS:
        picks = [r["wrong_picks"] for r in data["rows"][row]["runs"]]
        wrong = sum(p["wrong"] for p in picks)
        share = {c: 100 * sum(p[c] for p in picks) / max(wrong, 1) for c in ("local", "global")}
        lines.append(f"| {row} | {wrong / len(picks):.1f} of {picks[0]['questions']} | {share['local']:.1f}% | {share['global']:.1f}% |")
    return lines + [""]


def untrained_note(res) -> str:
    """Which rows ended training near the base-rate loss (within 10%), from the fits above."""
    stalled = {}
    for f in res["fits"]:
        if near_base_rate(f.get("final_epoch_loss", 0.0), res["datasets"][f["data"]]["base_rate_loss"]):
            stalled.setdefault((f["data"], f["row"]), []).append(f["seed"])
    if not stalled:
        return "Every fit ended its training well below the base-rate loss."
    listed = "; ".join(f"{data} {row} (seeds {', '.join(map(str, seeds))})" for (data, row), seeds in stalled.items())
    return (f"Fits that ended training within 10% of the base-rate loss, i.e. learned next to nothing at this budget: "
            f"{listed}. Their rows in the tables above measure a failure to train at this budget, not what "
            "context is worth.")


NOTES = [
    "The paper fine-tunes RoBERTa-base on ASNQ (59,914 questions); WikiQA-train has 873 answered questions and the "
    "SQuAD sample a few hundred, with a 6-layer MiniLM: differences of a point or two are within seed noise here "
    "(see the ± and the p-values), and the paper's gains need not transfer at this scale.",
    "WikiQA documents are short summary paragraphs (about 10 sentences) and every sentence of the paragraph is a "
    "candidate, so the global context draws on the same few sentences as the candidates; SQuAD paragraphs are "
    "shorter still (about 5 sentences), where local and global context overlap heavily. Above all, the context of "
    "a wrong candidate then usually holds the right one (its neighbour, or one of the question's most similar "
    "sentences; counted under each Table 4 analog): the context says 'the answer is near' for every candidate of the question alike, and the model "
    "must learn to tell which segment holds it. In ASNQ, where the paper measured its gains, candidates come from "
    "whole Wikipedia pages and most have no answer anywhere near them. Where a fit ended near the base-rate loss "
    "(see Fits), it did not learn at all, and its row says nothing about context. For MWA on WikiQA, "
    "`context_budget-wikiqa.md` tests two readings of its deficit and rejects both: its wrong picks hold the answer "
    "in their local context no more often than the no-context ranker's (it is not drawn to the answer's "
    "neighbours), and a longer budget lowers its training loss while its dev MAP stays flat and its test P@1 falls "
    "(it is not under-trained): with inputs five times longer than the pair, it fits the few hundred training "
    "questions without generalising.",
    "Global sentences are counted in spaCy tokens (max 128); MiniLM's wordpieces are about 1.2× more, and the "
    "contexts share 256 − (question + candidate tokens) of the input, so long global contexts lose their last, "
    "least similar sentence to truncation.",
    "The ensemble's two encoders are the Local and Global models of the same seed (ContextEnsemble trains "
    "ContextConcat members with its own parameters, which the in-process fit cache serves when those fits ran "
    "earlier in the same process), then as many epochs again with the top 3 layers of each encoder and the new "
    "classifier trainable. Its fixed-length latency is two full encoder passes (the paper's 1.35× suggests its two "
    "encoders did not both run at full length, or ran concurrently on the GPU).",
    "Latency is measured on the machine named at the top (on a CPU, cores shared with other jobs), as ratios "
    "within one run; the paper measured one GPU (a V100) with fixed batches of 128, where context costs ~6% over no context because every input is padded to the "
    "same length. With dynamic padding the no-context model reads far fewer tokens per pair (see the token column), "
    "so its latency advantage is much larger.",
]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 seed, 1 epoch, 40/10/30 questions per split, 1 latency round: an end-to-end check")
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="random seeds (default 0 1 2; quick: 0)")
    parser.add_argument("--epochs", type=int, default=None, help="training epochs of every data set (default: EPOCHS; quick: 1)")
    parser.add_argument("--data", nargs="+", choices=("wikiqa", "squad"), default=["wikiqa", "squad"])
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--render", action="store_true", help="only rewrite docs/benchmarks/context.md from the JSON (adding fields added since its run)")
    args = parser.parse_args(argv)
    if args.render:
        res = json.loads((RESULTS / tagged("context.json")).read_text())
        for name, data in res["datasets"].items():  # a field added after the run: from the same splits
            data.setdefault("base_rate_loss", base_rate_loss(load_data(name, bool(res["quick"]))["train"][1]))
        (RESULTS / tagged("context.json")).write_text(json.dumps(res, indent=2))
        (DOCS / tagged("context.md")).write_text(markdown(res))
        return
    args.seeds = args.seeds or ([0] if args.quick else [0, 1, 2])
    args.epochs = args.epochs or (1 if args.quick else None)
    if args.threads:
        torch.set_num_threads(args.threads)
    start = time.perf_counter()
    res = {
        **run_header("context.py", argv),
        "quick": "1 seed, 1 epoch, 40 train / 10 dev / 30 test questions per data set, one latency round on 128 rows"
        if args.quick else "",
        "seeds": args.seeds,
        "budget": {
            **{k: v for k, v in budget(None, args.seeds[0]).items() if k not in ("random_state", "epochs")},
            "epochs": {name: epochs_for(name, args) for name in args.data},
        },
        "datasets": {},
    }
    fit_log = []
    for name in args.data:
        res["datasets"][name] = run_dataset(name, args, fit_log)
    res["fits"] = fit_log
    res["acceptance"] = acceptance(res)
    log_checks(res["acceptance"])
    res["load_average_end"] = load_average()
    res["wall_seconds"] = time.perf_counter() - start
    res = jsonable(res)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / tagged("context.json")).write_text(json.dumps(res, indent=2))
    DOCS.mkdir(parents=True, exist_ok=True)
    (DOCS / tagged("context.md")).write_text(markdown(res))
    log(f"wrote {RESULTS / tagged('context.json')} and {DOCS / tagged('context.md')} ({res['wall_seconds'] / 60:.1f} min)")


if __name__ == "__main__":
    main()
