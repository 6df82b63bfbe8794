"""Answer or abstain: answer triggering (Yang, Yih & Meek 2015) of calibrated rankers on WikiQA and the SQuAD
sample (``answer.toml``).

    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/answer.py [--models WO+RR,Lexical+LR,Zero-shot,Transformer]
"""

from __future__ import annotations

import time

import numpy as np
from harness import SHARED_DATA, experiment, figure_path, log, pyplot, save_figure
from harness.experiment import Experiment
from harness.store import computing
from harness.library import (CalibratedRanker, GroupIndex, answer_triggering, apply_calibration, brier_score,
                             expected_calibration_error, load_benchmark_data, precision_at_coverage, precision_coverage_auc,
                             precision_coverage_curve, ranking_report, select, wilson_interval)
from scipy.special import expit
from sklearn.model_selection import GroupShuffleSplit

CONFIG = Experiment(__file__).config
CROSS_FITTED, PROBABILITY_SCORES = set(CONFIG["cross_fitted"]), set(CONFIG["probability_scores"])
BOOTSTRAP, CURVE_POINTS = CONFIG["record"]["bootstrap"], CONFIG["curve_points"]
TARGET_PRECISION = CONFIG["record"]["target_precision"]


def calibrated(entry, X, y, seed, methods):
    """``(method, fitted CalibratedRanker, how)`` for a suite entry and each calibration method: on question folds
    (:data:`CROSS_FITTED`), else the entry fitted once and calibrated on a dev split."""
    if entry.name in CROSS_FITTED:
        for method in methods:
            yield method, CalibratedRanker(entry.make(seed), method=method, cv=5).fit(X, y), "5 question folds"
        return
    fit, dev = next(GroupShuffleSplit(n_splits=1, test_size=0.2, random_state=seed).split(X, y, X["qid"]))
    model = entry.make(seed).fit(X.iloc[fit], y[fit])
    for method in methods:
        yield method, CalibratedRanker(model, method=method, cv="prefit").fit(X.iloc[dev], y[dev]), "prefit, dev 20 %"


def bootstrap_f1(answered, correct, answerable, seed):
    """95 % percentile interval of answer-triggering F1 over questions resampled with replacement."""
    rng = np.random.default_rng(seed)
    picks = rng.integers(len(answered), size=(BOOTSTRAP, len(answered)))
    hits = (answered & correct)[picks].sum(axis=1)
    f1 = 2 * hits / np.maximum(answered[picks].sum(axis=1) + answerable[picks].sum(axis=1), 1)
    return [float(v) for v in np.percentile(f1, [2.5, 97.5])]


def measure(model, X, y, seed, raw_is_probability=False) -> dict:
    """Answer triggering, precision at coverage and calibration of a fitted CalibratedRanker on ``(X, y)`` (``X``
    with a RangeIndex, so that the ``row`` of an answer is its position), from one prediction."""
    answers, scores = model.predict_answer(X, return_scores=True)
    on = {"ties": "stable", "position": X["position"]}  # the candidate the model answers with
    trig = answer_triggering(y, scores, X["qid"], answers["answered"].to_numpy(), **on)
    answerable = GroupIndex.from_frame(X).max(y) > 0
    correct = y[answers["row"].to_numpy()] > 0
    confidence = answers["probability"].to_numpy()
    proba = apply_calibration(model.calibration_, scores)  # predict_proba(X)[:, 1], without predicting again
    raw = scores if raw_is_probability else expit(scores)
    clean = ranking_report(y, scores, X["qid"], unanswered="include", **on)  # and a system that always answers
    target = {"target": TARGET_PRECISION, "reachable": True}
    try:
        target["holdout"] = model.threshold_for(target_precision=TARGET_PRECISION)
    except ValueError as exc:  # no held-out threshold reaches the target: the model would answer nothing
        target.update(reachable=False, reason=str(exc))
    if target["reachable"]:
        at = confidence > target["holdout"]["threshold"]
        hits, n = int(np.sum(at & correct)), int(np.sum(at))
        target.update(threshold=target["holdout"]["threshold"], n_answered=n, n_correct=hits,
                      precision=hits / n if n else None, interval=list(wilson_interval(hits, n)),
                      coverage=n / len(at))
    return {
        **{k: trig[k] for k in ("precision", "recall", "f1", "n_answered", "n_correct", "n_answerable", "n_questions")},
        "f1_interval": bootstrap_f1(answers["answered"].to_numpy(), correct, answerable, seed),
        "always": {k: clean[f"answer_{k}"] for k in ("precision", "recall", "f1")},
        "precision_at_50": precision_at_coverage(y, scores, X["qid"], confidence, 0.5, **on),
        "precision_at_80": precision_at_coverage(y, scores, X["qid"], confidence, 0.8, **on),
        "raw": "score" if raw_is_probability else "sigmoid",
        "ece_raw": expected_calibration_error(y, raw),
        "ece": expected_calibration_error(y, proba),
        "brier_raw": brier_score(y, raw),
        "brier": brier_score(y, proba),
        "map_clean": clean["map"],
        "p1_clean": clean["p@1"],
        "target_precision": target,
        "pc_auc": precision_coverage_auc(y, scores, X["qid"], confidence, **on),
        "curve": curve(y, scores, X["qid"], confidence, on),
    }


def curve(y, scores, groups, confidence, on) -> dict:
    """The test precision-coverage curve at :data:`CURVE_POINTS` coverages (the precision at each, as
    ``precision_at_coverage`` gives it), for the figure."""
    coverage, precision, _ = precision_coverage_curve(y, scores, groups, confidence, **on)
    grid = np.linspace(coverage[0], 1.0, CURVE_POINTS)
    return {"coverage": grid.tolist(), "precision": precision[np.searchsorted(coverage, grid - 1e-12)].tolist()}


def plot(res, path) -> None:
    """Precision against coverage on each data set's test questions, one line per model (dashed: isotonic),
    with the target precision."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(res["data"]), figsize=(5.2 * len(res["data"]), 3.8), squeeze=False)
    for ax, d in zip(axes[0], res["data"].values()):
        for i, (name, r) in enumerate(d["models"].items()):
            ax.plot(r["curve"]["coverage"], r["curve"]["precision"], lw=1.3, color=f"C{i // 2}",
                    ls="--" if "isotonic" in name else "-", label=f"{name} (area {r['pc_auc']:.2f})")
        ax.axhline(res["target_precision"], color="grey", lw=0.8, ls=":")
        ax.set(title=d["label"], xlabel="coverage (fraction of all test questions answered)",
               ylabel="precision of the answers", xlim=(0, 1), ylim=(0, 1))
        ax.legend(fontsize=6, loc="lower left")
        ax.grid(alpha=0.3)
    save_figure(fig, path)


def run(exp, args, res):
    res.update(paper=exp.paper, data={})
    entries = select(("all",), args.models.split(","))
    missing = {e.name: e.missing() for e in entries if e.missing()}
    if missing:
        raise SystemExit(f"missing packages: {missing}")
    for name, label in (("wikiqa", "WikiQA"), ("sample", "SQuAD 2.0 sample")):
        if name == "wikiqa" and not (SHARED_DATA / "wikiqa" / "WikiQA-test.tsv").exists():
            raise SystemExit(f"WikiQA not found under {SHARED_DATA / 'wikiqa'}; this benchmark needs the shared data.")
        path = SHARED_DATA / "wikiqa" if name == "wikiqa" else None
        X_train, y_train, X_test, y_test = load_benchmark_data(name, path, random_state=args.seed)
        X_test = X_test.reset_index(drop=True)
        rows = {}
        for entry in entries:
            computing(f"the calibrated fits of {entry.name} on {label}")
            log(f"{label}: {entry.name}")
            t0 = time.perf_counter()
            for method, model, how in calibrated(entry, X_train, y_train, args.seed, args.methods.split(",")):
                fit_s, row = time.perf_counter() - t0, f"{entry.name}{'' if method == 'sigmoid' else f' ({method})'}"
                measured = measure(model, X_test, y_test, args.seed, entry.name in PROBABILITY_SCORES)
                rows[row] = {**measured, "calibrated": f"{method}, {how}", "fit_seconds": fit_s,
                             "threshold": model.threshold_, "holdout": model.threshold_report_}
                log(f"  {row}: F1 {rows[row]['f1']:.3f} after {fit_s:.0f} s")
                t0 = time.perf_counter()
        index = GroupIndex.from_frame(X_test)
        res["data"][name] = {"label": label, "models": rows, "train_questions": int(X_train["qid"].nunique()),
                             "test_questions": int(index.n_groups),
                             "test_answerable": int((index.max(y_test) > 0).sum())}
    plot(res, figure_path("answer", "answer.png"))


if __name__ == "__main__":
    experiment.main(__file__, run, checks=lambda exp, res: [])
