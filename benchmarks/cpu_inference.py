"""CPU prediction speed of ``TransformerRanker`` against the peer's fastest documented CPU path
(``cpu_inference.toml``).

    python benchmarks/cpu_inference.py [--pairs 2000] [--rounds 3] [--threads N]
                                       [--peer-python .venv-peer/bin/python] [--cascade-questions 20] [--no-studies]
    python benchmarks/cpu_inference.py --only {accuracy,calibration,time-split}   # one section into the saved results
    python benchmarks/render.py cpu_inference     # the page alone, from its saved results
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import numpy as np
from harness import ROOT, cpu_flags, first_questions, fitted, log, session_calls, version, wikiqa_splits
from harness.cpu import cascade_rows, peer_environment, peer_int8, predicting_at, reference, rows, run_row, summarise
from harness.experiment import Experiment
from harness.library import (CALIBRATION_ROWS, CascadeTransformer, GroupIndex, TransformerRanker, activation_ranges,
                             as2rank, calibration_rows, compare, cpu_bf16_supported, evaluate, expand_candidates,
                             int8_supported, keep_answered, load_benchmark_data, mean_average_precision, onnx_runtime,
                             per_question, resolve_device)
from harness.measure import rotated
from harness.predict_round import WARMUP_PAIRS

EXP = Experiment(__file__)
TABLES = EXP.config["tables"]


def cascade_setup(args, work: Path, X_train, y_train, splits):
    """The cascade's fit (``CascadeTransformer(random_state=0)`` on the training questions, saved to ``work``) and
    its pairs: the first ``--cascade-questions`` answered WikiQA-test questions expanded to ~100 candidates (BM25
    negatives from every WikiQA sentence, as the cascade page's Table 3). Done before any timed round, so that no
    round runs while this process is still busy from a fit. Returns the model, the expanded questions and the
    section's record."""
    fit_log = []
    est = fitted(CascadeTransformer(random_state=0), X_train, y_train, fit_log=fit_log)
    X_exp, y_exp = expand_candidates(*keep_answered(*splits["test"]), splits["pool"], k=TABLES["candidates"])
    X = X_exp[X_exp["qid"].isin(X_exp["qid"].unique()[: args.cascade_questions]).to_numpy()]
    (work / "cascade_pairs.json").write_text(json.dumps(X[["qid", "question", "candidate"]].to_dict("records")))
    est.save_pretrained(work / "cascade", int8=True)
    out = {"fit": {"pairs": len(X_train), **fit_log[0]}, "exits": list(est.exits_), "candidates": TABLES["candidates"],
           "pairs": int(len(X)), "n_questions": args.cascade_questions, "runs": {n: [] for n in cascade_rows()}}
    return est, X_exp, y_exp, out


def cascade_section(args, work: Path, est, X_exp, y_exp, out) -> dict:
    """The cascade's rounds against the peer's ONNX int8 on the pairs of :func:`cascade_setup`, then untimed
    MAP and P@1 of α=0 and α=0.3 at int8 on every expanded question."""
    names = list(out["runs"])
    for r in range(args.rounds):
        for name in rotated(names, r):
            run = run_row(name, args, work, work / "cascade", None, cascade=True)
            out["runs"][name].append({**run, "round": r})
            log(f"[cascade round {r + 1}/{args.rounds}] {name}: {run['pairs_per_s']:.1f} pairs/s")
    out["summary"] = summarise(out["runs"], reference())
    out["accuracy"] = {"n_questions": int(X_exp["qid"].nunique()), "pairs": int(len(X_exp))}
    for alpha in (0.0, 0.3):
        scores, cost = est.set_params(precision="int8", alpha=alpha).predict(X_exp, return_cost=True)
        report = evaluate(y_exp, scores, X_exp, metrics=("map", "p@1"), use_position=False)
        out["accuracy"][f"alpha={alpha}"] = {"map": report["map"], "p@1": report["p@1"],
                                            "relative_cost": cost["relative_cost"],
                                            "relative_token_cost": cost["relative_token_cost"]}
        log(f"[cascade] int8 α={alpha}: MAP {report['map']:.4f} P@1 {report['p@1']:.4f}")
    return out


def time_split(fit_questions: int, pairs: int, threads: int | None) -> dict:
    """Where one int8 ``TransformerRanker.predict`` of the rows' model on the rows' pairs spends its time, after
    a warm-up call: ONNX Runtime's kernels by operator (its profiler, from the timed call's first session run
    on), the session runs as a whole, and the rest of ``predict`` (tokenisation, the lexical prior, batching).
    One call in this process, profiled, so its total is a little slower than the rows' timed calls."""
    import onnxruntime as ort

    splits = wikiqa_splits()
    with tempfile.TemporaryDirectory(prefix="as2rank-cpu-profile-") as tmp:
        work = Path(tmp)
        fitted(TransformerRanker(random_state=0), *first_questions(*splits["train"], fit_questions)).save_pretrained(
            work / "model", int8=True)
        X = splits["test"][0].head(pairs)
        prefix = str(work / "ort-profile")

        class Profiled(ort.SessionOptions):
            def __init__(self):
                super().__init__()
                self.enable_profiling, self.profile_file_prefix = True, prefix

        options = ort.SessionOptions
        ort.SessionOptions = Profiled
        try:
            with session_calls() as calls:
                est = TransformerRanker.from_pretrained(work / "model", precision="int8", n_threads=threads)
                est.predict(X.head(WARMUP_PAIRS))
                warmup_runs = len(calls)
                start = time.perf_counter()
                est.predict(X)
                seconds = time.perf_counter() - start
        finally:
            ort.SessionOptions = options
        (session,) = {module.session for module, _, _ in calls}
        events = json.loads(Path(session.end_profiling()).read_text())
    runs = sorted(e["ts"] for e in events if e.get("name") == "model_run")
    operators: dict = {}
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time") and e["ts"] >= runs[warmup_runs]:
            operators[e["args"]["op_name"]] = operators.get(e["args"]["op_name"], 0) + e["dur"] / 1e6
    session_seconds = sum(s for _, _, s in calls[warmup_runs:])
    return {"pairs": len(X), "seconds": seconds, "session_runs": len(calls) - warmup_runs,
            "session_seconds": session_seconds, "other_seconds": seconds - session_seconds,
            "operators": dict(sorted(operators.items(), key=lambda kv: -kv[1]))}


def accuracy(fit_questions: int) -> dict:
    """MAP at each precision of the accuracy table on whole test sets, per data set, with the paired test of
    each row against fp32: WikiQA (the timed model, on all of WikiQA-test) and the bundled SQuAD sample
    (``TransformerRanker(random_state=0)`` on its training split, on its test split)."""
    splits = wikiqa_splits()
    data = {f"WikiQA-test ({fit_questions} training questions)": (*first_questions(*splits["train"], fit_questions), *splits["test"]),
            "SQuAD sample (its training split)": load_benchmark_data("sample")}
    out = {}
    for name, (Xa, ya, Xt, yt) in data.items():
        est = fitted(TransformerRanker(random_state=0), Xa, ya)
        per_q = {}
        for row, setting in TABLES["accuracy_rows"].items():
            with predicting_at(est, setting):
                per_q[row] = per_question(yt, est.predict(Xt), Xt)
        tests = compare(per_q, "fp32")
        out[name] = {row: {"map": float(np.nanmean(ap)), "p_vs_fp32": None if row == "fp32" else tests[row]["p"]}
                     for row, ap in per_q.items()}
        out[name]["questions"] = int(per_q["fp32"].notna().sum())
        log(f"accuracy on {name}: " + ", ".join(f"{r} {100 * v['map']:.2f}" for r, v in out[name].items() if r != "questions"))
    return out


def batch_dependence(fit_questions: int) -> dict:
    """How much each precision's scores depend on the rows predicted with them: the timed model on all of
    WikiQA-test in one ``predict`` call against one call per question. Per row of the accuracy table: the
    largest and mean absolute change of a score, the questions (of those with two or more candidates) whose top
    candidate changes, and MAP of both ways."""
    splits = wikiqa_splits()
    X, y = splits["test"]
    est = fitted(TransformerRanker(random_state=0), *first_questions(*splits["train"], fit_questions))
    index = GroupIndex(X["qid"])
    questions = [index.order[a:b] for a, b in zip(index.offsets[:-1], index.offsets[1:])]
    out = {"questions": len(questions), "multi": sum(len(rows) > 1 for rows in questions)}
    for row, setting in TABLES["accuracy_rows"].items():
        with predicting_at(est, setting):
            together = est.predict(X)
            alone = np.empty_like(together)
            for rows_ in questions:
                alone[rows_] = est.predict(X.iloc[rows_])
        gap = np.abs(together - alone)
        top = [together[r].argmax() != alone[r].argmax() for r in questions if len(r) > 1]
        out[row] = {"max_abs": float(gap.max()), "mean_abs": float(gap.mean()), "top_changed": int(sum(top)),
                    "map_together": mean_average_precision(y, together, X["qid"]),
                    "map_alone": mean_average_precision(y, alone, X["qid"])}
        log(f"[batch dependence] {row}: largest change {gap.max():.4f}, top candidate changed in {sum(top)} questions")
    return out


def calibration(fit_questions: int) -> dict:
    """Static int8 with ranges calibrated on 128, 512 or all training rows (evenly spread) at the library's
    smoothing, and at the default rows with each smoothing of the table, per data set of :func:`accuracy`: how
    well int8 reproduces fp32 on WikiQA-dev (no labels: the mean absolute change of a logit, and the share of its
    questions with two or more candidates whose top candidate stays the same), and test MAP."""
    splits = wikiqa_splits()
    X_dev = splits["dev"][0]
    index = GroupIndex(X_dev["qid"])
    questions = [index.order[a:b] for a, b in zip(index.offsets[:-1], index.offsets[1:]) if b - a > 1]
    data = {"WikiQA": (*first_questions(*splits["train"], fit_questions), *splits["test"]),
            "SQuAD sample": load_benchmark_data("sample")}
    default = onnx_runtime.SMOOTHING
    # 0 in the configuration: every training row, and no smoothing.
    settings = [("rows", size or None, default) for size in TABLES["calibration_sizes"]]
    settings += [("smoothing", CALIBRATION_ROWS, a or None) for a in TABLES["smoothings"]]
    out = {"dev_questions": len(questions), "default_rows": CALIBRATION_ROWS, "default_smoothing": default}
    for name, (Xa, ya, Xt, yt) in data.items():
        est = fitted(TransformerRanker(random_state=0), Xa, ya)
        fitted_ranges, encoded = est.activation_ranges_, est.encode(Xa)
        ref_dev, ref_test = est.set_params(precision="fp32").predict(X_dev), est.predict(Xt)
        out[name] = {"fp32_map": mean_average_precision(yt, ref_test, Xt["qid"]), "rows": {}, "smoothing": {}}
        measured = {}  # (rows, α): the default setting is in both tables, measured once
        try:
            for table, size, alpha in settings:
                if (size, alpha) not in measured:
                    rows_ = calibration_rows(np.arange(len(Xa)), size or len(Xa))
                    est.activation_ranges_ = activation_ranges(est.model_, encoded, rows_, resolve_device("cpu"))
                    onnx_runtime.SMOOTHING = alpha
                    est.set_params(precision="int8")
                    dev, test = est.predict(X_dev), est.predict(Xt)
                    measured[size, alpha] = {
                        "mean_abs_dev": float(np.abs(dev - ref_dev).mean()),
                        "same_top_dev": float(np.mean([dev[q].argmax() == ref_dev[q].argmax() for q in questions])),
                        "map": mean_average_precision(yt, test, Xt["qid"]),
                    }
                    log(f"[calibration] {name}, {size or 'all'} rows, α={alpha}: {measured[size, alpha]}")
                out[name][table][str(size or "all") if table == "rows" else str(alpha or "none")] = measured[size, alpha]
        finally:
            onnx_runtime.SMOOTHING = default
            est.activation_ranges_ = fitted_ranges
            est.set_params(precision="fp32")
    return out


def in_repo(path) -> str:
    """``path`` relative to the repository when it lies inside it (pages name no machine's folders)."""
    try:
        return str(Path(path).relative_to(ROOT))
    except ValueError:
        return path


def checks(exp, res: dict) -> list:
    """The CPU criteria of the speed work (``cpu_inference.toml``): default precision ≥ 1.5× and int8 ≥ 2× the
    peer's ONNX int8 pairs/s (same round, median), with MAP within 0.2 (default) and 1 point (int8) of fp32 on
    every data set."""
    acc = res.get("accuracy", {})

    def gap(row):
        return max((abs(v["fp32"]["map"] - v[row]["map"]) for v in acc.values()), default=float("nan"))

    return exp.checks(res, gap=gap)


def run_section(args, argv) -> None:
    """``--only``: one section again, into the saved results, and the page rendered again."""
    res = EXP.saved()
    section = {"accuracy": lambda: accuracy(args.fit_questions), "calibration": lambda: calibration(args.fit_questions),
               "time-split": lambda: time_split(args.fit_questions, args.pairs, args.threads)}[args.only]()
    if args.only == "accuracy":  # its keys are data sets: the re-run is recorded beside it, and checked again
        res.update(accuracy=section, accuracy_rerun=EXP.header(argv))
        res["acceptance"] = checks(EXP, res)
    else:
        res[args.only.replace("-", "_")] = {**section, "rerun": EXP.header(argv)}
    EXP.publish(res)


def run(exp, args, res, argv=None):
    if args.only:
        run_section(args, argv)
        return False
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    peer_python = str(ROOT / args.peer_python) if not Path(args.peer_python).is_absolute() else args.peer_python
    args.peer_python = peer_python
    table = rows()
    res.update(cpu_flags=cpu_flags(), threads=args.threads, cpu_bf16=cpu_bf16_supported(), int8=int8_supported(),
               onnxruntime=version("onnxruntime"), as2rank=f"as2rank {as2rank.__version__} from {in_repo(Path(as2rank.__file__).parent)}",
               peer={"python": in_repo(peer_python), **peer_environment(peer_python), **exp.config["peer"]},
               rows={name: side for name, (side, _) in table.items()}, reference=reference(),
               peer_int8=peer_int8(), rounds=args.rounds, warmup_pairs=WARMUP_PAIRS,
               fits_before_rounds=True)
    splits = wikiqa_splits()
    X_train, y_train = first_questions(*splits["train"], args.fit_questions)
    fit_log = []
    est = fitted(TransformerRanker(random_state=0), X_train, y_train, fit_log=fit_log)
    res["as2rank_fit"] = {"questions": args.fit_questions, "pairs": len(X_train), **fit_log[0]}
    X_test, y_test = splits["test"]
    X, y = X_test.head(args.pairs), y_test[: args.pairs]
    res.update(pairs=len(X), n_questions=int(X["qid"].nunique()))
    names = list(table)
    res["runs"], scores = {n: [] for n in names}, {}
    with tempfile.TemporaryDirectory(prefix="as2rank-cpu-inference-") as tmp:
        work = Path(tmp)
        (work / "pairs.json").write_text(json.dumps(X[["qid", "question", "candidate"]].to_dict("records")))
        est.save_pretrained(work / "model", int8=True)
        est.save_pretrained(work / f"model-{exp.config['exported']}")
        cascade = cascade_setup(args, work, X_train, y_train, splits) if args.cascade_questions else None
        for r in range(args.rounds):
            for name in rotated(names, r):
                out = work / f"scores-{names.index(name)}.json" if r == 0 else None
                run_ = run_row(name, args, work, work / "model", out)
                res["runs"][name].append({**run_, "round": r})
                log(f"[round {r + 1}/{args.rounds}] {name}: {run_['pairs_per_s']:.1f} pairs/s ({run_['seconds']:.1f} s "
                    f"timed, {run_['process_seconds']:.1f} s process, load {run_['load_after'][0]})")
                if out is not None:
                    scores[name] = np.asarray(json.loads(out.read_text()))
        if cascade is not None:
            res["cascade"] = cascade_section(args, work, *cascade)
    res["map"] = {n: evaluate(y, scores[n], X, metrics=("map",))["map"] for n in names}
    res["summary"] = summarise(res["runs"], reference())
    res["time_split"] = time_split(args.fit_questions, args.pairs, args.threads)
    if not args.no_accuracy:
        res["accuracy"] = accuracy(args.fit_questions)
    if not (args.no_accuracy or args.no_studies):
        res["batch_dependence"] = batch_dependence(args.fit_questions)
        res["calibration"] = calibration(args.fit_questions)


def main(argv=None):
    from harness import experiment

    experiment.main(__file__, lambda exp, args, res: run(exp, args, res, argv), argv,
                    checks=checks)


if __name__ == "__main__":
    main()
