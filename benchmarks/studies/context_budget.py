"""How many epochs a context model needs: learning curves of context and no-context rankers on a data set of
``benchmarks/context.py`` (``context_budget.toml``).

    python benchmarks/studies/context_budget.py [--data squad|wikiqa] [--rows "No context" Local] [--epochs 2 4 6]
                                                [--seed 1] [--threads N] [--render]

``--render`` draws the figure again too.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness

import numpy as np
from harness import experiment, figure_path, fitted, log, pyplot, save_figure
from harness.contexts import answer_in_context, base_rate_loss, config, load_data, make, rows, with_context, wrong_picks
from harness.experiment import Experiment
from harness.library import evaluate

EXP = Experiment(__file__)
METRICS = config()["defaults"]["metrics"]


def run(exp, args, res):
    if set(args.rows) - set(rows()):
        raise SystemExit(f"the rows are {', '.join(rows())}")
    data = load_data(args.data, quick=False)
    (_, y_train), (_, y_dev), (_, y_test) = data["train"], data["dev"], data["test"]
    # Frames per global-context method, read once: "cosine" also serves the no-context row's wrong picks.
    methods = {"cosine"} | {make(row, 1, args.seed)[1] for row in args.rows} - {None}
    frames = {m: {split: with_context(X, m)[0] for split, (X, _) in data.items()} for m in methods}
    # Every row trains with the same backbone and batch size (context.budget); the page names them.
    params = make(args.rows[0], args.epochs[0], args.seed)[0].get_params()
    res.update(data=args.data, data_title=exp.config["titles"][args.data], seed=args.seed,
               base_rate_loss=base_rate_loss(y_train), near_base_rate=config()["defaults"]["near_base_rate"],
               n_train_pairs=len(y_train), rows=list(args.rows), backbone=params["model"],
               batch_size=params["batch_size"],
               answer_in_context=answer_in_context(frames["cosine"]["test"], y_test), fits=[])
    fit_log = []
    for row in args.rows:
        for epochs in args.epochs:
            est, method = make(row, epochs, args.seed)
            X = {split: data[split][0] for split in data} if method is None else frames[method]
            model = fitted(est, X["train"], y_train, fit_log, eval_set=(X["dev"], y_dev))
            history = model.history_
            predicted = model.predict(X["test"])
            scores = evaluate(y_test, predicted, X["test"], metrics=METRICS)
            res["fits"].append({
                "row": row, "epochs": epochs,
                "epoch_loss": list(history.epoch_loss), "dev_map": list(history.eval_scores),
                "best_step": history.best_step, "steps": len(history.step_loss), **scores,
                "wrong_picks": wrong_picks(frames[method or "cosine"]["test"], y_test, predicted),
                "fit_seconds": fit_log[-1].get("fit_seconds"), "cached": fit_log[-1]["cached"],
                "summary": est.get_params().get("summary"),
            })
            log(f"{row}, {epochs} epochs: loss {np.round(history.epoch_loss, 3)}, dev MAP "
                f"{np.round(history.eval_scores, 3)}, test " + " ".join(f"{m} {scores[m]:.4f}" for m in METRICS))
    plot(res, exp.page)


def plot(res, name):
    """Dev MAP per epoch of every fit: a colour per row, a line style per budget."""
    from matplotlib.ticker import MaxNLocator

    fig, ax = pyplot().subplots(figsize=(7, 4.2))
    colors = dict(zip(res["rows"], EXP.config["colors"]))
    styles = ["-", "--", ":", "-."]
    budgets = sorted({f["epochs"] for f in res["fits"]})
    for f in res["fits"]:
        ax.plot(range(1, len(f["dev_map"]) + 1), [100 * v for v in f["dev_map"]], marker="o", ms=3,
                color=colors[f["row"]], ls=styles[budgets.index(f["epochs"]) % len(styles)],
                label=f"{f['row']}, {f['epochs']}-epoch budget")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("epoch")
    ax.set_ylabel("dev MAP (%)")
    ax.set_title(f"{res['data_title']}, {res['n_train_pairs']} training pairs, batch {res['batch_size']} "
                 f"(seed {res['seed']})", fontsize=9)
    save_figure(fig, figure_path(EXP.template, f"{name}.png"), legend_axes=ax)


def page(args) -> str:
    """The page of ``--data`` (``context_budget``, ``context_budget-wikiqa``); with ``--render``, its figure is
    drawn again from its saved results too (the harness renders the page)."""
    name = EXP.page + ("" if args.data == "squad" else f"-{args.data}")
    if args.render:
        plot(EXP.saved(name), name)
    return name


if __name__ == "__main__":
    experiment.main(__file__, run, page=page)
