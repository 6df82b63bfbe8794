"""How many epochs a context model needs: learning curves of context and no-context rankers on a data set
of ``benchmarks/context.py`` (its splits; SQuAD by default).

    python benchmarks/context_budget.py [--data squad|wikiqa] [--rows "No context" Local] [--epochs 2 4 6] [--seed 1] [--threads N] [--render]

One fit per (row, epoch budget) of rows of ``context.make`` (by default ``TransformerRanker(max_length=128)``,
"No context", and ``ContextConcat(contexts=("local",))``, "Local"; context rows read the frames of their
global-context method) with the training budget of
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

import context
import numpy as np
import torch
from _common import DOCS, RESULTS, fitted, jsonable, log, run_header, tagged
from context import METRICS, answer_in_context, base_rate_loss, evaluate, load_data, make, mwa_summary_note, near_base_rate, with_context, wrong_picks, wrong_picks_note

ROWS = ("No context", "Local")
COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:gray")
TITLES = {"squad": "SQuAD sample", "wikiqa": "WikiQA"}


def output_name(data: str, ext: str) -> str:
    return tagged(f"context_budget{'' if data == 'squad' else '-' + data}.{ext}")


def run(args) -> dict:
    data = load_data(args.data, quick=False)
    (_, y_train), (_, y_dev), (_, y_test) = data["train"], data["dev"], data["test"]
    # Frames per global-context method, read once: "cosine" also serves the no-context row's wrong picks.
    methods = {"cosine"} | {make(row, 1, args.seed)[1] for row in args.rows} - {None}
    frames = {m: {split: with_context(X, m)[0] for split, (X, _) in data.items()} for m in methods}
    res = {
        "base_rate_loss": base_rate_loss(y_train), "n_train_pairs": len(y_train), "rows": list(args.rows),
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
            scores = evaluate(y_test, predicted, X["test"])
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
        f"prediction of the share of right answers): {res['base_rate_loss']:.3f}. Fit time: the run that trained "
        "the fit, on the machine of that run (a cached fit keeps its time)." + mwa_summary_note(res["fits"]),
        "",
    ]
    picks = "answer_in_context" in res
    if picks:
        lines += [wrong_picks_note(res["answer_in_context"]), ""]
    lines += [
        "| model | epochs | training loss per epoch | dev MAP per epoch | best epoch | test P@1 | test MAP | test MRR | fit time |"
        + (" wrong picks | local holds answer | global holds answer |" if picks else ""),
        "| --- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: |" + (" ---: | ---: | ---: |" if picks else ""),
    ]
    for f in res["fits"]:
        steps_per_epoch = f["steps"] / max(1, len(f["epoch_loss"]))
        best = round(f["best_step"] / steps_per_epoch) if f["best_step"] else "–"
        line = (
            f"| {f['row']} | {f['epochs']} | {' '.join(f'{v:.3f}' for v in f['epoch_loss'])} | "
            f"{' '.join(f'{100 * v:.1f}' for v in f['dev_map'])} | {best} | "
            + " | ".join(f"{100 * f[m]:.2f}" for m in METRICS) + f" | {f['fit_seconds'] / 60:.1f} min |"
        )
        if picks:
            w = f["wrong_picks"]
            line += f" {w['wrong']} of {w['questions']} | " + " | ".join(f"{100 * w[c] / max(w['wrong'], 1):.1f}%" for c in ("local", "global")) + " |"
        lines.append(line)
    lines += ["", *reading(res), "", f"![dev MAP per epoch]({output_name(res['data'], 'png')})", ""]
    return "\n".join(lines)


def reading(res) -> list:
    """Each context fit beside the no-context fit of the same budget: final training loss, best dev MAP and
    test P@1, and whether it ended near the base-rate loss (:func:`context.near_base_rate`)."""
    plain = {f["epochs"]: f for f in res["fits"] if f["row"] == "No context"}
    out = []
    for f in res["fits"]:
        base = plain.get(f["epochs"])
        if f["row"] == "No context" or base is None:
            continue
        stalled = near_base_rate(f["epoch_loss"][-1], res["base_rate_loss"])
        out.append(
            f"- {f['row']}, {f['epochs']} epochs: final training loss {f['epoch_loss'][-1]:.3f} (no context "
            f"{base['epoch_loss'][-1]:.3f}; base rate {res['base_rate_loss']:.3f}: "
            + ("near it, so this fit is under-trained" if stalled else "well below it") + "), best dev MAP "
            f"{100 * max(f['dev_map']):.1f} ({100 * max(base['dev_map']):.1f}), test P@1 "
            f"{100 * (f['p@1'] - base['p@1']):+.2f} points."
        )
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", choices=tuple(TITLES), default="squad")
    parser.add_argument("--rows", nargs="+", choices=context.ROWS, default=list(ROWS), help="table rows of benchmarks/context.py (default: No context, Local)")
    parser.add_argument("--epochs", type=int, nargs="+", default=[2, 4, 6], help="epoch budgets (default 2 4 6)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--render", action="store_true", help="only rewrite the page of --data from its JSON")
    args = parser.parse_args(argv)
    if args.render:
        res = json.loads((RESULTS / output_name(args.data, "json")).read_text())
        plot(res, DOCS / output_name(args.data, "png"))
        (DOCS / output_name(args.data, "md")).write_text(markdown(res))
        return
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
