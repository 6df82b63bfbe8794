"""Speed of the transformer estimators against sentence-transformers' ``CrossEncoder`` on WikiQA (``speed.toml``).

    python benchmarks/speed.py [--quick] [--threads N] [--epochs N] [--learning-rate LR]
                               [--train-steps N] [--train-rounds N] [--rounds N] [--train-questions N]
                               [--no-peer-bf16] [--render]
    python benchmarks/render.py speed      # the page alone, from benchmarks/results/speed.json

``--render`` recomputes the acceptance checks, draws the plot again and renders the page from the saved results.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import shutil
import tempfile
import time
import warnings

import numpy as np
import torch
from harness import experiment, figure_path, fitted, jsonable, load_average, log, pyplot, save_figure, wikiqa_splits
from harness.data import sorted_subset as subset_questions
from harness.experiment import Experiment
from harness.library import (AUTO_BATCH_TOKENS, CascadeTransformer, TransformerRanker, autocast_dtype, compare,
                             cpu_bf16_supported, evaluate, expand_candidates, int8_supported, keep_answered,
                             onnx_available, per_question, resolve_device, resolve_model)
from harness.measure import interleaved, significance, timed

CONFIG = Experiment(__file__).config
SWEEPS = CONFIG["sweeps"]
METRICS = tuple(SWEEPS["metrics"])
PEER_BATCH_SIZE = SWEEPS["peer_batch_size"]
WARMUP_PAIRS = SWEEPS["warmup_pairs"]
DEVICE = None  # the device both sides use: set in run() from resolve_device("auto")


@contextlib.contextmanager
def threads(n):
    """``with threads(n):`` torch intra-op threads for a block."""
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def label(**params) -> str:
    """``TransformerRanker(...)`` with ``params``, as the page names a row."""
    return "TransformerRanker(" + ", ".join(f"{k}={v!r}" for k, v in params.items()) + ")"


def ours(b, **params):
    return TransformerRanker(**b, reuse_fit=False, **params)


def fit_seconds(est, X, y) -> float:
    """Wall seconds of ``est.fit(X, y)`` (its RuntimeWarnings silenced)."""
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        est.fit(X, y)
    return time.perf_counter() - start


def speed_of(fn, X, warm) -> float:
    """Pairs per second of ``fn`` on ``X``, after a warm-up call on ``warm``."""
    fn(warm)
    return timed(fn, X)[1]["pairs_per_second"]


# ----------------------------------------------------------------------------------------------- the peer
def peer_model():
    """A fresh ``CrossEncoder`` on the packaged all-MiniLM-L6-v2 (classifier seeded), on ``DEVICE``."""
    from sentence_transformers import CrossEncoder

    path, local = resolve_model("minilm-l6")
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return CrossEncoder(path, num_labels=1, max_length=128, device=str(DEVICE), local_files_only=local)


def peer_fit(X, y, b, *, bf16=False):
    """Train a fresh peer with ``CrossEncoderTrainer``; the model, ``trainer.train()`` seconds and its metrics."""
    from datasets import Dataset
    from sentence_transformers.cross_encoder import CrossEncoderTrainer, CrossEncoderTrainingArguments
    from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss

    model = peer_model()
    data = Dataset.from_dict({"question": X["question"].tolist(), "candidate": X["candidate"].tolist(),
                              "label": (np.asarray(y) > 0).astype(np.float32).tolist()})
    out = tempfile.mkdtemp(prefix="as2rank-speed-peer-")
    # warmup_steps: a float, the fraction of the steps (linear warm-up, then the linear decay of peer_training).
    args = CrossEncoderTrainingArguments(
        output_dir=out, num_train_epochs=b["epochs"], per_device_train_batch_size=b["batch_size"],
        learning_rate=b["learning_rate"], warmup_steps=b["warmup"], weight_decay=b["weight_decay"],
        max_grad_norm=b["max_grad_norm"], bf16=bf16, use_cpu=DEVICE.type == "cpu", seed=b["random_state"],
        data_seed=b["random_state"], **CONFIG["peer_training"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = CrossEncoderTrainer(model=model, args=args, train_dataset=data, loss=BinaryCrossEntropyLoss(model))
        start = time.perf_counter()
        result = trainer.train()
        seconds = time.perf_counter() - start
    shutil.rmtree(out, ignore_errors=True)
    meta = {"optimizer": str(getattr(args.optim, "value", args.optim)),
            "train_runtime": result.metrics.get("train_runtime"), "n_steps": int(result.global_step)}
    return model, seconds, meta


def peer_predict(model, batch_size):
    """``CrossEncoder.predict`` at ``batch_size``, as a scorer of a frame's pairs."""
    return lambda X: np.asarray(model.predict(list(zip(X["question"].tolist(), X["candidate"].tolist())),
                                              batch_size=batch_size, show_progress_bar=False), dtype=np.float64)


# ----------------------------------------------------------------------------------------------- timing
def timing_rounds(predictors: dict, X, rounds: int, warm_X) -> tuple[dict, dict]:
    """Interleaved prediction timings: ``{name: scores}`` (first round) and ``{name: timing summary}``.

    Every predictor is called once on ``warm_X`` first (oneDNN kernel creation, the int8 copy: reported as
    ``warmup_seconds``). Rounds rotate the order so that a load swing does not always hit the same row.
    """
    warm = {name: timed(fn, warm_X)[1]["seconds"] for name, fn in predictors.items()}
    scores, runs = {}, {name: [] for name in predictors}

    def once(name):
        def call():
            s, t = timed(predictors[name], X)
            scores.setdefault(name, s)
            runs[name].append(t)
        return call

    interleaved({name: once(name) for name in predictors}, rounds)
    summary = {name: {"median_pairs_per_second": float(np.median([t["pairs_per_second"] for t in runs[name]])),
                      "runs": runs[name], "warmup_seconds": warm[name]} for name in predictors}
    return scores, summary


# ----------------------------------------------------------------------------------------------- training
def full_fits(X, y, b, args):
    """One full fit per accuracy row (the peer's, then ``[fits]``); returns ``{name: model}`` and
    ``{name: record}``. A row that trains in the dtype of one fitted before (``precision="auto"``) reuses it."""
    device = resolve_device("auto")
    models, records = {}, {}
    n_pairs = len(X) * b["epochs"]
    if not args.no_peer:
        log(f"[fit] peer CrossEncoder (CrossEncoderTrainer, fp32) on {len(X)} pairs x {b['epochs']} epochs")
        model, seconds, meta = peer_fit(X, y, b)
        models["peer"] = model
        records["peer"] = {"label": "CrossEncoder + CrossEncoderTrainer (fp32, its defaults)", "seconds": seconds,
                           "pairs_per_second": n_pairs / seconds, **meta, "load_after": load_average()}
        log(f"  {seconds:.0f} s, {n_pairs / seconds:.1f} pairs/s")
    dtypes = {}
    for name, params in CONFIG["fits"].items():
        est = ours(b, **params)
        dtype = autocast_dtype(est.precision, device, training=True)
        extra = {k: v for k, v in params.items() if k != "precision"}
        same = next((k for k, (d, e) in dtypes.items() if d == dtype and e == extra), None)
        if same is not None:
            log(f"[fit] TransformerRanker precision={name}: trains in {dtype} like '{same}' here: that fit is reused")
            models[name] = copy.copy(models[same]).set_params(precision=params["precision"])
            records[name] = {**records[same], "same_as": same}
            continue
        log(f"[fit] TransformerRanker precision={name} ({dtype}) on {len(X)} pairs x {b['epochs']} epochs")
        seconds = fit_seconds(est, X, y)
        models[name], dtypes[name], h = est, (dtype, extra), est.history_
        records[name] = {"label": label(**params), "dtype": str(dtype).replace("torch.", ""), "seconds": seconds,
                         "pairs_per_second": n_pairs / seconds, "loop_seconds": h.seconds,
                         "loop_pairs_per_second": n_pairs / h.seconds, "n_steps": h.n_steps,
                         "final_epoch_loss": h.epoch_loss[-1], "load_after": load_average()}
        log(f"  {seconds:.0f} s, {n_pairs / seconds:.1f} pairs/s (loop {n_pairs / h.seconds:.1f})")
    return models, records


def step_rounds(X, y, b, args):
    """Fixed-step training throughput: every configuration (the peer's, then ``[steps]``) on the same subset,
    interleaved."""
    n = min(len(X), args.train_steps * b["batch_size"])
    rows = np.sort(np.random.default_rng(1).choice(len(X), size=n, replace=False))
    Xs, ys = X.iloc[rows].reset_index(drop=True), y[rows]
    one = {**b, "epochs": 1}
    configs = {}
    if not args.no_peer:
        configs["peer fp32"] = lambda: (peer_fit(Xs, ys, one)[1], None)
        if not args.no_peer_bf16:
            configs["peer bf16=True"] = lambda: (peer_fit(Xs, ys, one, bf16=True)[1], None)

    def ours_fit(params):
        def run():
            est = ours(one, **params)
            return fit_seconds(est, Xs, ys), est.history_.seconds
        return run

    configs.update({name: ours_fit(params) for name, params in CONFIG["steps"].items()})
    runs = {k: [] for k in configs}

    def once(name):
        def call():
            seconds, loop = configs[name]()
            runs[name].append({"seconds": seconds, "pairs_per_second": n / seconds, "load_after": load_average(),
                               "loop_pairs_per_second": None if loop is None else n / loop})
        return call

    interleaved({name: once(name) for name in configs}, args.train_rounds, "steps")
    return {"n_pairs": n, "steps": int(np.ceil(n / b["batch_size"])), "epochs": one["epochs"],
            "rows": {k: {"median_pairs_per_second": float(np.median([t["pairs_per_second"] for t in v])), "runs": v}
                     for k, v in runs.items()}}


# ----------------------------------------------------------------------------------------------- checks
def plumbing(models, X, args):
    """Threads and batch_tokens of our default model, and the peer's batch size, on a subset."""
    out = {}
    # On a GPU each new batch shape costs its first call the kernels' selection: warm up on the whole subset.
    warm = X if DEVICE.type == "cuda" else X.iloc[:WARMUP_PAIRS]
    tr = models["auto"]
    n_cpu = os.cpu_count() or 1
    out["threads"] = []
    for n in sorted({1, max(1, n_cpu // 2), n_cpu}):
        with threads(n):
            row = {"threads": n, "TR auto": speed_of(tr.predict, X, warm)}
            if "peer" in models:
                peer = peer_predict(models["peer"], PEER_BATCH_SIZE)
                row[f"peer (batch {PEER_BATCH_SIZE})"] = speed_of(peer, X, warm)
        out["threads"].append(row)
        log(f"[plumbing] {n} thread(s): " + ", ".join(f"{k} {v:.1f}" for k, v in row.items() if k != "threads"))
    out["batch_tokens"] = []
    default = tr.batch_tokens
    # The same weights at each prediction precision the CPU default distinguishes (its own budget for int8).
    sweep = {"auto": tr}
    if DEVICE.type == "cpu" and int8_supported():
        sweep["int8"] = copy.copy(tr).set_params(precision="int8")
    gpu = SWEEPS["gpu_batch_tokens"] if DEVICE.type == "cuda" else []
    for bt in SWEEPS["quick_batch_tokens"] if args.quick else SWEEPS["batch_tokens"] + gpu:
        row = {"batch_tokens": bt}
        for precision, est in sweep.items():
            row[precision] = speed_of(est.set_params(batch_tokens=bt).predict, X, warm)
        out["batch_tokens"].append(row)
        log(f"[plumbing] batch_tokens={bt}: " + ", ".join(f"{p} {row[p]:.1f}" for p in sweep) + " pairs/s")
    tr.set_params(batch_tokens=default)
    out["peer_batch_size"] = []
    if "peer" in models:
        for bs in SWEEPS["quick_peer_batch_sizes"] if args.quick else SWEEPS["peer_batch_sizes"]:
            pps = speed_of(peer_predict(models["peer"], bs), X, warm)
            out["peer_batch_size"].append({"batch_size": bs, "pairs_per_second": pps})
            log(f"[plumbing] peer batch_size={bs}: {pps:.1f} pairs/s")
        out["peer_best_batch_size"] = max(out["peer_batch_size"], key=lambda r: r["pairs_per_second"])["batch_size"]
    out["n_rows"] = len(X)
    return out


def prediction_table(models, X, y, args, peer_bs):
    """Every predictor on the test set: accuracy, timings, significance."""
    predictors, labels = {}, {}
    if "peer" in models:
        predictors["peer"] = peer_predict(models["peer"], PEER_BATCH_SIZE)
        labels["peer"] = f"CrossEncoder.predict (batch_size={PEER_BATCH_SIZE}, its default)"
        if peer_bs != PEER_BATCH_SIZE:
            predictors[f"peer bs={peer_bs}"] = peer_predict(models["peer"], peer_bs)
            labels[f"peer bs={peer_bs}"] = f"CrossEncoder.predict (batch_size={peer_bs}, fastest of the sweep)"
        if not args.no_peer_bf16:
            predictors["peer bf16"] = peer_predict(copy.deepcopy(models["peer"]).bfloat16(), peer_bs)
            labels["peer bf16"] = f"CrossEncoder.predict, model.bfloat16() (batch_size={peer_bs})"
    for name, est in models.items():
        if name == "peer":
            continue
        if name == "auto":
            # copy.copy shares model_ but the int8 copy is cached per object: each set_params copy builds its own.
            for p in ("fp32", "int8") if DEVICE.type == "cpu" else ("fp32",):
                predictors[f"TR auto-fit @ {p}"] = copy.copy(est).set_params(precision=p).predict
                labels[f"TR auto-fit @ {p}"] = f"TransformerRanker fitted with precision='auto', predicting at {p!r}"
        predictors[f"TR {name}"] = est.predict
        labels[f"TR {name}"] = label(**CONFIG["fits"][name])
    scores, timing = timing_rounds(predictors, X, args.rounds, X.iloc[:WARMUP_PAIRS])
    per_q = {k: per_question(y, s, X) for k, s in scores.items()}
    vs_peer = compare(per_q, "peer") if "peer" in per_q else {}
    rows = []
    for name in predictors:
        row = {"name": name, "label": labels[name], **evaluate(y, scores[name], X, metrics=METRICS), **timing[name]}
        if "peer" in per_q and name != "peer":
            row["p_map_vs_peer"] = vs_peer[name]["p"]
        ref = SWEEPS["refs"].get(name)
        if ref in per_q:
            row["ref"] = ref
            row["p_map_vs_ref"] = compare({name: per_q[name], ref: per_q[ref]}, ref)[name]["p"]
        rows.append(row)
        log(f"[predict] {name}: MAP {row['map']:.4f} MRR {row['mrr']:.4f} P@1 {row['p@1']:.4f}, "
            f"{row['median_pairs_per_second']:.1f} pairs/s")
    return rows


def cascade_table(train, b, args, models, X3, y3, peer_bs):
    """The cascade (fitted on ``train``) at α=0 and α=0.3 beside the peer and TR on the ~100-candidate set."""
    cb = {**b, "learning_rate": args.cascade_learning_rate}
    fit_log = []
    ct = fitted(CascadeTransformer(**cb), *train, fit_log)
    predictors = {}
    if "peer" in models:
        predictors["peer"] = peer_predict(models["peer"], PEER_BATCH_SIZE)
        if peer_bs != PEER_BATCH_SIZE:
            predictors[f"peer bs={peer_bs}"] = peer_predict(models["peer"], peer_bs)
    predictors["TR auto"] = models["auto"].predict
    ct0 = copy.copy(ct).set_params(alpha=0.0)
    ct3 = copy.copy(ct).set_params(alpha=0.3)
    reports = {}

    def reporting(est, key):  # est.predict, its cost report kept as reports[key]
        def call(X):
            s, reports[key] = est.predict(X, return_cost=True)
            return s
        return call

    predictors["CT α=0"] = reporting(ct0, "CT α=0")
    predictors["CT α=0.3"] = reporting(ct3, "CT α=0.3")
    if DEVICE.type == "cuda":
        wide = SWEEPS["gpu_wide"] * AUTO_BATCH_TOKENS["other"]
        for name, est in (("CT α=0", ct0), ("CT α=0.3", ct3)):
            key = f"{name}, batch_tokens={wide}"
            predictors[key] = reporting(copy.copy(est).set_params(batch_tokens=wide), key)
    # On a GPU every new chunk shape costs its first call the kernels' selection and memory, and the cascade's
    # shapes vary with its drops: a warm-up on the whole set, so that the rounds time the steady state.
    warm = X3 if DEVICE.type == "cuda" else X3.iloc[:SWEEPS["cascade_warmup"]]
    scores, timing = timing_rounds(predictors, X3, args.cascade_rounds, warm)
    # Tokenisation is the same call for every α: timed alone, it bounds what the drops can save in a whole call.
    encode_seconds = interleaved({"encode": lambda: ct0.encode(X3)}, args.cascade_rounds, "encode")["encode"]
    p_at_1 = {k: per_question(y3, scores[k], X3, "p@1") for k in ("CT α=0", "CT α=0.3")}
    rows = []
    for name in predictors:
        row = {"name": name, **evaluate(y3, scores[name], X3, metrics=METRICS), **timing[name]}
        if name.startswith("CT"):
            row.update({k: reports[name][k] for k in ("relative_cost", "relative_token_cost")})
        if name == "CT α=0.3":
            row["p_p@1_vs_ct0"] = compare(p_at_1, "CT α=0")[name]["p"]
        rows.append(row)
        log(f"[cascade] {name}: MAP {row['map']:.4f} P@1 {row['p@1']:.4f}, "
            f"{row['median_pairs_per_second']:.1f} pairs/s")
    return {"rows": rows, "budget": cb, "fit": fit_log, "n_questions": int(X3["qid"].nunique()), "n_rows": len(X3),
            "exits": list(ct.exits_), "alpha": ct3.alpha, "candidates": SWEEPS["candidates"], "warmup_pairs": len(warm),
            "encode_seconds": float(np.median(encode_seconds))}


# ----------------------------------------------------------------------------------------------- the page
def checks(exp, res) -> list:
    """The acceptance checks of ``speed.toml``, with the peer's fastest rows they name."""
    steps = res["train_steps"]["rows"]
    peer_steps = [k for k in steps if k.startswith("peer")]
    peer_rows = [r for r in res["prediction"] if r["name"].startswith("peer")]
    return exp.checks(res, peer_best_step=max(peer_steps, key=lambda k: steps[k]["median_pairs_per_second"],
                                              default=None),
                      best_peer=max(peer_rows, key=lambda r: r["median_pairs_per_second"], default=None))
def plot(res, path):
    plt = pyplot()
    pred = res["prediction"]
    steps = res["train_steps"]["rows"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 0.45 * max(len(pred), len(steps)) + 1.6))
    for ax, names, vals, label in (
            (axes[0], [r["name"] for r in pred], [r["median_pairs_per_second"] for r in pred],
             "prediction pairs/s (WikiQA test, median of rounds)"),
            (axes[1], list(steps), [steps[n]["median_pairs_per_second"] for n in steps],
             f"training pairs/s ({res['train_steps']['steps']} steps x 32 pairs, median of rounds)")):
        colors = ["tab:grey" if n.startswith("peer") else "tab:blue" for n in names]
        ax.barh(names[::-1], vals[::-1], color=colors[::-1])
        ax.set_xlabel(label)
    for ax in axes:
        ax.grid(axis="x", alpha=0.3)
        ax.tick_params(axis="y", labelsize=8)
    fig.suptitle(f"as2rank vs sentence-transformers CrossEncoder: {res['machine']}, {res['torch_threads']} torch "
                 "threads" + (" (QUICK run)" if res.get("quick") else ""), fontsize=9)
    save_figure(fig, path, dpi=110)


def run(exp, args, res):
    global DEVICE
    DEVICE = resolve_device("auto")
    import sentence_transformers
    import transformers

    transformers.logging.set_verbosity_error()
    res.update(
        device=str(DEVICE), omp_num_threads=os.environ.get("OMP_NUM_THREADS"), cpu_bf16=cpu_bf16_supported(),
        int8=int8_supported(), int8_engine="ONNX Runtime" if onnx_available() else "torch's dynamic quantization",
        cpu_capability=torch.backends.cpu.get_cpu_capability(), sentence_transformers=sentence_transformers.__version__,
        transformers=transformers.__version__,
        # What the page says of the method: the warm-up call, the randomisation test, as2rank's defaults.
        warmup_pairs=WARMUP_PAIRS, n_resamples=significance()["n_resamples"],
        head_lr_multiplier=TransformerRanker().head_lr_multiplier, auto_batch_tokens=AUTO_BATCH_TOKENS,
        peer_batch_size=PEER_BATCH_SIZE, args=vars(args),
        quick=(f"{args.epochs} epoch(s) on {args.train_questions} training questions, {args.test_questions} test "
               f"questions, {args.cascade_questions} expanded test questions, fixed-step rounds of "
               f"{args.train_steps} steps, 1 round each, reduced sweeps") if args.quick else "")
    log(f"machine: {res['machine']}; torch {res['torch']}, {res['torch_threads']} threads")
    splits = wikiqa_splits()
    b = {"epochs": args.epochs, "learning_rate": args.learning_rate, **exp.config["budget"], "random_state": 0}
    res["budget"] = b
    X_train, y_train = subset_questions(*splits["train"], args.train_questions, seed=0)
    X_test, y_test = subset_questions(*splits["test"], args.test_questions, seed=0)
    res.update(n_train_rows=len(X_train), n_train_questions=int(X_train["qid"].nunique()), n_test_rows=len(X_test),
               n_test_questions=int(X_test["qid"].nunique()),
               n_test_evaluated=int(keep_answered(X_test, y_test)[0]["qid"].nunique()))
    models, res["fits"] = full_fits(X_train, y_train, b, args)
    log("[steps] fixed-step training rounds")
    res["train_steps"] = step_rounds(X_train, y_train, b, args)
    sub, _ = subset_questions(X_test, y_test, min(args.plumbing_questions, res["n_test_questions"]), seed=2)
    res["plumbing"] = plumbing(models, sub, args)
    peer_bs = res["plumbing"].get("peer_best_batch_size", PEER_BATCH_SIZE)
    res["prediction"] = prediction_table(models, X_test, y_test, args, peer_bs)
    if not args.no_cascade:
        X3, y3 = subset_questions(*keep_answered(*splits["test"]), args.cascade_questions, seed=0)
        log(f"[cascade] expanding {X3['qid'].nunique()} test questions to ~100 candidates")
        X3, y3 = expand_candidates(X3, y3, splits["pool"], k=SWEEPS["candidates"])
        res["cascade"] = cascade_table((X_train, y_train), b, args, models, X3.reset_index(drop=True), y3, peer_bs)
    res.update(json.loads(json.dumps(jsonable(res), default=str)))
    plot(res, figure_path("speed", "speed.png"))


def main(argv=None):
    exp = Experiment(__file__)
    args = exp.arguments(argv)
    if args.render:  # the checks and the figure again, from the saved results
        res = exp.saved()
        res["acceptance"] = checks(exp, res)
        plot(res, figure_path("speed", "speed.png"))
        exp.publish(res)
        return
    experiment.main(__file__, run, argv, checks=checks)


if __name__ == "__main__":
    main()
