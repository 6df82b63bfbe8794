"""CPU prediction speed of ``TransformerRanker`` against the peer's fastest documented CPU path.

    python benchmarks/cpu_inference.py [--pairs 2000] [--rounds 3] [--threads N]
                                       [--peer-python .venv-peer/bin/python] [--cascade-questions 20] [--no-studies]
    python benchmarks/cpu_inference.py --only {accuracy,calibration,time-split}   # one section into the saved results
    python benchmarks/render.py cpu_inference     # the page alone, from its saved results

The peer is sentence-transformers' ``CrossEncoder`` on its default torch backend, on ONNX Runtime
(``backend="onnx"``) and on its dynamic int8 ONNX export for AVX-512 VNNI CPUs (for AVX2 on a CPU without
VNNI, :data:`PEER_INT8`). Its ONNX backend needs ``optimum-onnx``, which pins ``transformers`` < 4.58, so it
runs in a second virtual environment given by ``--peer-python``; build it with torch pinned as in the README,
torch first so nothing pulls a CUDA build::

    python -m venv .venv-peer          # the default --peer-python is .venv-peer/bin/python
    .venv-peer/bin/pip install torch==2.13.0
    .venv-peer/bin/pip install "sentence-transformers[onnx]"

**Rows.** The peer (``benchmarks/peer_crossencoder.py`` in that environment; batch 32, its default;
``max_length=128``) at ``torch``, ``onnx`` and ``onnx-int8``, on the packaged all-MiniLM-L6-v2 with an
untrained head drawn with seed 0 (the checkpoint and its exports are kept in
``benchmarks/cache/peer-crossencoder/``); ``TransformerRanker`` (the library's defaults, ``random_state=0``)
fitted once on the first ``--fit-questions`` questions of ``_common.wikiqa_splits()["train"]`` (the fit is
cached by ``_common.fitted``) and predicting at ``precision`` ``"auto"``, ``"int8"`` (on ONNX Runtime when
it is installed, as it is for this page, and again with torch's int8 kernels) and ``"fp32"``. The model is
saved with ``save_pretrained(int8=True)``, so the int8 rows load its ONNX Runtime graphs; the row "graphs
exported at load" loads the same model saved without them, and exports them in its warm-up.

**Timing.** The first ``--pairs`` pairs of WikiQA-test. Every round runs every row once, each in a fresh
subprocess, so that all rows pay the same process conditions: it loads its model, predicts on the first 64
pairs to warm up (for int8 this builds the quantized copy), then times one ``predict`` call on all the
pairs, tokenisation included. The process's wall time (interpreter start, imports, loading, warm-up and the
timed call) is recorded too: what one call on these pairs costs from a cold start. The order of the rows
rotates by one each round. Both models are fitted (or loaded from the cache) before the first timed round.
``--threads`` sets ``OMP_NUM_THREADS``, torch's intra-op threads and ONNX Runtime's ``intra_op_num_threads``
in every subprocess. Reported per row: the median pairs/s over the rounds, the min-max, and the median over the
rounds of its pairs/s divided by the peer's ONNX-int8 pairs/s of the same round. MAP (first round's scores,
questions without a correct answer skipped) checks that as2rank's precisions agree; the peer's head is
untrained, so its MAP says nothing of accuracy.

Writes ``benchmarks/results/cpu_inference.json`` and ``docs/benchmarks/cpu_inference.md`` (from
``benchmarks/pages/cpu_inference.md.j2``), with the page's acceptance checks in the results.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import (CACHE, ROOT, cpu_flags, fitted, load_average, log, log_checks, publish, run_header,
                     session_calls, timed_subprocess, wikiqa_splits)

HERE = Path(__file__).resolve().parent
PEER_CACHE = CACHE / "peer-crossencoder"
PEER_BATCH_SIZE = 32
MAX_LENGTH = 128
WARMUP_PAIRS = 64
#: Candidates per expanded WikiQA-test question of the cascade rows (``expand_candidates(k=...)``).
CANDIDATES = 100

#: The peer's int8 export for this CPU: its AVX-512 VNNI configuration where the CPU has VNNI, else its AVX2 one
#: (uint8 weights, for the exact uint8 × uint8 kernels: the VNNI file's int8 weights would have their sums
#: clamped by the uint8 × int8 kernels of a CPU without VNNI).
PEER_INT8 = "avx512_vnni" if "avx512_vnni" in cpu_flags() else "avx2"
#: Row name -> (side, backend or precision).
ROWS = {
    "CrossEncoder torch fp32": ("peer", "torch"),
    "CrossEncoder ONNX fp32": ("peer", "onnx"),
    f"CrossEncoder ONNX int8 ({PEER_INT8})": ("peer", "onnx-int8"),
    "TransformerRanker precision='auto'": ("as2rank", "auto"),
    "TransformerRanker precision='int8'": ("as2rank", "int8"),
    "TransformerRanker precision='int8', graphs exported at load": ("as2rank", "int8-export"),
    "TransformerRanker precision='int8', torch kernels": ("as2rank", "int8-torch"),
    "TransformerRanker precision='fp32'": ("as2rank", "fp32"),
}
REFERENCE = f"CrossEncoder ONNX int8 ({PEER_INT8})"
#: Suffix of the folder of the as2rank model saved without its int8 graphs (``save_pretrained(int8=False)``).
EXPORTED = "without-graphs"
#: The cascade's rows, on WikiQA-test questions expanded to ~100 candidates: name -> (side, precision, alpha).
CASCADE_ROWS = {
    REFERENCE: ("peer", "onnx-int8", None),
    "CascadeTransformer α=0, precision='int8'": ("cascade", "int8", 0.0),
    "CascadeTransformer α=0.3, precision='int8'": ("cascade", "int8", 0.3),
    "CascadeTransformer α=0.3, precision='auto'": ("cascade", "auto", 0.3),
}


def as2rank_round(precision: str, model_dir: Path, pairs_file: Path, threads: int | None,
                  scores_file: Path | None, alpha: float | None = None) -> None:
    """One timed ``TransformerRanker.predict`` (the subprocess of an as2rank row); prints the peer's JSON line.

    Parameters
    ----------
    precision : str
        The ``precision`` to predict at.
    model_dir : pathlib.Path
        A fitted model written by ``save_pretrained``.
    pairs_file : pathlib.Path
        JSON records with ``qid``, ``question`` and ``candidate``.
    threads : int or None
        ``n_threads`` of the estimator (None: torch's default).
    scores_file : pathlib.Path or None
        Where to write the scores (JSON list), if given.
    alpha : float or None
        A ``CascadeTransformer``'s drop ratio (``model_dir`` then holds a cascade); None: a ``TransformerRanker``.
    """
    import pandas as pd

    import as2rank
    from as2rank.transformer.cascade import CascadeTransformer
    from as2rank.neural.onnx import runtime as onnx_runtime
    from as2rank.transformer.ranker import TransformerRanker

    if precision == "int8-torch":  # the int8 path of an environment without ONNX Runtime
        onnx_runtime.onnx_available = lambda: False
        precision = "int8"
    X = pd.DataFrame(json.loads(pairs_file.read_text()))
    if alpha is None:
        est = TransformerRanker.from_pretrained(model_dir, precision=precision, n_threads=threads)
    else:
        est = CascadeTransformer.from_pretrained(model_dir, precision=precision, n_threads=threads, alpha=alpha)
    est.predict(X.head(WARMUP_PAIRS))
    start = time.perf_counter()
    scores = est.predict(X)
    seconds = time.perf_counter() - start
    print(json.dumps({"backend": precision, "pairs": len(X), "seconds": seconds, "pairs_per_s": len(X) / seconds,
                      "library": str(Path(as2rank.__file__).resolve().parent)}))
    if scores_file is not None:
        scores_file.write_text(json.dumps([float(s) for s in scores]))


def run_row(name: str, args, work: Path, model_dir: Path, scores_file: Path | None, cascade: bool = False) -> dict:
    """Run one round of row ``name`` in a subprocess; its JSON line plus the process's wall time and load.

    Parameters
    ----------
    name : str
        A key of :data:`ROWS`.
    args : argparse.Namespace
        The parsed command line (``threads``, ``peer_python``).
    work : pathlib.Path
        The run's folder holding ``pairs.json``.
    model_dir : pathlib.Path
        The fitted ``TransformerRanker`` (``save_pretrained`` folder).
    scores_file : pathlib.Path or None
        Ask the subprocess to write its scores there.
    cascade : bool
        A row of :data:`CASCADE_ROWS` on the cascade's pairs instead.
    """
    from as2rank.neural.models import resolve_model

    side, setting, alpha = CASCADE_ROWS[name] if cascade else (*ROWS[name], None)
    pairs = work / ("cascade_pairs.json" if cascade else "pairs.json")
    if side == "peer":
        cmd = [args.peer_python, str(HERE / "peer_crossencoder.py"), str(pairs), "--backend", setting,
               "--model", resolve_model("minilm-l6")[0], "--cache", str(PEER_CACHE),
               "--int8-config", PEER_INT8, "--batch-size", str(PEER_BATCH_SIZE), "--max-length", str(MAX_LENGTH)]
    else:
        if setting == "int8-export":  # the same model saved without its int8 graphs
            setting, model_dir = "int8", model_dir.with_name(f"{model_dir.name}-{EXPORTED}")
        cmd = [sys.executable, str(HERE / "cpu_inference.py"), "--as2rank-round", setting,
               "--model-dir", str(model_dir), "--pairs-file", str(pairs)]
        cmd += [] if alpha is None else ["--alpha", str(alpha)]
    cmd += (["--threads", str(args.threads)] if args.threads else []) + (["--scores", str(scores_file)] if scores_file else [])
    return timed_subprocess(name, cmd, args.threads)


def peer_environment(peer_python: str) -> dict:
    """Versions of the peer environment's packages that matter here (``versions``), and the ``transformers``
    requirement of its ``optimum-onnx`` (``optimum_onnx_requires``: why it cannot share as2rank's)."""
    code = ("import json, importlib.metadata as m; print(json.dumps({'versions': {p: m.version(p) for p in "
            "('sentence-transformers', 'transformers', 'torch', 'onnxruntime', 'optimum-onnx')}, "
            "'optimum_onnx_requires': next(r for r in m.requires('optimum-onnx') if r.startswith('transformers'))}))")
    return json.loads(subprocess.run([peer_python, "-c", code], capture_output=True, text=True, check=True).stdout)


#: Precisions of the accuracy table (in-process, untimed), with the int8 engine where it matters.
ACCURACY_ROWS = {"fp32": "fp32", "auto": "auto", "int8 (ONNX Runtime)": "int8", "int8 (torch kernels)": "int8-torch",
                 "int8 (ONNX Runtime, uint8 × int8 kernels)": "int8-u8s8"}


def fit_subset(X, y, fit_questions: int):
    """The rows of the first ``fit_questions`` questions of ``(X, y)``: the training data of the timed model."""
    keep = X["qid"].isin(X["qid"].unique()[:fit_questions]).to_numpy()
    return X[keep], y[keep]


@contextlib.contextmanager
def predicting_at(est, setting: str):
    """``est`` set to predict at a :data:`ACCURACY_ROWS` setting; ``"int8-torch"`` hides ONNX Runtime from
    as2rank for the duration, so int8 runs on torch's kernels; ``"int8-u8s8"`` tells as2rank that this CPU's
    uint8 × int8 kernels sum exactly, so its int8 session runs them whatever they compute (their saturating
    16-bit pair sums on an x86 CPU without VNNI: what int8 would score if the library did not avoid them)."""
    from as2rank.neural.onnx import runtime as onnx_runtime
    from as2rank.neural.onnx.copies import INT8_COPIES

    available, exact = onnx_runtime.onnx_available, onnx_runtime.u8s8_sums_exact
    if setting == "int8-torch":
        onnx_runtime.onnx_available = lambda: False
    if setting == "int8-u8s8":
        onnx_runtime.u8s8_sums_exact = lambda: True
        INT8_COPIES.forget(est.model_)  # a session built on the other kernels is not reused, before or after
    try:
        yield est.set_params(precision=setting.partition("-")[0])
    finally:
        onnx_runtime.onnx_available, onnx_runtime.u8s8_sums_exact = available, exact
        if setting == "int8-u8s8":
            INT8_COPIES.forget(est.model_)


def cascade_setup(args, work: Path, X_train, y_train, splits):
    """The cascade's fit (``CascadeTransformer(random_state=0)`` on the training questions, saved to ``work``) and
    its pairs: the first ``--cascade-questions`` answered WikiQA-test questions expanded to ~100 candidates (BM25
    negatives from every WikiQA sentence, as the cascade page's Table 3). Done before any timed round, so that no
    round runs while this process is still busy from a fit. Returns the model, the expanded questions and the
    section's record."""
    from as2rank.transformer.cascade import CascadeTransformer
    from as2rank.data import keep_answered
    from as2rank.datasets import expand_candidates

    fit_log = []
    est = fitted(CascadeTransformer(random_state=0), X_train, y_train, fit_log=fit_log)
    X_exp, y_exp = expand_candidates(*keep_answered(*splits["test"]), splits["pool"], k=CANDIDATES)
    first = X_exp["qid"].isin(X_exp["qid"].unique()[: args.cascade_questions]).to_numpy()
    X = X_exp[first]
    (work / "cascade_pairs.json").write_text(json.dumps(X[["qid", "question", "candidate"]].to_dict("records")))
    est.save_pretrained(work / "cascade", int8=True)
    out = {"fit": {"pairs": len(X_train), **fit_log[0]}, "exits": list(est.exits_), "candidates": CANDIDATES,
           "pairs": int(len(X)), "n_questions": args.cascade_questions, "runs": {n: [] for n in CASCADE_ROWS}}
    return est, X_exp, y_exp, out


def cascade_section(args, work: Path, est, X_exp, y_exp, out) -> dict:
    """The cascade's rounds against the peer's ONNX int8 on the pairs of :func:`cascade_setup`, then untimed
    MAP and P@1 of α=0 and α=0.3 at int8 on every expanded question."""
    from as2rank.evaluation import evaluate

    names = list(CASCADE_ROWS)
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            run = run_row(name, args, work, work / "cascade", None, cascade=True)
            out["runs"][name].append({**run, "round": r})
            log(f"[cascade round {r + 1}/{args.rounds}] {name}: {run['pairs_per_s']:.1f} pairs/s")
    out["summary"] = summarise(out)
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
    with tempfile.TemporaryDirectory(prefix="as2rank-cpu-profile-") as tmp:
        return _time_split(fit_questions, pairs, threads, Path(tmp))


def _time_split(fit_questions: int, pairs: int, threads: int | None, work: Path) -> dict:
    import onnxruntime as ort

    from as2rank.transformer.ranker import TransformerRanker

    splits = wikiqa_splits()
    fitted(TransformerRanker(random_state=0), *fit_subset(*splits["train"], fit_questions)).save_pretrained(
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
    """MAP at each precision of :data:`ACCURACY_ROWS` on whole test sets, per data set, with the paired test
    of each row against fp32: WikiQA (the timed model, on all of WikiQA-test) and the bundled SQuAD sample
    (``TransformerRanker(random_state=0)`` on its training split, on its test split)."""
    import numpy as np

    from as2rank.evaluation import compare, per_question
    from as2rank.app.suite import load_benchmark_data
    from as2rank.transformer.ranker import TransformerRanker

    splits = wikiqa_splits()
    sample = load_benchmark_data("sample")
    data = {
        f"WikiQA-test ({fit_questions} training questions)": (*fit_subset(*splits["train"], fit_questions), *splits["test"]),
        "SQuAD sample (its training split)": sample,
    }
    out = {}
    for name, (Xa, ya, Xt, yt) in data.items():
        est = fitted(TransformerRanker(random_state=0), Xa, ya)
        per_q = {}
        for row, setting in ACCURACY_ROWS.items():
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
    WikiQA-test in one ``predict`` call against one call per question. Per row of :data:`ACCURACY_ROWS`: the
    largest and mean absolute change of a score, the questions (of those with two or more candidates) whose top
    candidate changes, and MAP of both ways."""
    import numpy as np

    from as2rank.data import GroupIndex
    from as2rank.metrics import mean_average_precision
    from as2rank.transformer.ranker import TransformerRanker

    splits = wikiqa_splits()
    X, y = splits["test"]
    est = fitted(TransformerRanker(random_state=0), *fit_subset(*splits["train"], fit_questions))
    index = GroupIndex(X["qid"])
    questions = [index.order[a:b] for a, b in zip(index.offsets[:-1], index.offsets[1:])]
    out = {"questions": len(questions), "multi": sum(len(rows) > 1 for rows in questions)}
    for row, setting in ACCURACY_ROWS.items():
        with predicting_at(est, setting):
            together = est.predict(X)
            alone = np.empty_like(together)
            for rows in questions:
                alone[rows] = est.predict(X.iloc[rows])
        gap = np.abs(together - alone)
        top = [together[r].argmax() != alone[r].argmax() for r in questions if len(r) > 1]
        out[row] = {"max_abs": float(gap.max()), "mean_abs": float(gap.mean()), "top_changed": int(sum(top)),
                    "map_together": mean_average_precision(y, together, X["qid"]),
                    "map_alone": mean_average_precision(y, alone, X["qid"])}
        log(f"[batch dependence] {row}: largest change {gap.max():.4f}, top candidate changed in {sum(top)} questions")
    return out


#: Calibration rows of the int8 ranges compared by :func:`calibration` (``None``: every training row).
CALIBRATION_SIZES = (128, 512, None)
#: Smoothing strengths compared by :func:`calibration` at the default calibration rows (``None``: none).
SMOOTHINGS = (None, 0.5, 0.8, 1.0)


def calibration(fit_questions: int) -> dict:
    """Static int8 with ranges calibrated on 128, 512 or all training rows (evenly spread) at the library's
    smoothing, and at 128 rows with each of :data:`SMOOTHINGS`, per data set of :func:`accuracy`: how well
    int8 reproduces fp32 on WikiQA-dev (no labels: the mean absolute change of a logit, and the share of its
    questions with two or more candidates whose top candidate stays the same), and test MAP."""
    import numpy as np

    from as2rank.data import GroupIndex
    from as2rank.metrics import mean_average_precision
    from as2rank.neural import resolve_device
    from as2rank.neural.onnx import runtime as onnx_runtime
    from as2rank.neural.onnx.calibration import CALIBRATION_ROWS, activation_ranges, calibration_rows
    from as2rank.app.suite import load_benchmark_data
    from as2rank.transformer.ranker import TransformerRanker

    splits = wikiqa_splits()
    X_dev = splits["dev"][0]
    index = GroupIndex(X_dev["qid"])
    questions = [index.order[a:b] for a, b in zip(index.offsets[:-1], index.offsets[1:]) if b - a > 1]
    data = {"WikiQA": (*fit_subset(*splits["train"], fit_questions), *splits["test"]),
            "SQuAD sample": load_benchmark_data("sample")}
    default = onnx_runtime.SMOOTHING
    settings = [("rows", size, default) for size in CALIBRATION_SIZES]
    settings += [("smoothing", CALIBRATION_ROWS, a) for a in SMOOTHINGS]
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
                    rows = calibration_rows(np.arange(len(Xa)), size or len(Xa))
                    est.activation_ranges_ = activation_ranges(est.model_, encoded, rows, resolve_device("cpu"))
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


def summarise(res: dict) -> dict:
    """Per row: median, min and max pairs/s over the rounds and the median same-round ratio to :data:`REFERENCE`."""
    ref = [r["pairs_per_s"] for r in res["runs"][REFERENCE]]
    out = {}
    for name, runs in res["runs"].items():
        pps = [r["pairs_per_s"] for r in runs]
        out[name] = {"median": statistics.median(pps), "min": min(pps), "max": max(pps),
                     "vs_reference": statistics.median(p / q for p, q in zip(pps, ref)),
                     "process_seconds": statistics.median(r["process_seconds"] for r in runs)}
    return out


def _version(package: str) -> str | None:
    """The installed version of ``package``, or None."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None


def in_repo(path) -> str:
    """``path`` relative to the repository when it lies inside it (pages name no machine's folders)."""
    try:
        return str(Path(path).relative_to(ROOT))
    except ValueError:
        return path


def checks(res: dict) -> list:
    """The CPU criteria of the speed work: default precision ≥ 1.5× and int8 ≥ 2× the peer's ONNX int8 pairs/s
    (same round, median), with MAP within 0.2 (default) and 1 point (int8) of fp32 on every data set."""
    s = res["summary"]
    acc = res.get("accuracy", {})

    def gap(row):
        return max((abs(v["fp32"]["map"] - v[row]["map"]) for v in acc.values()), default=float("nan"))

    auto, int8 = s["TransformerRanker precision='auto'"], s["TransformerRanker precision='int8'"]
    cascade = []
    if "cascade" in res:
        c, a = res["cascade"]["summary"]["CascadeTransformer α=0.3, precision='int8'"], res["cascade"]["accuracy"]
        drop = 100 * (a["alpha=0.0"]["p@1"] - a["alpha=0.3"]["p@1"])
        cascade = [
            {"check": "CascadeTransformer α=0.3 (int8) on ~100 candidates ≥ 2× the peer's ONNX int8",
             "measured": f"{c['vs_reference']:.2f}×", "pass": c["vs_reference"] >= 2.0},
            {"check": "α=0.3: P@1 within 1.5 of α=0 (all expanded questions, int8)",
             "measured": f"{100 * a['alpha=0.3']['p@1']:.2f} vs {100 * a['alpha=0.0']['p@1']:.2f}", "pass": drop <= 1.5},
        ]
    return [
        {"check": "precision='auto' (the default) ≥ 1.5× the peer's ONNX int8", "measured": f"{auto['vs_reference']:.2f}×",
         "pass": auto["vs_reference"] >= 1.5},
        {"check": "precision='auto': MAP within 0.2 of fp32 (accuracy table, every data set)",
         "measured": f"largest gap {100 * gap('auto'):.2f}", "pass": bool(acc) and 100 * gap("auto") <= 0.2},
        {"check": "precision='int8' ≥ 2× the peer's ONNX int8", "measured": f"{int8['vs_reference']:.2f}×",
         "pass": int8["vs_reference"] >= 2.0},
        {"check": "precision='int8': MAP within 1 point of fp32 (accuracy table, every data set)",
         "measured": f"largest gap {100 * gap('int8 (ONNX Runtime)'):.2f}",
         "pass": bool(acc) and 100 * gap("int8 (ONNX Runtime)") <= 1.0},
        *cascade,
    ]


def main(argv=None) -> None:
    """Parse the command line; run the rounds (or one as2rank subprocess round) and write the results."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=2000, help="first N WikiQA-test pairs (default 2000)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--fit-questions", type=int, default=300,
                        help="train TransformerRanker (defaults) on the first N WikiQA-train questions (default 300)")
    parser.add_argument("--threads", type=int, default=None, help="threads of every row (default: the libraries')")
    parser.add_argument("--peer-python", default=str(ROOT / ".venv-peer" / "bin" / "python"),
                        help="the Python of the peer's virtual environment")
    parser.add_argument("--cascade-questions", type=int, default=20,
                        help="expanded WikiQA-test questions (~100 candidates each) of the cascade rounds (0: none)")
    parser.add_argument("--no-accuracy", action="store_true", help="skip the untimed MAP table on whole test sets")
    parser.add_argument("--no-studies", action="store_true",
                        help="skip the batch-dependence and calibration sections (int8 arithmetic that does not depend "
                             "on the CPU's kernels, which compute exact integer sums on every CPU as2rank runs int8 on)")
    parser.add_argument("--only", choices=("accuracy", "calibration", "time-split"), default=None,
                        help="re-run only this section into the saved results, and re-render the page")
    # The subprocess of an as2rank row (started by run_row).
    parser.add_argument("--as2rank-round", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--pairs-file", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--scores", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--alpha", type=float, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.as2rank_round:
        as2rank_round(args.as2rank_round, args.model_dir, args.pairs_file, args.threads, args.scores, args.alpha)
        return
    if args.only:
        from harness import RESULTS, tagged

        res = json.loads((RESULTS / tagged("cpu_inference.json")).read_text())
        section = {"accuracy": lambda: accuracy(args.fit_questions), "calibration": lambda: calibration(args.fit_questions),
                   "time-split": lambda: time_split(args.fit_questions, args.pairs, args.threads)}[args.only]()
        if args.only == "accuracy":  # its keys are data sets: the re-run is recorded beside it, and checked again
            res.update(accuracy=section, accuracy_rerun=run_header("cpu_inference.py", argv))
            res["acceptance"] = checks(res)
        else:
            res[args.only.replace("-", "_")] = {**section, "rerun": run_header("cpu_inference.py", argv)}
        log(f"wrote {publish(res, 'cpu_inference')}")
        return
    import numpy as np
    import torch

    import as2rank
    from as2rank.evaluation import evaluate
    from as2rank.neural import cpu_bf16_supported, int8_supported
    from as2rank.transformer.ranker import TransformerRanker

    if args.threads:
        torch.set_num_threads(args.threads)
    t_start = time.perf_counter()
    res = {**run_header("cpu_inference.py", argv), "cpu_flags": cpu_flags(), "threads": args.threads, "cpu_bf16": cpu_bf16_supported(),
           "int8": int8_supported(), "onnxruntime": _version("onnxruntime"),
           "as2rank": f"as2rank {as2rank.__version__} from {in_repo(Path(as2rank.__file__).parent)}",
           "peer": {"python": in_repo(args.peer_python), **peer_environment(args.peer_python),
                    "batch_size": PEER_BATCH_SIZE, "max_length": MAX_LENGTH},
           "rows": {name: side for name, (side, _) in ROWS.items()}, "reference": REFERENCE, "peer_int8": PEER_INT8,
           "rounds": args.rounds, "warmup_pairs": WARMUP_PAIRS, "fits_before_rounds": True}
    splits = wikiqa_splits()
    X_train, y_train = fit_subset(*splits["train"], args.fit_questions)
    fit_log = []
    est = fitted(TransformerRanker(random_state=0), X_train, y_train, fit_log=fit_log)
    res["as2rank_fit"] = {"questions": args.fit_questions, "pairs": len(X_train), **fit_log[0]}
    X_test, y_test = splits["test"]
    X, y = X_test.head(args.pairs), y_test[: args.pairs]
    res.update(pairs=len(X), n_questions=int(X["qid"].nunique()))
    names = list(ROWS)
    res["runs"], scores = {n: [] for n in names}, {}
    with tempfile.TemporaryDirectory(prefix="as2rank-cpu-inference-") as tmp:
        work = Path(tmp)
        (work / "pairs.json").write_text(json.dumps(X[["qid", "question", "candidate"]].to_dict("records")))
        est.save_pretrained(work / "model", int8=True)
        est.save_pretrained(work / f"model-{EXPORTED}")
        cascade = cascade_setup(args, work, X_train, y_train, splits) if args.cascade_questions else None
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[: r % len(names)]:
                out = work / f"scores-{names.index(name)}.json" if r == 0 else None
                run = run_row(name, args, work, work / "model", out)
                res["runs"][name].append({**run, "round": r})
                log(f"[round {r + 1}/{args.rounds}] {name}: {run['pairs_per_s']:.1f} pairs/s ({run['seconds']:.1f} s "
                    f"timed, {run['process_seconds']:.1f} s process, load {run['load_after'][0]})")
                if out is not None:
                    scores[name] = np.asarray(json.loads(out.read_text()))
        if cascade is not None:
            res["cascade"] = cascade_section(args, work, *cascade)
    res["map"] = {n: evaluate(y, scores[n], X, metrics=("map",))["map"] for n in names}
    res["summary"] = summarise(res)
    res["time_split"] = time_split(args.fit_questions, args.pairs, args.threads)
    if not args.no_accuracy:
        res["accuracy"] = accuracy(args.fit_questions)
    if not (args.no_accuracy or args.no_studies):
        res["batch_dependence"] = batch_dependence(args.fit_questions)
        res["calibration"] = calibration(args.fit_questions)
    res["load_average_end"] = load_average()
    res["wall_seconds"] = time.perf_counter() - t_start
    res["acceptance"] = checks(res)
    log_checks(res["acceptance"])
    log(f"wrote {publish(res, 'cpu_inference')}")


if __name__ == "__main__":
    main()
