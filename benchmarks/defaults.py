"""Which training defaults should the neural estimators have: learning curves per learning rate, lexical
prior and training size.

    python benchmarks/defaults.py [--estimator transformer|cascade|distilled|cerberus|concat|mwa|cosinet]
                                  [--data sample wikiqa] [--sizes 100 300 all] [--lrs 2e-5 5e-5 1e-4 2e-4]
                                  [--priors off on] [--seeds 0] [--epochs 4] [--batch-sizes B ...]
                                  [--threads N] [--render]

For each (data, size, seed, learning rate, lexical prior, schedule length) one estimator of the chosen class
(all other parameters at their defaults; the cascade scored at α=0; the distilled students with the suite's
teachers, Cosinet and Lexical+LR cross-fitted; the context rankers behind the suite's ``ContextExtractor``,
fitted on the training split) trains with ``partial_fit`` once per epoch, the schedule laid out over the
curve's epochs (``total_rows``), and after each epoch scores the validation split (MAP) and the test split
(MAP, MRR, P@1, per-question AP). Estimators without ``partial_fit`` (the distilled students) are fitted once
per schedule length and scored at its end. Cosinet's curves sweep the schedule length (``--epochs 3 10 30``)
and batch size instead of the prior. Reference rows per (data, size, seed): ``OverlapRankRanker`` (WO+RR),
``Cosinet`` and the estimator's defaults before this benchmark. Data: the bundled SQuAD sample (train/test
split by paragraph) and WikiQA (train: answered questions of WikiQA-train; test: WikiQA-test). Training
subsets: whole documents, seeded, nested; 10 % of them (at least 10 questions, whole documents) validate.

Writes ``benchmarks/results/<stem>.json`` after every curve (it is also the cache: a re-run skips what
it holds), ``docs/benchmarks/<stem>.md`` and ``docs/benchmarks/<stem>.png`` (stem: ``defaults`` for
``TransformerRanker``, ``defaults-<estimator>`` otherwise).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
from _common import DOCS, RESULTS, SHARED_DATA, jsonable, load_average, log, run_header, tagged, training_params

TITLES = {"sample": "SQuAD sample", "wikiqa": "WikiQA"}
REFS = ("WO+RR", "Cosinet", "today's default", "Cosinet ES")
#: The "Cosinet ES" reference row: Cosinet with a 10-epoch budget and early stopping on the validation split
#: (``fit(..., eval_set=)``; the library's patience), a candidate default for Cosinet.
COSINET_ES = {"epochs": 10}
METRICS = ("map", "mrr", "p@1")


def lr_text(lr) -> str:
    return "paper" if lr is None else f"{lr:.0e}".replace("e-0", "e-")


#: The training defaults of the transformer estimators before this benchmark (the TANDA papers' setting).
TANDA = {"epochs": 2, "learning_rate": 2e-5, "lexical_prior": False}
#: ``--estimator``: the class swept, the stem of its results file, page and figure, and the parameters that
#: its defaults had before this benchmark (the "today's default" reference row; the results files' name).
ESTIMATORS = {
    "transformer": ("TransformerRanker", "defaults", TANDA),
    "cascade": ("CascadeTransformer", "defaults-cascade", TANDA),
    "distilled": ("DistilledRanker", "defaults-distilled", TANDA),
    "cerberus": ("Cerberus", "defaults-cerberus", TANDA),
    "concat": ("ContextConcat", "defaults-concat", TANDA),
    "mwa": ("ContextMWA", "defaults-mwa", TANDA),
    "cosinet": ("Cosinet", "defaults-cosinet", {"epochs": 3, "learning_rate": None, "batch_size": 8}),
}
#: The suite's ContextExtractor in front of each context ranker (``as2rank.suite``).
GLOBAL_METHODS = {"concat": "ngram", "mwa": "cosine"}


#: What the page's setup says of the estimator's construction beyond the swept parameters.
SETUP = {
    "cascade": "Scored at α=0 (no drops). ",
    "distilled": "Teachers as in the suite's Cerberus row: `Cosinet` and `LexicalFeatures` + logistic regression, "
                 "3-fold cross-fitted on the training split (`teacher_cv=3`). ",
    "cerberus": "Teachers as in the suite's Cerberus row: `Cosinet` and `LexicalFeatures` + logistic regression, "
                "3-fold cross-fitted on the training split (`teacher_cv=3`); one head each. ",
    "concat": "Behind `ContextExtractor(global_method=\"ngram\")` fitted on the training split, as in the suite. ",
    "mwa": "Behind `ContextExtractor(global_method=\"cosine\")` fitted on the training split, as in the suite. ",
}


def param_text(name, value) -> str:
    return lr_text(value) if name == "learning_rate" and value is not None else repr(value)


def previous_label(estimator) -> str:
    """Page label of the "today's default" reference row."""
    before = ESTIMATORS[estimator][2]
    text = f"{before['epochs']} epochs, lr {lr_text(before['learning_rate'])}"
    return f"previous default ({text}" + (f", batch {before['batch_size']})" if "batch_size" in before else ")")


def files(estimator) -> tuple:
    """Names of the results file, the page and the figure of ``estimator``."""
    return tuple(tagged(f"{ESTIMATORS[estimator][1]}.{ext}") for ext in ("json", "md", "png"))


def estimator_class(estimator):
    import as2rank

    import as2rank.context

    return getattr(as2rank.context if estimator in GLOBAL_METHODS else as2rank, ESTIMATORS[estimator][0])


def extra_params(estimator, seed) -> dict:
    """Parameters of the swept estimator besides the swept ones: the cascade's α, the students' teachers."""
    if estimator == "cascade":
        return {"alpha": 0.0}
    if estimator in ("distilled", "cerberus"):
        from as2rank import Cosinet
        from as2rank.suite import _lexical_lr

        return {"teachers": [Cosinet(random_state=seed), _lexical_lr(seed)], "teacher_cv": 3}
    return {}


def with_contexts(estimator, train, val, test):
    """The three splits with the context columns of the suite's ContextExtractor (fitted on the training
    split) when ``estimator`` is a context ranker, else as they are."""
    if estimator not in GLOBAL_METHODS:
        return train, val, test
    from as2rank.context import ContextExtractor

    extractor = ContextExtractor(global_method=GLOBAL_METHODS[estimator]).fit(train[0])
    return tuple((extractor.transform(X), y) for X, y in (train, val, test))


def load(data):
    """(X_train, y_train, X_test, y_test) with answered questions only, plus the document of each row."""
    from as2rank.data import keep_answered

    if data == "sample":
        from as2rank.suite import load_benchmark_data

        X, y, X_test, y_test = load_benchmark_data("sample", random_state=0)
    else:
        import _common

        if not (SHARED_DATA / "wikiqa" / "WikiQA-train.tsv").exists():
            raise SystemExit(f"WikiQA not found under {SHARED_DATA / 'wikiqa'}: run with --data sample, or set AS2RANK_SHARED_DATA.")
        splits = _common.wikiqa_splits()
        (X, y), (X_test, y_test) = splits["full"], splits["test"]
    # Scores are per question, so dropping unanswered test questions leaves the clean-protocol metrics as they are.
    return (*keep_answered(X, y), *keep_answered(X_test, y_test))


def pick_docs(X, n_questions, rng) -> np.ndarray:
    """Rows of the first whole documents, in a seeded order, holding at least ``n_questions`` questions."""
    docs = X.groupby("doc_id", sort=True)["qid"].nunique()
    docs = docs.iloc[rng.permutation(len(docs))]
    chosen = docs.index[: int(np.searchsorted(docs.cumsum().to_numpy(), n_questions) + 1)]
    return X["doc_id"].isin(chosen).to_numpy()


def splits(X, y, size, seed):
    """Training subset of ``size`` questions (nested across sizes for one seed), split into train and validation."""
    n_all = X["qid"].nunique()
    sub = pick_docs(X, n_all if size == "all" else int(size), np.random.default_rng(seed))
    Xs, ys = X[sub], y[sub]
    n = Xs["qid"].nunique()
    val = pick_docs(Xs, max(10, round(0.1 * n)), np.random.default_rng([seed, 1]))
    return (Xs[~val], ys[~val]), (Xs[val], ys[val])


def scores(model, X, y, per_question=False) -> dict:
    from as2rank.metrics import mean_average_precision, ranking_report

    start = time.perf_counter()
    s = model.predict(X)
    out = {m: ranking_report(y, s, X["qid"])[m] for m in METRICS} | {"predict_seconds": time.perf_counter() - start}
    if per_question:
        out["ap"] = mean_average_precision(y, s, X["qid"], per_group=True).sort_index().to_numpy()
    return out


#: Parameters that ``partial_fit`` ignores: a learning curve's key leaves them out.
STREAM_IGNORED = ("epochs", "early_stopping", "validation_fraction", "patience", "eval_every")


def key(data, size, seed, name, est, epochs=None) -> str:
    params = {k: v for k, v in training_params(est).items() if isinstance(v, (str, int, float, bool, type(None)))}
    if epochs is not None:
        params = {k: v for k, v in params.items() if k not in STREAM_IGNORED}
    return json.dumps([data, str(size), seed, name, epochs, params], sort_keys=True, default=str)


def curve_model(estimator, lr, prior, seed, batch_size=None):
    swept = {"batch_size": batch_size} if estimator == "cosinet" else {"lexical_prior": prior}
    return estimator_class(estimator)(learning_rate=lr, random_state=seed, precision="auto", verbose=False,
                                      **swept, **extra_params(estimator, seed))


def curve_label(c) -> str:
    batch = f", batch {c['batch_size']}" if c.get("batch_size") else ""
    return f"lr {lr_text(c['lr'])}{batch}" + (" + prior" if c.get("prior") else "")


def curve(est, train, val, test, epochs) -> dict:
    """Scores after every epoch of an ``epochs``-long schedule (``partial_fit``), or at its end only for an
    estimator without ``partial_fit`` (``first_epoch``: the epoch of the first score)."""
    (X, y), (Xv, yv), (Xt, yt) = train, val, test
    streamed = hasattr(est, "partial_fit")
    out = {"epoch_seconds": [], "val_map": [], "test": [], "first_epoch": 1 if streamed else epochs}
    for e in range(epochs if streamed else 1):
        start = time.perf_counter()
        if streamed:
            est.partial_fit(X, y, total_rows=epochs * len(X))
        else:
            est.set_params(epochs=epochs).fit(X, y)
        out["epoch_seconds"].append(time.perf_counter() - start)
        out["val_map"].append(scores(est, Xv, yv)["map"])
        out["test"].append(scores(est, Xt, yt, per_question=True))
        log(f"  epoch {e + 1}: {out['epoch_seconds'][-1]:.0f}s, val MAP {out['val_map'][-1]:.4f}, test MAP {out['test'][-1]['map']:.4f}")
    return out


def reference(estimator, name, seed):
    from as2rank import Cosinet, OverlapRankRanker

    before = ESTIMATORS[estimator][2]
    return {"WO+RR": lambda: OverlapRankRanker(), "Cosinet": lambda: Cosinet(random_state=seed),
            "Cosinet ES": lambda: Cosinet(**COSINET_ES, random_state=seed),
            "today's default": lambda: estimator_class(estimator)(**before, random_state=seed, precision="auto", verbose=False,
                                                                  **extra_params(estimator, seed))}[name]()


def run(args, res, save):
    for seed in args.seeds:
        for size in args.sizes:
            for data in args.data:
                X, y, Xt, yt = args.loaded.get(data) or args.loaded.setdefault(data, load(data))
                res.setdefault("test_qids", {})[data] = sorted(Xt["qid"].unique())
                train, val = splits(X, y, size, seed)
                train, val, test = with_contexts(args.estimator, train, val, (Xt, yt))
                info = {"data": data, "size": str(size), "seed": seed, "n_train_questions": train[0]["qid"].nunique(),
                        "n_train_rows": len(train[0]), "n_val_questions": val[0]["qid"].nunique(), "n_test_questions": len(res["test_qids"][data])}
                cosinet = args.estimator == "cosinet"
                jobs = [(curve_label({"lr": lr, "prior": prior == "on", "batch_size": b}), "curves",
                         curve_model(args.estimator, lr, prior == "on", seed, b), lr, epochs)
                        for epochs in args.epochs for prior in (["off"] if cosinet else args.priors) for lr in args.lrs
                        for b in (args.batch_sizes if cosinet else [None])]
                if args.refs_only:
                    jobs = []
                jobs += [(name, "refs", reference(args.estimator, name, seed), None, None) for name in args.refs]
                for name, kind, est, lr, epochs in jobs:
                    k = key(data, size, seed, name, est, epochs)
                    if k in res[kind]:
                        continue
                    log(f"{data}, {size} ({info['n_train_questions']} questions, {info['n_train_rows']} rows), seed {seed}: {name}"
                        + (f", {epochs}-epoch schedule" if epochs else ""))
                    start = time.perf_counter()
                    if kind == "curves":
                        swept = {"batch_size": est.batch_size} if cosinet else {"prior": bool(est.lexical_prior)}
                        entry = {**info, "lr": lr, **swept, "epochs": epochs, **curve(est, train, val, test, epochs)}
                    else:
                        est.fit(*train, **({"eval_set": val} if name == "Cosinet ES" else {}))
                        entry = {**info, "name": name, "fit_seconds": time.perf_counter() - start, "test": scores(est, *test, per_question=True)}
                        log(f"  test MAP {entry['test']['map']:.4f} ({entry['fit_seconds']:.0f}s)")
                    res[kind][k] = {**entry, "wall_seconds": time.perf_counter() - start, "load_average": load_average(), "date": time.strftime("%Y-%m-%d %H:%M")}
                    save(res)


def cells(res, data, estimator):
    """{(row label, size): [per-question AP arrays, one per seed]}, rows in table order."""
    table, picks = {}, {}
    curves = [c for c in res["curves"].values() if c["data"] == data]
    for c in sorted(curves, key=lambda c: (c["epochs"], c.get("prior") or False, c["lr"] or 0, c.get("batch_size") or 0)):
        if len(c["val_map"]) > 1:
            best = int(np.argmax(c["val_map"]))
            sel = (f"{curve_label(c)}, best-validation epoch of {c['epochs']}", c["size"])
            table.setdefault(sel, []).append(np.asarray(c["test"][best]["ap"]))
            picks.setdefault(sel, []).append(best + 1)
        for e, t in enumerate(c["test"], start=c.get("first_epoch", 1)):
            table.setdefault((f"{curve_label(c)}, epoch {e} of {c['epochs']}", c["size"]), []).append(np.asarray(t["ap"]))
    for name in REFS:
        for r in res["refs"].values():
            if r["data"] == data and r["name"] == name:
                table.setdefault((previous_label(estimator) if name == "today's default" else name, r["size"]), []).append(np.asarray(r["test"]["ap"]))
    return table, picks


def cosinet_ref_params(res) -> str:
    """The training budget of the "Cosinet" reference row as it was fitted (read from its cache keys; the
    library's Cosinet defaults may have changed since), as constructor arguments."""
    fitted = {json.dumps({k: json.loads(key)[5].get(k) for k in ("epochs", "batch_size")}, sort_keys=True)
              for key, r in res["refs"].items() if r["name"] == "Cosinet"}
    if len(fitted) != 1:
        return ""
    return "".join(f"{k}={v!r}, " for k, v in json.loads(fitted.pop()).items())


def epoch_of(label) -> tuple:
    """(schedule length, epoch) of a row label "..., epoch e of E"."""
    e, total = label.rsplit("epoch ", 1)[1].split(" of ")
    return int(total), int(e)


def analyse(res, data, estimator):
    """Rows, sizes, MAP per cell (mean over seeds), best cell per size and p-value of each cell against it."""
    from as2rank.metrics import paired_significance

    table, picks = cells(res, data, estimator)
    rows = list(dict.fromkeys(r for r, _ in table))
    sizes = sorted({s for _, s in table}, key=lambda s: float("inf") if s == "all" else int(s))
    ap = {c: np.nanmean(np.vstack(v), axis=0) for c, v in table.items()}
    mean = {c: float(np.nanmean(v)) for c, v in ap.items()}
    best = {s: max((c for c in mean if c[1] == s), key=mean.get) for s in sizes}
    p = {c: paired_significance(ap[c], ap[best[c[1]]]) for c in mean}
    return rows, sizes, mean, best, p, {c: len(v) for c, v in table.items()}, picks


def p_text(p) -> str:
    return "p < 0.001" if p < 0.001 else f"p = {p:.3f}"


def summary(res, data, rows, sizes, mean, best, p, default_row) -> list:
    """One generated line per size: the best cell, the library default's cell, the best transformer cell, the
    reference rows, and at the best transformer cell's learning rate the best-validation epoch against epoch 4
    of 4 and the best epoch."""
    out = []
    for s in sizes:
        b = best[s]
        vs = lambda c: "" if c == b else f" ({p_text(p[c])} vs best)"
        text = f"- {TITLES[data]}, {s} questions: best {b[0]} ({100 * mean[b]:.1f})"
        if (default_row, s) in mean and (default_row, s) != b:
            text += f"; library default {100 * mean[(default_row, s)]:.1f}{vs((default_row, s))}"
        lr_cells = [c for c in mean if c[1] == s and c[0].startswith("lr ")]
        if lr_cells:
            t = max(lr_cells, key=mean.get)
            if t != b:
                text += f"; best swept row {t[0]} {100 * mean[t]:.1f}{vs(t)}"
            lr = t[0].rsplit(", ", 1)[0]
            epochs = sorted((c for c in lr_cells if c[0].startswith(lr + ", epoch")), key=lambda c: epoch_of(c[0]))
            sel = (f"{lr}, best-validation epoch of {epoch_of(epochs[-1][0])[0]}", s) if epochs else None
            if sel in mean and epochs:
                text += (f"; at {lr} the best-validation epoch gives {100 * mean[sel]:.1f}{vs(sel)}, {epochs[-1][0].rsplit(', ', 1)[1]} "
                         f"{100 * mean[epochs[-1]]:.1f}{vs(epochs[-1])}")
        text += "".join(f"; {r.split(' (')[0]} {100 * mean[(r, s)]:.1f}{vs((r, s))}" for r in rows if not r.startswith("lr ") and (r, s) in mean and (r, s) != b)
        out.append(text + ".")
    return out


def plot(res, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted({(c["data"], c["size"]) for c in res["curves"].values()}, key=lambda d: (d[0], float("inf") if d[1] == "all" else int(d[1])))
    if not panels:
        return
    fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels), 3.2), squeeze=False)
    for ax, (data, size) in zip(axes[0], panels):
        schedules = sorted({c["epochs"] for c in res["curves"].values()})
        for label, epochs in sorted({(curve_label(c), c["epochs"]) for c in res["curves"].values()}):
            runs = [c for c in res["curves"].values() if (c["data"], c["size"], curve_label(c), c["epochs"]) == (data, size, label, epochs)]
            if runs:
                m = np.mean([[t["map"] for t in c["test"]] for c in runs], axis=0)
                first = runs[0].get("first_epoch", 1)
                ax.plot(range(first, first + len(m)), 100 * m, marker="o", ms=3, ls="-" if "prior" in label else ":",
                        label=label + (f" ({epochs}-epoch schedule)" if len(schedules) > 1 else ""))
        for (name, ls) in zip(REFS, (":", "--", "-.", (0, (1, 1)))):
            refs = [r["test"]["map"] for r in res["refs"].values() if (r["data"], r["size"], r["name"]) == (data, size, name)]
            if refs:
                ax.axhline(100 * np.mean(refs), color="gray", ls=ls, lw=1, label=name)
        ax.set_title(f"{TITLES[data]}, {size} questions", fontsize=8)
        ax.set_xlabel("epoch" + (f" (of a {schedules[0]}-epoch schedule)" if len(schedules) == 1 else ""), fontsize=8)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("test MAP (%)")
    axes[0][0].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def markdown(res, estimator) -> str:
    name, _, before = ESTIMATORS[estimator]
    cosinet = estimator == "cosinet"
    scored = " at α=0 (`alpha=0`: no drops)" if estimator == "cascade" else ""
    swept = "batch_size=b" if cosinet else "lexical_prior=..."
    lines = [f"# {name} defaults chosen by measurement", "",
             f"Test MAP (%) of `{name}(learning_rate=lr, {swept})`{scored} with every other parameter at its "
             "default, by training questions (columns)" + ("; \"+ prior\": `lexical_prior=True` (see `as2rank.prior`)" if not cosinet else "")
             + ". **Bold**: the best cell of its column; `≈`: not told apart from it by a "
             "paired randomisation test over test questions (p ≥ 0.05; per-question AP, averaged over seeds). "
             "\"epoch e of E\" is the model after e epochs of an E-epoch schedule (warm-up and decay laid out over E "
             "epochs), not an e-epoch fit; \"best-validation epoch\" is the epoch with the best validation MAP (eN: the epoch "
             "it picked, per seed).", ""]
    default = estimator_class(estimator)()
    # Cosinet's default budget adapts to the data (epochs="auto"): its row is the reference row "Cosinet".
    row = "Cosinet" if cosinet else (
        f"{curve_label({'lr': default.learning_rate, 'prior': getattr(default, 'lexical_prior', None)})}"
        f", epoch {default.epochs} of {default.epochs}")
    notes, chosen = [], []
    for data in TITLES:
        if not any(c["data"] == data for c in [*res["curves"].values(), *res["refs"].values()]):
            continue
        rows, sizes, mean, best, p, n, picks = analyse(res, data, estimator)
        info = {r["size"]: r for r in [*res["curves"].values(), *res["refs"].values()] if r["data"] == data}
        lines += [f"## {TITLES[data]}", "", "| row | " + " | ".join(f"{s} ({info[s]['n_train_questions']} train + {info[s]['n_val_questions']} val)" for s in sizes) + " |",
                  "| --- |" + " ---: |" * len(sizes)]
        for r in rows:
            def cell(s):
                if (r, s) not in mean:
                    return "–"
                v = f"{100 * mean[(r, s)]:.2f}" + (f" (e{','.join(map(str, picks[(r, s)]))})" if (r, s) in picks else "")
                return f"**{v}**" if best[s] == (r, s) else (f"{v} ≈" if p[(r, s)] >= 0.05 else v)
            lines.append(f"| {r} | " + " | ".join(cell(s) for s in sizes) + " |")
        seeds = sorted({v for v in n.values()})
        lines += ["", f"{info[sizes[0]]['n_test_questions']} test questions; seeds per cell: {', '.join(map(str, seeds))}.", ""]
        notes += summary(res, data, rows, sizes, mean, best, p, row)
        chosen += [(mean.get((row, s)), best[s] == (row, s) or p.get((row, s), 0) >= 0.05,
                    mean.get((previous_label(estimator), s))) for s in sizes]
    done = [c for c in chosen if c[0] is not None]
    chosen_params = ", ".join(f"`{k}={param_text(k, getattr(default, k))}`" for k in ("learning_rate", "epochs", "lexical_prior", "batch_size")
                              if k in before or k == "lexical_prior" and not cosinet)
    if len(chosen) < 3 * len(TITLES):
        lines[0] = f"# {name} defaults: the measurements so far"
        notes.insert(0, f"- Incomplete: {len(chosen)} of the {3 * len(TITLES)} columns (training sizes 100, 300 and all of each "
                        f"data set) are measured; the library's defaults ({chosen_params}) are not chosen from this page until "
                        "all are.")
    elif done:
        notes.insert(0, f"- The library's defaults ({chosen_params}: the "
                        f"row \"{row}\") are the best cell or not told apart from it in {sum(c[1] for c in done)} of "
                        f"{len(done)} columns, and above the previous default in {sum(c[0] > c[2] for c in done if c[2] is not None)}.")
    lines += ["## What it shows", "", *notes, "", f"![test MAP per epoch]({files(estimator)[2]})", "",
              "## Setup", "",
              "Data: the bundled SQuAD sample (`load_benchmark_data(\"sample\", random_state=0)`: train/test split by "
              "paragraph; only 4 articles, so subsets are drawn by paragraph, `doc_id`) and WikiQA (train: the answered "
              "questions of WikiQA-train; test: the answered questions of WikiQA-test, clean protocol). Training subsets "
              "are whole documents in a seeded order (the smaller inside the larger); 10 % of a subset's questions (at "
              "least 10, whole documents) validate and the rest train, for every row, the reference rows included. "
              + ("Curves: `partial_fit` once per epoch with `total_rows = E × rows`, so the schedule is `fit(epochs=E)`'s. "
                 if hasattr(default, "partial_fit") else f"`{name}` has no `partial_fit`: each cell is a whole `fit(epochs=E)`. ")
              + SETUP.get(estimator, "")
              + f"Reference rows: `OverlapRankRanker()`, `Cosinet({cosinet_ref_params(res)}random_state=seed)` and `{name}("
              + ", ".join(f"{k}={param_text(k, v)}" for k, v in before.items()) + ", random_state=seed)` (the defaults before this "
              "benchmark)"
              + (f"; `Cosinet ES`: `Cosinet({', '.join(f'{k}={v!r}' for k, v in COSINET_ES.items())}, random_state=seed)` "
                 "fitted with the validation split as `eval_set` (early stopping at the library's patience, best epoch's "
                 "weights kept)" if any(r["name"] == "Cosinet ES" for r in res["refs"].values()) else "")
              + ". Metrics: pessimistic ties.", "",
              "## Provenance", ""]
    for h in res["runs"]:
        lines.append(f"- `{h['command']}`: {h['date']} on {h['machine']}; torch {h['torch']} with {h['torch_threads']} CPU threads; load at start {h['load_average_start']}."
                     + (f" {h['note']}" if h.get("note") else ""))
    lines += ["", "| data | size | seed | row | train rows | fit seconds (per epoch) | load | date |", "| --- | --- | ---: | --- | ---: | --- | --- | --- |"]
    for c in res["curves"].values():
        lines.append(f"| {c['data']} | {c['size']} | {c['seed']} | {curve_label(c)} | {c['n_train_rows']} | {' '.join(f'{s:.0f}' for s in c['epoch_seconds'])} | {c['load_average']} | {c['date']} |")
    for r in res["refs"].values():
        lines.append(f"| {r['data']} | {r['size']} | {r['seed']} | {r['name']} | {r['n_train_rows']} | {r['fit_seconds']:.1f} | {r['load_average']} | {r['date']} |")
    return "\n".join(lines) + "\n"


def render(res, estimator):
    _, page, png = files(estimator)
    DOCS.mkdir(parents=True, exist_ok=True)
    plot(res, DOCS / png)
    (DOCS / page).write_text(markdown(res, estimator))
    log(f"wrote {DOCS / page}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", nargs="+", choices=tuple(TITLES), default=list(TITLES))
    parser.add_argument("--sizes", nargs="+", default=["100", "300", "all"], help="training questions per subset, or 'all'")
    parser.add_argument("--lrs", nargs="+", type=lambda v: None if v == "paper" else float(v), default=[2e-5, 5e-5, 1e-4, 2e-4],
                        help="peak learning rates; 'paper': Cosinet's learning_rate=None")
    parser.add_argument("--priors", nargs="+", choices=("off", "on"), default=["off", "on"],
                        help="train without / with the lexical prior (the estimator's lexical_prior)")
    parser.add_argument("--estimator", choices=tuple(ESTIMATORS), default="transformer")
    parser.add_argument("--refs", nargs="*", choices=REFS, default=list(REFS[:3]),
                        help="reference rows to fit (default: all but 'Cosinet ES')")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--refs-only", action="store_true", help="fit the reference rows only (no learning curves)")
    parser.add_argument("--epochs", nargs="+", type=int, default=[4], help="epochs of each learning curve (the schedule's length)")
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[8], help="Cosinet's batch sizes (questions per step)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--render", action="store_true", help="only rewrite the page from the results file")
    args = parser.parse_args(argv)
    path = RESULTS / files(args.estimator)[0]
    res = json.loads(path.read_text()) if path.exists() else {"runs": [], "curves": {}, "refs": {}}
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    if not args.render:
        header = run_header("defaults.py", argv)
        args.loaded = {}

        def save(res):
            if header not in res["runs"]:  # only runs that computed something are listed
                res["runs"].append(header)
            RESULTS.mkdir(parents=True, exist_ok=True)
            path.with_suffix(".tmp").write_text(json.dumps(jsonable(res), indent=1))
            os.replace(path.with_suffix(".tmp"), path)

        run(args, res, save)
    render(json.loads(path.read_text()), args.estimator)


if __name__ == "__main__":
    main()
