"""Speed of the transformer estimators against sentence-transformers' ``CrossEncoder`` on WikiQA (issue 8).

    python benchmarks/speed.py [--quick] [--threads N] [--epochs N] [--learning-rate LR]
                               [--train-steps N] [--train-rounds N] [--rounds N] [--train-questions N]
                               [--no-peer-bf16] [--render]

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
``max_length=128``, seed 0, on the answered questions of WikiQA-train minus the dev split
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
AP (``as2rank.metrics.paired_significance``) against the peer and against the fp32 prediction of the same
weights. **Plumbing checks** on a subset: torch threads, ``batch_tokens`` and the peer's batch size.

``--quick``: 1 epoch on 20 training questions, 30 test questions, 5 expanded test questions, fixed-step
rounds of 2 steps, one round, reduced sweeps: checks the script end to end (its numbers mean little).
Writes ``benchmarks/results/speed.json``, ``docs/benchmarks/speed.md`` and ``docs/benchmarks/speed.png``.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import sys
import tempfile
import time
import warnings

import numpy as np
import pandas as pd
import torch
from _common import DOCS, NOTE, RESULTS, acceptance_section, fitted, jsonable, load_average, log, log_checks, machine, tagged, wikiqa_splits

from as2rank.cascade import CascadeTransformer
from as2rank.data import keep_answered
from as2rank.datasets import expand_candidates
from as2rank.metrics import mean_average_precision, paired_significance, precision_at_k, ranking_report
from as2rank.neural import cpu_bf16_supported, int8_supported, resolve_device
from as2rank.neural.onnx_runtime import onnx_available
from as2rank.transformer import TransformerRanker

METRICS = ("map", "mrr", "p@1")
PEER_BATCH_SIZES = (16, 32, 64, 128, 256)
BATCH_TOKENS = (1024, 2048, 4096, 8192, 16384)

#: What results written before ``precision="int8"`` could run on ONNX Runtime measured (they do not say).
INT8_ENGINE_BEFORE = "torch's dynamic quantization (measured before the ONNX Runtime engine existed)"


# ----------------------------------------------------------------------------------------------- helpers
def budget(args) -> dict:
    # The model the peer trains too: no lexical prior (the library's default since the defaults benchmark).
    return {"epochs": args.epochs, "batch_size": 32, "learning_rate": args.learning_rate, "max_length": 128,
            "lexical_prior": False, "random_state": 0}


def evaluate(y, scores, X) -> dict:
    rep = ranking_report(y, scores, X["qid"].to_numpy(), position=X["position"].to_numpy(), k=(1,))
    return {m: float(rep[m]) for m in METRICS} | {"n_evaluated": int(rep["n_evaluated"])}


def per_question(y, scores, X, metric="map") -> pd.Series:
    fn = {"map": mean_average_precision, "p@1": precision_at_k}[metric]
    return fn(y, scores, X["qid"].to_numpy(), position=X["position"].to_numpy(), per_group=True)


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

    from as2rank.neural.backbone import resolve_model

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
        warmup_steps=0.1,  # a float: the fraction of the steps (linear warm-up, then the default linear decay)
        weight_decay=0.01,
        max_grad_norm=1.0,
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
        dtype = est._compute_dtype(device, training=True)
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
    return {"n_pairs": n, "steps": int(np.ceil(n / b["batch_size"])),
            "rows": {k: {"median_pairs_per_second": float(np.median([t["pairs_per_second"] for t in v])), "runs": v}
                     for k, v in runs.items()}}


# ----------------------------------------------------------------------------------------------- checks
def plumbing(models, X, args):
    """Threads and batch_tokens of our default model, and the peer's batch size, on a subset."""
    out = {}
    warm = X.iloc[:64]
    tr = models["auto"]
    n_cpu = os.cpu_count() or 1
    out["threads"] = []
    for n in sorted({1, max(1, n_cpu // 2), n_cpu}):
        with threads(n):
            row = {"threads": n}
            tr.predict(warm)
            row["TR auto"] = timed(tr.predict, X)[1]["pairs_per_second"]
            if "peer" in models:
                PeerPredict(models["peer"], 32)(warm)
                row["peer (batch 32)"] = timed(PeerPredict(models["peer"], 32), X)[1]["pairs_per_second"]
        out["threads"].append(row)
        log(f"[plumbing] {n} thread(s): " + ", ".join(f"{k} {v:.1f}" for k, v in row.items() if k != "threads"))
    out["batch_tokens"] = []
    default = tr.batch_tokens
    for bt in ((2048, 16384) if args.quick else BATCH_TOKENS):
        tr.set_params(batch_tokens=bt)
        tr.predict(warm)
        pps = timed(tr.predict, X)[1]["pairs_per_second"]
        out["batch_tokens"].append({"batch_tokens": bt, "pairs_per_second": pps})
        log(f"[plumbing] batch_tokens={bt}: {pps:.1f} pairs/s")
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
        predictors["peer"] = PeerPredict(models["peer"], 32)
        labels["peer"] = "CrossEncoder.predict (batch_size=32, its default)"
        if peer_bs != 32:
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
    scores, timing = timing_rounds(predictors, X, args.rounds, X.iloc[:64])
    per_q = {k: per_question(y, s, X) for k, s in scores.items()}
    rows = []
    for name in predictors:
        row = {"name": name, "label": labels[name], **evaluate(y, scores[name], X), **timing[name]}
        if "peer" in per_q and name != "peer":
            row["p_map_vs_peer"] = paired_significance(per_q[name], per_q["peer"])
        ref = {"TR auto": "TR auto-fit @ fp32", "TR auto-fit @ int8": "TR auto-fit @ fp32", "TR bf16": "TR fp32",
               "TR auto, freeze_embeddings": "TR auto"}.get(name)
        if ref is not None and ref in per_q:
            row["ref"] = ref
            row["p_map_vs_ref"] = paired_significance(per_q[name], per_q[ref])
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
        predictors["peer"] = PeerPredict(models["peer"], 32)
        if peer_bs != 32:
            predictors[f"peer bs={peer_bs}"] = PeerPredict(models["peer"], peer_bs)
    predictors["TR auto"] = models["auto"].predict
    ct0 = copy.copy(ct).set_params(alpha=0.0)
    ct3 = copy.copy(ct).set_params(alpha=0.3)
    reports = {}

    def run(est, key):
        def call(X):
            s = est.predict(X)
            reports[key] = est.cost_report_
            return s
        return call

    predictors["CT α=0"] = run(ct0, "CT α=0")
    predictors["CT α=0.3"] = run(ct3, "CT α=0.3")
    scores, timing = timing_rounds(predictors, X3, args.cascade_rounds, X3.iloc[:200])
    per_q = {k: {m: per_question(y3, s, X3, m) for m in ("map", "p@1")} for k, s in scores.items()}
    rows = []
    for name in predictors:
        row = {"name": name, **evaluate(y3, scores[name], X3), **timing[name]}
        if name.startswith("CT"):
            row["relative_cost"] = reports[name]["relative_cost"]
        if name == "CT α=0.3":
            row["p_p@1_vs_ct0"] = paired_significance(per_q[name]["p@1"], per_q["CT α=0"]["p@1"])
        rows.append(row)
        log(f"[cascade] {name}: MAP {row['map']:.4f} P@1 {row['p@1']:.4f}, {row['median_pairs_per_second']:.1f} pairs/s")
    return {"rows": rows, "budget": cb, "fit": fit_log, "n_questions": int(X3["qid"].nunique()), "n_rows": len(X3)}


def pct(v) -> str:
    return f"{100 * v:.2f}"


def acceptance(res) -> list:
    fits, pred = res["fits"], {r["name"]: r for r in res["prediction"]}
    steps = res["train_steps"]["rows"]
    checks = []
    if "peer" in fits and "auto" in fits:
        ratio = fits["auto"]["pairs_per_second"] / fits["peer"]["pairs_per_second"]
        checks.append(("fit: TransformerRanker (default precision) ≥ 4× the peer's training pairs/s (full fits, fp32 peer)",
                       f"{fits['auto']['pairs_per_second']:.1f} / {fits['peer']['pairs_per_second']:.1f} = {ratio:.2f}×",
                       ratio >= 4))
        peer_best = max((k for k in steps if k.startswith("peer")), key=lambda k: steps[k]["median_pairs_per_second"])
        r2 = steps["TR auto"]["median_pairs_per_second"] / steps[peer_best]["median_pairs_per_second"]
        checks.append((f"fit: same against the peer's fastest setting ({peer_best}), fixed-step rounds",
                       f"{steps['TR auto']['median_pairs_per_second']:.1f} / "
                       f"{steps[peer_best]['median_pairs_per_second']:.1f} = {r2:.2f}×", r2 >= 4))
        a, p = pred["TR auto"], pred["peer"]
        checks.append(("fit: WikiQA-test MAP ≥ the peer's (same epochs, batch size, learning rate)",
                       f"{pct(a['map'])} vs {pct(p['map'])} (Δ {100 * (a['map'] - p['map']):+.2f}, p={a['p_map_vs_peer']:.3f})",
                       a["map"] >= p["map"]))
        peer_pps = p["median_pairs_per_second"]
        r = a["median_pairs_per_second"] / peer_pps
        checks.append(("predict: default precision ≥ 2× CrossEncoder.predict (batch_size=32)",
                       f"{a['median_pairs_per_second']:.1f} / {peer_pps:.1f} = {r:.2f}×", r >= 2))
        peer_rows = [v for k, v in pred.items() if k.startswith("peer")]
        best = max(peer_rows, key=lambda v: v["median_pairs_per_second"])
        rb = a["median_pairs_per_second"] / best["median_pairs_per_second"]
        checks.append((f"predict: same against the peer's fastest row ({best['name']})",
                       f"{a['median_pairs_per_second']:.1f} / {best['median_pairs_per_second']:.1f} = {rb:.2f}×", rb >= 2))
        f32 = pred["TR auto-fit @ fp32"]
        checks.append(("predict: default precision MAP within 0.2 points of the fp32 prediction (same weights)",
                       f"{pct(a['map'])} vs {pct(f32['map'])} (Δ {100 * (a['map'] - f32['map']):+.2f})",
                       abs(a["map"] - f32["map"]) <= 0.002))
        if "TR auto-fit @ int8" in pred:
            i8 = pred["TR auto-fit @ int8"]
            r8 = i8["median_pairs_per_second"] / peer_pps
            checks.append(("predict: precision='int8' ≥ 3× CrossEncoder.predict (batch_size=32)",
                           f"{i8['median_pairs_per_second']:.1f} / {peer_pps:.1f} = {r8:.2f}×", r8 >= 3))
            checks.append(("predict: int8 MAP within 1 point of the fp32 prediction (same weights)",
                           f"{pct(i8['map'])} vs {pct(f32['map'])} (Δ {100 * (i8['map'] - f32['map']):+.2f})",
                           abs(i8["map"] - f32["map"]) <= 0.01))
        if "fp32" in fits:
            m32 = pred["TR fp32"]
            checks.append(("default precision costs no accuracy: MAP of the 'auto' fit vs the fp32 fit (not an issue "
                           "criterion; the issue's 'a default that costs accuracy is not a default')",
                           f"{pct(a['map'])} vs {pct(m32['map'])} (Δ {100 * (a['map'] - m32['map']):+.2f})",
                           a["map"] >= m32["map"] - 0.002))
    cas = res.get("cascade")
    if cas is not None:
        by = {r["name"]: r for r in cas["rows"]}
        c0, c3 = by["CT α=0"], by["CT α=0.3"]
        if "peer" in by:
            rc = c3["median_pairs_per_second"] / by["peer"]["median_pairs_per_second"]
            checks.append(("~100 candidates: CascadeTransformer α=0.3 ≥ 3× CrossEncoder.predict (batch_size=32)",
                           f"{c3['median_pairs_per_second']:.1f} / {by['peer']['median_pairs_per_second']:.1f} = {rc:.2f}×",
                           rc >= 3))
        if res.get("device", "cpu").startswith("cuda"):
            r03 = c3["median_pairs_per_second"] / c0["median_pairs_per_second"]
            checks.append(("GPU, ~100 candidates: α=0.3 ≥ 1.4× the pairs/s of α=0 (whole `predict` calls)",
                           f"{c3['median_pairs_per_second']:.1f} / {c0['median_pairs_per_second']:.1f} = {r03:.2f}×",
                           r03 >= 1.4))
        checks.append(("~100 candidates: α=0.3 P@1 at most 1.5 points below α=0",
                       f"{pct(c3['p@1'])} vs {pct(c0['p@1'])} (Δ {100 * (c3['p@1'] - c0['p@1']):+.2f}, "
                       f"p={c3['p_p@1_vs_ct0']:.3f})", c3["p@1"] >= c0["p@1"] - 0.015))
    return [{"check": c, "measured": m, "pass": bool(ok)} for c, m, ok in checks]


# ----------------------------------------------------------------------------------------------- output
def plot(res, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pred = res["prediction"]
    steps = res["train_steps"]["rows"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 0.45 * max(len(pred), len(steps)) + 1.6))
    names = [r["name"] for r in pred]
    vals = [r["median_pairs_per_second"] for r in pred]
    colors = ["tab:grey" if n.startswith("peer") else "tab:blue" for n in names]
    axes[0].barh(names[::-1], vals[::-1], color=colors[::-1])
    axes[0].set_xlabel("prediction pairs/s (WikiQA test, median of rounds)")
    names = list(steps)
    vals = [steps[n]["median_pairs_per_second"] for n in names]
    colors = ["tab:grey" if n.startswith("peer") else "tab:blue" for n in names]
    axes[1].barh(names[::-1], vals[::-1], color=colors[::-1])
    axes[1].set_xlabel(f"training pairs/s ({res['train_steps']['steps']} steps x 32 pairs, median of rounds)")
    for ax in axes:
        ax.grid(axis="x", alpha=0.3)
        ax.tick_params(axis="y", labelsize=8)
    fig.suptitle(f"as2rank vs sentence-transformers CrossEncoder: {res['machine']}, {res['torch_threads']} torch threads"
                 + (" (QUICK run)" if res.get("quick") else ""), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def markdown(res) -> str:

    def pval(p):
        return "–" if p is None else (f"{p:.3f}" + ("*" if p < 0.05 else ""))

    b = res["budget"]
    lines = [
        "# Speed: as2rank transformer rankers vs sentence-transformers' CrossEncoder (WikiQA)",
        "",
    ]
    if res.get("quick"):
        lines += [f"> **QUICK RUN** ({res['quick']}): a check that the script runs end to end, on a shared and "
                  "busy machine. The numbers below are noisy and on tiny subsets; they are not the benchmark.", ""]
    lines += [
        f"Measured {res['date']} on **{res['machine']}**; torch {res['torch']} with **{res['torch_threads']} "
        f"intra-op thread(s)** (`torch.get_num_threads()`; `OMP_NUM_THREADS`={res['omp_num_threads']!s}), "
        f"sentence-transformers {res['sentence_transformers']}, transformers {res['transformers']}. "
        f"Native bfloat16 (oneDNN): {res['cpu_bf16']}; int8 kernels: {res['int8']} (CPU capability "
        f"{res['cpu_capability']}); int8 engine: {res.get('int8_engine', INT8_ENGINE_BEFORE)}. Load average at start {res['load_average_start']}, at end "
        f"{res['load_average_end']}. One process, {res['wall_seconds'] / 60:.1f} min."
        + (f" {res['note']}" if res.get("note") else ""),
        "",
        f"Command: `{res['command']}`.",
        "",
        "## What each side did",
        "",
        f"- **Data**: training on {res['n_train_rows']:,} pairs ({res['n_train_questions']} answered questions of "
        "WikiQA-train minus the 10% dev split, `_common.wikiqa_splits()['train']`); prediction on "
        f"{res['n_test_rows']:,} WikiQA-test pairs ({res['n_test_questions']} questions, all of them, tokenisation "
        f"included); MAP/MRR/P@1 under the clean protocol (questions without a correct answer skipped: "
        f"{res['n_test_evaluated']} questions evaluated).",
        f"- **Budget, both sides**: {b['epochs']} epoch(s), batch {b['batch_size']}, learning rate {b['learning_rate']:g} "
        "(peak; linear warm-up over 10% of the steps, then linear decay to 0), weight decay 0.01, gradient clipping "
        f"1.0, max_length {b['max_length']}, seed {b['random_state']}.",
        "- **Peer**: `CrossEncoder(<packaged all-MiniLM-L6-v2>, num_labels=1, max_length=128)` "
        "(BertForSequenceClassification: the checkpoint's pooler and a new linear layer), `CrossEncoderTrainer` with "
        f"`BinaryCrossEntropyLoss`, optimizer `{res['fits'].get('peer', {}).get('optimizer', '?')}` (its default), "
        f"on `{res.get('device', 'cpu')}` like as2rank (`use_cpu=True` on the CPU), no evaluation, no checkpoints, "
        "no logging. Training time: `trainer.train()` (it tokenises "
        "each batch in its collator). Prediction: `CrossEncoder.predict(pairs, batch_size=...)`, which sorts by "
        "length and tokenises per batch.",
        "- **as2rank**: `TransformerRanker(epochs, batch_size=32, learning_rate, max_length=128, random_state=0, "
        "precision=...)`, other parameters at their defaults (mean pooling, head learning rate ×10, length-bucketed "
        "batches, fused AdamW, prediction batches sorted by length of `batch_tokens='auto'` padded tokens: 2048 on "
        "the CPU). "
        "Training time: the whole `fit` call (loading the weights, tokenising every pair, the loop); the loop alone "
        "is in the fits table.",
    ]
    fits = res["fits"]
    lines += [
        "",
        "## Training",
        "",
        "Full fits (one each; figures of this run):",
        "",
        "| row | fit time | training pairs/s | loop pairs/s | final epoch loss | load after |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for name, f in fits.items():
        if f.get("same_as"):
            lines.append(f"| {name} | = the '{f['same_as']}' fit (same dtype on this machine) | | | | |")
            continue
        loop = f"{f['loop_pairs_per_second']:.1f}" if f.get("loop_pairs_per_second") else "–"
        loss = f"{f['final_epoch_loss']:.4f}" if f.get("final_epoch_loss") is not None else "–"
        lines.append(f"| {f['label']} | {f['seconds']:.0f} s | {f['pairs_per_second']:.1f} | {loop} | {loss} | "
                     f"{[round(v, 2) for v in f['load_after']]} |")
    st = res["train_steps"]
    peer_ref = st["rows"].get("peer fp32", {}).get("median_pairs_per_second")
    lines += [
        "",
        f"Fixed-step rounds: every configuration trains {st['steps']} optimizer steps on the same {st['n_pairs']} "
        f"random training pairs (1 epoch), interleaved, {res['args']['train_rounds']} round(s); median pairs/s. "
        "`peer bf16=True` is `CrossEncoderTrainingArguments(bf16=True)` (bfloat16 autocast). as2rank's time is the "
        "whole `fit` (with loading the weights: a visible share of a few steps), the peer's `trainer.train()` "
        "(without loading its weights); the loop column is as2rank's training loop alone.",
        "",
        "| configuration | pairs/s (median) | vs peer fp32 | runs | loop pairs/s (runs) |",
        "| --- | ---: | ---: | --- | --- |",
    ]
    for name, r in st["rows"].items():
        vs = f"{r['median_pairs_per_second'] / peer_ref:.2f}×" if peer_ref else "–"
        loops = [t.get("loop_pairs_per_second") for t in r["runs"]]
        lines.append(f"| {name} | {r['median_pairs_per_second']:.1f} | {vs} | "
                     + ", ".join(f"{t['pairs_per_second']:.1f}" for t in r["runs"]) + " | "
                     + (", ".join(f"{v:.1f}" for v in loops) if all(v is not None for v in loops) else "–") + " |")
    lines += [
        "",
        "## Prediction and accuracy on WikiQA test",
        "",
        f"{res['args']['rounds']} interleaved round(s) over all {res['n_test_rows']:,} pairs, median pairs/s; a warm-up "
        "call on 64 pairs before (for int8 it builds the quantized copy, done once per fitted model). "
        "p vs peer: paired randomisation test (9,999 sign flips) of per-question AP against the peer's row; "
        "ref / p vs ref: the same test against a reference row (the same weights predicted in fp32 for a lower "
        "precision; the fp32 fit for the bf16 fit; the fit with trained embeddings for the frozen ones); "
        "* = p < 0.05.",
        "",
        "| row | what | MAP | MRR | P@1 | pairs/s | vs peer (bs 32) | p vs peer | ref | p vs ref | warm-up |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |",
    ]
    peer_pps = next((r["median_pairs_per_second"] for r in res["prediction"] if r["name"] == "peer"), None)
    for r in res["prediction"]:
        vs = f"{r['median_pairs_per_second'] / peer_pps:.2f}×" if peer_pps else "–"
        lines.append(f"| {r['name']} | {r['label']} | {pct(r['map'])} | {pct(r['mrr'])} | {pct(r['p@1'])} | "
                     f"{r['median_pairs_per_second']:.1f} | {vs} | {pval(r.get('p_map_vs_peer'))} | "
                     f"{r.get('ref') or '–'} | {pval(r.get('p_map_vs_ref'))} | {r['warmup_seconds']:.1f} s |")
    lines += ["", f"![pairs/s per row]({tagged('speed.png')})", ""]
    pl = res["plumbing"]
    lines += [
        f"## Plumbing checks ({pl['n_rows']} test pairs, one call each)",
        "",
        "Torch threads (`torch.set_num_threads`): prediction pairs/s",
        "",
        "| threads | " + " | ".join(k for k in pl["threads"][0] if k != "threads") + " |",
        "| ---: | " + " | ".join("---:" for k in pl["threads"][0] if k != "threads") + " |",
    ]
    for row in pl["threads"]:
        lines.append(f"| {row['threads']} | " + " | ".join(f"{v:.1f}" for k, v in row.items() if k != "threads") + " |")
    lines += ["", "`batch_tokens` of `TransformerRanker` (default 'auto': 2048 on the CPU, 16384 elsewhere), "
              "precision 'auto':", "",
              "| batch_tokens | pairs/s |", "| ---: | ---: |"]
    for row in pl["batch_tokens"]:
        lines.append(f"| {row['batch_tokens']} | {row['pairs_per_second']:.1f} |")
    if pl.get("peer_batch_size"):
        lines += ["", "`CrossEncoder.predict(batch_size=...)` (default 32); the fastest is used for the peer's "
                  "second row above:", "", "| batch_size | pairs/s |", "| ---: | ---: |"]
        for row in pl["peer_batch_size"]:
            lines.append(f"| {row['batch_size']} | {row['pairs_per_second']:.1f} |")
    cas = res.get("cascade")
    if cas:
        cb = cas["budget"]
        lines += [
            "",
            f"## CascadeTransformer on ~100 candidates per question ({cas['n_questions']} questions, {cas['n_rows']:,} pairs)",
            "",
            "The answered WikiQA-test questions expanded with BM25 negatives from all WikiQA sentences "
            "(`expand_candidates(k=100)`, as Table 3 of `benchmarks/cascade.py`). `CascadeTransformer` (exits 2-6, "
            f"precision 'auto') trained with {cb['epochs']} epoch(s), batch {cb['batch_size']}, learning rate "
            f"{cb['learning_rate']:g}; α=0.3 drops 30% of each question's survivors at every exit but the last. "
            f"{res['args']['cascade_rounds']} round(s), median pairs/s. p: paired randomisation test of per-question P@1 "
            "vs α=0.",
            "",
            "| row | MAP | P@1 | relative cost | pairs/s | vs peer (bs 32) | p P@1 vs α=0 |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        peer3 = next((r["median_pairs_per_second"] for r in cas["rows"] if r["name"] == "peer"), None)
        for r in cas["rows"]:
            vs = f"{r['median_pairs_per_second'] / peer3:.2f}×" if peer3 else "–"
            cost = f"{r['relative_cost']:.3f}" if r.get("relative_cost") is not None else "–"
            lines.append(f"| {r['name']} | {pct(r['map'])} | {pct(r['p@1'])} | {cost} | "
                         f"{r['median_pairs_per_second']:.1f} | {vs} | {pval(r.get('p_p@1_vs_ct0'))} |")
    lines += acceptance_section(res["acceptance"], "Acceptance checks (issue 8), as measured")
    lines.append("| tests on tiny random models (batch order/size, input order, pickles without the instructions, "
                 "fp32 reproducibility) | `tests/test_precision.py`, not this script | see the test suite |")
    lines += ["", "## Notes", ""] + [f"- {n}" for n in res["notes"]] + [""]
    return "\n".join(lines)


NOTES = [
    "Thread setting: every as2rank transformer estimator computes in torch's intra-op thread pool; torch starts "
    "it with one thread per physical core. Set it with `torch.set_num_threads(n)` in the process (or "
    "`OMP_NUM_THREADS=n` before starting Python); `--threads` of this script does the former. The peer uses the "
    "same pool. Tokenisation (Hugging Face fast tokenizers) runs apart from it.",
    "The peer's ONNX backends (`CrossEncoder(..., backend='onnx')`, fp32 and int8) cannot share this process "
    "(their exporter pins another transformers): `benchmarks/cpu_inference.py` measures them in a virtual "
    "environment of their own on the same pairs (`docs/benchmarks/cpu_inference.md`).",
    "The peer and `TransformerRanker` are not the same network: the peer scores the pretrained pooler output "
    "(first token, dense + tanh) with one new linear layer, all at one learning rate; `TransformerRanker` reads "
    "the mean of the token encodings (the pooling all-MiniLM-L6-v2 was trained with) through a new 2-layer head "
    "at 10× the learning rate. The MAP comparison is between the two libraries' defaults, same data and budget.",
    "Training pairs/s of the full fits and of the fixed-step rounds are both from this run; a full fit also pays "
    "for the learning-rate warm-up and for loading and tokenising (as2rank) or building the trainer's dataloader "
    "(peer). Fixed-step rounds use a random subset: length buckets are then smaller than in a full fit.",
    "The cascade groups whole questions (its drops are per question) and, since this benchmark's first runs, runs "
    "its layers on length-sorted chunks of `batch_tokens` padded tokens cut from each group; before, each group "
    "was one batch padded to its longest candidate, which on this ~100-candidate set cost 2.1x the real tokens "
    "(and made the cascade at α=0 slower per pair than `TransformerRanker`, `docs/benchmarks/cascade.md`).",
    "One seed per model (`random_state=0`, `seed=0`); a MAP difference of a point on 243 questions is usually "
    "within seed noise: read the p-values.",
]


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
    parser.add_argument("--render", action="store_true", help="only re-write the Markdown page and plot from the JSON")
    args = parser.parse_args(argv)
    if args.render:
        res = json.loads((RESULTS / tagged("speed.json")).read_text())
        res["acceptance"], res["notes"] = acceptance(res), NOTES
        (RESULTS / tagged("speed.json")).write_text(json.dumps(res, indent=2))
        plot(res, DOCS / tagged("speed.png"))
        (DOCS / tagged("speed.md")).write_text(markdown(res))
        log(f"re-rendered {DOCS / tagged('speed.md')}")
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
        "command": ("python benchmarks/speed.py " + " ".join(argv if argv is not None else sys.argv[1:])).strip(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": machine(),
        "device": str(DEVICE),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        **({"note": NOTE} if NOTE else {}),
        "cpu_bf16": cpu_bf16_supported(),
        "int8": int8_supported(),
        "int8_engine": "ONNX Runtime" if onnx_available() else "torch's dynamic quantization",
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "sentence_transformers": sentence_transformers.__version__,
        "transformers": transformers.__version__,
        "load_average_start": load_average(),
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
    peer_bs = res["plumbing"].get("peer_best_batch_size", 32)
    res["prediction"] = prediction_table(models, X_test, y_test, args, peer_bs)
    if not args.no_cascade:
        X3, y3 = keep_answered(*splits["test"])
        X3, y3 = subset_questions(X3, y3, args.cascade_questions, seed=0)
        log(f"[cascade] expanding {X3['qid'].nunique()} test questions to ~100 candidates")
        X3, y3 = expand_candidates(X3, y3, splits["pool"], k=100)
        res["cascade"] = cascade_table(splits, b, args, models, X3.reset_index(drop=True), y3, peer_bs)
    res["acceptance"] = acceptance(res)
    log_checks(res["acceptance"])
    res["notes"] = NOTES
    res["load_average_end"] = load_average()
    res["wall_seconds"] = time.perf_counter() - t_start
    res = json.loads(json.dumps(jsonable(res), default=str))
    RESULTS.mkdir(parents=True, exist_ok=True)
    DOCS.mkdir(parents=True, exist_ok=True)
    (RESULTS / tagged("speed.json")).write_text(json.dumps(res, indent=2))
    plot(res, DOCS / tagged("speed.png"))
    (DOCS / tagged("speed.md")).write_text(markdown(res))
    log(f"wrote {RESULTS / tagged('speed.json')}, {DOCS / tagged('speed.md')} ({res['wall_seconds'] / 60:.1f} min)")


if __name__ == "__main__":
    main()
