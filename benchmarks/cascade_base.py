"""The Cascade Transformer at the paper's depth on a CPU: twelve layers, exits 4, 6, 8, 10, 12 (Soldaini &
Moschitti, 2020, Tables 2-3), beside the six-layer MiniLM cascade.

    python benchmarks/cascade_base.py [--train-questions 300] [--timing-questions 12] [--rounds 5] [--threads N]
                                      [--fit-only] [--only mpnet-base|minilm-l6] [--quick] [--render]

Models: ``CascadeTransformer`` on ``"mpnet-base"`` (all-mpnet-base-v2, 12 layers; ``default_exits(12)`` is the
paper's exits) and on the default ``"minilm-l6"`` (exits 2-6), both with the paper's fine-tuning setting
(:func:`budget`: 2 epochs, learning rate 2e-5, batch 32, ``max_length=128``, no lexical prior, no segment
similarity, no early stopping), fitted on ``--train-questions`` answered questions of WikiQA-train (the defaults
benchmark's column of 300, a fixed random subset; ``_common.fitted`` caches them with the code they ran, so a
later run refits nothing unchanged, and a change of the predict path refits nothing at all).

For each cascade: the dev split's answered questions expanded to ~100 candidates (``expand_candidates``, BM25
negatives from every WikiQA sentence) tune the per-exit drop ratios α (``tune_alpha``, grid 0-0.6, dev MAP,
relative cost ≤ ``COST_BUDGET``); WikiQA-test's answered questions expanded the same way give MAP, P@1 and
relative cost at α = 0, at uniform α over the grid (simulated exactly from one encoder pass) and at the tuned
α (``predict`` itself, with its agreement with the simulation). Throughput: ``--rounds`` interleaved rounds of
``predict`` at α = 0 and at the tuned α on ``--timing-questions`` test questions (~100 candidates each,
tokenisation included, as a user calls it); ``ms_per_question`` for each uniform α too, for the curve of MAP
against time of both cascades (``docs/benchmarks/cascade_base.png``). Writes
``benchmarks/results/cascade_base.json`` and ``docs/benchmarks/cascade_base.md``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from harness import DOCS, conclude, fitted, log, publish, run_header, save_figure, subset_questions, tagged, wikiqa_splits
from cascade import PAPER, expanded, timed

from as2rank.data import GroupIndex
from as2rank.evaluation import compare, evaluate, per_question
from as2rank.pruning.rules import simulate_cascade, tune_alpha
from as2rank.transformer.cascade import CascadeTransformer

MODELS = {"MPNet (12 layers)": "mpnet-base", "MiniLM (6 layers)": "minilm-l6"}
GRID = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6)
#: The relative cost the tuned α may spend, and the acceptance's thresholds (fractions of MAP, speed-up).
COST_BUDGET = 0.6
CRITERIA = {"max_relative_cost": 0.6, "min_speedup": 1.5, "max_map_drop": 0.01}


def budget(model: str, seed: int = 0) -> dict:
    """The paper's fine-tuning setting (``CascadeTransformer``'s docstring), on ``model``."""
    return {"model": model, "epochs": 2, "learning_rate": 2e-5, "batch_size": 32, "max_length": 128,
            "lexical_prior": False, "segment_similarity": False, "early_stopping": False, "random_state": seed}


def sweep(ct, X, y) -> dict:
    """MAP, P@1 and relative cost of uniform α over :data:`GRID`, simulated from one encoder pass of ``X``."""
    ct.set_params(alpha=0.0, exit_layer=None)
    logits = ct.predict_exits(X)
    index = GroupIndex.from_frame(X)
    rows = {}
    for a in GRID:
        scores, report = simulate_cascade(logits, index, a, ct.exits_)
        rows[a] = {**evaluate(y, scores, X, metrics=("map", "p@1", "mrr")), "relative_cost": report["relative_cost"],
                   "_scores": scores}
    return {"logits": logits, "rows": rows}


def throughput(ct, X, alphas, rounds) -> dict:
    """Interleaved rounds of ``predict`` at each α of ``alphas`` (the first is the reference): seconds, ms per
    question and each round's speed-up over the reference."""
    times = {str(a): [] for a in alphas}
    for r in range(rounds):
        for a in alphas:
            ct.set_params(alpha=list(a) if np.ndim(a) else a)
            _, t = timed(ct.predict, X)
            times[str(a)].append(t["seconds"])
        log(f"[throughput] round {r}: " + ", ".join(f"α={a} {t[-1]:.2f}s" for a, t in times.items()))
    ct.set_params(alpha=0.0)
    ref = times[str(alphas[0])]
    n_q = int(X["qid"].nunique())
    return {str(a): {"seconds": t, "ms_per_question": 1000 * float(np.median(t)) / n_q,
                     "speedup": [r0 / s for r0, s in zip(ref, t)],
                     "median_speedup": float(np.median([r0 / s for r0, s in zip(ref, t)]))} for a, t in times.items()}


def one_cascade(name, ct, splits_exp, timing_X, rounds) -> dict:
    (X_dev, y_dev), (X_test, y_test) = splits_exp
    ct.set_params(alpha=0.0, exit_layer=None)
    tuned, table = tune_alpha(ct, X_dev, y_dev, grid=GRID, max_relative_cost=COST_BUDGET, metric="map")
    tuned = tuple(float(a) for a in tuned)
    log(f"[{name}] dev-tuned α {tuned} (of {len(table)} combinations)")
    sw = sweep(ct, X_test, y_test)
    ct.set_params(alpha=list(tuned))
    (scores, report), t_pred = timed(lambda X: ct.predict(X, return_cost=True), X_test)
    sim, _ = simulate_cascade(sw["logits"], GroupIndex.from_frame(X_test), tuned, ct.exits_)
    base = sw["rows"][0.0]
    per_q = {"α=0": per_question(y_test, base["_scores"], X_test, "map"), "tuned": per_question(y_test, scores, X_test, "map")}
    res = {"exits": list(ct.exits_), "n_layers": int(ct.n_layers_), "tuned_alpha": list(tuned),
           "tuned": {**evaluate(y_test, scores, X_test, metrics=("map", "p@1", "mrr")), "relative_cost": report["relative_cost"],
                     "relative_token_cost": report["relative_token_cost"], "survivors": report["survivors"],
                     "p_map_vs_alpha0": compare(per_q, "α=0")["tuned"]["p"],
                     "max_abs_diff_vs_simulated": float(np.max(np.abs(sim - scores))) if len(scores) else 0.0},
           "uniform": {str(a): {k: v for k, v in r.items() if not k.startswith("_")} for a, r in sw["rows"].items()},
           "predict_seconds_full_test": t_pred["seconds"]}
    res["throughput"] = throughput(ct, timing_X, (0.0, tuned), rounds)
    res["tuned"].update(ms_per_question=res["throughput"][str(tuned)]["ms_per_question"],
                        speedup=res["throughput"][str(tuned)]["speedup"],
                        median_speedup=res["throughput"][str(tuned)]["median_speedup"])
    # Time per question of each uniform α: the curve of MAP against time.
    uni = throughput(ct, timing_X, tuple(a for a in GRID), max(1, rounds // 2))
    for a in GRID:
        res["uniform"][str(a)]["ms_per_question"] = uni[str(a)]["ms_per_question"]
    return res


def plot(res, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for (name, r), color in zip(res["cascades"].items(), ("tab:red", "tab:blue")):
        pts = [(v["ms_per_question"], 100 * v["map"], a) for a, v in sorted(r["uniform"].items(), key=lambda kv: float(kv[0]))]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color=color, label=f"{name}, uniform α 0-0.6")
        for x, yv, a in pts:
            ax.annotate(a, (x, yv), fontsize=6, xytext=(3, 3), textcoords="offset points")
        ax.scatter([r["tuned"]["ms_per_question"]], [100 * r["tuned"]["map"]], marker="*", s=150, color=color, edgecolor="black",
                   zorder=3, label=f"{name}, dev-tuned α")
    ax.set_xlabel(f"ms per question (~100 candidates, {res['host_threads']} CPU threads, tokenisation included)")
    ax.set_ylabel("WikiQA test MAP (%)")
    ax.set_title("Cascades: accuracy against CPU time per question", fontsize=9)
    save_figure(fig, path, legend_axes=ax)


def acceptance(res) -> list:
    r = res["cascades"]["MPNet (12 layers)"]
    t, a0 = r["tuned"], r["uniform"]["0.0"]
    speed = t
    checks = [
        (f"12-layer cascade at its tuned α {tuple(r['tuned_alpha'])}: relative cost ≤ {CRITERIA['max_relative_cost']}",
         f"{t['relative_cost']:.3f}", t["relative_cost"] <= CRITERIA["max_relative_cost"]),
        (f"throughput ≥ {CRITERIA['min_speedup']}× α = 0 (median of interleaved rounds)",
         f"{speed['median_speedup']:.2f}× (" + ", ".join(f"{s:.2f}" for s in speed["speedup"]) + ")",
         speed["median_speedup"] >= CRITERIA["min_speedup"]),
        ("MAP within 1 point of α = 0", f"{100 * t['map']:.2f} vs {100 * a0['map']:.2f} (p={t['p_map_vs_alpha0']:.3f})",
         a0["map"] - t["map"] <= CRITERIA["max_map_drop"]),
    ]
    return [{"check": c, "measured": m, "pass": bool(ok)} for c, m, ok in checks]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train-questions", type=int, default=300)
    parser.add_argument("--timing-questions", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--fit-only", action="store_true", help="fit (and cache) the cascades, then stop")
    parser.add_argument("--only", choices=tuple(MODELS.values()), default=None, help="fit only this backbone's cascade")
    parser.add_argument("--render", action="store_true", help="only re-write the page from the JSON")
    parser.add_argument("--quick", action="store_true",
                        help="an end-to-end check: 16 training, 10 dev and 10 test questions, 2 timed, 1 round")
    args = parser.parse_args(argv)
    if args.quick:
        args.train_questions, args.timing_questions, args.rounds = 16, 2, 1
    if args.render:
        from render import main as render

        render([tagged("cascade_base.json")[: -len(".json")]])
        return
    if args.threads:
        torch.set_num_threads(args.threads)
    start = time.perf_counter()
    splits = wikiqa_splits()
    X_train, y_train = subset_questions(*splits["train"], args.train_questions)
    fits, cts = [], {}
    for name, model in MODELS.items():
        if args.only in (None, model):
            cts[name] = fitted(CascadeTransformer(**budget(model)), X_train, y_train, fits)
    if args.fit_only:
        log("cascades fitted and cached")
        return
    exp = (expanded(*splits["dev"], splits["pool"]), expanded(*splits["test"], splits["pool"]))
    if args.quick:
        exp = tuple(subset_questions(X, y, 10) for X, y in exp)
    timing_X, _ = subset_questions(*exp[1], args.timing_questions, seed=1)
    res = {**run_header("cascade_base.py", argv), "template": "cascade_base", "paper": PAPER, "criteria": CRITERIA,
           "grid": list(GRID), "cost_budget": COST_BUDGET, "budget": budget("<model>"), "fits": fits,
           "n_train_questions": int(X_train["qid"].nunique()), "n_train_rows": len(X_train),
           "n_dev_questions": int(exp[0][0]["qid"].nunique()), "n_dev_rows": len(exp[0][0]),
           "n_test_questions": int(exp[1][0]["qid"].nunique()), "n_test_rows": len(exp[1][0]),
           "timing_questions": args.timing_questions, "timing_rows": len(timing_X), "rounds": args.rounds,
           "host_threads": torch.get_num_threads(), "cascades": {},
           "quick": "16 training, 10 dev and 10 test questions, 2 timed in 1 round" if args.quick else ""}
    for name, ct in cts.items():
        res["cascades"][name] = one_cascade(name, ct, exp, timing_X, args.rounds)
    DOCS.mkdir(parents=True, exist_ok=True)
    plot(res, DOCS / tagged("cascade_base.png"))
    if "MPNet (12 layers)" in res["cascades"]:
        conclude(res, "cascade_base", start, acceptance(res))
    else:
        publish(res, "cascade_base")


if __name__ == "__main__":
    main()
