"""The Cascade Transformer at the paper's depth on a CPU, beside the six-layer MiniLM cascade (``cascade_base.toml``).

    python benchmarks/cascade_base.py [--train-questions 300] [--timing-questions 12] [--rounds 5] [--threads N]
                                      [--fit-only] [--only mpnet-base|minilm-l6] [--quick] [--render] [--cached-only]
"""

from __future__ import annotations

import numpy as np
import torch
from harness import experiment, expanded, figure_path, fitted, log, pyplot, save_figure, subset_questions, wikiqa_splits
from harness.library import CascadeTransformer, GroupIndex, compare, evaluate, per_question, simulate_cascade, tune_alpha
from harness.measure import timed


def sweep(grid, ct, X, y) -> dict:
    """MAP, P@1 and relative cost of uniform α over ``grid``, simulated from one encoder pass of ``X``."""
    ct.set_params(alpha=0.0, exit_layer=None)
    logits = ct.predict_exits(X)
    index = GroupIndex.from_frame(X)
    rows = {}
    for a in grid:
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
            times[str(a)].append(timed(ct.predict, X)[1]["seconds"])
        log(f"[throughput] round {r}: " + ", ".join(f"α={a} {t[-1]:.2f}s" for a, t in times.items()))
    ct.set_params(alpha=0.0)
    ref = times[str(alphas[0])]
    n_q = int(X["qid"].nunique())
    return {str(a): {"seconds": t, "ms_per_question": 1000 * float(np.median(t)) / n_q,
                     "speedup": [r0 / s for r0, s in zip(ref, t)],
                     "median_speedup": float(np.median([r0 / s for r0, s in zip(ref, t)]))} for a, t in times.items()}


def one_cascade(res, name, ct, splits_exp, timing_X, rounds) -> dict:
    (X_dev, y_dev), (X_test, y_test) = splits_exp
    grid = tuple(res["grid"])
    ct.set_params(alpha=0.0, exit_layer=None)
    tuned, table = tune_alpha(ct, X_dev, y_dev, grid=grid, max_relative_cost=res["cost_budget"], metric="map")
    tuned = tuple(float(a) for a in tuned)
    log(f"[{name}] dev-tuned α {tuned} (of {len(table)} combinations)")
    sw = sweep(grid, ct, X_test, y_test)
    ct.set_params(alpha=list(tuned))
    (scores, report), t_pred = timed(lambda X: ct.predict(X, return_cost=True), X_test)
    sim, _ = simulate_cascade(sw["logits"], GroupIndex.from_frame(X_test), tuned, ct.exits_)
    base = sw["rows"][0.0]
    per_q = {"α=0": per_question(y_test, base["_scores"], X_test, "map"), "tuned": per_question(y_test, scores, X_test, "map")}
    out = {"exits": list(ct.exits_), "n_layers": int(ct.n_layers_), "tuned_alpha": list(tuned),
           "tuned": {**evaluate(y_test, scores, X_test, metrics=("map", "p@1", "mrr")), "relative_cost": report["relative_cost"],
                     "relative_token_cost": report["relative_token_cost"], "survivors": report["survivors"],
                     "p_map_vs_alpha0": compare(per_q, "α=0")["tuned"]["p"],
                     "max_abs_diff_vs_simulated": float(np.max(np.abs(sim - scores))) if len(scores) else 0.0},
           "uniform": {str(a): {k: v for k, v in r.items() if not k.startswith("_")} for a, r in sw["rows"].items()},
           "predict_seconds_full_test": t_pred["seconds"]}
    out["throughput"] = throughput(ct, timing_X, (0.0, tuned), rounds)
    out["tuned"].update(ms_per_question=out["throughput"][str(tuned)]["ms_per_question"],
                        speedup=out["throughput"][str(tuned)]["speedup"],
                        median_speedup=out["throughput"][str(tuned)]["median_speedup"])
    # Time per question of each uniform α: the curve of MAP against time.
    uni = throughput(ct, timing_X, grid, max(1, rounds // 2))
    for a in grid:
        out["uniform"][str(a)]["ms_per_question"] = uni[str(a)]["ms_per_question"]
    return out


def plot(res, path) -> None:
    plt = pyplot()
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


def run(exp, args, res):
    splits = wikiqa_splits()
    X_train, y_train = subset_questions(*splits["train"], args.train_questions)
    fits, cts = [], {}
    for name, model in exp.config["models"].items():
        if args.only in (None, model):
            cts[name] = fitted(CascadeTransformer(**{**res["budget"], "model": model}), X_train, y_train, fits)
    if args.fit_only:
        log("cascades fitted and cached")
        return False
    exp_splits = (expanded(*splits["dev"], splits["pool"]), expanded(*splits["test"], splits["pool"]))
    if args.quick:
        exp_splits = tuple(subset_questions(X, y, 10) for X, y in exp_splits)
    timing_X, _ = subset_questions(*exp_splits[1], args.timing_questions, seed=1)
    res.update(paper=exp.paper, fits=fits, n_train_questions=int(X_train["qid"].nunique()), n_train_rows=len(X_train),
               n_dev_questions=int(exp_splits[0][0]["qid"].nunique()), n_dev_rows=len(exp_splits[0][0]),
               n_test_questions=int(exp_splits[1][0]["qid"].nunique()), n_test_rows=len(exp_splits[1][0]),
               timing_questions=args.timing_questions, timing_rows=len(timing_X), rounds=args.rounds,
               host_threads=torch.get_num_threads(), cascades={},
               quick="16 training, 10 dev and 10 test questions, 2 timed in 1 round" if args.quick else "")
    for name, ct in cts.items():
        res["cascades"][name] = one_cascade(res, name, ct, exp_splits, timing_X, args.rounds)
    plot(res, figure_path(exp.template, "cascade_base.png"))
    if "MPNet (12 layers)" not in res["cascades"]:
        exp.publish(res)
        return False


if __name__ == "__main__":
    experiment.main(__file__, run)
