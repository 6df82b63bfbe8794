"""How many epochs a context model needs: learning curves of context and no-context rankers on a data set
of ``benchmarks/context.py`` (its splits; SQuAD by default).

    python benchmarks/studies/context_budget.py [--data squad|wikiqa] [--rows "No context" Local] [--epochs 2 4 6] [--seed 1] [--threads N] [--render]

One fit per (row, epoch budget) of rows of ``harness.contexts.make`` (by default ``TransformerRanker(max_length=128)``,
"No context", and ``ContextConcat(contexts=("local",))``, "Local"; context rows read the frames of their
global-context method) with the training budget of
``benchmarks/context.py`` (batch 32, learning rate 1e-4, warm-up then linear decay over the whole budget,
early stopping on the dev split with the best epoch restored). A budget is a schedule, not a checkpoint:
the 6-epoch fit is not the 2-epoch fit trained on. Reports each fit's per-epoch training loss against the
base-rate loss (the constant prediction of the share of right answers) and dev MAP, and its test P@1, MAP
and MRR; plots dev MAP per epoch. This is what sets the epochs of ``benchmarks/context.toml``.

Writes ``benchmarks/studies/results/context_budget.json``, ``docs/studies/context_budget.md`` (from
``benchmarks/studies/pages/context_budget.md.j2``) and ``docs/studies/context_budget.png`` (with ``-wikiqa`` before
the extension for WikiQA).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness

import numpy as np
import torch
from harness import STUDY_DOCS, STUDY_RESULTS, fitted, log, publish, render_page, run_header, save_figure, tagged
from harness.contexts import answer_in_context, base_rate_loss, config, load_data, make, rows, with_context, wrong_picks
from harness.library import evaluate

METRICS, NEAR_BASE_RATE = config()["defaults"]["metrics"], config()["defaults"]["near_base_rate"]

ROWS = ("No context", "Local")
COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:gray")
TITLES = {"squad": "SQuAD sample", "wikiqa": "WikiQA"}


def page_name(data: str) -> str:
    """The name of a data set's results and page (``context_budget``, ``context_budget-wikiqa``), untagged."""
    return f"context_budget{'' if data == 'squad' else '-' + data}"


def output_name(data: str, ext: str) -> str:
    return tagged(f"{page_name(data)}.{ext}")


def run(args) -> dict:
    data = load_data(args.data, quick=False)
    (_, y_train), (_, y_dev), (_, y_test) = data["train"], data["dev"], data["test"]
    # Frames per global-context method, read once: "cosine" also serves the no-context row's wrong picks.
    methods = {"cosine"} | {make(row, 1, args.seed)[1] for row in args.rows} - {None}
    frames = {m: {split: with_context(X, m)[0] for split, (X, _) in data.items()} for m in methods}
    # Every row trains with the same backbone and batch size (context.budget); the page names them.
    params = make(args.rows[0], args.epochs[0], args.seed)[0].get_params()
    res = {
        "base_rate_loss": base_rate_loss(y_train), "near_base_rate": NEAR_BASE_RATE, "n_train_pairs": len(y_train),
        "rows": list(args.rows),
        "backbone": params["model"], "batch_size": params["batch_size"],
        "answer_in_context": answer_in_context(frames["cosine"]["test"], y_test), "fits": [],
    }
    fit_log = []
    for row in args.rows:
        for epochs in args.epochs:
            est, method = make(row, epochs, args.seed)
            X = {split: data[split][0] for split in data} if method is None else frames[method]
            model = fitted(est, X["train"], y_train, fit_log, eval_set=(X["dev"], y_dev))
            history = model.history_
            predicted = model.predict(X["test"])
            scores = evaluate(y_test, predicted, X["test"], metrics=METRICS)
            picks = wrong_picks(frames[method or "cosine"]["test"], y_test, predicted)
            res["fits"].append({
                "row": row, "epochs": epochs, "epoch_loss": list(history.epoch_loss), "dev_map": list(history.eval_scores),
                "best_step": history.best_step, "steps": len(history.step_loss), **scores, "wrong_picks": picks,
                "fit_seconds": fit_log[-1].get("fit_seconds"), "cached": fit_log[-1]["cached"],
                "summary": est.get_params().get("summary"),
            })
            log(f"{row}, {epochs} epochs: loss {np.round(history.epoch_loss, 3)}, dev MAP "
                f"{np.round(history.eval_scores, 3)}, test " + " ".join(f"{m} {scores[m]:.4f}" for m in METRICS))
    return res


def plot(res, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(7, 4.2))
    rows = res.get("rows", ROWS)
    colors = dict(zip(rows, COLORS))
    styles = ["-", "--", ":", "-."]
    budgets = sorted({f["epochs"] for f in res["fits"]})
    for f in res["fits"]:
        ax.plot(range(1, len(f["dev_map"]) + 1), [100 * v for v in f["dev_map"]], marker="o", ms=3,
                color=colors[f["row"]], ls=styles[budgets.index(f["epochs"]) % len(styles)],
                label=f"{f['row']}, {f['epochs']}-epoch budget")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("epoch")
    ax.set_ylabel("dev MAP (%)")
    ax.set_title(f"{res['data_title']}, {res['n_train_pairs']} training pairs, batch {res['batch_size']} (seed {res['seed']})",
                 fontsize=9)
    save_figure(fig, path, legend_axes=ax)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", choices=tuple(TITLES), default="squad")
    parser.add_argument("--rows", nargs="+", choices=rows(), default=list(ROWS), help="table rows of benchmarks/context.py (default: No context, Local)")
    parser.add_argument("--epochs", type=int, nargs="+", default=[2, 4, 6], help="epoch budgets (default 2 4 6)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--render", action="store_true", help="only redraw the plot and page of --data from its saved results")
    args = parser.parse_args(argv)
    if args.render:
        res = json.loads((STUDY_RESULTS / output_name(args.data, "json")).read_text())
        plot(res, STUDY_DOCS / output_name(args.data, "png"))
        (STUDY_DOCS / output_name(args.data, "md")).write_text(render_page(res))
        return
    if args.threads:
        torch.set_num_threads(args.threads)
    start = time.perf_counter()
    res = {
        **run_header("studies/context_budget.py", argv),
        "data": args.data,
        "data_title": TITLES[args.data],
        "seed": args.seed,
        **run(args),
    }
    res["wall_seconds"] = time.perf_counter() - start
    STUDY_DOCS.mkdir(parents=True, exist_ok=True)
    plot(res, STUDY_DOCS / output_name(args.data, "png"))
    publish(res, page_name(args.data), template="context_budget")
    log(f"done in {res['wall_seconds'] / 60:.1f} min")


if __name__ == "__main__":
    main()
