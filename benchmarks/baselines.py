"""Table 2 statistics and the baseline rows of Tables 3-5 of Bonadiman & Moschitti (2020) (``baselines.toml``).

    python benchmarks/baselines.py
"""

from __future__ import annotations

import time

import numpy as np
from harness import SHARED_DATA, experiment, library
from harness.library import METRICS, GroupIndex, compare, evaluate, load_squad_sent, load_wikiqa, per_question, ranking_report, tokenize
from harness.store import computing


def expected_random(y, index: GroupIndex):
    """Exact expected P@1 and AP of a uniformly random order, per answered question.

    With n candidates of which R are relevant, E[P@1] = R / n and
    E[AP] = (R - 1) / (n - 1) + H_n (n - R) / (n (n - 1)) (E[AP] = 1 when n = 1).
    """
    n = index.sizes.astype(float)
    r = index.sum(y > 0)
    answered = r > 0
    n, r = n[answered], r[answered]
    harmonic = np.array([np.sum(1.0 / np.arange(1, k + 1)) for k in n.astype(int)])
    with np.errstate(invalid="ignore", divide="ignore"):
        ap = np.where(n > 1, (r - 1) / (n - 1) + harmonic * (n - r) / (n * (n - 1)), 1.0)
    return float(np.mean(r / n)), float(np.mean(ap))


def statistics(X, y):
    index = GroupIndex.from_frame(X)
    q_texts = X["question"].to_numpy()[index.order[index.starts]]
    q_len = np.mean([len(t) for t in tokenize(q_texts)])
    c_len = np.mean([len(t) for t in tokenize(X["candidate"].to_numpy())])
    p1, ap = expected_random(y, index)
    return {
        "questions": index.n_groups,
        "sentences": len(X),
        "answered_pct": 100 * float(np.mean(index.max(y) > 0)),
        "avg_candidates": len(X) / index.n_groups,
        "avg_q_len": float(q_len),
        "avg_c_len": float(c_len),
        "random_p@1": 100 * p1,
        "random_map": 100 * ap,
    }


def evaluate_baselines(models, X, y):
    rows, per_q = {}, {}
    for name, model in models.items():
        scores = model.fit(X, y).predict(X)
        report = evaluate(y, scores, X)
        rows[name] = {k: 100 * report[k] for k in METRICS} | {"n_evaluated": report["n_evaluated"]}
        per_q[name] = per_question(y, scores, X)
    tests = compare(per_q, "WO+RR")
    for name in models:
        rows[name]["p_map_vs_WO+RR"] = None if name == "WO+RR" else tests[name]["p"]
    return rows


def report_timing(X, y):
    """Median wall time of ``ranking_report`` on the whole set (acceptance: well under a second)."""
    computing("the time of ranking_report")
    scores = library.OverlapRankRanker().predict(X)
    times = []
    for _ in range(21):
        t0 = time.perf_counter()
        ranking_report(y, scores, X["qid"], position=X["position"])
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def run(exp, args, res):
    for key in ("torch", "torch_threads", "load_average_start"):  # the page's provenance: the command, date and machine
        res.pop(key)
    models = {name: getattr(library, cls)() for name, cls in exp.config["models"].items()}
    for name, loader, path in (("wikiqa", load_wikiqa, args.wikiqa or SHARED_DATA / "wikiqa" / "WikiQA-test.tsv"),
                               ("squad", load_squad_sent, args.squad or SHARED_DATA / "squad" / "squad-v2.0-dev-sample.json")):
        X, y = loader(path)
        computing(f"the baselines on {name}")
        res[name] = {"stats": statistics(X, y), "models": evaluate_baselines(models, X, y), "paper": exp.paper[name]}
        if name == "wikiqa":
            res["ranking_report_seconds"] = report_timing(X, y)
    exp.publish(res)
    return False


if __name__ == "__main__":
    experiment.main(__file__, run)
