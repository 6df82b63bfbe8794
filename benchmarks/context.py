"""Context for answer sentence selection: Tables 2-4 of Han, Soldaini & Moschitti (2021) (``context.toml``).

    python benchmarks/context.py [--paper] [--model mpnet-base|minilm-l6] [--quick] [--seeds 0 1 2] [--epochs N]
                                [--data wikiqa squad] [--train-questions N] [--threads N] [--rows R ...]
                                [--page-rows R ...] [--render] [--cached-only]
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from harness import experiment, fitted, log, subset_questions
from harness.contexts import (answer_in_context, base_rate_loss, config, latency, load_data, make, rows, with_context,
                              wrong_picks)
from harness.library import FIT_CACHE, ContextExtractor, compare, evaluate, per_question
from harness.measure import significance
from harness.store import fitted_scores


def page_rows(args) -> tuple:
    """The rows this run's page has: ``--page-rows`` (in table order; "No context", which every other row is
    tested against, always), else all of :func:`harness.contexts.rows`."""
    if not args.page_rows:
        return rows(args.paper)
    return tuple(row for row in rows(args.paper) if row in {"No context", *args.page_rows})


def epochs_for(exp, name: str, args) -> int:
    return args.epochs or exp.config["paper_budget"]["epochs"][name]


def latency_model(exp, row, data, frames, args):
    """The row's estimator (seed 0) fitted for one epoch on a few training questions, and the test frame it
    reads: a forward pass costs the same whatever the weights, so latency needs the row's architecture and
    inputs, not its full fit (whose scores may come from ``benchmarks/results/scores/``)."""
    est, method = make(row, 1, 0, args.paper, args.model)
    X, y = data["train"] if method is None else (frames[("train", method)], data["train"][1])
    return (fitted(est, *subset_questions(X, y, exp.config["latency"]["fit_questions"])),
            data["test"][0] if method is None else frames[("test", method)])


def mean_tokens(est, X) -> float:
    """Mean input tokens per pair (all inputs of the model: both for the ensemble)."""
    encoded = est.encode(X)
    return float(sum(v.sum() for k, v in encoded.items() if k.endswith("attention_mask")) / len(X))


def run_dataset(exp, name, args, fit_log) -> dict:
    log(f"== {name}")
    metrics = exp.config["defaults"]["metrics"]
    data = load_data(name, args.quick, args.train_questions)
    frames, extraction = {}, {}
    for split, (X, _) in data.items():
        for method in ("ngram", "cosine"):
            frames[(split, method)], extraction[f"{split}/{method}"] = with_context(X, method)
    res = {"n": {split: {"questions": int(X["qid"].nunique()), "rows": len(X)} for split, (X, _) in data.items()},
           "base_rate_loss": base_rate_loss(data["train"][1]), "extraction": extraction,
           "answer_in_context": {m: answer_in_context(frames[("test", m)], data["test"][1]) for m in ("ngram", "cosine")},
           "rows": {}}
    y_train, y_dev, y_test = (data[s][1] for s in ("train", "dev", "test"))
    per_q = {row: {"map": [], "p@1": []} for row in args.rows or page_rows(args)}
    for row in per_q:
        runs = []
        for seed in args.seeds:
            est, method = make(row, epochs_for(exp, name, args) if args.paper else args.epochs, seed, args.paper, args.model)
            X_train, X_dev, X_test = (data[s][0] if method is None else frames[(s, method)] for s in ("train", "dev", "test"))
            scores, _ = fitted_scores(est, X_train, y_train, X_test, fit_log, eval_set=(X_dev, y_dev))
            fit_log[-1].update(data=name, row=row, seed=seed)
            picks = wrong_picks(frames[("test", method or "cosine")], y_test, scores)
            runs.append({"seed": seed, **evaluate(y_test, scores, X_test, metrics=metrics), "wrong_picks": picks})
            for m in ("map", "p@1"):
                per_q[row][m].append(per_question(y_test, scores, X_test, m))
            log(f"[{name}] {row} seed {seed}: " + " ".join(f"{m} {runs[-1][m]:.4f}" for m in metrics))
        res["rows"][row] = {"runs": runs, **{m: float(np.mean([r[m] for r in runs])) for m in metrics},
                            **{f"{m}_std": float(np.std([r[m] for r in runs])) for m in metrics}}
    if args.rows:  # a part of the page: its fits are in the score store, the page needs every row
        return res
    for m in ("map", "p@1"):
        means = {row: pd.concat(per_q[row][m], axis=1).mean(axis=1) for row in per_q}
        tests = compare(means, "No context")
        for row in per_q:
            if row != "No context":
                res["rows"][row][f"p_{m}"] = tests[row]["p"]
        for row, spec in exp.config["rows"].items():
            if "variant_of" in spec and row in per_q and spec["variant_of"] in per_q:  # the earlier default against today's
                base = spec["variant_of"]
                res["rows"][row][f"p_{m}_vs_default"] = compare({base: means[base], row: means[row]}, base)[row]["p"]
        if {"MWA", "MWA (n-gram)"} <= set(per_q):
            # Table 4: the two global-context methods against each other, not only against no context.
            res["rows"]["MWA (n-gram)"][f"p_{m}_vs_cosine"] = compare(
                {"MWA": means["MWA"], "MWA (n-gram)": means["MWA (n-gram)"]}, "MWA")["MWA (n-gram)"]["p"]
    log(f"[{name}] in-process fit cache hits so far: {FIT_CACHE.hits} (ensemble members served by this run's Local/Global fits)")
    models, frames_test = {}, {}
    for row in per_q:
        models[row], frames_test[row] = latency_model(exp, row, data, frames, args)
        res["rows"][row]["tokens_per_pair"] = mean_tokens(models[row], frames_test[row])
    res["latency"] = latency(models, frames_test, rounds=1 if args.quick else 3, n_rows=128 if args.quick else 512)
    res["latency_rows"] = min(128 if args.quick else 512, len(data["test"][0]))
    return res


def page(args) -> str:
    default = config()["defaults"]["model"]["paper" if args.paper else "library"]
    name = "context" if args.paper else "context-library"
    return name if (args.model or default) == default else f"{name}-{args.model}"


def run(exp, args, res):
    cfg = exp.config
    if args.paper and set(args.rows or ()) - set(rows(True)):
        raise SystemExit(f"--paper has the rows {', '.join(rows(True))}")
    if (set(args.rows or ()) | set(args.page_rows or ())) - set(cfg["rows"]):
        raise SystemExit(f"the rows are {', '.join(cfg['rows'])}")
    args.seeds = args.seeds or ([0] if args.quick else [0, 1, 2])
    args.model = args.model or cfg["defaults"]["model"]["paper" if args.paper else "library"]
    args.epochs = args.epochs or (1 if args.quick else None)
    res.update(
        quick="1 seed, 1 epoch, 40 train / 10 dev / 30 test questions per data set, one latency round on 128 rows" if args.quick else "",
        seeds=args.seeds, train_questions=args.train_questions, paper_config=args.paper, paper=exp.paper,
        backbone={k: v for k, v in cfg["backbones"][args.model].items() if k != "learning_rate"},
        page_rows=list(page_rows(args)), rows_not_run=[row for row in rows(args.paper) if row not in page_rows(args)],
        extractor={k: v for k, v in ContextExtractor().get_params().items()
                   if k in ("local_window", "max_global_sentences", "max_global_tokens", "encoder")},
        latency_batch=cfg["latency"]["batch"], latency_fit_questions=cfg["latency"]["fit_questions"],
        alpha=cfg["defaults"]["alpha"], n_resamples=significance()["n_resamples"],
        near_base_rate=cfg["defaults"]["near_base_rate"],
        earlier_defaults={} if args.paper else {row: {"row": spec["variant_of"], "params": spec["params"]}
                                                for row, spec in cfg["rows"].items() if "variant_of" in spec},
        budget={"batch_size": cfg["paper_budget"]["batch_size"], "learning_rate": cfg["backbones"][args.model]["learning_rate"],
                "epochs": {name: epochs_for(exp, name, args) for name in args.data}} if args.paper else None,
        datasets={})
    fit_log = []
    for name in args.data:
        res["datasets"][name] = run_dataset(exp, name, args, fit_log)
    if args.rows:
        log(f"stored the fits of {', '.join(args.rows)}, seeds {args.seeds}; the page needs every row: run without --rows")
        return False
    res["fits"] = fit_log

if __name__ == "__main__":
    experiment.main(__file__, run, page=page)
