"""Which training defaults the neural estimators should have: learning curves per learning rate, lexical prior
and training size (``defaults.toml``).

    python benchmarks/defaults.py [--estimator transformer|cascade|distilled|cerberus|concat|mwa|ensemble|cosinet]
                                  [--data sample wikiqa] [--sizes 100 300 all] [--lrs 2e-5 5e-5 1e-4 2e-4]
                                  [--priors off on] [--seeds 0] [--epochs 4] [--batch-sizes B ...]
                                  [--threads N] [--render]

Writes ``benchmarks/results/<stem>.json`` after every curve (it is also the cache: a re-run skips what it holds
from the current library, :func:`harness.store.library_digest` with its application floor), then the analysis of
the page into it, ``docs/benchmarks/<stem>.md`` and ``docs/benchmarks/<stem>.png`` (stem: ``defaults`` for
``TransformerRanker``, ``defaults-<estimator>`` otherwise).
"""

from __future__ import annotations

import itertools
import json
import time

import numpy as np
import pandas as pd
from harness import RESULTS, figure_path, jsonable, library_digest, load_average, log, pyplot, run_header
from harness import library, save_figure, tagged, write_text
from harness.data import load_answered, training_subset
from harness.experiment import Experiment
from harness.library import AUTO_MIN_QUESTIONS, compare, evaluate, per_question
from harness.measure import timed
from harness.store import NotStored, computing, training_params

EXP = Experiment(__file__)
CFG = EXP.config
TITLES, VARIANTS, ENCODERS, COSINET_ES = CFG["titles"], CFG["variants"], CFG["encoders"], CFG["cosinet_es"]
METRICS, SIZES, PROTOCOL, ALPHA = tuple(CFG["metrics"]), tuple(CFG["sizes"]), CFG["protocol"], CFG["alpha"]
STREAM_IGNORED = tuple(CFG["stream_ignored"])
#: ``--estimator`` -> {class, stem, before, settings, suite} (``defaults.toml``).
ESTIMATORS = CFG["estimators"]
SETTINGS = {name: e.get("settings", {}) for name, e in ESTIMATORS.items()}
#: ``--estimator`` -> the parameters its defaults had before this benchmark.
BEFORE = {name: CFG["before"][e["before"]] for name, e in ESTIMATORS.items()}
#: The reference rows fitted as a user would (the library's estimator on the whole subset, train and validation
#: rows): name -> its parameters beyond the library's defaults.
AS_USER = {"library default": {}, **VARIANTS, **ENCODERS}
REFS = ("WO+RR", "Cosinet", "today's default", "Cosinet ES", *AS_USER)
#: The figure's line style of each reference row (of :data:`REFS`, in order).
REF_STYLES = (":", "--", "-.", (0, (1, 1)), "-", (0, (5, 1)), (0, (3, 1, 1, 1)), (0, (1, 3)), (0, (5, 2, 1, 2)),
              (0, (2, 2)), (0, (4, 1, 1, 1, 1, 1)), (0, (6, 2)), (0, (1, 1, 3, 1)), (0, (8, 2)), (0, (2, 1, 2, 3)))


def lr_text(lr) -> str:
    return "paper" if lr is None else f"{lr:.0e}".replace("e-0", "e-")


def size_order(size):
    return float("inf") if size == "all" else int(size)


def suite_entry(name):
    return next(e for e in library.ENTRIES if e.name == name)


def suite_global_method(estimator):
    """The ContextExtractor method of the suite's pipeline for ``estimator``, None when it is no context ranker."""
    suite = ESTIMATORS[estimator].get("suite")
    return None if suite is None else suite_entry(suite).make(0).steps[0][1].global_method


def previous_label(estimator) -> str:
    """Page label of the "today's default" reference row."""
    b = BEFORE[estimator]
    batch = f", batch {b['batch_size']}" if "batch_size" in b else ""
    return f"previous default ({b['epochs']} epochs, lr {lr_text(b['learning_rate'])}{batch})"


def estimator_class(estimator):
    return getattr(library, ESTIMATORS[estimator]["class"])


def build(estimator, seed, **params):
    """The swept class with ``params`` and its settings (the cascade's α; the students' teacher_cv and the suite's
    teachers, Cosinet and Lexical+LR; a context ranker's settings are its ContextExtractor's)."""
    settings = {} if "global_method" in SETTINGS[estimator] else SETTINGS[estimator]
    if "teacher_cv" in settings:
        settings = {"teachers": [library.Cosinet(random_state=seed), suite_entry("Lexical+LR").make(seed)], **settings}
    return estimator_class(estimator)(random_state=seed, verbose=False, **params, **settings)


def with_contexts(estimator, train, val, test):
    """The three splits with the context columns of the suite's ContextExtractor (fitted on the training
    split) when ``estimator`` is a context ranker (its settings name the method), else as they are."""
    if "global_method" not in SETTINGS[estimator]:
        return train, val, test
    extractor = library.ContextExtractor(global_method=SETTINGS[estimator]["global_method"]).fit(train[0])
    return tuple((extractor.transform(X), y) for X, y in (train, val, test))


def scores(model, X, y, with_ap=False) -> dict:
    """Test metrics of ``model`` on ``(X, y)`` (pessimistic ties, without the frame's ``position``), the
    prediction time and with ``with_ap`` the average precision of each question (sorted by ``qid``)."""
    s, timing = timed(model.predict, X)
    report = evaluate(y, s, X, metrics=METRICS, use_position=False)
    out = {m: report[m] for m in METRICS} | {"predict_seconds": timing["seconds"]}
    if with_ap:
        out["ap"] = per_question(y, s, X, "map", use_position=False).sort_index().to_numpy()
    return out


def key(data, size, seed, name, est, epochs=None) -> str:
    """The entry's key in the results file (its cache): the column, the row, the schedule's length and the
    estimator's training parameters (a learning curve's without those ``partial_fit`` ignores)."""
    params = {k: v for k, v in training_params(est).items() if isinstance(v, (str, int, float, bool, type(None)))}
    if epochs is not None:
        params = {k: v for k, v in params.items() if k not in STREAM_IGNORED}
    return json.dumps([data, str(size), seed, name, epochs, params], sort_keys=True, default=str)


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
        out["test"].append(scores(est, Xt, yt, with_ap=True))
        log(f"  epoch {e + 1}: {out['epoch_seconds'][-1]:.0f}s, val MAP {out['val_map'][-1]:.4f}, "
            f"test MAP {out['test'][-1]['map']:.4f}")
    return out


def reference(estimator, name, seed):
    if name == "WO+RR":
        return library.OverlapRankRanker()
    if name == "Cosinet":
        return library.Cosinet(random_state=seed)
    if name == "Cosinet ES":
        return library.Cosinet(**COSINET_ES, random_state=seed)
    if name == "today's default":
        return build(estimator, seed, **BEFORE[estimator], precision="auto")
    return build(estimator, seed, **AS_USER[name])


def run(args, res, save):
    # An entry is reused only when the code that computed it is the code running now: the same parameters may
    # train another model once the library changes.
    digest = library_digest(application=True)
    cosinet, loaded = args.estimator == "cosinet", {}
    for seed, size, data in itertools.product(args.seeds, args.sizes, args.data):
        if data not in loaded:
            loaded[data] = load_answered(data, PROTOCOL["sample_random_state"])
        X, y, Xt, yt = loaded[data]
        res.setdefault("test_qids", {})[data] = sorted(Xt["qid"].unique())
        train, val = training_subset(X, y, size, seed, PROTOCOL["val_fraction"], PROTOCOL["val_min"])
        train, val, test = with_contexts(args.estimator, train, val, (Xt, yt))
        info = {"data": data, "size": str(size), "seed": seed, "n_train_questions": train[0]["qid"].nunique(),
                "n_train_rows": len(train[0]), "n_val_questions": val[0]["qid"].nunique(),
                "n_test_questions": len(res["test_qids"][data])}
        jobs = [] if args.refs_only else [
            (curve_label({"lr": lr, "prior": prior, "batch_size": b}), "curves",
             build(args.estimator, seed, learning_rate=lr, precision="auto",
                   **({"batch_size": b} if cosinet else {"lexical_prior": prior})), lr, epochs)
            for epochs in args.epochs for prior in ([False] if cosinet else [p == "on" for p in args.priors])
            for lr in args.lrs for b in (args.batch_sizes if cosinet else [None])]
        jobs += [(name, "refs", reference(args.estimator, name, seed), None, None) for name in args.refs]
        for name, kind, est, lr, epochs in jobs:
            k = key(data, size, seed, name, est, epochs)
            if res[kind].get(k, {}).get("library") == digest:
                continue
            computing(f"the {kind} entry {name} of {data}, size {size}, seed {seed}")
            log(f"{data}, {size} ({info['n_train_questions']} questions, {info['n_train_rows']} rows), seed {seed}: "
                f"{name}" + (f", {epochs}-epoch schedule" if epochs else ""))
            start = time.perf_counter()
            if kind == "curves":
                swept = {"batch_size": est.batch_size} if cosinet else {"prior": bool(est.lexical_prior)}
                entry = {**info, "lr": lr, **swept, "epochs": epochs, **curve(est, train, val, test, epochs)}
            else:
                if name in AS_USER:
                    est.fit(pd.concat([train[0], val[0]]), np.concatenate([train[1], val[1]]))
                else:
                    est.fit(*train, **({"eval_set": val} if name == "Cosinet ES" else {}))
                entry = {**info, "name": name, "fit_seconds": time.perf_counter() - start,
                         "test": scores(est, *test, with_ap=True)}
                log(f"  test MAP {entry['test']['map']:.4f} ({entry['fit_seconds']:.0f}s)")
            res[kind][k] = {**entry, "library": digest, "wall_seconds": time.perf_counter() - start,
                            "load_average": load_average(), "date": time.strftime("%Y-%m-%d %H:%M")}
            save(res)


def current(runs) -> list:
    """The reference runs of ``runs`` (in their order) that the code of their row's latest run computed: a row
    is the estimator as it was built when it ran (a library default measured again after the defaults changed
    replaces the earlier runs, and its seeds that were not run again drop out)."""
    code = {(r["name"], r["size"]): r.get("library") for r in sorted(runs, key=lambda r: r["date"])}
    return [r for r in runs if r.get("library") == code[(r["name"], r["size"])]]


def cells(res, data, estimator, names=None):
    """{(row label, size): [per-question AP arrays, one per seed]}, rows in table order; reference rows of
    ``names`` (default: every reference row but the other encoders') from their :func:`current` runs."""
    table, picks = {}, {}
    curves = [c for c in res["curves"].values() if c["data"] == data]
    for c in sorted(curves, key=lambda c: (c["epochs"], c.get("prior") or False, c["lr"] or 0,
                                           c.get("batch_size") or 0)):
        if len(c["val_map"]) > 1:
            best = int(np.argmax(c["val_map"]))
            sel = (f"{curve_label(c)}, best-validation epoch of {c['epochs']}", c["size"])
            table.setdefault(sel, []).append(np.asarray(c["test"][best]["ap"]))
            picks.setdefault(sel, []).append(best + 1)
        for e, t in enumerate(c["test"], start=c.get("first_epoch", 1)):
            label = f"{curve_label(c)}, epoch {e} of {c['epochs']}"
            table.setdefault((label, c["size"]), []).append(np.asarray(t["ap"]))
    runs = current([r for r in res["refs"].values() if r["data"] == data])
    for name in [n for n in REFS if n not in ENCODERS] if names is None else names:
        label = previous_label(estimator) if name == "today's default" else name
        for r in runs:
            if r["name"] == name:
                table.setdefault((label, r["size"]), []).append(np.asarray(r["test"]["ap"]))
    return table, picks


def cosinet_ref_params(res):
    """The training budget of the "Cosinet" reference row as it was fitted (read from its cache keys; the
    library's Cosinet defaults may have changed since), None unless all its fits share one."""
    fitted = {json.dumps({k: json.loads(key)[5].get(k) for k in ("epochs", "batch_size")}, sort_keys=True)
              for key, r in res["refs"].items() if r["name"] == "Cosinet"}
    return json.loads(fitted.pop()) if len(fitted) == 1 else None


def epoch_of(label) -> tuple:
    """(schedule length, epoch) of a row label "..., epoch e of E"."""
    e, total = label.rsplit("epoch ", 1)[1].split(" of ")
    return int(total), int(e)


def seed_means(table) -> dict:
    """Each cell's per-question AP averaged over its seeds (what the paired tests compare)."""
    return {c: np.nanmean(np.vstack(v), axis=0) for c, v in table.items()}


def analyse(res, data, estimator):
    """Rows, sizes, MAP per cell (mean over seeds), best cell per size and p-value of each cell against it
    (NaN for the best cell itself)."""
    table, picks = cells(res, data, estimator)
    rows = list(dict.fromkeys(r for r, _ in table))
    sizes = sorted({s for _, s in table}, key=size_order)
    ap = seed_means(table)
    mean = {c: float(np.nanmean(v)) for c, v in ap.items()}
    best = {s: max((c for c in mean if c[1] == s), key=mean.get) for s in sizes}
    p = {}
    for s in sizes:
        p |= {c: t["p"] for c, t in compare({c: ap[c] for c in mean if c[1] == s}, best[s]).items()}
    return rows, sizes, mean, best, p, {c: len(v) for c, v in table.items()}, picks


def summary(sizes, rows, mean, best, p, default_row) -> list:
    """Per size, the cells that the page's summary names: the best cell, the library default's cell, the best
    swept cell, at the best swept cell's learning rate the best-validation epoch and the schedule's last epoch,
    and the reference rows; each as {label, map, p against the best cell (None for the best cell)}."""
    out = []
    for s in sizes:
        b = best[s]
        cell = lambda c, **kw: {"label": c[0], "map": mean[c], "p": None if c == b else p[c], **kw}
        col = {"size": s, "best": cell(b)}
        if (default_row, s) in mean and (default_row, s) != b:
            col["default"] = cell((default_row, s))
        lr_cells = [c for c in mean if c[1] == s and c[0].startswith("lr ")]
        if lr_cells:
            t = max(lr_cells, key=mean.get)
            if t != b:
                col["best_swept"] = cell(t)
            lr = t[0].rsplit(", ", 1)[0]
            epochs = sorted((c for c in lr_cells if c[0].startswith(lr + ", epoch")), key=lambda c: epoch_of(c[0]))
            sel = (f"{lr}, best-validation epoch of {epoch_of(epochs[-1][0])[0]}", s) if epochs else None
            if sel in mean:
                col["selection"] = {"lr": lr, "best_validation": cell(sel),
                                    "last": cell(epochs[-1], epoch=epochs[-1][0].rsplit(", ", 1)[1])}
        col["refs"] = [cell((r, s), name=r.split(" (")[0]) for r in rows
                       if not r.startswith("lr ") and (r, s) in mean and (r, s) != b and r != default_row]
        out.append(col)
    return out


def variants_vs_default(res, estimator, default_row, variants=VARIANTS) -> list:
    """Each variant row against the library default over every column (data set × size) that measured both:
    the columns where the variant is ahead, its mean test-MAP difference over them, and a paired randomisation
    test over test questions, each question's AP difference averaged over its data set's columns (a question
    counts once however many sizes scored it; the data sets' questions side by side). One column's test cannot
    tell small gains apart; this one pools them, so a candidate default is judged across sizes and data sets."""
    out, default = [], estimator_class(estimator)()
    tables = {data: seed_means(cells(res, data, estimator, names=[default_row, *variants])[0]) for data in TITLES}
    for name, params in variants.items():
        if all(getattr(default, k, None) == v for k, v in params.items()):
            continue  # the default itself today (a row of runs made before it became the default)
        gains, variant, base = [], [], []
        for ap in tables.values():
            sizes = [s for r, s in ap if r == name and (default_row, s) in ap]
            if not sizes:
                continue
            gains += [float(np.mean(ap[(name, s)]) - np.mean(ap[(default_row, s)])) for s in sizes]
            variant.append(np.mean([ap[(name, s)] for s in sizes], axis=0))
            base.append(np.mean([ap[(default_row, s)] for s in sizes], axis=0))
        if gains:
            per_q = {default_row: np.concatenate(base), name: np.concatenate(variant)}
            out.append({"name": name, "columns": len(gains), "ahead": sum(g > 0 for g in gains),
                        "delta": float(np.mean(gains)), "p": compare(per_q, default_row)[name]["p"]})
    return out


def encoders_vs_default(res, estimator, default_row) -> list:
    """Per column (data set × size) that measured an encoder row and the library default: each one's test MAP
    (mean over seeds), the encoder row's p-value against the library default (paired randomisation over test
    questions) and both fit times (mean seconds of the runs in the cell), so that a page says what the other
    encoder buys and what it costs."""
    out, rows = [], (default_row, *ENCODERS)
    for data in TITLES:
        table = cells(res, data, estimator, names=rows)[0]
        means = seed_means(table)
        runs = current(sorted((r for r in res["refs"].values() if r["data"] == data and r["name"] in rows),
                              key=lambda r: r["date"]))
        seconds = {}
        for r in runs:
            seconds.setdefault((r["name"], r["size"]), []).append(r["fit_seconds"])
        for size in [s for s in SIZES if (default_row, s) in table and any((n, s) in table for n in ENCODERS)]:
            ap = {n: means[(n, size)] for n in rows if (n, size) in table}
            tests = compare(ap, default_row)
            out.append({"data": data, "title": TITLES[data], "size": size,
                        "rows": [{"name": n, "map": float(np.nanmean(v)), "seeds": len(table[(n, size)]),
                                  "p": None if n == default_row else tests[n]["p"],
                                  "fit_seconds": float(np.mean(seconds[(n, size)]))} for n, v in ap.items()]})
    return out


def describe(res, estimator) -> dict:
    """``res`` with what its page shows beyond the measurements: the estimator's constants, the library's
    defaults today (its row: "default_row"), and per data set the table of test MAP per cell (mean over seeds),
    each cell's p-value against the best cell of its column, and the summary of each column; "verdict" counts
    the columns where the library default is the best cell or not told apart from it."""
    cosinet, default, previous = estimator == "cosinet", estimator_class(estimator)(), BEFORE[estimator]
    auto_holdout = bool(getattr(type(default), "auto_holdout", False))
    # Cosinet's default budget adapts to the data (epochs="auto"): its row is the reference row "Cosinet"; a
    # default that holds out its own validation questions, or one that the swept curves do not train (a default
    # changed after them; its "library default" rows measured), is the "library default" row.
    measured = any(r["name"] == "library default" for r in res["refs"].values())
    default_row = "Cosinet" if cosinet else "library default" if auto_holdout or measured else (
        f"{curve_label({'lr': default.learning_rate, 'prior': getattr(default, 'lexical_prior', None)})}"
        f", epoch {default.epochs} of {default.epochs}")
    entries = [*res["curves"].values(), *res["refs"].values()]
    tables, chosen = [], []
    for data in TITLES:
        if not any(c["data"] == data for c in entries):
            continue
        rows, sizes, mean, best, p, n, picks = analyse(res, data, estimator)
        # The column's split as seed 0 draws it (the seeds' splits differ; the last entry written wins).
        info = {r["size"]: r for r in sorted(entries, key=lambda r: -r["seed"]) if r["data"] == data}
        tables.append({
            "data": data, "title": TITLES[data], "n_test_questions": info[sizes[0]]["n_test_questions"],
            "seeds_per_cell": sorted(set(n.values())),
            "columns": [{"size": s, "n_train_questions": info[s]["n_train_questions"],
                         "n_val_questions": info[s]["n_val_questions"]} for s in sizes],
            "rows": [{"label": r, "cells": [None if (r, s) not in mean else
                                            {"map": mean[(r, s)], "picks": picks.get((r, s)), "best": best[s] == (r, s),
                                             "p": None if best[s] == (r, s) else p[(r, s)]} for s in sizes]}
                     for r in rows],
            "summary": summary(sizes, rows, mean, best, p, default_row),
        })
        chosen += [(mean.get((default_row, s)), best[s] == (default_row, s) or p.get((default_row, s), 0) >= ALPHA,
                    mean.get((previous_label(estimator), s))) for s in sizes]
    done = [c for c in chosen if c[0] is not None]
    return {
        **res,
        "estimator": estimator, "class": ESTIMATORS[estimator]["class"], "stem": ESTIMATORS[estimator]["stem"],
        "alpha": ALPHA, "protocol": PROTOCOL, "sample_articles": int(library.load_sample()[0]["title"].nunique()),
        "settings": SETTINGS[estimator], "suite_global_method": suite_global_method(estimator),
        "before": previous, "cosinet_es": COSINET_ES, "variants": VARIANTS, "encoders": ENCODERS,
        "cosinet_ref_params": cosinet_ref_params(res),
        "streamed": hasattr(default, "partial_fit"),
        "auto_holdout": auto_holdout, "auto_min_questions": AUTO_MIN_QUESTIONS,
        "library_default": {k: getattr(default, k) for k in ("learning_rate", "epochs", "lexical_prior",
                                                             "segment_similarity", "batch_size", "early_stopping")
                            if k in previous or k == "lexical_prior" and not cosinet
                            or k == "segment_similarity" and hasattr(default, k)
                            or k == "early_stopping" and default_row == "library default"},
        "default_row": default_row,
        "segment_default_changed": bool(getattr(default, "segment_similarity", False))
        and any("'segment similarity'" in r.get("command", "") for r in res["runs"]),
        "tables": tables,
        "variants_vs_default": [] if cosinet else variants_vs_default(res, estimator, default_row),
        "encoders_vs_default": [] if cosinet else encoders_vs_default(res, estimator, default_row),
        "encoders_pooled": [] if cosinet else variants_vs_default(res, estimator, default_row, ENCODERS),
        "verdict": {"columns": len(chosen), "planned_columns": len(SIZES) * len(TITLES), "planned_sizes": SIZES,
                    "measured": len(done), "default_ok": sum(c[1] for c in done),
                    "previous_measured": sum(c[2] is not None for c in done),
                    "above_previous": sum(c[0] > c[2] for c in done if c[2] is not None)},
        "curve_labels": [curve_label(c) for c in res["curves"].values()],
    }


def plot(res, path):
    """Test MAP per epoch of every learning curve, one panel per (data set, size), the reference rows as lines."""
    curves = list(res["curves"].values())
    panels = sorted({(c["data"], c["size"]) for c in curves}, key=lambda d: (d[0], size_order(d[1])))
    if not panels:
        return
    plt = pyplot()
    schedules, series = sorted({c["epochs"] for c in curves}), sorted({(curve_label(c), c["epochs"]) for c in curves})
    fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels), 3.2), squeeze=False)
    for ax, (data, size) in zip(axes[0], panels):
        for label, epochs in series:
            runs = [c for c in curves
                    if (c["data"], c["size"], curve_label(c), c["epochs"]) == (data, size, label, epochs)]
            if runs:
                m = np.mean([[t["map"] for t in c["test"]] for c in runs], axis=0)
                first = runs[0].get("first_epoch", 1)
                ax.plot(range(first, first + len(m)), 100 * m, marker="o", ms=3, ls="-" if "prior" in label else ":",
                        label=label + (f" ({epochs}-epoch schedule)" if len(schedules) > 1 else ""))
        for name, ls in zip(REFS, REF_STYLES, strict=True):
            refs = [r["test"]["map"] for r in res["refs"].values()
                    if (r["data"], r["size"], r["name"]) == (data, size, name)]
            if refs:  # the library's default row stands out in black
                ax.axhline(100 * np.mean(refs), color="black" if name == "library default" else "gray", ls=ls, lw=1,
                           label=name)
        ax.set_title(f"{TITLES[data]}, {size} questions", fontsize=8)
        ax.set_xlabel("epoch" + (f" (of a {schedules[0]}-epoch schedule)" if len(schedules) == 1 else ""), fontsize=8)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("test MAP (%)")
    axes[0][0].legend(fontsize=6)
    save_figure(fig, path, dpi=110)


def render(res, estimator):
    """The figure, the analysis saved beside the measurements, and the page."""
    stem = ESTIMATORS[estimator]["stem"]
    plot(res, figure_path("defaults", f"{stem}.png"))
    EXP.publish(describe(res, estimator), stem)


def main(argv=None):
    args = EXP.arguments(argv)
    if set(args.refs) - set(REFS):
        raise SystemExit(f"--refs: the reference rows are {', '.join(REFS)}")
    path = RESULTS / tagged(f"{ESTIMATORS[args.estimator]['stem']}.json")
    res = json.loads(path.read_text()) if path.exists() else {"runs": [], "curves": {}, "refs": {}}
    if not args.render:
        header = run_header("defaults.py", argv)

        def save(res):
            if header not in res["runs"]:  # only runs that computed something are listed
                res["runs"].append(header)
            RESULTS.mkdir(parents=True, exist_ok=True)
            write_text(path, json.dumps(jsonable(res), indent=2) + "\n")

        try:
            run(args, res, save)
        except NotStored as refused:
            log(str(refused))
    render(json.loads(path.read_text()), args.estimator)


if __name__ == "__main__":
    main()
