"""Context for answer sentence selection on WikiQA and the SQuAD sample: the shape of Tables 2-4 of Han,
Soldaini & Moschitti (2021).

    python benchmarks/context.py [--paper] [--model mpnet-base|minilm-l6] [--quick] [--seeds 0 1 2] [--epochs N]
                                [--data wikiqa squad] [--train-questions N] [--threads N] [--rows R ...]
                                [--page-rows R ...]

**At the library's strength** (the default): every row is the library's estimator at its defaults
(``random_state`` the seed): No context = ``TransformerRanker()``, Local / Global = ``ContextConcat`` with one
context, Concat = ``ContextConcat()``, Ensemble = ``ContextEnsemble()`` (its ``LIBRARY_DEFAULTS`` passed explicitly),
MWA = ``ContextMWA()``; writes
``context-library``. **At the paper's** (``--paper``): the paper's pure models at one budget, as below; writes
``context``.

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

With ``--paper``, models (the Table 2 rows), one backbone (``--model``; by default ``mpnet-base``, a 12-layer BASE
encoder as the paper's RoBERTa-base) and, per data set, one training budget for all (``budget()``; epochs:
``EPOCHS``; the learning rate of the backbone, ``BACKBONES``), every one the paper's model without the lexical prior
(``lexical_prior=False``): No context = ``TransformerRanker(max_length=128)``; Local / Global = ``ContextConcat`` with
``contexts=("local",)`` / ``("global",)``; Concat = ``ContextConcat()``; Ensemble = ``ContextEnsemble()``
(whose two member encoders are the Local and Global fits, reused from the in-process fit cache when they were
trained in the same run); MWA = ``ContextMWA()``; plus MWA over n-gram global context (Table 4). Context
models read at most 256 tokens, 128 of them reserved for the question and candidate. Every fit goes
through ``_common.fitted()``, so a re-run retrains nothing unchanged. P@1, MAP and MRR are means ± standard
deviations over the seeds; p-values: paired randomisation test (9,999 sign flips) of per-question AP and
P@1, each averaged over the seeds, against the no-context row.

Latency (one run, interleaved rounds, median): ``predict``'s forward passes alone on test rows in batches of
128 (tokenisation and batch building excluded), per sample, (a) with dynamic padding (rows sorted by length,
each batch padded to its longest row: the context tokens show) and (b) at fixed length (every model, the
no-context one included, padded to 256 tokens: the paper's setting), each row's estimator fitted for one
epoch on 16 training questions (a forward pass costs the same whatever the weights). Mean input tokens per
pair (both inputs for the ensemble) explain the dynamic figures.

Every fit's test scores are stored in ``benchmarks/results/scores/`` (``_common.fitted_scores``), keyed by the
fit (the library's code included): a run needing more CPU hours than one session has is run again with the same
command until every fit is stored, and the page records which machine trained each fit.

``--rows R ...`` fits those rows only (their test scores go to the score store, no page is written): parts of
one page for parallel processes, each its own rows and seeds; the run without ``--rows`` then reads them all.

``--page-rows R ...`` writes a page of those rows (and No context) only, naming the others as not run: the rows a
host can afford (on a 2-core CPU a BASE fit of a context model takes about half an hour).

The page is ``context`` (``--paper``) or ``context-library``, with ``-<model>`` appended when ``--model`` is not
that kind's default.

``--train-questions N`` keeps N training questions of each data set (drawn once, seed 0), as ``cerberus.py``
does: the CPU page's budget (300), since at all 796 WikiQA training questions one seed of every row at the
library's defaults takes hours on a CPU.

``--quick``: 1 seed, 1 epoch, 40 train / 10 dev / 30 test questions per data set, one latency round on 128
rows: an end-to-end check, not a result. Writes ``benchmarks/results/context.json`` and
``docs/benchmarks/context.md`` (from ``benchmarks/pages/context.md.j2``; ``python benchmarks/render.py context``
renders the page again from the JSON).
"""

from __future__ import annotations

import argparse
import inspect
import time

import joblib
import numpy as np
import pandas as pd
import torch
from as2rank.files import atomic_file
from harness import (CACHE, conclude, fitted, fitted_scores, library_digest, log, run_header, subset_questions,
                     wikiqa_splits)

from as2rank.transformer.context.rankers import ContextConcat, ContextEnsemble, ContextExtractor, ContextMWA
from as2rank.data import GroupIndex, keep_answered
from as2rank.evaluation import compare, evaluate, per_question
from as2rank.metrics import paired_significance
from as2rank.neural import autocast, resolve_device, to_device
from as2rank.neural.predict import batch_tensors
from as2rank.neural.fitcache import FIT_CACHE
from as2rank.transformer.ranker import TransformerRanker

#: Input lengths of the context models: the whole input, and the share reserved for question + candidate
#: (= the no-context model's max_length, so the pair is encoded alike in every row of the table).
CONTEXT_LENGTHS = {"max_length": 256, "max_pair_length": 128}
NO_CONTEXT_LENGTH = 128
#: Training epochs of every model, per data set (``--epochs`` overrides both). SQuAD's training split is small
#: (67 steps an epoch at batch 32) and the context models leave the base-rate plateau later than the
#: no-context one (``benchmarks/studies/context_budget.py``, seed 1): ContextConcat(contexts=("local",)) ended a
#: 2-epoch budget at loss 0.52 (base rate 0.53; test P@1 47.9) and a 4-epoch one at 0.23 (P@1 79.5); dev MAP
#: of both it and the no-context model levels off from the third epoch, and 6 epochs gained nothing on dev.
EPOCHS = {"wikiqa": 2, "squad": 4}
LATENCY_BATCH = 128
#: Training questions of the short fits that latency is measured on (``latency_model``).
LATENCY_FIT_QUESTIONS = 16
#: The metrics of every run (``as2rank.evaluation.evaluate``'s ``metrics``), in the order the page prints them.
METRICS = ("p@1", "map", "mrr")
#: Significance level of the p-values' stars and of the acceptance check; the sign flips of the paired
#: randomisation test that ``as2rank.evaluation.compare`` runs (``paired_significance``'s default).
ALPHA = 0.05
N_RESAMPLES = inspect.signature(paired_significance).parameters["n_resamples"].default
#: A fit whose final training loss is at least this share of the base-rate loss (``base_rate_loss``) learned
#: next to nothing: the pages list such fits.
NEAR_BASE_RATE = 0.9
#: The backbones a run can fine-tune (``--model``), and the learning rate of the paper's budget on each: on the
#: 6-layer MiniLM the rate ``benchmarks/cascade.py`` selected on WikiQA dev; on the 12-layer BASE encoder the
#: Cascade Transformer paper's fine-tuning rate for its BASE models (Soldaini & Moschitti 2020; the context paper
#: does not give its own), 1e-4 being far above what BASE encoders are fine-tuned at.
BACKBONES = {
    "minilm-l6": {"model": "minilm-l6", "name": "all-MiniLM-L6-v2", "layers": 6, "hidden": 384, "pooling": "mean",
                  "learning_rate": 1e-4},
    "mpnet-base": {"model": "mpnet-base", "name": "all-mpnet-base-v2", "layers": 12, "hidden": 768, "pooling": "mean",
                   "learning_rate": 2e-5},
}
#: The backbone of each kind of run when ``--model`` is not given: the paper's pure models at the paper's size
#: (a BASE encoder, as its RoBERTa-base), the library's estimators at their default.
DEFAULT_MODEL = {"paper": "mpnet-base", "library": "minilm-l6"}

#: Han, Soldaini & Moschitti (2021). Table 2 (ASNQ test, RoBERTa-base): P@1, MAP, MRR, and latency per sample
#: as printed (ms, fixed batch of 128, one V100); Table 4 (ASNQ test, MWA): global context by n-gram overlap
#: vs cosine similarity; footnote 3: global sentences selected on average with h=5 (ASNQ).
PAPER = {
    "model": "RoBERTa-base",
    "data": "ASNQ",
    "questions": 59914,
    "gpu": "V100",
    "batch": 128,
    "table2": {
        "No context": {"p@1": 0.596, "map": 0.685, "mrr": 0.706, "ms_per_sample": 5.49},
        "Local": {"p@1": 0.653, "map": 0.732, "mrr": 0.752, "ms_per_sample": 5.62},
        "Global": {"p@1": 0.622, "map": 0.698, "mrr": 0.722, "ms_per_sample": 5.67},
        "Concat": {"p@1": 0.631, "map": 0.726, "mrr": 0.743, "ms_per_sample": 5.76},
        "Ensemble": {"p@1": 0.668, "map": 0.743, "mrr": 0.765, "ms_per_sample": 7.41},
        "MWA": {"p@1": 0.661, "map": 0.742, "mrr": 0.758, "ms_per_sample": 5.82},
    },
    "table4": {
        "MWA (n-gram)": {"p@1": 0.638, "map": 0.725, "mrr": 0.746},
        "MWA": {"p@1": 0.661, "map": 0.742, "mrr": 0.758},
    },
    "global_sentences": {"ngram": 3.02, "cosine": 2.85},
}

#: Rows of the tables in fit order: the ensemble comes right after Local and Global, so that its member
#: encoders are those fits (in-process fit cache) rather than trained again.
ROWS = ("No context", "Local", "Global", "Ensemble", "Concat", "MWA", "MWA (n-gram)")


#: Defaults that changed after the page's fits began, passed explicitly so that every fit of a row trains
#: today's default whichever library commit runs it (``docs/benchmarks/defaults-ensemble.md`` and
#: ``defaults-mwa.md`` measured these).
LIBRARY_DEFAULTS = {"Ensemble": {"segment_similarity": True}, "MWA": {"segment_similarity": True},
                    "MWA (n-gram)": {"segment_similarity": True}}
#: At the library's strength, rows after the table's: a row's estimator at an earlier default, beside it (what
#: the change of default is worth on the page's data): row -> (the row it varies, its parameters).
EARLIER_DEFAULTS = {"MWA, no segment similarity": ("MWA", {"segment_similarity": False})}


def rows(paper: bool) -> tuple:
    """The page's rows: the tables' (``ROWS``), and at the library's strength the earlier defaults'."""
    return ROWS if paper else ROWS + tuple(EARLIER_DEFAULTS)


def page_rows(args) -> tuple:
    """The rows this run's page has: ``--page-rows`` (in table order; "No context", which every other row is
    tested against, always), else all of :func:`rows`."""
    if not args.page_rows:
        return rows(args.paper)
    return tuple(row for row in rows(args.paper) if row in {"No context", *args.page_rows})


def budget(epochs: int, seed: int, model: str = "minilm-l6") -> dict:
    """The one training budget of every model on ``model`` (its rate: :data:`BACKBONES`)."""
    return {"model": model, "epochs": epochs, "batch_size": 32, "learning_rate": BACKBONES[model]["learning_rate"],
            "random_state": seed}


def epochs_for(name: str, args) -> int:
    return args.epochs or EPOCHS[name]


def make(row: str, epochs: int | None, seed: int, paper: bool = True, model: str = "minilm-l6"):
    """The estimator of a table row on the backbone ``model``, and the global-context method of the frame it
    reads: the paper's pure model at one budget, or the library's estimator at its defaults (``epochs`` given:
    that many)."""
    if not paper:
        kw = {"model": model, "random_state": seed, **({"epochs": epochs} if epochs else {})}
        if row in EARLIER_DEFAULTS:
            base, params = EARLIER_DEFAULTS[row]
            return make(base, epochs, seed, paper, model)[0].set_params(**params), "cosine"
        if row == "No context":
            return TransformerRanker(**kw), None
        if row in ("Local", "Global"):
            return ContextConcat(contexts=(row.lower(),), **kw), "cosine"
        model = {"Concat": ContextConcat, "Ensemble": ContextEnsemble}.get(row, ContextMWA)(**LIBRARY_DEFAULTS.get(row, {}), **kw)
        return model, "ngram" if row == "MWA (n-gram)" else "cosine"
    b = budget(epochs, seed, model)
    if row == "No context":
        return TransformerRanker(max_length=NO_CONTEXT_LENGTH, lexical_prior=False, segment_similarity=False, **b), None
    if row in ("Local", "Global"):
        return ContextConcat(contexts=(row.lower(),), lexical_prior=False, segment_similarity=False, **CONTEXT_LENGTHS, **b), "cosine"
    if row == "Concat":
        return ContextConcat(lexical_prior=False, segment_similarity=False, **CONTEXT_LENGTHS, **b), "cosine"
    if row == "Ensemble":
        return ContextEnsemble(lexical_prior=False, segment_similarity=False, **CONTEXT_LENGTHS, **b), "cosine"
    return (ContextMWA(lexical_prior=False, segment_similarity=False, **CONTEXT_LENGTHS, **b),
            "ngram" if row == "MWA (n-gram)" else "cosine")


# ----------------------------------------------------------------------------------------------- data
def load_data(name: str, quick: bool, train_questions: int | None = None) -> dict:
    """``{"train", "dev", "test"}`` -> (X, y): answered questions only, whole questions (so every document is
    complete: its sentences are the question's candidates); ``train_questions``: keep that many training
    questions (drawn with seed 0, the same for every row and seed)."""
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
    if train_questions:
        data["train"] = subset_questions(*data["train"], train_questions)
    return data


def with_context(X, method: str):
    """``X`` with its contexts (cached on disk), and the extractor's report."""
    extractor = ContextExtractor(global_method=method)
    # Keyed by the library's code too: contexts extracted by an earlier version are not read back.
    path = CACHE / f"ContextExtractor-{joblib.hash((extractor.get_params(), X, library_digest()))}.joblib"
    if path.exists():
        return joblib.load(path)
    start = time.perf_counter()
    Xc, report = extractor.fit(X).transform(X, return_report=True)
    report["seconds"] = time.perf_counter() - start
    CACHE.mkdir(parents=True, exist_ok=True)
    with atomic_file(path) as temporary:
        joblib.dump((Xc, report), temporary)
    log(f"  {method} contexts of {len(X)} rows in {report['seconds']:.0f}s: {report['mean_global_sentences']:.2f} global sentences")
    # The frame as read back: its hash (part of the fitted-model cache keys) is then the same in later runs.
    return joblib.load(path)


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
    index = GroupIndex(Xc["qid"].to_numpy(), Xc["position"].to_numpy())
    picks = index.sort(np.asarray(scores, dtype=np.float64), np.asarray(y))[index.starts]
    wrong = picks[np.asarray(y)[picks] == 0]
    hits = context_holds_answer(Xc, y, wrong)
    return {"questions": len(picks), "wrong": len(wrong), "local": int(hits["local"].sum()), "global": int(hits["global"].sum())}


# ----------------------------------------------------------------------------------------------- latency
def latency_model(row, data, frames, args):
    """The row's estimator (seed 0) fitted for one epoch on ``LATENCY_FIT_QUESTIONS`` training questions, and
    the test frame it reads: a forward pass costs the same whatever the weights, so latency needs the row's
    architecture and inputs, not its full fit (whose scores may come from ``benchmarks/results/scores/``)."""
    est, method = make(row, 1, 0, args.paper, args.model)
    X, y = data["train"] if method is None else (frames[("train", method)], data["train"][1])
    return fitted(est, *subset_questions(X, y, LATENCY_FIT_QUESTIONS)), data["test"][0] if method is None else frames[("test", method)]


def mean_tokens(est, X) -> float:
    """Mean input tokens per pair (all inputs of the model: both for the ensemble)."""
    encoded = est.encode(X)
    return float(sum(v.sum() for k, v in encoded.items() if k.endswith("attention_mask")) / len(X))


def latency_batches(est, X, fixed_width):
    """Batches of ``LATENCY_BATCH`` rows, tokenised and built in advance (not timed)."""
    encoded = est.encode(X)
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
    from torch.profiler import ProfilerActivity, profile

    predictor = est.predictor(device)
    batch = to_device(batch, device)
    with torch.no_grad(), autocast(device, predictor.dtype):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            predictor.module(batch)
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
    data = load_data(name, args.quick, args.train_questions)
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
    per_q = {row: {"map": [], "p@1": []} for row in args.rows or page_rows(args)}
    for row in per_q:
        runs = []
        for seed in args.seeds:
            est, method = make(row, epochs_for(name, args) if args.paper else args.epochs, seed, args.paper, args.model)
            X_train = data["train"][0] if method is None else frames[("train", method)]
            X_dev = data["dev"][0] if method is None else frames[("dev", method)]
            X_test = X_test_plain if method is None else frames[("test", method)]
            scores, _ = fitted_scores(est, X_train, y_train, X_test, fit_log, eval_set=(X_dev, y_dev))
            fit_log[-1].update(data=name, row=row, seed=seed)
            picks = wrong_picks(frames[("test", method or "cosine")], y_test, scores)
            runs.append({"seed": seed, **evaluate(y_test, scores, X_test, metrics=METRICS), "wrong_picks": picks})
            for m in ("map", "p@1"):
                per_q[row][m].append(per_question(y_test, scores, X_test, m))
            log(f"[{name}] {row} seed {seed}: " + " ".join(f"{m} {runs[-1][m]:.4f}" for m in METRICS))
        res["rows"][row] = {
            "runs": runs,
            **{m: float(np.mean([r[m] for r in runs])) for m in METRICS},
            **{f"{m}_std": float(np.std([r[m] for r in runs])) for m in METRICS},
        }
    if args.rows:  # a part of the page: its fits are in the score store, the page needs every row
        return res
    for m in ("map", "p@1"):
        means = {row: pd.concat(per_q[row][m], axis=1).mean(axis=1) for row in per_q}
        tests = compare(means, "No context")
        for row in per_q:
            if row != "No context":
                res["rows"][row][f"p_{m}"] = tests[row]["p"]
        for row, (base, _) in EARLIER_DEFAULTS.items():
            if row in per_q and base in per_q:  # the earlier default against today's
                res["rows"][row][f"p_{m}_vs_default"] = compare({base: means[base], row: means[row]}, base)[row]["p"]
        if {"MWA", "MWA (n-gram)"} <= set(per_q):
            # Table 4: the two global-context methods against each other, not only against no context.
            res["rows"]["MWA (n-gram)"][f"p_{m}_vs_cosine"] = compare(
                {"MWA": means["MWA"], "MWA (n-gram)": means["MWA (n-gram)"]}, "MWA")["MWA (n-gram)"]["p"]
    log(f"[{name}] in-process fit cache hits so far: {FIT_CACHE.hits} (ensemble members served by this run's Local/Global fits)")
    models, frames_test = {}, {}
    for row in per_q:
        models[row], frames_test[row] = latency_model(row, data, frames, args)
        res["rows"][row]["tokens_per_pair"] = mean_tokens(models[row], frames_test[row])
    res["latency"] = latency(models, frames_test, rounds=1 if args.quick else 3, n_rows=128 if args.quick else 512)
    res["latency_rows"] = min(128 if args.quick else 512, len(X_test_plain))
    return res


# ----------------------------------------------------------------------------------------------- checks
#: The latency bound of MWA over Concat in the acceptance checks.
MWA_OVER_CONCAT = 1.2


def acceptance(res) -> list:
    paper = {row: v["ms_per_sample"] for row, v in PAPER["table2"].items()}
    gain = PAPER["table2"]["MWA"]["p@1"] - PAPER["table2"]["No context"]["p@1"]
    checks = []
    if "wikiqa" in res["datasets"]:
        rows = res["datasets"]["wikiqa"]["rows"]
        mwa, base = rows["MWA"], rows["No context"]
        delta = mwa["p@1"] - base["p@1"]
        checks.append((
            f"WikiQA: MWA P@1 above the no-context TransformerRanker (same backbone and budget; paper: {100 * gain:+.1f} "
            f"on {PAPER['data']}); significant only if p < {ALPHA}",
            f"{100 * mwa['p@1']:.2f} vs {100 * base['p@1']:.2f} (Δ {100 * delta:+.2f}, p={mwa['p_p@1']:.3f})",
            delta > 0,
        ))
    for name, data in res["datasets"].items():
        for mode in ("fixed", "dynamic"):
            lat = {row: v["ms_per_sample"] for row, v in data["latency"][mode].items()}
            ratio = lat["MWA"] / lat["Concat"]
            checks.append((f"{name}, {mode} padding: MWA latency ≤ {MWA_OVER_CONCAT}× Concat (paper "
                           f"{paper['MWA'] / paper['Concat']:.2f}×)", f"{ratio:.2f}×", ratio <= MWA_OVER_CONCAT))
            if "Ensemble" not in lat:
                continue
            ratio = lat["MWA"] / lat["Ensemble"]
            checks.append((f"{name}, {mode} padding: MWA latency below Ensemble (paper {paper['MWA'] / paper['Ensemble']:.2f}×)",
                           f"{ratio:.2f}×", ratio < 1))
    return [{"check": c, "measured": m, "pass": bool(ok)} for c, m, ok in checks]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--paper", action="store_true", help="the paper's pure models at one budget")
    parser.add_argument("--quick", action="store_true", help="1 seed, 1 epoch, 40/10/30 questions per split, 1 latency round: an end-to-end check")
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="random seeds (default 0 1 2; quick: 0)")
    parser.add_argument("--epochs", type=int, default=None, help="training epochs of every data set (default: EPOCHS; quick: 1)")
    parser.add_argument("--data", nargs="+", choices=("wikiqa", "squad"), default=["wikiqa", "squad"])
    parser.add_argument("--train-questions", type=int, default=None, help="keep this many training questions per data set (default: all)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--rows", nargs="+", choices=ROWS + tuple(EARLIER_DEFAULTS), default=None,
                        help="fit these rows only, into the score store (a part of the page, for parallel processes)")
    parser.add_argument("--page-rows", nargs="+", choices=ROWS + tuple(EARLIER_DEFAULTS), default=None,
                        help="the page's rows (No context always among them): a page of the rows a host can afford")
    parser.add_argument("--model", choices=tuple(BACKBONES), default=None,
                        help=f"the backbone of every row (default: {DEFAULT_MODEL['paper']} with --paper, the paper's "
                             f"size; else {DEFAULT_MODEL['library']}, the library's default)")
    args = parser.parse_args(argv)
    if args.paper and set(args.rows or ()) - set(ROWS):
        parser.error(f"--paper has the rows {', '.join(ROWS)}")
    args.seeds = args.seeds or ([0] if args.quick else [0, 1, 2])
    kind = "paper" if args.paper else "library"
    args.model = args.model or DEFAULT_MODEL[kind]
    args.epochs = args.epochs or (1 if args.quick else None)
    if args.threads:
        torch.set_num_threads(args.threads)
    start = time.perf_counter()
    res = {
        **run_header("context.py", argv),
        "quick": "1 seed, 1 epoch, 40 train / 10 dev / 30 test questions per data set, one latency round on 128 rows"
        if args.quick else "",
        "seeds": args.seeds,
        "train_questions": args.train_questions,
        "paper_config": args.paper,
        "paper": PAPER,
        "backbone": {k: v for k, v in BACKBONES[args.model].items() if k != "learning_rate"},
        "page_rows": list(page_rows(args)),
        "rows_not_run": [row for row in rows(args.paper) if row not in page_rows(args)],
        "extractor": {k: v for k, v in ContextExtractor().get_params().items()
                      if k in ("local_window", "max_global_sentences", "max_global_tokens", "encoder")},
        "latency_batch": LATENCY_BATCH,
        "latency_fit_questions": LATENCY_FIT_QUESTIONS,
        "alpha": ALPHA,
        "n_resamples": N_RESAMPLES,
        "near_base_rate": NEAR_BASE_RATE,
        "earlier_defaults": {} if args.paper else {row: {"row": base, "params": params} for row, (base, params) in EARLIER_DEFAULTS.items()},
        "budget": {
            **{k: v for k, v in budget(None, args.seeds[0], args.model).items() if k not in ("random_state", "epochs", "model")},
            "epochs": {name: epochs_for(name, args) for name in args.data},
        } if args.paper else None,
        "datasets": {},
    }
    fit_log = []
    for name in args.data:
        res["datasets"][name] = run_dataset(name, args, fit_log)
    if args.rows:
        log(f"stored the fits of {', '.join(args.rows)}, seeds {args.seeds}; the page needs every row: run without --rows")
        return
    res["fits"] = fit_log
    res["template"] = "context"
    page = "context" if args.paper else "context-library"
    conclude(res, page if args.model == DEFAULT_MODEL[kind] else f"{page}-{args.model}", start, acceptance(res))


if __name__ == "__main__":
    main()
