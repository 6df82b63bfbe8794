"""Answer or abstain: answer triggering (Yang, Yih & Meek 2015) of calibrated rankers on WikiQA and the SQuAD sample.

Each model is wrapped in ``as2rank.answer.CalibratedRanker`` and fitted on the training split, every question
kept (WikiQA-train: 2,118 questions; the sample's training paragraphs of ``load_benchmark_data("sample")``); the
threshold is the one of the best answer-triggering F1 on the held-out training folds. On the test split, all
questions kept (WikiQA-test: 633, 390 of them without a correct sentence), it reports answer-triggering
precision, recall and F1 (a 95 % percentile bootstrap interval of F1 over test questions), precision at 50 % and
80 % coverage, the expected calibration error and Brier score of the candidate probabilities before (the
logistic sigmoid of the raw score; Lexical+LR's score, a probability already) and after calibration, and the
WikiQA paper's figures; and the threshold for a precision of 0.9 (:data:`TARGET_PRECISION`), chosen on the
same held-out questions, with the test precision it gives and that precision's 95 % Wilson interval.

How each model is calibrated, by both methods (``--methods``): the cheap ones (WO+RR, Lexical+LR) with ``cv=5``
question folds (refitted 5 + 1 times); any other (Zero-shot: with labels, its ``fit`` learns the lexical prior; the
default Transformer) is fitted once on 80 % of the training questions and calibrated ``cv="prefit"`` on the other
20 %.

    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/answer.py [--models WO+RR,Lexical+LR,Zero-shot,Transformer]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from harness import DOCS, SHARED_DATA, conclude, log, run_header, save_figure, tagged
from scipy.special import expit
from sklearn.model_selection import GroupShuffleSplit

from as2rank.answer import CalibratedRanker
from as2rank.answer.calibration import apply_calibration
from as2rank.app.suite import load_benchmark_data, select
from as2rank.data import GroupIndex
from as2rank.metrics import ranking_report
from as2rank.triggering import (answer_triggering, brier_score, expected_calibration_error, precision_at_coverage,
                                precision_coverage_auc, precision_coverage_curve, wilson_interval)

#: The WikiQA paper's answer-triggering results on WikiQA-test (precision, recall, F1, %): its CNN-Cnt model
#: and the best feature set added to it (question length).
PAPER = {"CNN-Cnt": (26.09, 37.04, 30.61), "CNN-Cnt + QLen": (27.96, 37.86, 32.17)}
MODELS = ("WO+RR", "Lexical+LR", "Zero-shot", "Transformer")
#: The models calibrated on question folds (see the module docstring); the others on a dev split.
CROSS_FITTED = {"WO+RR", "Lexical+LR"}
#: Models whose score is a probability already (Lexical+LR's is its logistic regression's, fitted on the pairs):
#: their uncalibrated probability is the score itself; the others' is the logistic sigmoid of the score.
PROBABILITY_SCORES = {"Lexical+LR"}
BOOTSTRAP = 2000
#: Points kept of each test precision-coverage curve for the page's figure (evenly spaced in coverage).
CURVE_POINTS = 101
#: The target precision whose threshold, chosen on held-out training questions, is checked on the test split.
TARGET_PRECISION = 0.9


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
    import matplotlib.pyplot as plt

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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated suite model names")
    parser.add_argument("--methods", default="sigmoid,isotonic", help="comma-separated calibration methods")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    res = {**run_header("answer.py", argv), "bootstrap": BOOTSTRAP, "paper": PAPER,
           "target_precision": TARGET_PRECISION, "data": {}}
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
    plot(res, DOCS / tagged("answer.png"))
    print(conclude(res, "answer", start, []).read_text())


if __name__ == "__main__":
    main()
