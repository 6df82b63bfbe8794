"""Cosinet on WikiQA and the SQuAD sample: the shape of Tables 4 and 5 of Bonadiman & Moschitti (2020).

    python benchmarks/cosinet.py [--seeds 5] [--quick] [--threads N]

WikiQA: the models train on the answered questions of WikiQA-train minus a held-out dev split (10% of its
questions, ``_common.wikiqa_splits()``; the paper removes unanswered questions, §4.1) for the paper's fixed 3
epochs, no early stopping, and are evaluated on WikiQA-test, clean protocol (the 243 questions with an
answer). The dev split is only reported (MAP of every run on it, a check on held-out training-distribution
data); nothing is selected on it or on the test set. The SQuAD sample (four SQuAD 2.0 dev articles converted
by ``as2rank.datasets.load_squad_sent``) is split by paragraph: 70% of the paragraphs train, 30% test
(answered questions, P@1 and MRR).

Each row is run with ``--seeds`` random states; the tables give mean ± standard deviation, the trainable
parameter count, and the training time measured in this run (``fit`` wall time: tokenisation, embedding
look-up and the 3 epochs). Significance: per-question AP (WikiQA) or reciprocal rank (SQuAD), averaged over
seeds, against the listwise Cosinet without RNN, by a paired randomisation test
(``as2rank.evaluation.compare``). The time of ``fit`` on the *full* WikiQA train split (all 2,118 questions)
is measured separately for the listwise BiRNN and the pointwise Cosinet. Writes
``benchmarks/results/cosinet.json`` and ``docs/benchmarks/cosinet.md`` (from
``benchmarks/pages/cosinet.md.j2``).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd
import torch
from harness import COSINET_PAPER_BUDGET, SHARED_DATA, load_average, publish, run_header, wikiqa_splits
from sklearn.model_selection import GroupShuffleSplit

from as2rank.lexical.baselines import OverlapRankRanker
from as2rank.cosinet.estimator import PAPER_LEARNING_RATES, Cosinet
from as2rank.data import keep_answered
from as2rank.evaluation import compare, evaluate, per_question

DEFAULT_EMBEDDINGS = "minilm-l6-wordpiece"
#: What the page says each word-vector table is.
EMBEDDINGS = {
    "minilm-l6-wordpiece": "the static input wordpiece embeddings of the packaged all-MiniLM-L6-v2, a word = mean of "
                           "its wordpieces",
    "glove-6b-50d": "the packaged GloVe 6B",
}
#: The paper's setup (§4.2): its word vectors and the GPU of its training times.
PAPER_SETUP = {"embeddings": "ConceptNet Numberbatch", "embedding_dim": 300, "hardware": "GTX 1080 Ti"}

# (label, Cosinet parameters, paper Table 4 (MAP, MRR, params, time), paper Table 5 (P@1, MRR, params, time))
ROWS = [
    ("Cosinet (pointwise)", {"loss": "pointwise", "rnn": None}, (70.95, 72.86, "904k", "6 sec"), (86.18, 91.81, "904k", "1 min 47 sec")),
    ("Cosinet listwise", {"loss": "listwise", "rnn": None}, (71.22, 73.07, "904k", "5.5 sec"), (85.12, 91.16, "904k", "8 min 10 sec")),
    ("+ RNN", {"loss": "listwise", "rnn": "rnn"}, (74.78, 76.35, "1.17M", "7.5 sec"), None),
    ("+ BiRNN", {"loss": "listwise", "rnn": "birnn"}, (75.62, 77.13, "1.12M", "8.9 sec"), (86.18, 91.97, "1.12M", "12 min 30 sec")),
    ("+ LSTM", {"loss": "listwise", "rnn": "lstm"}, (74.31, 75.78, "1.99M", "7 sec"), None),
    ("+ BiLSTM", {"loss": "listwise", "rnn": "bilstm"}, (75.32, 76.85, "1.81M", "9.5 sec"), None),
    ("+ BiRNN, GloVe-50d", {"loss": "listwise", "rnn": "birnn", "embeddings": "glove-6b-50d"}, None, None),
]
BASE_ROW = "Cosinet listwise"
PAPER_WO_RR = {"wikiqa": (68.25, 69.43), "squad": (73.12, 83.60)}
#: The metrics of every run; the per-question metric of the significance tests, per data set.
METRICS = ("map", "mrr", "p@1")
TESTED = {"wikiqa": "map", "squad": "mrr"}


def squad_splits():
    from as2rank.datasets import load_squad_sent

    path = SHARED_DATA / "squad" / "squad-v2.0-dev-sample.json"
    if path.exists():
        X, y = load_squad_sent(path)
    else:
        from as2rank.datasets import load_sample

        X, y = load_sample()
    train_idx, test_idx = next(GroupShuffleSplit(n_splits=1, test_size=0.3, random_state=0).split(X, y, X["doc_id"]))
    X_train, y_train = keep_answered(X.iloc[train_idx], y[train_idx])
    X_test, y_test = keep_answered(X.iloc[test_idx], y[test_idx])
    return {"train": (X_train, y_train), "test": (X_test, y_test)}


def score(y, scores, X, metrics=METRICS) -> dict:
    """The run's metrics, ranked by the scores alone (the metrics of this page ignore ``position``)."""
    return evaluate(y, scores, X, metrics=metrics, use_position=False)


def paper_shape_params(config: dict) -> int:
    """Trainable parameters of a row's network with the paper's word vectors (``PAPER_SETUP``) and half its RNN
    hidden size: the shape that the paper's printed parameter counts fit."""
    from as2rank.cosinet.network import CosinetNetwork

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
    return {"model": "WO+RR", **score(y_test, scores, X_test), "paper": PAPER_WO_RR[dataset]}


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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="1 seed, rows listwise and + BiRNN only")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    seeds = list(range(1 if args.quick else args.seeds))
    rows = [r for r in ROWS if not args.quick or r[0] in (BASE_ROW, "+ BiRNN")]
    result = {
        **run_header("cosinet.py", argv),
        "seeds": seeds,
        "default_embeddings": DEFAULT_EMBEDDINGS,
        "embeddings": EMBEDDINGS,
        "budget": COSINET_PAPER_BUDGET,
        "learning_rates": PAPER_LEARNING_RATES,
        "base_row": BASE_ROW,
        "paper_setup": PAPER_SETUP,
    }
    wikiqa = wikiqa_splits()
    result["wikiqa"] = {
        "baseline": baseline(wikiqa, "wikiqa"),
        "n_train_questions": int(wikiqa["train"][0]["qid"].nunique()),
        "n_dev_questions": int(wikiqa["dev"][0]["qid"].nunique()),
        "rows": run_rows(wikiqa, rows, seeds, "wikiqa"),
        "full_train_timing": full_train_timing(wikiqa, seeds[0]),
    }
    squad = squad_splits()
    result["squad"] = {
        "baseline": baseline(squad, "squad"),
        "n_train_questions": int(squad["train"][0]["qid"].nunique()),
        "n_test_questions": int(squad["test"][0]["qid"].nunique()),
        "rows": run_rows(squad, [r for r in rows if "GloVe" not in r[0] or not args.quick], seeds, "squad"),
    }
    result["load_average_end"] = load_average()
    print(publish(result, "cosinet").read_text())


if __name__ == "__main__":
    main()
