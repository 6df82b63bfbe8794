"""How many epochs a context model needs: learning curves of a no-context and a local-context ranker on a
data set of ``benchmarks/context.py`` (its splits; SQuAD by default).

    python benchmarks/context_budget.py [--data squad|wikiqa] [--epochs 2 4 6] [--seed 1] [--threads N]

One fit per (model, epoch budget) of two rows of ``context.make``: ``TransformerRanker(max_length=128)`` ("No context") and
``ContextConcat(contexts=("local",))`` ("Local", cosine-context frames) with the training budget of
``benchmarks/context.py`` (batch 32, learning rate 1e-4, warm-up then linear decay over the whole budget,
early stopping on the dev split with the best epoch restored). A budget is a schedule, not a checkpoint:
the 6-epoch fit is not the 2-epoch fit trained on. Reports each fit's per-epoch training loss against the
base-rate loss (the constant prediction of the share of right answers) and dev MAP, and its test P@1, MAP
and MRR; plots dev MAP per epoch. This is what sets ``EPOCHS`` of ``benchmarks/context.py``.

Writes ``benchmarks/results/context_budget.json``, ``docs/benchmarks/context_budget.md`` and
``docs/benchmarks/context_budget.png`` (with ``-wikiqa`` before the extension for WikiQA).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
from _common import DOCS, RESULTS, fitted, jsonable, log, run_header, tagged
from context import METRICS, base_rate_loss, evaluate, load_data, make, with_context

ROWS = ("No context", "Local")
TITLES = {"squad": "SQuAD sample", "wikiqa": "WikiQA"}


def output_name(data: str, ext: str) -> str:
    return tagged(f"context_budget{'' if data == 'squad' else '-' + data}.{ext}")


def run(args) -> dict:
    data = load_data(args.data, quick=False)
    frames = {split: with_context(X, "cosine")[0] for split, (X, _) in data.items()}
    (_, y_train), (_, y_dev), (_, y_test) = data["train"], data["dev"], data["test"]
    res = {"base_rate_loss": base_rate_loss(y_train), "n_train_pairs": len(y_train), "fits": []}
    fit_log = []
    for row in ROWS:
        for epochs in args.epochs:
            X = {split: data[split][0] if row == "No context" else frames[split] for split in data}
            model = fitted(make(row, epochs, args.seed)[0], X["train"], y_train, fit_log, eval_set=(X["dev"], y_dev))
            history = model.history_
            scores = evaluate(y_test, model.predict(X["test"]), X["test"])
            res["fits"].append({
                "row": row, "epochs": epochs, "epoch_loss": list(history.epoch_loss), "dev_map": list(history.eval_scores),
                "best_step": history.best_step, "steps": len(history.step_loss), **scores,
                "fit_seconds": fit_log[-1].get("fit_seconds"), "cached": fit_log[-1]["cached"],
            })
            log(f"{row}, {epochs} epochs: loss {np.round(history.epoch_loss, 3)}, dev MAP "
                f"{np.round(history.eval_scores, 3)}, test " + " ".join(f"{m} {scores[m]:.4f}" for m in METRICS))
    return res


def plot(res, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    colors = {"No context": "tab:blue", "Local": "tab:orange"}
    styles = ["-", "--", ":", "-."]
    budgets = sorted({f["epochs"] for f in res["fits"]})
    for f in res["fits"]:
        ax.plot(range(1, len(f["dev_map"]) + 1), [100 * v for v in f["dev_map"]], marker="o", ms=3,
                color=colors[f["row"]], ls=styles[budgets.index(f["epochs"]) % len(styles)],
                label=f"{f['row']}, {f['epochs']}-epoch budget")
    ax.set_xlabel("epoch")
    ax.set_ylabel("dev MAP (%)")
    ax.set_title(f"{TITLES[res['data']]}, {res['n_train_pairs']} training pairs, batch 32 (seed {res['seed']})", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def markdown(res) -> str:
    lines = [
        f"# Context models: training budget ({TITLES[res['data']]})",
        "",
        f"Measured {res['date']} on {res['machine']}; torch {res['torch']} with {res['torch_threads']} CPU thread(s). "
        f"Command: `{res['command']}`. Wall time {res['wall_seconds'] / 60:.1f} min (fits read from "
        "`benchmarks/cache/` where cached).",
        "",
        f"The {TITLES[res['data']]} split of `benchmarks/context.py` ({res['n_train_pairs']} training pairs, about "
        f"{res['n_train_pairs'] // 32} steps an epoch at batch 32), seed {res['seed']}, backbone `minilm-l6`. Each "
        "row is one fit with its own schedule (warm-up, then linear decay over the whole budget); early stopping "
        "on the dev split restores the best epoch, which the test figures use. Base-rate loss (the constant "
        f"prediction of the share of right answers): {res['base_rate_loss']:.3f}.",
        "",
        "| model | epochs | training loss per epoch | dev MAP per epoch | best epoch | test P@1 | test MAP | test MRR |",
        "| --- | ---: | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for f in res["fits"]:
        steps_per_epoch = f["steps"] / max(1, len(f["epoch_loss"]))
        best = round(f["best_step"] / steps_per_epoch) if f["best_step"] else "–"
        lines.append(
            f"| {f['row']} | {f['epochs']} | {' '.join(f'{v:.3f}' for v in f['epoch_loss'])} | "
            f"{' '.join(f'{100 * v:.1f}' for v in f['dev_map'])} | {best} | "
            + " | ".join(f"{100 * f[m]:.2f}" for m in METRICS) + " |"
        )
    lines += ["", f"![dev MAP per epoch]({output_name(res['data'], 'png')})", ""]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", choices=tuple(TITLES), default="squad")
    parser.add_argument("--epochs", type=int, nargs="+", default=[2, 4, 6], help="epoch budgets (default 2 4 6)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    start = time.perf_counter()
    res = {
        **run_header("context_budget.py", argv),
        "data": args.data,
        "seed": args.seed,
        **run(args),
    }
    res["wall_seconds"] = time.perf_counter() - start
    res = jsonable(res)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / output_name(args.data, "json")).write_text(json.dumps(res, indent=2))
    DOCS.mkdir(parents=True, exist_ok=True)
    plot(res, DOCS / output_name(args.data, "png"))
    (DOCS / output_name(args.data, "md")).write_text(markdown(res))
    log(f"wrote {DOCS / output_name(args.data, 'md')} ({res['wall_seconds'] / 60:.1f} min)")


if __name__ == "__main__":
    main()
