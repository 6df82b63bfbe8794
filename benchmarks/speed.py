"""Speed of the transformer estimators against sentence-transformers' ``CrossEncoder`` on WikiQA.

    python benchmarks/speed.py [--quick] [--threads N] [--epochs N] [--learning-rate LR]
                               [--train-steps N] [--train-rounds N] [--rounds N] [--train-questions N]
                               [--no-peer-bf16] [--render]
    python benchmarks/render.py speed      # the page alone, from benchmarks/results/speed.json

Everything runs in ONE process, so every ratio compares figures taken in the same run on the same machine.

**Models.** The default offline backbone ``"minilm-l6"`` (the packaged all-MiniLM-L6-v2) on both sides:

* the peer: ``sentence_transformers.CrossEncoder`` initialised from the same packaged directory with
  ``num_labels=1, max_length=128`` (``BertForSequenceClassification``: the checkpoint's pooler + a new linear
  layer), trained with ``CrossEncoderTrainer`` and its default ``BinaryCrossEntropyLoss``;
* ``TransformerRanker()`` (mean pooling + a feed-forward head; ``head_lr_multiplier=10``) at ``precision``
  ``"fp32"``, ``"bf16"`` and ``"auto"`` (the default; where ``"auto"`` resolves to the dtype of another
  row, that row's fitted model is reused and the table says so), and ``"int8"`` for prediction (the
  ``"auto"`` model, quantized once);
* ``CascadeTransformer(alpha=0.3)`` on the ~100-candidate set of ``benchmarks/cascade.py`` (Table 3).

**One budget** (the papers' fine-tuning setting, ``TransformerRanker``'s defaults before ``docs/benchmarks/defaults.md``
chose 4 epochs at 1e-4): ``--epochs`` (2), batch 32, ``--learning-rate`` (2e-5), linear
warm-up over 10% of the steps then linear decay, weight decay 0.01, gradient clipping at 1.0,
``max_length=128``, seed 0 (:func:`budget`: both sides read it), on the answered questions of WikiQA-train minus the dev split
(``_common.wikiqa_splits()["train"]``). The cascade trains with ``--cascade-learning-rate`` (1e-4, the budget
``benchmarks/cascade.py`` selected on dev; at 2e-5 its classifiers barely leave their initialisation).

**Training pairs/s.** (a) One full fit per accuracy row: ``TransformerRanker.fit`` wall time (loading the
weights, tokenising, the loop) and the peer's ``trainer.train()`` wall time (its loop, tokenising each batch
in its collator; loading its weights and building the ``datasets.Dataset`` are outside). (b) Fixed-step
rounds: every configuration, the peer with ``bf16=True`` too, trains ``--train-steps`` optimizer steps on
the same random subset of ``steps × 32`` training pairs (1 epoch), interleaved over ``--train-rounds``
rounds; median pairs/s. The peer's bf16 configuration is measured only this way (a full second peer fit
is the most expensive thing here).

**Prediction pairs/s** on all 6,165 WikiQA-test pairs (633 questions; the metrics skip the 390 without a
correct answer, the clean protocol, so accuracy is over 243 questions / 2,351 pairs), tokenisation
included, after one warm-up call on 64 pairs (which builds the int8 copy: its time is reported apart),
``--rounds`` interleaved rounds, median. The peer predicts with its default ``batch_size=32`` (the row
the issue's criteria name), with the fastest batch size of a sweep, and with bfloat16 weights
(``model.bfloat16()``, which its efficiency guide documents for GPUs; tried here because this CPU has native
bfloat16). Its ONNX and OpenVINO backends (documented for CPUs) are not measured: their packages
(``optimum-onnx``, ``optimum-intel``) pin ``transformers`` < 5 or replace torch (see the Markdown page).

**Accuracy**: MAP, MRR, P@1 on WikiQA-test (clean protocol); paired randomisation tests of per-question
AP (``as2rank.evaluation.compare``) against the peer and against the fp32 prediction of the same
weights. **Plumbing checks** on a subset: torch threads, ``batch_tokens`` and the peer's batch size.

``--quick``: 1 epoch on 20 training questions, 30 test questions, 5 expanded test questions, fixed-step
rounds of 2 steps, one round, reduced sweeps: checks the script end to end (its numbers mean little).
Writes ``benchmarks/results/speed.json``, ``docs/benchmarks/speed.md`` (from ``benchmarks/pages/speed.md.j2``)
and ``docs/benchmarks/speed.png`` (``-<tag>`` before the extension with ``AS2RANK_BENCH_TAG``); ``--render``
recomputes the acceptance checks, re-draws the plot and re-renders the page from the saved results.
"""

from __future__ import annotations

import argparse
import copy
import inspect
import json
import os
import shutil
import tempfile
import time
import warnings

import numpy as np
import torch
from harness import DOCS, RESULTS, fitted, jsonable, load_average, log, log_checks, publish, run_header, tagged, wikiqa_splits
from speed_page import acceptance, plot

from as2rank.transformer.cascade import CascadeTransformer
from as2rank.data import keep_answered
from as2rank.datasets import expand_candidates
from as2rank.evaluation import compare, evaluate, per_question
from as2rank.metrics import paired_significance
from as2rank.neural import autocast_dtype, cpu_bf16_supported, int8_supported, resolve_device
from as2rank.neural.onnx.runtime import onnx_available
from as2rank.transformer.ranker import TransformerRanker
from as2rank.transformer.scaffold import AUTO_BATCH_TOKENS

METRICS = ("map", "mrr", "p@1")
#: ``CrossEncoder.predict``'s default batch size (the peer's reference row) and the sweep of the plumbing checks.
PEER_BATCH_SIZE = 32
PEER_BATCH_SIZES = (16, 32, 64, 128, 256)
BATCH_TOKENS = (256, 512, 1024, 2048, 4096, 8192, 16384)
#: On a GPU the sweep goes on to larger batches (fewer kernel launches per pair), and the cascade is timed at
#: ``GPU_WIDE × AUTO_BATCH_TOKENS["other"]`` as well: its drops save arithmetic, not launches.
GPU_BATCH_TOKENS = (32768, 65536, 131072)
GPU_WIDE = 4
#: Pairs of the warm-up call before the timed prediction rounds (WikiQA test; the cascade's set: CASCADE_WARMUP).
WARMUP_PAIRS = 64
CASCADE_WARMUP = 200
#: Candidates per question of the cascade section (``expand_candidates(k=...)``).
CANDIDATES = 100


# ----------------------------------------------------------------------------------------------- helpers
def budget(args) -> dict:
    """The training budget of both sides: ``TransformerRanker``'s parameters, which ``peer_fit`` reads too
    (``warmup``, ``weight_decay`` and ``max_grad_norm`` are the library's defaults, spelled out for the peer)."""
    # The model the peer trains too: no lexical prior, no segment similarity term, and the whole budget (no
    # held-out questions), as the peer trains.
    return {"epochs": args.epochs, "batch_size": 32, "learning_rate": args.learning_rate, "max_length": 128,
            "warmup": 0.1, "weight_decay": 0.01, "max_grad_norm": 1.0, "lexical_prior": False,
            "segment_similarity": False, "early_stopping": False, "random_state": 0}


def subset_questions(X, y, n, seed):
    if n is None or n >= X["qid"].nunique():
        return X.reset_index(drop=True), y
    qids = np.random.default_rng(seed).choice(np.sort(X["qid"].unique()), size=n, replace=False)
    keep = X["qid"].isin(qids).to_numpy()
    return X[keep].reset_index(drop=True), y[keep]


def pairs_of(X) -> list:
    return list(zip(X["question"].tolist(), X["candidate"].tolist()))


class threads:
    """``with threads(n):`` torch intra-op threads for a block."""

    def __init__(self, n):
        self.n, self.old = n, torch.get_num_threads()

    def __enter__(self):
        torch.set_num_threads(self.n)

    def __exit__(self, *exc):
        torch.set_num_threads(self.old)


# ----------------------------------------------------------------------------------------------- the peer
DEVICE = None  # the device both sides use: set in main() from resolve_device("auto")


def peer_model():
    """A fresh ``CrossEncoder`` on the packaged all-MiniLM-L6-v2 (classifier seeded), on ``DEVICE``."""
    from sentence_transformers import CrossEncoder

    from as2rank.neural.models import resolve_model

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
    args = CrossEncoderTrainingArguments(
        output_dir=out,
        num_train_epochs=b["epochs"],
        per_device_train_batch_size=b["batch_size"],
        learning_rate=b["learning_rate"],
        warmup_steps=b["warmup"],  # a float: the fraction of the steps (linear warm-up, then the default linear decay)
        weight_decay=b["weight_decay"],
        max_grad_norm=b["max_grad_norm"],
        lr_scheduler_type="linear",
        bf16=bf16,
        use_cpu=DEVICE.type == "cpu",
        seed=b["random_state"],
        data_seed=b["random_state"],
        save_strategy="no",
        eval_strategy="no",
        logging_strategy="no",
        report_to="none",
        disable_tqdm=True,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = CrossEncoderTrainer(model=model, args=args, train_dataset=data, loss=BinaryCrossEntropyLoss(model))
        start = time.perf_counter()
        result = trainer.train()
        seconds = time.perf_counter() - start
    shutil.rmtree(out, ignore_errors=True)
    meta = {"optimizer": str(getattr(args.optim, "value", args.optim)), "train_runtime": result.metrics.get("train_runtime"),
            "n_steps": int(result.global_step)}
    return model, seconds, meta


class PeerPredict:
    def __init__(self, model, batch_size):
        self.model, self.batch_size = model, batch_size

    def __call__(self, X):
        return np.asarray(self.model.predict(pairs_of(X), batch_size=self.batch_size, show_progress_bar=False),
                          dtype=np.float64)


# ----------------------------------------------------------------------------------------------- timing
def timed(fn, X):
    before = load_average()
    start = time.perf_counter()
    out = fn(X)
    seconds = time.perf_counter() - start
    return out, {"seconds": seconds, "pairs_per_second": len(X) / seconds, "load_before": before,
                 "load_after": load_average()}


def timing_rounds(predictors: dict, X, rounds: int, warm_X) -> tuple[dict, dict]:
    """Interleaved prediction timings: ``{name: scores}`` (first round) and ``{name: timing summary}``.

    Every predictor is called once on ``warm_X`` first (oneDNN kernel creation, the int8 copy: reported as
    ``warmup_seconds``). Rounds rotate the order so that a load swing does not always hit the same row.
    """
    names = list(predictors)
    warm = {}
    for name in names:
        _, t = timed(predictors[name], warm_X)
        warm[name] = t["seconds"]
    scores, runs = {}, {name: [] for name in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            s, t = timed(predictors[name], X)
            scores.setdefault(name, s)
            runs[name].append(t)
            log(f"  [round {r + 1}/{rounds}] {name}: {t['pairs_per_second']:.1f} pairs/s ({t['seconds']:.1f} s, "
                f"load {t['load_after'][0]})")
    summary = {name: {"median_pairs_per_second": float(np.median([t["pairs_per_second"] for t in runs[name]])),
                      "runs": runs[name], "warmup_seconds": warm[name]} for name in names}
    return scores, summary


# ----------------------------------------------------------------------------------------------- training
def ours(precision, b, **extra):
    return TransformerRanker(**b, precision=precision, reuse_fit=False, **extra)


def full_fits(X, y, b, args):
    """One full fit per accuracy row; returns ``{name: model}`` and ``{name: record}``."""
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
    rows = [("fp32", {}), ("bf16", {}), ("auto", {}), ("auto, freeze_embeddings", {"freeze_embeddings": True})]
    for name, extra in rows:
        precision = name.split(",")[0]
        est = ours(precision, b, **extra)
        dtype = autocast_dtype(est.precision, device, training=True)
        same = next((k for k, (d, e) in dtypes.items() if d == dtype and e == extra), None)
        if same is not None:
            log(f"[fit] TransformerRanker precision={name}: trains in {dtype} like '{same}' here: that fit is reused")
            models[name] = copy.copy(models[same]).set_params(precision=precision)
            records[name] = {**records[same], "same_as": same}
            continue
        log(f"[fit] TransformerRanker precision={name} ({dtype}) on {len(X)} pairs x {b['epochs']} epochs")
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            est.fit(X, y)
        seconds = time.perf_counter() - start
        models[name] = est
        dtypes[name] = (dtype, extra)
        records[name] = {"label": f"TransformerRanker(precision={precision!r}"
                                  + (", freeze_embeddings=True" if extra else "") + ")",
                         "dtype": str(dtype).replace("torch.", ""), "seconds": seconds,
                         "pairs_per_second": n_pairs / seconds, "loop_seconds": est.history_.seconds,
                         "loop_pairs_per_second": n_pairs / est.history_.seconds, "n_steps": est.history_.n_steps,
                         "final_epoch_loss": est.history_.epoch_loss[-1], "load_after": load_average()}
        log(f"  {seconds:.0f} s, {n_pairs / seconds:.1f} pairs/s (loop {n_pairs / est.history_.seconds:.1f})")
    return models, records


def step_rounds(X, y, b, args):
    """Fixed-step training throughput: every configuration on the same subset, interleaved."""
    n = min(len(X), args.train_steps * b["batch_size"])
    rows = np.sort(np.random.default_rng(1).choice(len(X), size=n, replace=False))
    Xs, ys = X.iloc[rows].reset_index(drop=True), y[rows]
    one = {**b, "epochs": 1}
    configs = {}
    if not args.no_peer:
        configs["peer fp32"] = lambda: (peer_fit(Xs, ys, one)[1], None)
        if not args.no_peer_bf16:
            configs["peer bf16=True"] = lambda: (peer_fit(Xs, ys, one, bf16=True)[1], None)

    def ours_fit(precision, **extra):
        def run():
            est = ours(precision, one, **extra)
            start = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                est.fit(Xs, ys)
            return time.perf_counter() - start, est.history_.seconds
        return run

    configs["TR fp32"] = ours_fit("fp32")
    configs["TR auto"] = ours_fit("auto")
    configs["TR auto, freeze_embeddings"] = ours_fit("auto", freeze_embeddings=True)
    runs = {k: [] for k in configs}
    names = list(configs)
    for r in range(args.train_rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            seconds, loop = configs[name]()
            runs[name].append({"seconds": seconds, "pairs_per_second": n / seconds, "load_after": load_average(),
                               "loop_pairs_per_second": None if loop is None else n / loop})
            log(f"  [steps {r + 1}/{args.train_rounds}] {name}: {n / seconds:.1f} pairs/s ({seconds:.1f} s)")
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
            row = {"threads": n}
            tr.predict(warm)
            row["TR auto"] = timed(tr.predict, X)[1]["pairs_per_second"]
            if "peer" in models:
                PeerPredict(models["peer"], PEER_BATCH_SIZE)(warm)
                row[f"peer (batch {PEER_BATCH_SIZE})"] = timed(PeerPredict(models["peer"], PEER_BATCH_SIZE), X)[1]["pairs_per_second"]
        out["threads"].append(row)
        log(f"[plumbing] {n} thread(s): " + ", ".join(f"{k} {v:.1f}" for k, v in row.items() if k != "threads"))
    out["batch_tokens"] = []
    default = tr.batch_tokens
    # The same weights at each prediction precision the CPU default distinguishes (its own budget for int8).
    sweep = {"auto": tr}
    if DEVICE.type == "cpu" and int8_supported():
        sweep["int8"] = copy.copy(tr).set_params(precision="int8")
    for bt in ((512, 2048) if args.quick else BATCH_TOKENS + (GPU_BATCH_TOKENS if DEVICE.type == "cuda" else ())):
        row = {"batch_tokens": bt}
        for precision, est in sweep.items():
            est.set_params(batch_tokens=bt)
            est.predict(warm)
            row[precision] = timed(est.predict, X)[1]["pairs_per_second"]
        out["batch_tokens"].append(row)
        log(f"[plumbing] batch_tokens={bt}: " + ", ".join(f"{p} {row[p]:.1f}" for p in sweep) + " pairs/s")
    tr.set_params(batch_tokens=default)
    out["peer_batch_size"] = []
    if "peer" in models:
        for bs in ((32, 128) if args.quick else PEER_BATCH_SIZES):
            fn = PeerPredict(models["peer"], bs)
            fn(warm)
            pps = timed(fn, X)[1]["pairs_per_second"]
            out["peer_batch_size"].append({"batch_size": bs, "pairs_per_second": pps})
            log(f"[plumbing] peer batch_size={bs}: {pps:.1f} pairs/s")
        out["peer_best_batch_size"] = max(out["peer_batch_size"], key=lambda r: r["pairs_per_second"])["batch_size"]
    out["n_rows"] = len(X)
    return out


def prediction_table(models, X, y, args, peer_bs):
    """Every predictor on the test set: accuracy, timings, significance."""
    predictors, labels = {}, {}
    if "peer" in models:
        predictors["peer"] = PeerPredict(models["peer"], PEER_BATCH_SIZE)
        labels["peer"] = f"CrossEncoder.predict (batch_size={PEER_BATCH_SIZE}, its default)"
        if peer_bs != PEER_BATCH_SIZE:
            predictors[f"peer bs={peer_bs}"] = PeerPredict(models["peer"], peer_bs)
            labels[f"peer bs={peer_bs}"] = f"CrossEncoder.predict (batch_size={peer_bs}, fastest of the sweep)"
        if not args.no_peer_bf16:
            bf = copy.deepcopy(models["peer"]).bfloat16()
            predictors["peer bf16"] = PeerPredict(bf, peer_bs)
            labels["peer bf16"] = f"CrossEncoder.predict, model.bfloat16() (batch_size={peer_bs})"
    for name, model in models.items():
        if name == "peer":
            continue
        est = model
        if name == "auto":
            for p in ("fp32", "int8") if DEVICE.type == "cpu" else ("fp32",):
                predictors[f"TR auto-fit @ {p}"] = copy.copy(est).set_params(precision=p).predict
                labels[f"TR auto-fit @ {p}"] = f"TransformerRanker fitted with precision='auto', predicting at {p!r}"
        predictors[f"TR {name}"] = est.predict
        labels[f"TR {name}"] = f"TransformerRanker(precision={est.precision!r}" + (
            ", freeze_embeddings=True" if est.freeze_embeddings else "") + ")"
    # copy.copy shares model_ but the int8 copy is cached per object: each set_params copy builds its own.
    scores, timing = timing_rounds(predictors, X, args.rounds, X.iloc[:WARMUP_PAIRS])
    per_q = {k: per_question(y, s, X) for k, s in scores.items()}
    vs_peer = compare(per_q, "peer") if "peer" in per_q else {}
    rows = []
    for name in predictors:
        row = {"name": name, "label": labels[name], **evaluate(y, scores[name], X, metrics=METRICS), **timing[name]}
        if "peer" in per_q and name != "peer":
            row["p_map_vs_peer"] = vs_peer[name]["p"]
        ref = {"TR auto": "TR auto-fit @ fp32", "TR auto-fit @ int8": "TR auto-fit @ fp32", "TR bf16": "TR fp32",
               "TR auto, freeze_embeddings": "TR auto"}.get(name)
        if ref is not None and ref in per_q:
            row["ref"] = ref
            row["p_map_vs_ref"] = compare({name: per_q[name], ref: per_q[ref]}, ref)[name]["p"]
        rows.append(row)
        log(f"[predict] {name}: MAP {row['map']:.4f} MRR {row['mrr']:.4f} P@1 {row['p@1']:.4f}, "
            f"{row['median_pairs_per_second']:.1f} pairs/s")
    return rows


def cascade_table(splits, b, args, models, X3, y3, peer_bs):
    cb = {**b, "learning_rate": args.cascade_learning_rate}
    X_train, y_train = splits["train_used"]
    fit_log = []
    ct = fitted(CascadeTransformer(**cb), X_train, y_train, fit_log)
    predictors = {}
    if "peer" in models:
        predictors["peer"] = PeerPredict(models["peer"], PEER_BATCH_SIZE)
        if peer_bs != PEER_BATCH_SIZE:
            predictors[f"peer bs={peer_bs}"] = PeerPredict(models["peer"], peer_bs)
    predictors["TR auto"] = models["auto"].predict
    ct0 = copy.copy(ct).set_params(alpha=0.0)
    ct3 = copy.copy(ct).set_params(alpha=0.3)
    reports = {}

    def run(est, key):
        def call(X):
            s, reports[key] = est.predict(X, return_cost=True)
            return s
        return call

    predictors["CT α=0"] = run(ct0, "CT α=0")
    predictors["CT α=0.3"] = run(ct3, "CT α=0.3")
    if DEVICE.type == "cuda":
        wide = GPU_WIDE * AUTO_BATCH_TOKENS["other"]
        for name, est in (("CT α=0", ct0), ("CT α=0.3", ct3)):
            label = f"{name}, batch_tokens={wide}"
            predictors[label] = run(copy.copy(est).set_params(batch_tokens=wide), label)
    # On a GPU every new chunk shape costs its first call the kernels' selection and memory, and the cascade's
    # shapes vary with its drops: a warm-up on the whole set, so that the rounds time the steady state.
    warm = X3 if DEVICE.type == "cuda" else X3.iloc[:CASCADE_WARMUP]
    scores, timing = timing_rounds(predictors, X3, args.cascade_rounds, warm)
    # Tokenisation is the same call for every α: timed alone, it bounds what the drops can save in a whole call.
    encode_seconds = []
    for _ in range(args.cascade_rounds):
        start = time.perf_counter()
        ct0.encode(X3)
        encode_seconds.append(time.perf_counter() - start)
    p_at_1 = {k: per_question(y3, scores[k], X3, "p@1") for k in ("CT α=0", "CT α=0.3")}
    rows = []
    for name in predictors:
        row = {"name": name, **evaluate(y3, scores[name], X3, metrics=METRICS), **timing[name]}
        if name.startswith("CT"):
            row["relative_cost"] = reports[name]["relative_cost"]
            row["relative_token_cost"] = reports[name]["relative_token_cost"]
        if name == "CT α=0.3":
            row["p_p@1_vs_ct0"] = compare(p_at_1, "CT α=0")[name]["p"]
        rows.append(row)
        log(f"[cascade] {name}: MAP {row['map']:.4f} P@1 {row['p@1']:.4f}, {row['median_pairs_per_second']:.1f} pairs/s")
    return {"rows": rows, "budget": cb, "fit": fit_log, "n_questions": int(X3["qid"].nunique()), "n_rows": len(X3),
            "exits": list(ct.exits_), "alpha": ct3.alpha, "candidates": CANDIDATES, "warmup_pairs": len(warm),
            "encode_seconds": float(np.median(encode_seconds))}


# ----------------------------------------------------------------------------------------------- main
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="subsets and few steps: checks the script end to end")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--epochs", type=int, default=None, help="training epochs, both sides (default 2; quick 1)")
    parser.add_argument("--learning-rate", type=float, default=2e-5)
    parser.add_argument("--cascade-learning-rate", type=float, default=1e-4)
    parser.add_argument("--train-steps", type=int, default=None,
                        help="optimizer steps of each fixed-step training round (default 40; quick 2)")
    parser.add_argument("--train-rounds", type=int, default=None, help="fixed-step rounds (default 2; quick 1)")
    parser.add_argument("--rounds", type=int, default=None, help="prediction rounds on WikiQA test (default 3; quick 1)")
    parser.add_argument("--cascade-rounds", type=int, default=1, help="prediction rounds on the ~100-candidate set")
    parser.add_argument("--train-questions", type=int, default=None,
                        help="train on this many answered training questions (fixed random subset; default all; "
                             "quick 20): a shorter full fit for the peer")
    parser.add_argument("--test-questions", type=int, default=None, help="WikiQA-test questions (default all; quick 30)")
    parser.add_argument("--cascade-questions", type=int, default=None,
                        help="expanded test questions of the cascade section (default all 243; quick 5)")
    parser.add_argument("--plumbing-questions", type=int, default=None,
                        help="WikiQA-test questions of the thread / batch-size sweeps (default 60; quick 12)")
    parser.add_argument("--no-peer", action="store_true", help="leave the peer out (as2rank rows only)")
    parser.add_argument("--no-peer-bf16", action="store_true", help="leave out the peer's bf16 rows")
    parser.add_argument("--no-cascade", action="store_true", help="leave out the cascade section")
    parser.add_argument("--render", action="store_true",
                        help="only recompute the acceptance checks, re-draw the plot and re-render the page from the JSON")
    args = parser.parse_args(argv)
    if args.render:
        res = json.loads((RESULTS / tagged("speed.json")).read_text())
        res["acceptance"] = acceptance(res)
        plot(res, DOCS / tagged("speed.png"))
        publish(res, "speed")
        return
    quick = {"epochs": 1, "train_steps": 2, "train_rounds": 1, "rounds": 1, "train_questions": 20,
             "test_questions": 30, "cascade_questions": 5, "plumbing_questions": 12}
    full = {"epochs": 2, "train_steps": 40, "train_rounds": 2, "rounds": 3, "train_questions": None,
            "test_questions": None, "cascade_questions": None, "plumbing_questions": 60}
    for k, v in (quick if args.quick else full).items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    if args.threads:
        torch.set_num_threads(args.threads)
    global DEVICE
    DEVICE = resolve_device("auto")
    import sentence_transformers
    import transformers

    transformers.logging.set_verbosity_error()
    t_start = time.perf_counter()
    res = {
        **run_header("speed.py", argv),
        "device": str(DEVICE),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "cpu_bf16": cpu_bf16_supported(),
        "int8": int8_supported(),
        "int8_engine": "ONNX Runtime" if onnx_available() else "torch's dynamic quantization",
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "sentence_transformers": sentence_transformers.__version__,
        "transformers": transformers.__version__,
        # What the page says of the method: the warm-up call, the randomisation test, as2rank's defaults.
        "warmup_pairs": WARMUP_PAIRS,
        "n_resamples": inspect.signature(paired_significance).parameters["n_resamples"].default,
        "head_lr_multiplier": TransformerRanker().head_lr_multiplier,
        "auto_batch_tokens": AUTO_BATCH_TOKENS,
        "peer_batch_size": PEER_BATCH_SIZE,
        "args": vars(args),
        "quick": (f"{args.epochs} epoch(s) on {args.train_questions} training questions, {args.test_questions} test "
                  f"questions, {args.cascade_questions} expanded test questions, fixed-step rounds of "
                  f"{args.train_steps} steps, 1 round each, reduced sweeps") if args.quick else "",
    }
    log(f"machine: {res['machine']}; torch {res['torch']}, {res['torch_threads']} threads")
    splits = wikiqa_splits()
    b = budget(args)
    res["budget"] = b
    X_train, y_train = subset_questions(*splits["train"], args.train_questions, seed=0)
    splits["train_used"] = (X_train, y_train)
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
        X3, y3 = keep_answered(*splits["test"])
        X3, y3 = subset_questions(X3, y3, args.cascade_questions, seed=0)
        log(f"[cascade] expanding {X3['qid'].nunique()} test questions to ~100 candidates")
        X3, y3 = expand_candidates(X3, y3, splits["pool"], k=CANDIDATES)
        res["cascade"] = cascade_table(splits, b, args, models, X3.reset_index(drop=True), y3, peer_bs)
    res["acceptance"] = acceptance(res)
    log_checks(res["acceptance"])
    res["load_average_end"] = load_average()
    res["wall_seconds"] = time.perf_counter() - t_start
    res = json.loads(json.dumps(jsonable(res), default=str))
    DOCS.mkdir(parents=True, exist_ok=True)
    plot(res, DOCS / tagged("speed.png"))
    page = publish(res, "speed")
    log(f"wrote {page} ({res['wall_seconds'] / 60:.1f} min)")


if __name__ == "__main__":
    main()
