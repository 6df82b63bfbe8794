"""Cosinet on WikiQA and the SQuAD sample: Tables 4 and 5 of Bonadiman & Moschitti (2020) (``cosinet.toml``).

    python benchmarks/cosinet.py [--seeds 5] [--quick] [--threads N]
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
from harness import experiment, wikiqa_splits
from harness.data import paragraph_splits, squad_sample
from harness.experiment import Experiment
from harness.library import PAPER_LEARNING_RATES, Cosinet, CosinetNetwork, OverlapRankRanker, compare, evaluate, per_question
from harness.store import computing

EXP = Experiment(__file__)
PAPER, CONFIG = EXP.paper, EXP.config
COSINET_PAPER_BUDGET, PAPER_SETUP = PAPER["budget"], PAPER["setup"]
DEFAULT_EMBEDDINGS, BASE_ROW = CONFIG["record"]["default_embeddings"], CONFIG["base_row"]
METRICS, TESTED = tuple(CONFIG["metrics"]), CONFIG["tested"]
# (label, Cosinet parameters, paper Table 4 (MAP, MRR, params, time), paper Table 5 (P@1, MRR, params, time))
ROWS = [(label, params, PAPER["table4"].get(label), PAPER["table5"].get(label)) for label, params in CONFIG["rows"].items()]


def score(y, scores, X, metrics=METRICS) -> dict:
    """The run's metrics, ranked by the scores alone (the metrics of this page ignore ``position``)."""
    return evaluate(y, scores, X, metrics=metrics, use_position=False)


def paper_shape_params(config: dict) -> int:
    """Trainable parameters of a row's network with the paper's word vectors (``PAPER_SETUP``) and half its RNN
    hidden size: the shape that the paper's printed parameter counts fit."""
    hidden = config["rnn_hidden_size"]
    network = CosinetNetwork(**{**config, "dim": PAPER_SETUP["embedding_dim"], "rnn_hidden_size": hidden // 2 if hidden else None})
    return int(sum(p.numel() for p in network.parameters() if p.requires_grad))


def run_rows(splits, rows, seeds, dataset):
    X_train, y_train = splits["train"]
    X_test, y_test = splits["test"]
    results, per_q = [], {}
    for label, params, paper_wikiqa, paper_squad in rows:
        runs, curves = [], []
        for seed in seeds:
            computing(f"the fit of {label}, seed {seed}")
            model = Cosinet(random_state=seed, **{**COSINET_PAPER_BUDGET, **params})
            start = time.perf_counter()
            model.fit(X_train, y_train)
            fit_seconds = time.perf_counter() - start
            scores = model.predict(X_test)
            run = {"seed": seed, "fit_seconds": fit_seconds, "loop_seconds": model.history_.seconds, **score(y_test, scores, X_test)}
            if "dev" in splits:
                X_dev, y_dev = splits["dev"]
                run["dev_map"] = score(y_dev, model.predict(X_dev), X_dev, metrics=("map",))["map"]
            runs.append(run)
            curves.append(per_question(y_test, scores, X_test, TESTED[dataset], use_position=False))
            print(f"[{dataset}] {label:22s} seed {seed}: MAP {run['map']:.4f} MRR {run['mrr']:.4f} P@1 {run['p@1']:.4f} "
                  f"fit {fit_seconds:.1f}s", flush=True)
        per_q[label] = pd.concat(curves, axis=1).mean(axis=1)
        paper = paper_wikiqa if dataset == "wikiqa" else paper_squad
        config = dict(model.module_config_)
        results.append({
            "model": label,
            "params": dict(params),
            "embeddings": params.get("embeddings", DEFAULT_EMBEDDINGS),
            "n_params": int(model.n_params_),
            "module_config": config,
            "paper_shape": {"rnn_hidden_size": config["rnn_hidden_size"] // 2 if config["rnn_hidden_size"] else None,
                            "n_params": paper_shape_params(config)},
            "runs": runs,
            **{f"{m}_{stat}": float(getattr(np, stat)([r[m] for r in runs])) for m in ("map", "mrr", "p@1", "fit_seconds") for stat in ("mean", "std")},
            "paper": None if paper is None else dict(zip(("map", "mrr") if dataset == "wikiqa" else ("p@1", "mrr"), paper[:2]))
            | {"params": paper[2], "train_time": paper[3]},
        })
    tests = compare(per_q, BASE_ROW)
    for row in results:
        if row["model"] != BASE_ROW:
            row["p_value_vs_listwise"] = tests[row["model"]]["p"]
            row["differs_from_listwise"] = tests[row["model"]]["differs"]
    return results


def baseline(splits, dataset) -> dict:
    X_test, y_test = splits["test"]
    scores = OverlapRankRanker().fit(X_test).predict(X_test)
    return {"model": "WO+RR", **score(y_test, scores, X_test), "paper": PAPER["wo_rr"][dataset]}


def full_train_timing(splits, seed) -> list[dict]:
    X, y = splits["full"]
    answered = int(pd.Series(y).groupby(X["qid"].to_numpy()).max().gt(0).sum())
    out = []
    for label, params in (("listwise + BiRNN (defaults)", {}), ("pointwise, no RNN", {"loss": "pointwise", "rnn": None})):
        model = Cosinet(random_state=seed, **{**COSINET_PAPER_BUDGET, **params})
        start = time.perf_counter()
        model.fit(X, y)
        out.append({"model": label, "fit_seconds": time.perf_counter() - start, "loop_seconds": model.history_.seconds,
                    "n_questions": int(X["qid"].nunique()), "n_answered_questions": answered, "n_rows": len(X)})
        print(f"[timing] full WikiQA train, {label}: fit {out[-1]['fit_seconds']:.1f}s", flush=True)
    return out


def run(exp, args, res):
    seeds = list(range(1 if args.quick else args.seeds))
    rows = [r for r in ROWS if not args.quick or r[0] in (BASE_ROW, "+ BiRNN")]
    res.update(seeds=seeds, budget=COSINET_PAPER_BUDGET, learning_rates=PAPER_LEARNING_RATES, base_row=BASE_ROW,
               paper_setup=PAPER_SETUP)
    wikiqa = wikiqa_splits()
    res["wikiqa"] = {"baseline": baseline(wikiqa, "wikiqa"), "n_train_questions": int(wikiqa["train"][0]["qid"].nunique()),
                     "n_dev_questions": int(wikiqa["dev"][0]["qid"].nunique()), "rows": run_rows(wikiqa, rows, seeds, "wikiqa"),
                     "full_train_timing": full_train_timing(wikiqa, seeds[0])}
    squad = paragraph_splits(*squad_sample())
    res["squad"] = {"baseline": baseline(squad, "squad"), "n_train_questions": int(squad["train"][0]["qid"].nunique()),
                    "n_test_questions": int(squad["test"][0]["qid"].nunique()),
                    "rows": run_rows(squad, [r for r in rows if "GloVe" not in r[0] or not args.quick], seeds, "squad")}


if __name__ == "__main__":
    experiment.main(__file__, run)
