"""The Cascade Transformer on WikiQA: Tables 2-3 and Figure 2 of Soldaini & Moschitti (2020) (``cascade.toml``).

    python benchmarks/cascade.py [--epochs N] [--learning-rate LR] [--seeds N] [--exit-sampling uniform|all]
                                 [--quick] [--train-only] [--threads N] [--model NAME] [--render] [--cached-only]
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
from harness import (experiment, expanded, figure_path, fitted, library, log, pyplot, save_figure, subset_questions,
                     wikiqa_splits)
from harness.library import (EXIT_GAP, CascadeTransformer, GroupIndex, SequentialRanker, TransformerRanker,
                             autocast_dtype, compare, evaluate, keep_answered, per_question, resolve_device,
                             simulate_cascade, tune_alpha)
from harness.measure import interleaved, mean_std, seeds_per_question, significance, timed


def fit_all(cfg, splits, budget, seeds, fit_log):
    """The final models of Table 2 (``models.final``) over ``seeds``, and TR of each depth (seed 0)."""
    X_train, y_train = splits["train"]
    depths, models = cfg["models"]["depths"], {}
    for seed in seeds:
        for m in cfg["models"]["final"]:
            est = getattr(library, m["estimator"])(**{**budget, **m["params"], "random_state": seed})
            models[(m["kind"], seed)] = fitted(est, X_train, y_train, fit_log)
    trs = {n: fitted(TransformerRanker(num_layers=n, **budget), X_train, y_train, fit_log) for n in depths[:-1]}
    trs[max(depths)] = models[("TR", budget["random_state"])]
    return models, trs


def dev_map(y, scores, X) -> float:
    """Dev MAP as the selection of the exit sampling reads it (without the position column)."""
    return evaluate(y, scores, X, metrics=("map",), use_position=False)["map"]


def final_scores(model, X):
    """Per-row scores of a 6-layer TR, or every exit's logits of a cascade (α=0)."""
    if isinstance(model, CascadeTransformer):
        model.set_params(alpha=0.0, exit_layer=None)
        return model.predict_exits(X)
    return model.predict(X)[:, None]


def table2(cfg, models, trs, seeds, X_test, y_test, X_dev, y_dev):
    """WikiQA test, answered questions: (a) over ``seeds``, the final models (every exit of a cascade, at α=0),
    with their dev MAP; (b) seed 0, TR of each depth beside the cascades' exits of the same depth."""
    depths, samplings, seed0 = cfg["models"]["depths"], cfg["models"]["samplings"], seeds[0]
    (X, y), (Xd, yd) = keep_answered(X_test, y_test), keep_answered(X_dev, y_dev)
    X, Xd = X.reset_index(drop=True), Xd.reset_index(drop=True)
    logits = {key: final_scores(model, X) for key, model in models.items()}
    dev_logits = {key: final_scores(model, Xd) for key, model in models.items()}
    final, per_q = [], {}
    for m in cfg["models"]["final"]:
        kind = m["kind"]
        runs = [evaluate(y, logits[(kind, s)][:, -1], X) for s in seeds]
        dev = [dev_map(yd, dev_logits[(kind, s)][:, -1], Xd) for s in seeds]
        per_q[kind] = seeds_per_question(y, [logits[(kind, s)][:, -1] for s in seeds], X)
        row = {"kind": kind, "label": m["label"], "dev_map": dev, "runs": runs, **mean_std(runs, ("map", "mrr", "p@1"))}
        if kind.startswith("CT"):
            row["exit_map"] = [float(np.mean([evaluate(y, logits[(kind, s)][:, e], X)["map"] for s in seeds]))
                               for e in range(len(depths))]
            row["exit_dev_map"] = [float(np.mean([dev_map(yd, dev_logits[(kind, s)][:, e], Xd) for s in seeds]))
                                   for e in range(len(depths))]
        final.append(row)
        log(f"[table 2] {m['label']}: MAP {row['map']:.4f} ± {row['map_std']:.4f}, dev MAP {np.mean(dev):.4f}")
    tests = compare(per_q, "TR")
    for row in final:
        if row["kind"] != "TR":
            row["p_map_vs_tr"] = tests[row["kind"]]["p"]
    by_depth = []
    for e, n in enumerate(depths):
        scores = {"TR": trs[n].predict(X), **{f"CT {s}": logits[(f"CT {s}", seed0)][:, e] for s in samplings}}
        tests = compare({k: per_question(y, v, X) for k, v in scores.items()}, "TR")
        by_depth.append({"layers": n, **{k: evaluate(y, v, X) for k, v in scores.items()},
                         **{f"p {k}": tests[k]["p"] for k in scores if k != "TR"}})
        log(f"[table 2] {n} layers: " + ", ".join(f"{k} MAP {by_depth[-1][k]['map']:.4f}" for k in scores))
    # exit_layer= scores with one partial classifier: the same logits as predict_exits' column.
    ct = models[("CT uniform", seed0)]
    ct.set_params(exit_layer=ct.exits_[0])
    check = float(np.max(np.abs(ct.predict(X) - logits[("CT uniform", seed0)][:, 0])))
    ct.set_params(exit_layer=None)
    return {"final": final, "by_depth": by_depth, "seeds": list(seeds), "exit_layer_check_max_abs_diff": check,
            "n_questions": int(X["qid"].nunique()), "n_test_questions": int(X_test["qid"].nunique()), "n_rows": len(X),
            "n_dev_questions": int(Xd["qid"].nunique())}


def agreement(simulated, predicted) -> dict:
    """How far ``predict`` is from ``simulate_cascade``: rows that stopped at another exit, and the largest
    score difference among rows that stopped at the same one (scores carry their exit as an offset of
    ``EXIT_GAP``). In float32 both are 0 up to rounding; under bfloat16 autocast a logit depends slightly on
    the other rows of its batch (padding width), so a row on a question's drop boundary may go either way."""
    stage_sim, stage = np.floor(simulated / EXIT_GAP + 0.5), np.floor(predicted / EXIT_GAP + 0.5)
    same = stage_sim == stage
    diff = np.abs(simulated - predicted)[same]
    return {"rows_other_exit": int((~same).sum()), "n_rows": len(same),
            "max_abs_diff_same_exit": float(diff.max()) if len(diff) else 0.0}


def token_cost(scores, lengths, exits) -> float:
    """The relative cost counted in tokens instead of rows: Σ tokens × layers each row ran, over 6 layers of
    every token. Above the row cost when the rows that survive are longer than those dropped."""
    stage = np.floor(scores / EXIT_GAP + 0.5).astype(np.int64) + len(exits) - 1
    layers = np.asarray(exits)[stage]
    return float((lengths * layers).sum() / (exits[-1] * lengths.sum()))


def table3(cfg, ct, trs, X, y, tuned_alpha):
    depths, alphas = cfg["models"]["depths"], cfg["table3"]["alphas"]
    rows, per_q = [], {}

    def add(label, kind, param, scores, cost, timing=None, extra=None):
        row = {"label": label, "model": kind, "param": param, **evaluate(y, scores, X), "relative_cost": cost,
               "timing": timing, **(extra or {})}
        rows.append(row)
        per_q[label] = {m: per_question(y, scores, X, m) for m in ("map", "p@1")}
        t = timing and f", {timing['ms_per_question']:.0f} ms/question, {timing['pairs_per_second']:.1f} pairs/s"
        log(f"[table 3] {label}: MAP {row['map']:.4f} nDCG@10 {row['ndcg@10']:.4f} P@1 {row['p@1']:.4f} "
            f"MRR {row['mrr']:.4f} cost {cost:.3f}{t or ''}")

    for n, tr in trs.items():
        scores, timing = timed(tr.predict, X, per_question=True)
        add(f"TR {n} layers", "TR", n, scores, n / max(depths), timing)
    for alpha in alphas:
        # The steps are the monolithic TRs above: SequentialRanker.fit would fit clones of them on the
        # same data with the same parameters, i.e. these exact models.
        sr = SequentialRanker([TransformerRanker(num_layers=n, lexical_prior=False, segment_similarity=False)
                               for n in depths], keep=1 - alpha)
        sr.steps_ = [trs[n] for n in depths]
        (scores, cost), timing = timed(lambda X: sr.predict(X, return_cost=True), X, per_question=True)
        add(f"SR α={alpha}", "SR", alpha, scores, cost["relative_cost"], timing, {"survivors": cost["survivors"]})
    ct.set_params(alpha=0.0, exit_layer=None)
    # predict_exits is predict at α=0 (all rows through every layer and exit) returning every exit's logits.
    (logits, exit_cost), timing = timed(lambda X: ct.predict_exits(X, return_cost=True), X, per_question=True)
    index = GroupIndex.from_frame(X)
    for e, n in enumerate(ct.exits_[:-1]):
        add(f"CT exit {n} (α=0)", "CT exit", n, logits[:, e], n / ct.n_layers_)
    scores0, _ = simulate_cascade(logits, index, 0.0, ct.exits_)
    add("CT α=0", "CT", 0.0, scores0, exit_cost["relative_cost"], timing)
    sim_diffs = {}
    lengths = ct.encode(X)["lengths"]
    for alpha in (*alphas, tuned_alpha):
        label = f"CT α={alpha}" if np.ndim(alpha) == 0 else f"CT α={tuple(alpha)} (dev-tuned)"
        ct.set_params(alpha=list(alpha) if np.ndim(alpha) else alpha)
        (scores, report), timing = timed(lambda X: ct.predict(X, return_cost=True), X, per_question=True)
        sim, _ = simulate_cascade(logits, index, alpha, ct.exits_)
        sim_diffs[label] = agreement(sim, scores)
        add(label, "CT", alpha if np.ndim(alpha) == 0 else list(alpha), scores, report["relative_cost"], timing,
            {"survivors": report["survivors"], "rows_per_layer": report["rows_per_layer"],
             "token_cost": token_cost(scores, lengths, ct.exits_)})
    ct.set_params(alpha=0.0)
    base = "TR 6 layers"
    vs_tr6 = compare({label: q["map"] for label, q in per_q.items()}, base)
    vs_ct0 = compare({r["label"]: per_q[r["label"]]["p@1"] for r in rows if r["model"] in ("CT", "SR")}, "CT α=0")
    for row in rows:
        if row["label"] != base:
            row["p_map_vs_tr6"] = vs_tr6[row["label"]]["p"]
        if row["model"] in ("CT", "SR") and row["label"] != "CT α=0":
            row["p_p@1_vs_ct0"] = vs_ct0[row["label"]]["p"]
    return rows, sim_diffs


def throughput_rounds(alpha, ct, X, y, rounds, n_questions):
    """Interleaved timings of the cascade at α=0 and at the checked ``alpha`` on a subset (the machine is shared
    and noisy)."""
    Xs, _ = subset_questions(X, y, n_questions, seed=1)
    runs = {0.0: [], alpha: []}

    def at(a):  # a timed predict at α=a
        return lambda: runs[a].append(timed(ct.set_params(alpha=a).predict, Xs, per_question=True)[1])

    interleaved({f"α={a}": at(a) for a in runs}, rounds, "throughput", rotate=False)
    ct.set_params(alpha=0.0)
    out = [{"alpha_0": t0, f"alpha_{alpha}": t, "speedup": t0["seconds"] / t["seconds"]}
           for t0, t in zip(runs[0.0], runs[alpha])]
    return {"n_questions": n_questions, "n_rows": len(Xs), "rounds": out,
            "median_speedup": float(np.median([r["speedup"] for r in out]))}


def figure2(cfg, ct, X_dev, y_dev):
    grid, budget = cfg["table3"]["grid"], cfg["table3"]["cost_budget"]
    ct.set_params(alpha=0.0, exit_layer=None)
    start = time.perf_counter()
    best, table = tune_alpha(ct, X_dev, y_dev, grid=tuple(grid), max_relative_cost=budget, metric="p@1")
    seconds = time.perf_counter() - start
    table = table.assign(alpha=table["alpha"].map(tuple))
    # Pareto front: combinations no other combination beats on both cost (lower) and P@1 (higher).
    by_cost = table.sort_values(["relative_cost", "p@1"], ascending=[True, False], kind="stable")
    front, best_so_far = [], -np.inf
    for _, r in by_cost.iterrows():
        if r["p@1"] > best_so_far + 1e-12:
            front.append(r)
            best_so_far = r["p@1"]
    front = pd.DataFrame(front)

    def row_of(alpha):
        return table[table["alpha"].map(lambda a: a == tuple(alpha))].iloc[0]

    uniform = {a: row_of((a,) * (len(ct.exits_) - 1)) for a in (0.0, *cfg["table3"]["alphas"]) if a in grid}
    log(f"[figure 2] {len(table)} combinations in {seconds:.0f}s; best under cost {budget}: {best}")
    return {"best_alpha": list(best), "best": row_of(best)[["relative_cost", "p@1"]].to_dict(),
            "uniform": {str(a): r[["relative_cost", "p@1"]].to_dict() for a, r in uniform.items()},
            "front": [{"alpha": list(r["alpha"]), "relative_cost": r["relative_cost"], "p@1": r["p@1"]}
                      for _, r in front.iterrows()],
            "n_combinations": len(table), "grid": list(grid), "max_relative_cost": budget, "seconds": seconds,
            "n_questions": int(X_dev["qid"].nunique()), "n_rows": len(X_dev), "_table": table}


def plot_figure2(cfg, fig2, path):
    plt, table, budget = pyplot(), fig2["_table"], cfg["table3"]["cost_budget"]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.scatter(table["relative_cost"], 100 * table["p@1"], s=6, alpha=0.35, color="tab:blue", label="α combinations")
    front = pd.DataFrame(fig2["front"])
    xs = [*front["relative_cost"], table["relative_cost"].max()]
    ys = [*(100 * front["p@1"]), 100 * front["p@1"].iloc[-1]]
    ax.step(xs, ys, where="post", color="tab:red", lw=1.2, label="Pareto front")
    for a, marker in zip((0.0, *cfg["table3"]["alphas"]), ("s", "^", "D", "o")):
        if str(a) in fig2["uniform"]:
            r = fig2["uniform"][str(a)]
            ax.scatter(r["relative_cost"], 100 * r["p@1"], marker=marker, s=60, color="black", zorder=3,
                       label=f"α={a} (all exits)")
    b = fig2["best"]
    ax.scatter(b["relative_cost"], 100 * b["p@1"], marker="*", s=160, color="gold", edgecolor="black", zorder=4,
               label=f"best, cost ≤ {budget}: {tuple(fig2['best_alpha'])}")
    ax.axvline(budget, color="grey", ls=":", lw=1)
    ax.set_xlabel("relative cost per batch (1.0 = 6-layer model)")
    ax.set_ylabel("P@1 (%)")
    ax.set_title(f"Cascade α grid on the WikiQA dev split, ~100 candidates/question ({fig2['n_questions']} questions)",
                 fontsize=9)
    save_figure(fig, path, legend_axes=ax)


def run(exp, args, res):
    cfg, t3 = exp.config, exp.config["table3"]
    precision = autocast_dtype(TransformerRanker().precision, resolve_device("auto"))
    res.update(precision=str(precision).replace("torch.", ""), quick="", paper=exp.paper,
               significance=significance(), candidates_per_question=t3["candidates"])
    splits = wikiqa_splits()
    X_train, y_train = splits["train"]
    res.update(n_train_questions=int(X_train["qid"].nunique()), n_train_rows=len(X_train),
               pool_size=len(splits["pool"]))
    fit_log = []
    res["budget"] = {"model": args.model, "epochs": args.epochs, "learning_rate": args.learning_rate, **cfg["budget"],
                     "random_state": 0}
    res["seeds"] = list(range(args.seeds))
    models, trs = fit_all(cfg, splits, res["budget"], res["seeds"], fit_log)
    res["fits"] = list({f["key"]: f for f in fit_log if "key" in f}.values())
    if args.train_only:
        log("models fitted and cached")
        return False
    res["backbone"] = {"model": args.model, "num_layers": int(models[("CT uniform", res["seeds"][0])].n_layers_),
                       "hidden_size": int(trs[max(cfg["models"]["depths"])].model_.encoder.config.hidden_size)}
    res["table2"] = table2(cfg, models, trs, res["seeds"], *splits["test"], *splits["dev"])
    # The cascade of Table 3 and Figure 2: the exit sampling asked for, else the one with the best dev MAP.
    dev = {r["kind"]: np.mean(r["dev_map"]) for r in res["table2"]["final"]}
    sampling = args.exit_sampling or max(cfg["models"]["samplings"], key=lambda s: dev[f"CT {s}"])
    res["sampling"] = sampling
    res["sampling_chosen_by"] = "--exit-sampling" if args.exit_sampling else "dev MAP"
    log(f"Table 3 and Figure 2 use exit_sampling={sampling!r} ({res['sampling_chosen_by']})")
    ct = models[(f"CT {sampling}", res["seeds"][0])]
    fig2 = figure2(cfg, ct, *expanded(*splits["dev"], splits["pool"], k=t3["candidates"]))
    plot_figure2(cfg, fig2, figure_path(exp.template, "cascade_alpha.png"))
    res["figure2"] = {k: v for k, v in fig2.items() if not k.startswith("_")}
    X3, y3 = expanded(*splits["test"], splits["pool"], k=t3["candidates"])
    timing = (t3["quick"] if args.quick else t3)["timing"]
    if args.quick:
        n_all = X3["qid"].nunique()
        X3, y3 = subset_questions(X3, y3, t3["quick"]["questions"], seed=0)
        res["quick"] = (f"Table 3 on {t3['quick']['questions']} of the {n_all} answered test questions (a fixed "
                        f"random subset, seed 0), interleaved timing rounds: {timing['rounds']} on "
                        f"{timing['questions']} of them; Table 2 and Figure 2 in full")
    rows, sim_diffs = table3(cfg, ct, trs, X3, y3, tuple(fig2["best_alpha"]))
    res["table3"] = {"rows": rows, "simulate_agreement": sim_diffs, "n_questions": int(X3["qid"].nunique()),
                     "n_rows": len(X3)}
    res["throughput"] = throughput_rounds(res["criteria"]["alpha"], ct, X3, y3, timing["rounds"], timing["questions"])


def checks(exp, res):
    return exp.checks(res, default_sampling=CascadeTransformer().exit_sampling)


if __name__ == "__main__":
    experiment.main(__file__, run, checks=checks)
