"""Scale-out on one machine: parallel model selection, streamed scoring and streamed training (``scale.toml``).

    python benchmarks/scale.py [--quick] [--workdir DIR] [--keep-files]

The synthetic files are written into a temporary directory (deleted at the end unless ``--keep-files``; never
committed).
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import joblib
import numpy as np
import pandas as pd
from harness import ROOT, experiment, log, wikiqa_splits
from harness.experiment import Experiment, read_paper
from harness.library import (Cosinet, GroupIndex, LexicalFeatures, OverlapRankRanker, PointwiseRanker, cli_main, count_rows,
                             get_scorer, load_asnq, load_sample)

CONFIG = Experiment(__file__).config
RECORD = CONFIG["record"]
CANDIDATES, STREAM_MODEL = RECORD["candidates_per_question"], RECORD["stream_model"]
CV_FOLDS, GRID_TORCH_THREADS = RECORD["grid_setup"]["cv_folds"], RECORD["grid_setup"]["torch_threads"]
DASK_WORKERS, DASK_THREADS_PER_WORKER = RECORD["grid_setup"]["dask_workers"], RECORD["grid_setup"]["dask_threads_per_worker"]
COSINET_PAPER_BUDGET = read_paper("cosinet.json")["budget"]


# ------------------------------------------------------------------------------------------ data


def write_synthetic_asnq(path: Path, n_rows: int, seed: int = 0, block: int = 10_000) -> Path:
    """An ASNQ TSV of ``n_rows`` rows (a multiple of 50) built from the bundled SQuAD sample (see the module
    docstring), written ``block`` questions at a time."""
    X, y = load_sample()
    clean = re.compile(r"[\t\r\n]+")
    questions = X["question"].astype(str).str.replace(clean, " ", regex=True).to_numpy(object)
    sentences = X["candidate"].astype(str).str.replace(clean, " ", regex=True).to_numpy(object)
    index = GroupIndex.from_frame(X)
    pool = pd.unique(sentences)
    rng = np.random.default_rng(seed)
    n_questions = n_rows // CANDIDATES
    with open(path, "w", encoding="utf-8") as fh:
        for start in range(0, n_questions, block):
            q = np.arange(start, min(n_questions, start + block))
            base = q % index.n_groups
            own = np.minimum(index.sizes[base], CANDIDATES)
            # The base question's rows, in document order: own[k] per question.
            local = np.arange(own.sum()) - np.repeat(np.cumsum(own) - own, own)
            rows = index.order[np.repeat(index.starts[base], own) + local]
            n_neg = CANDIDATES - own
            slot = np.concatenate([local, np.arange(n_neg.sum()) - np.repeat(np.cumsum(n_neg) - n_neg, n_neg) + np.repeat(own, n_neg)])
            which = np.concatenate([np.repeat(np.arange(len(q)), own), np.repeat(np.arange(len(q)), n_neg)])
            text = np.concatenate([sentences[rows], pool[rng.integers(len(pool), size=n_neg.sum())]])
            label = np.concatenate([np.where(y[rows] > 0, 4, 3), rng.integers(1, 3, size=n_neg.sum())])
            order = np.lexsort((slot, which))
            titles = np.array([f"{questions[index.order[index.starts[b]]]} (#{i})" for b, i in zip(base, q)], dtype=object)
            frame = pd.DataFrame({"q": titles[which[order]], "s": text[order], "l": label[order]})
            frame.to_csv(fh, sep="\t", header=False, index=False, quoting=csv.QUOTE_NONE, escapechar="\\")
    return path


# ------------------------------------------------------------------------------------------ processes


def own_usage() -> dict:
    """This process's peak resident memory and CPU time.

    The peak is ``VmHWM`` of ``/proc/self/status``, the high-water mark of this program's own address space.
    (``ru_maxrss`` would not do: Linux carries the parent's peak over into a child at exec, so every child of
    a large benchmark process would report at least the parent's size.)
    """
    import resource

    with open("/proc/self/status") as fh:
        hwm = next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:"))
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {"peak_rss_mib": hwm / 1024, "cpu_seconds": usage.ru_utime + usage.ru_stime}


def run_measured(command: list, report: Path) -> dict:
    """Run a child mode of this script (which writes ``report``): wall time, exit status, stderr and the
    child's own report (peak memory, CPU time, ...)."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), *command], cwd=ROOT, env=child_env(), capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    return {**json.loads(report.read_text()), "seconds": seconds, "stderr": done.stderr}


def child_cli(report: str, argv: list) -> None:
    """Child mode: run ``as2rank`` with ``argv`` in this process, then write its exit status and usage."""
    status = cli_main(argv)
    Path(report).write_text(json.dumps({"returncode": status, **own_usage()}))
    sys.exit(status)


def child_env() -> dict:
    return {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


# ------------------------------------------------------------------------------------------ 1. grid search


def grid_searches(quick: bool) -> list:
    import joblib as jl
    import torch
    from distributed import Client, LocalCluster
    from sklearn.base import clone
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GridSearchCV, GroupKFold
    from sklearn.pipeline import make_pipeline


    X, y = wikiqa_splits()["full"]
    if quick:
        keep = X["qid"].isin(X["qid"].unique()[:300]).to_numpy()
        X, y = X[keep].reset_index(drop=True), y[keep]
    searches = {
        "lexical pipeline": (
            make_pipeline(LexicalFeatures(), PointwiseRanker(LogisticRegression(max_iter=1000))),
            {"pointwiseranker__estimator__C": [0.1, 1.0, 10.0]},
        ),
        # One torch thread in every mode: a parallel reduction splits its sums by the thread count, so fits
        # with 2 threads (the main process's default) and with 1 (each worker's) differ in the last bits, and
        # training amplifies that. The last mode shows the default's time and that difference.
        "Cosinet": (Cosinet(random_state=0, n_threads=GRID_TORCH_THREADS, **COSINET_PAPER_BUDGET), {"rnn": [None, "birnn"]}),
    }
    dask = f"dask {DASK_WORKERS} workers"
    modes = {"lexical pipeline": ("n_jobs=1", "n_jobs=2", dask),
             "Cosinet": ("n_jobs=1", "n_jobs=2", dask, "n_jobs=1, torch's default threads")}
    rows = []
    start = time.perf_counter()
    with LocalCluster(n_workers=DASK_WORKERS, threads_per_worker=DASK_THREADS_PER_WORKER, processes=True, dashboard_address=None, silence_logs=50) as cluster, Client(cluster) as client:
        cluster_seconds = time.perf_counter() - start
        worker_threads = sorted(client.run(torch.get_num_threads).values())
        for name, (model, grid) in searches.items():
            reference = None
            for mode in modes[name]:
                default_threads = "default threads" in mode
                estimator = clone(model).set_params(n_threads=None) if default_threads else model
                n_jobs = -1 if mode.startswith("dask") else int(mode[len("n_jobs=")])
                search = GridSearchCV(estimator, grid, cv=GroupKFold(CV_FOLDS), scoring=get_scorer("map"), n_jobs=n_jobs)
                log(f"[grid] {name}, {mode}: {len(X)} rows")
                t = time.perf_counter()
                if mode.startswith("dask"):
                    with jl.parallel_backend("dask"):
                        search.fit(X, y, groups=X["qid"])
                else:
                    search.fit(X, y, groups=X["qid"])
                seconds = time.perf_counter() - t
                scores = np.array([search.cv_results_[f"split{i}_test_score"] for i in range(CV_FOLDS)])
                reference = reference or (search.best_params_, scores, seconds)
                rows.append(
                    {
                        "model": name,
                        "mode": mode,
                        "seconds": seconds,
                        "speedup": reference[2] / seconds,
                        "best_params": {k: v for k, v in search.best_params_.items()},
                        "mean_test_score": search.cv_results_["mean_test_score"].tolist(),
                        "same_best_params": search.best_params_ == reference[0],
                        "max_abs_score_diff": float(np.abs(scores - reference[1]).max()),
                        "torch_threads": threads(estimator, mode, worker_threads[0]),
                    }
                )
                log(f"  {seconds:.1f}s, best {search.best_params_}, max |dCV| {rows[-1]['max_abs_score_diff']:.2e}")
    for row in rows:
        row["dask_cluster_start_seconds"] = cluster_seconds
        row["n_rows"], row["n_questions"] = len(X), int(X["qid"].nunique())
    return rows


def threads(estimator, mode: str, worker_threads: int) -> int:
    """torch threads of each fit: the estimator's ``n_threads``, else the process's default."""
    import torch

    n = getattr(estimator, "n_threads", None)
    if n is not None:
        return n
    return torch.get_num_threads() if mode.startswith("n_jobs=1") else (1 if mode == "n_jobs=2" else worker_threads)


# ------------------------------------------------------------------------------------------ 2. scoring


def fit_models(folder: Path) -> dict:
    X, y = load_sample()
    paths = {"WO+RR": folder / "worr.joblib", "Cosinet": folder / "cosinet.joblib"}
    joblib.dump(OverlapRankRanker().fit(X, y), paths["WO+RR"])
    log("fitting Cosinet (defaults) on the SQuAD sample")
    joblib.dump(Cosinet(random_state=0, **COSINET_PAPER_BUDGET).fit(X, y), paths["Cosinet"])
    return paths


def scoring(files: dict, models: dict, folder: Path, chunksize: int) -> list:
    rows = []
    for name, model in models.items():
        for n_rows, path in files.items():
            out = folder / f"scores-{name.replace('+', '')}-{n_rows}.parquet"
            report = folder / f"predict-{name.replace('+', '')}-{n_rows}.json"
            # --overwrite: every run is timed from scratch, never resumed from an earlier run's output in --workdir.
            command = ["--child-cli", str(report), "predict", "--model", str(model), "--allow-pickle", "--input", str(path), "--output", str(out), "--chunksize", str(chunksize), "--quiet", "--overwrite"]
            log(f"[predict] {name} on {n_rows:,} rows")
            result = run_measured(command, report)
            loop = re.search(r"\(([\d.]+) rows/s\)", result["stderr"])
            rows.append(
                {
                    "model": name,
                    "rows": n_rows,
                    "seconds": result["seconds"],
                    "cpu_seconds": result["cpu_seconds"],
                    "rows_per_second_loop": float(loop.group(1)) if loop else None,
                    "rows_per_second_wall": n_rows / result["seconds"],
                    "peak_rss_mib": result["peak_rss_mib"],
                    "output": str(out),
                }
            )
            log(f"  {result['seconds']:.1f}s wall, {result['cpu_seconds']:.1f}s CPU, {rows[-1]['rows_per_second_loop']} rows/s in the loop, peak RSS {result['peak_rss_mib']:.0f} MiB")
    return rows


def check_scores(model_path: Path, input_path: Path, output: Path) -> dict:
    """One score per input row, equal to in-memory predict on the whole file."""
    import pyarrow.dataset as ds

    table = ds.dataset(output, format="parquet").to_table(columns=["row", "score"]).to_pandas().sort_values("row")
    X, _ = load_asnq(input_path)
    model = joblib.load(model_path)
    log(f"[check] in-memory predict of {len(X):,} rows with {type(model).__name__}")
    expected = model.predict(X)
    rows = table["row"].to_numpy()
    return {
        "output_rows": len(table),
        "input_rows": len(X),
        "one_score_per_row": bool(len(table) == len(X) and (rows == np.arange(len(X))).all()),
        "max_abs_diff_vs_in_memory": float(np.abs(table["score"].to_numpy() - expected).max()),
    }


# ------------------------------------------------------------------------------------------ 3. streamed training


STREAM_MODEL = dict(embeddings="glove-6b-50d", rnn=None, loss="pointwise", n_filters=64, batch_size=16, random_state=0)


def stream_train_child(path: str, out: str, chunksize: str) -> None:
    """Run in a fresh process: one pass of partial_fit over the chunks of ``path``."""
    total = count_rows(Path(path))
    model = Cosinet(**STREAM_MODEL)
    start = time.perf_counter()
    chunks = 0
    for X, y in load_asnq(path, chunksize=int(chunksize)):
        model.partial_fit(X, y, total_rows=total)
        chunks += 1
    seconds = time.perf_counter() - start
    history = model.history_
    Path(out).write_text(
        json.dumps(
            {
                "rows": total,
                "chunks": chunks,
                "steps": history.n_steps,
                "train_seconds": seconds,
                "rows_per_second": total / seconds,
                "first_chunk_loss": history.epoch_loss[0],
                "last_chunk_loss": history.epoch_loss[-1],
                "vocabulary": len(model.vocabulary_),
                **own_usage(),
            }
        )
    )


def streamed_training(files: dict, folder: Path, chunksize: int) -> list:
    rows = []
    for n_rows in (min(files), max(files)):
        out = folder / f"stream-{n_rows}.json"
        log(f"[stream] partial_fit over {n_rows:,} rows in chunks of {chunksize:,}")
        row = {k: v for k, v in run_measured(["--stream-train", str(files[n_rows]), str(out), str(chunksize)], out).items() if k != "stderr"}
        rows.append(row)
        log(f"  {row['seconds']:.1f}s wall, {row['cpu_seconds']:.1f}s CPU ({row['rows_per_second']:.0f} rows/s), peak RSS {row['peak_rss_mib']:.0f} MiB, loss {row['first_chunk_loss']:.3f} -> {row['last_chunk_loss']:.3f}")
    return rows


# ------------------------------------------------------------------------------------------ report


def checks(exp, res) -> list:
    """The checks of ``scale.toml`` over each grid search (its runs but the one with torch's default threads, there
    for its time) and each model's scoring runs by size."""
    grid = {}
    for name in sorted({r["model"] for r in res["grid"]}):
        runs = [r for r in res["grid"] if r["model"] == name and "default threads" not in r["mode"]]
        grid[name] = {"same": all(r["same_best_params"] for r in runs), "diff": max(r["max_abs_score_diff"] for r in runs)}
    scoring = {name: {r["rows"]: r for r in res["scoring"] if r["model"] == name}
               for name in sorted({r["model"] for r in res["scoring"]})}
    return exp.checks(res, grid=grid, scoring=scoring)


def run(exp, args, res):
    sizes = CONFIG["quick_sizes"] if args.quick else CONFIG["sizes"]
    chunksize = CONFIG["quick_chunksize"] if args.quick else CONFIG["chunksize"]
    folder = Path(args.workdir or tempfile.mkdtemp(prefix="as2rank-scale-"))
    folder.mkdir(parents=True, exist_ok=True)
    res.update(quick=args.quick, sizes=list(sizes), chunksize=chunksize)
    try:
        res["grid"] = grid_searches(args.quick)
        files = {}
        for n in sizes:
            log(f"[data] writing {n:,} synthetic ASNQ rows")
            files[n] = write_synthetic_asnq(folder / f"asnq-{n}.tsv", n)
        models = fit_models(folder)
        res["scoring"] = scoring(files, models, folder, chunksize)
        middle = sizes[1]
        res["checks"] = {name: check_scores(models[name], files[middle], next(
            s["output"] for s in res["scoring"] if s["model"] == name and s["rows"] == middle)) for name in models}
        res["stream"] = streamed_training(files, folder, chunksize)
    finally:
        if not args.keep_files and not args.workdir:
            shutil.rmtree(folder, ignore_errors=True)
    for s in res["scoring"]:
        s.pop("output")


def main():
    argv = sys.argv[1:]
    if argv[:1] == ["--stream-train"]:  # the child processes of the streamed training and of as2rank predict
        stream_train_child(*argv[1:4])
    elif argv[:1] == ["--child-cli"]:
        child_cli(argv[1], argv[2:])
    else:
        experiment.main(__file__, run, checks=checks)


if __name__ == "__main__":
    main()
