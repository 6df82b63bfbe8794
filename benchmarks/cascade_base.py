"""The Cascade Transformer at the paper's depth on a CPU, beside the six-layer MiniLM cascade (``cascade_base.toml``).

    python benchmarks/cascade_base.py [--train-questions 300] [--timing-questions 12] [--rounds 5] [--threads N]
                                      [--fit-only] [--only mpnet-base|minilm-l6] [--quick] [--render] [--cached-only]
"""

from __future__ import annotations

import numpy as np
import torch
from harness import (experiment, expanded, figure_path, fitted, log, pyplot, save_figure, subset_questions,
                     wikiqa_splits)
from harness.library import (CascadeTransformer, GroupIndex, compare, evaluate, per_question, simulate_cascade,
                             tune_alpha)
from harness.measure import interleaved, timed


def sweep(grid, ct, X, y, metrics) -> dict:
    """``metrics`` and relative cost of uniform α over ``grid``, simulated from one encoder pass of ``X``."""
    ct.set_params(alpha=0.0, exit_layer=None)
    logits = ct.predict_exits(X)
    index = GroupIndex.from_frame(X)
    rows = {}
    for a in grid:
        scores, report = simulate_cascade(logits, index, a, ct.exits_)
        rows[a] = {**evaluate(y, scores, X, metrics=metrics), "relative_cost": report["relative_cost"],
                   "_scores": scores}
    return {"logits": logits, "rows": rows}


def throughput(ct, X, alphas, rounds) -> dict:
    """Interleaved rounds of ``predict`` at each α of ``alphas`` in turn (the first is the reference): seconds, ms
    per question and each round's speed-up over the reference."""
    calls = {str(a): lambda a=a: ct.set_params(alpha=list(a) if np.ndim(a) else a).predict(X) for a in alphas}
    times = interleaved(calls, rounds, "throughput", rotate=False)
    ct.set_params(alpha=0.0)
    ref, n_q = times[str(alphas[0])], int(X["qid"].nunique())
    speedups = {a: [r0 / s for r0, s in zip(ref, t)] for a, t in times.items()}
    return {a: {"seconds": t, "ms_per_question": 1000 * float(np.median(t)) / n_q, "speedup": speedups[a],
                "median_speedup": float(np.median(speedups[a]))} for a, t in times.items()}


def one_cascade(res, name, ct, splits, timing_X, rounds, metrics) -> dict:
    """α tuned on the dev split of ``splits``; on its test split, each uniform α (simulated) and the tuned α
    (``predict``); the throughput of both on ``timing_X``."""
    (X_dev, y_dev), (X_test, y_test) = splits
    grid = tuple(res["grid"])
    ct.set_params(alpha=0.0, exit_layer=None)
    tuned, table = tune_alpha(ct, X_dev, y_dev, grid=grid, max_relative_cost=res["cost_budget"], metric="map")
    tuned = tuple(float(a) for a in tuned)
    log(f"[{name}] dev-tuned α {tuned} (of {len(table)} combinations)")
    sw = sweep(grid, ct, X_test, y_test, metrics)
    ct.set_params(alpha=list(tuned))
    (scores, report), t_pred = timed(lambda X: ct.predict(X, return_cost=True), X_test)
    sim, _ = simulate_cascade(sw["logits"], GroupIndex.from_frame(X_test), tuned, ct.exits_)
    per_q = {"α=0": per_question(y_test, sw["rows"][0.0]["_scores"], X_test, "map"),
             "tuned": per_question(y_test, scores, X_test, "map")}
    out = {"exits": list(ct.exits_), "n_layers": int(ct.n_layers_), "tuned_alpha": list(tuned),
           "tuned": {**evaluate(y_test, scores, X_test, metrics=metrics), "relative_cost": report["relative_cost"],
                     "relative_token_cost": report["relative_token_cost"], "survivors": report["survivors"],
                     "p_map_vs_alpha0": compare(per_q, "α=0")["tuned"]["p"],
                     "max_abs_diff_vs_simulated": float(np.max(np.abs(sim - scores))) if len(scores) else 0.0},
           "uniform": {str(a): {k: v for k, v in r.items() if not k.startswith("_")} for a, r in sw["rows"].items()},
           "predict_seconds_full_test": t_pred["seconds"]}
    out["throughput"] = throughput(ct, timing_X, (0.0, tuned), rounds)
    out["tuned"].update({k: v for k, v in out["throughput"][str(tuned)].items() if k != "seconds"})
    # Time per question of each uniform α: the curve of MAP against time.
    uniform = throughput(ct, timing_X, grid, max(1, rounds // 2))
    for a in grid:
        out["uniform"][str(a)]["ms_per_question"] = uniform[str(a)]["ms_per_question"]
    return out


def plot(res, path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for (name, r), color in zip(res["cascades"].items(), ("tab:red", "tab:blue")):
        pts = [(v["ms_per_question"], 100 * v["map"], a)
               for a, v in sorted(r["uniform"].items(), key=lambda kv: float(kv[0]))]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color=color, label=f"{name}, uniform α 0-0.6")
        for x, yv, a in pts:
            ax.annotate(a, (x, yv), fontsize=6, xytext=(3, 3), textcoords="offset points")
        ax.scatter([r["tuned"]["ms_per_question"]], [100 * r["tuned"]["map"]], marker="*", s=150, color=color,
                   edgecolor="black", zorder=3, label=f"{name}, dev-tuned α")
    ax.set_xlabel(f"ms per question (~100 candidates, {res['host_threads']} CPU threads, tokenisation included)")
    ax.set_ylabel("WikiQA test MAP (%)")
    ax.set_title("Cascades: accuracy against CPU time per question", fontsize=9)
    save_figure(fig, path, legend_axes=ax)


def run(exp, args, res):
    cfg, splits = exp.config, wikiqa_splits()
    X_train, y_train = subset_questions(*splits["train"], args.train_questions)
    fits = []
    cts = {name: fitted(CascadeTransformer(**{**res["budget"], "model": model}), X_train, y_train, fits)
           for name, model in cfg["models"].items() if args.only in (None, model)}
    if args.fit_only:
        log("cascades fitted and cached")
        return False
    dev, test = (expanded(*splits[s], splits["pool"]) for s in ("dev", "test"))
    n = cfg["quick_questions"]
    if args.quick:
        dev, test = (subset_questions(X, y, n) for X, y in (dev, test))
    timing_X, _ = subset_questions(*test, args.timing_questions, seed=1)
    res.update(paper=exp.paper, fits=fits, n_train_questions=int(X_train["qid"].nunique()), n_train_rows=len(X_train),
               n_dev_questions=int(dev[0]["qid"].nunique()), n_dev_rows=len(dev[0]),
               n_test_questions=int(test[0]["qid"].nunique()), n_test_rows=len(test[0]),
               timing_questions=args.timing_questions, timing_rows=len(timing_X), rounds=args.rounds,
               host_threads=torch.get_num_threads(), cascades={},
               quick=f"{args.train_questions} training, {n} dev and {n} test questions, {args.timing_questions} timed "
                     f"in {args.rounds} round" if args.quick else "")
    for name, ct in cts.items():
        res["cascades"][name] = one_cascade(res, name, ct, (dev, test), timing_X, args.rounds, tuple(cfg["metrics"]))
    plot(res, figure_path(exp.template, "cascade_base.png"))
    if "MPNet (12 layers)" not in res["cascades"]:  # the checks are the 12-layer cascade's: a page without them
        exp.publish(res)
        return False


if __name__ == "__main__":
    experiment.main(__file__, run)
