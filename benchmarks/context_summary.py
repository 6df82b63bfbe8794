"""What the MWA classifier should read beside the attended views: the question and candidate tokens
(``ContextMWA(summary="pair")``) or the whole sequence, context included (``summary="sequence"``).

    python benchmarks/context_summary.py [--data wikiqa|squad] [--seeds 0 1 2] [--epochs N] [--threads N] [--render]

The splits, contexts (cosine global context), backbone and training budget of ``benchmarks/context.py``
(``context.make``: batch 32, learning rate 1e-4, ``EPOCHS`` of the data set; early stopping on the dev split),
one fit per (row, seed): No context (``TransformerRanker``), MWA with each summary. Reports test P@1, MAP and
MRR per seed and as mean ± std, the paired per-seed Δ of the two summaries, and a paired randomisation test
(9,999 sign flips) of per-question AP and P@1 averaged over the seeds. Results are written after every seed,
so an interrupted run leaves the seeds it finished.

Writes ``benchmarks/results/context_summary.json`` and ``docs/benchmarks/context_summary.md`` (``-squad``
before the extension for the SQuAD sample).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import pandas as pd
import torch
from _common import DOCS, RESULTS, fitted, jsonable, log, run_header, tagged
from context import EPOCHS, METRICS, evaluate, load_data, make, per_question, with_context

from as2rank.metrics import paired_significance

ROWS = {"No context": None, "MWA, pair summary": "pair", "MWA, sequence summary": "sequence"}
TITLES = {"wikiqa": "WikiQA", "squad": "SQuAD sample"}


def output_name(data: str, ext: str) -> str:
    return tagged(f"context_summary{'' if data == 'wikiqa' else '-' + data}.{ext}")


def estimator(row: str, epochs: int, seed: int):
    if ROWS[row] is None:
        return make("No context", epochs, seed)[0]
    return make("MWA", epochs, seed)[0].set_params(summary=ROWS[row])


def run(args, res, write) -> None:
    data = load_data(args.data, quick=False)
    frames = {split: with_context(X, "cosine")[0] for split, (X, _) in data.items()}
    (_, y_train), (_, y_dev), (_, y_test) = data["train"], data["dev"], data["test"]
    per_q = {row: {m: [] for m in ("map", "p@1")} for row in ROWS}
    for seed in args.seeds:
        for row in ROWS:
            X = {split: data[split][0] for split in data} if ROWS[row] is None else frames
            model = fitted(estimator(row, args.epochs, seed), X["train"], y_train, res["fits"], eval_set=(X["dev"], y_dev))
            scores = model.predict(X["test"])
            run_ = {"row": row, "seed": seed, **evaluate(y_test, scores, X["test"]),
                    "epoch_loss": list(model.history_.epoch_loss), "dev_map": list(model.history_.eval_scores),
                    "fit_seconds": res["fits"][-1].get("fit_seconds"), "cached": res["fits"][-1]["cached"]}
            res["runs"].append(run_)
            for m in per_q[row]:
                per_q[row][m].append(per_question(y_test, scores, X["test"], m))
            log(f"{row}, seed {seed}: " + " ".join(f"{m} {run_[m]:.4f}" for m in METRICS))
        # Significance over the seeds every row finished.
        mean = {row: {m: pd.concat(v, axis=1).mean(axis=1) for m, v in per_q[row].items()} for row in ROWS}
        res["p"] = {
            f"{a} vs {b}": {m: paired_significance(mean[a][m], mean[b][m]) for m in ("map", "p@1")}
            for a, b in (("MWA, pair summary", "MWA, sequence summary"), ("MWA, pair summary", "No context"),
                         ("MWA, sequence summary", "No context"))
        }
        write(res)


def summary_table(res) -> list:
    lines = ["| model | seeds | P@1 | MAP | MRR | final training loss | best dev MAP | fit time |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for row in ROWS:
        runs = [r for r in res["runs"] if r["row"] == row]
        if not runs:
            continue
        cells = [f"{100 * np.mean([r[m] for r in runs]):.2f} ± {100 * np.std([r[m] for r in runs]):.2f}" for m in METRICS]
        loss = np.mean([r["epoch_loss"][-1] for r in runs])
        dev = np.mean([max(r["dev_map"]) for r in runs])
        minutes = np.mean([r["fit_seconds"] for r in runs]) / 60
        lines.append(f"| {row} | {', '.join(str(r['seed']) for r in runs)} | " + " | ".join(cells)
                     + f" | {loss:.3f} | {100 * dev:.1f} | {minutes:.1f} min |")
    return lines


def seed_table(res) -> list:
    by = {(r["row"], r["seed"]): r for r in res["runs"]}
    seeds = sorted({r["seed"] for r in res["runs"]})
    lines = ["| seed | " + " | ".join(f"{row} P@1 / MAP" for row in ROWS) + " | pair − sequence P@1 / MAP |",
             "| ---: |" + " ---: |" * (len(ROWS) + 1)]
    for seed in seeds:
        cells = [f"{100 * by[(row, seed)]['p@1']:.2f} / {100 * by[(row, seed)]['map']:.2f}" if (row, seed) in by else "–" for row in ROWS]
        pair, seq = by.get(("MWA, pair summary", seed)), by.get(("MWA, sequence summary", seed))
        delta = f"{100 * (pair['p@1'] - seq['p@1']):+.2f} / {100 * (pair['map'] - seq['map']):+.2f}" if pair and seq else "–"
        lines.append(f"| {seed} | " + " | ".join(cells) + f" | {delta} |")
    return lines


def reading(res) -> list:
    """The seed-paired differences in one sentence: pair − sequence, and each summary − no context."""
    by = {(r["row"], r["seed"]): r for r in res["runs"]}
    seeds = [s for s in sorted({r["seed"] for r in res["runs"]}) if all((row, s) in by for row in ROWS)]
    if not seeds:
        return []

    def delta(a, b, m):
        return 100 * np.mean([by[(a, s)][m] - by[(b, s)][m] for s in seeds])

    pair, seq = "MWA, pair summary", "MWA, sequence summary"
    wins = sum(by[(pair, s)]["p@1"] > by[(seq, s)]["p@1"] for s in seeds)
    return [
        f"Over the {len(seeds)} seed(s) with every row: pair − sequence {delta(pair, seq, 'p@1'):+.2f} P@1 and "
        f"{delta(pair, seq, 'map'):+.2f} MAP (pair ahead in P@1 on {wins} of {len(seeds)}); against no context, "
        f"pair {delta(pair, 'No context', 'p@1'):+.2f} P@1 / {delta(pair, 'No context', 'map'):+.2f} MAP, sequence "
        f"{delta(seq, 'No context', 'p@1'):+.2f} / {delta(seq, 'No context', 'map'):+.2f}.",
        "",
    ]


def markdown(res) -> str:
    seeds = sorted({r["seed"] for r in res["runs"] if r["row"] != "No context"})
    lines = [
        f"# MWA: what the classifier reads ({TITLES[res['data']]})",
        "",
        f"Measured {res['date']} on {res['machine']}; torch {res['torch']} with {res['torch_threads']} CPU thread(s). "
        f"Command: `{res['command']}`. Wall time {res['wall_seconds'] / 60:.1f} min (fits read from `benchmarks/cache/` "
        "where cached; fit time is that of the run that trained the fit).",
        "",
        f"`ContextMWA` on the {TITLES[res['data']]} splits of `benchmarks/context.py` (cosine global context, "
        f"backbone `minilm-l6`, batch 32, learning rate 1e-4, {res['epochs']} epochs, early stopping on dev), "
        "with the classifier reading, beside each context's attended views averaged over the question and "
        "candidate tokens, either those tokens' own encodings averaged (`summary=\"pair\"`, the default; Tan et "
        "al. aggregate each token's encoding with its attended views) or the whole sequence pooled, context "
        "tokens included (`summary=\"sequence\"`, the model of the pages measured before this option). "
        f"Test questions: {res['n_test_questions']}; seeds finished: {', '.join(map(str, seeds)) or 'none'}.",
        "",
        *summary_table(res),
        "",
        "Per seed (test P@1 / MAP, %):",
        "",
        *seed_table(res),
        "",
        *reading(res),
    ]
    if res.get("p"):
        lines += ["Paired randomisation test of per-question AP and P@1 (each averaged over the seeds):", ""]
        lines += [f"- {pair}: p = {p['map']:.4f} (AP), {p['p@1']:.4f} (P@1)" for pair, p in res["p"].items()]
        lines.append("")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", choices=tuple(TITLES), default="wikiqa")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=None, help="training epochs (default: EPOCHS of benchmarks/context.py)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--render", action="store_true", help="only rewrite the page of --data from its JSON")
    args = parser.parse_args(argv)
    json_path, md_path = RESULTS / output_name(args.data, "json"), DOCS / output_name(args.data, "md")
    if args.render:
        md_path.write_text(markdown(json.loads(json_path.read_text())))
        return
    args.epochs = args.epochs or EPOCHS[args.data]
    if args.threads:
        torch.set_num_threads(args.threads)
    start = time.perf_counter()
    n_test = load_data(args.data, quick=False)["test"][0]["qid"].nunique()
    res = {**run_header("context_summary.py", argv), "data": args.data, "epochs": args.epochs, "seeds": args.seeds,
           "n_test_questions": int(n_test), "runs": [], "fits": []}

    def write(res):
        res["wall_seconds"] = time.perf_counter() - start
        RESULTS.mkdir(parents=True, exist_ok=True)
        DOCS.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(jsonable(res), indent=2))
        md_path.write_text(markdown(jsonable(res)))
        log(f"wrote {json_path} and {md_path} ({res['wall_seconds'] / 60:.1f} min)")

    run(args, res, write)


if __name__ == "__main__":
    main()
