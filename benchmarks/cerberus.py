"""CERBERUS: the shape of Tables 2, 3 and 5 of Matsubara, Lind, Soldaini & Moschitti (2022), on WikiQA or the
SQuAD sample, at the library's strength or at the paper's.

    python benchmarks/cerberus.py [--data wikiqa|sample] [--paper] [--seeds 3] [--train-questions N] [--quick]
                                  [--threads N] [--teacher-cv 3] [--teacher-model NAME] [--teacher-seed T]
                                  [--hydra-seeds 3]
    python benchmarks/cerberus.py ... --store-teachers S | --store-seed S   # one seed's part, in parallel
    python benchmarks/cerberus.py --render        # re-write the Markdown page from the JSON

**At the library's strength** (the default): every model at the library's defaults (``random_state=s``): the
teachers ``TransformerRanker``, ``Cosinet`` and the lexical ranker; the students ``TransformerRanker`` (no
teacher; the same model as the transformer teacher), one ``DistilledRanker`` per teacher, and ``Cerberus``
(B5 3H1 on the 6-layer MiniLM) and Hydra (B5 3H1 distilled from the ``TransformerRanker`` teachers of seeds
0, 1 and 2: teachers as strong as the student); the linear ensembles of the teachers, of Hydra's teachers and of
the three KD students. Writes
``cerberus-library[-sample]``. **At the paper's** (``--paper``): the paper's pure models at one fixed budget,
every row below; writes ``cerberus[-sample]``.

Teachers (three families, one set per seed ``s``): ``TransformerRanker`` on ``--teacher-model`` (default the
offline ``minilm-l6``; any Hugging Face path for a bigger teacher on a GPU), ``Cosinet`` (BiRNN, listwise)
and the lexical pointwise ranker ``LexicalFeatures → PointwiseRanker(LogisticRegression)``.
``--teacher-seed T``: every student seed distils the teachers of seed ``T`` (one costly teacher, such as
``--teacher-model mpnet-base`` on a CPU, instead of one per seed); ``--hydra-seeds 0`` leaves Hydra out (its
teachers are transformer teachers of seeds 0, 1, 2). A teacher's scores of the test, training and dev rows are
stored with its fit's code record (``teacher_scores``: the teacher artefact, committed): a later run reads them
and the cross-fitted logits instead of the model. Their training targets are cross-fitted: ``teacher_logits(teacher, X, y, cv=--teacher-cv)`` fits clones on
the other question folds, scores each fold, and Platt-calibrates each fold; the logits are computed once per
teacher and passed to every student as precomputed scores (exactly what ``Cerberus(teachers=[...],
teacher_cv=k)`` computes itself). One row distils from the fitted teachers' in-sample scores instead.

With ``--paper``, students all on ``minilm-l6`` with one budget (``budget()``: 2 epochs, batch 32, learning rate 1e-4,
``max_length=128``, as the cascade benchmark selected on dev; ``kd_alpha=0.5, temperature=3``, the middle of
the paper's grid, for every distilled row): the student with no teacher (``TransformerRanker``, the same model
as the transformer teacher), one ``DistilledRanker`` per teacher, the linear ensemble of those three students,
KD_Sum, KD_RR, Hydra (``Cerberus`` B5 3H1 with the transformer teachers of seeds 0, 1, 2), ``Cerberus`` B5 3H1
and B4 3H2. Linear ensembles (``LinearEnsemble``) tune their weights on the dev split. Every fit goes through
``_common.fitted`` (cached in ``benchmarks/cache/``), so a re-run retrains nothing.

Data: WikiQA (``_common.wikiqa_splits``: train, dev, test) or the SQuAD sample (``defaults.load``: its
train/test split, dev the defaults benchmark's validation articles); ``--train-questions`` keeps that many
training questions (a fixed random subset). Test: answered questions (clean protocol). P@1, MAP, MRR: mean ± std over the seeds; paired
randomisation tests of per-question AP (averaged over seeds) against the no-teacher student and the best
single-teacher KD student. Each seed's results (test scores of every row, heads, ensembles' weights, fits) are
stored whole in ``benchmarks/results/scores/`` (keyed by the seed, the data, the fits' keys and this script's
code of a seed): a run stopped early keeps the seeds it finished, and the same command goes on from there, on
this machine or another. Latency: the forward pass on pre-tokenised batches of 128 test pairs (tokenisation
excluded, as the paper), interleaved rounds, one per distinct architecture, each fitted for one epoch on 16
training questions (a forward pass costs the same whatever the weights). ``--quick``: one seed, one epoch,
100 training questions, 40 dev and 60 test questions, 2-fold cross-fitting, 2 timing rounds on 256 pairs.
Seeds side by side (a GPU runs several fits at once): ``--store-teachers S`` per seed, then ``--store-seed S``
per seed, each in its own process, then the command without them gathers the stored seeds and measures latency.
Writes ``benchmarks/results/cerberus.json`` and ``docs/benchmarks/cerberus.md`` (from
``benchmarks/pages/cerberus.md.j2``; ``--render``, or ``python benchmarks/render.py cerberus``, renders it again).
"""

from __future__ import annotations

import argparse
import inspect
import json
import time

import joblib
import numpy as np
import pandas as pd
import torch
from harness import (code_ledger, write_text, COSINET_PAPER_BUDGET, DOCS, RESULTS, SCORES, SHARED_DATA, cache_key, conclude, fitted, log, read_fresh,
                     render_page, run_header, save_stored, subset_questions, syntax, tagged, training_params, wikiqa_splits)
from defaults import load, splits
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline

from harness.teachers import StoredScores, cross_fitted, n_params, teacher_scores, teacher_seeds

from as2rank.lexical.baselines import LexicalFeatures, PointwiseRanker
from as2rank.transformer.cerberus import Cerberus, DistilledRanker, LinearEnsemble, teacher_logits
from as2rank.cosinet.estimator import Cosinet
from as2rank.data import keep_answered
from as2rank.evaluation import compare, evaluate, per_question
from as2rank.neural import autocast, resolve_device, to_device
from as2rank.neural.predict import batch_tensors
from as2rank.transformer.ranker import TransformerRanker

TEACHERS = ("TR", "Cosinet", "Lexical")
KD_ALPHA, TEMPERATURE = 0.5, 3.0
METRICS = ("p@1", "map", "mrr")

#: Layers of the student (and of the minilm-l6 transformer teacher); the Cerberus architectures (body and
#: head layers; Hydra is B5 3H1 too); the test pairs of the end-to-end timing of the teachers.
STUDENT_LAYERS = 6
ARCHITECTURES = {"Cerberus B5 3H1": {"body_layers": 5, "head_layers": 1}, "Cerberus B4 3H2": {"body_layers": 4, "head_layers": 2}}
#: The rows of the paper's configuration that the library-strength run leaves out (no library default to measure).
PAPER_ONLY = ("KD_Sum", "KD_RR", "Cerberus B4 3H2", "Cerberus B5 3H1, in-sample teachers")
TITLES = {"wikiqa": "WikiQA", "sample": "SQuAD sample"}
END_TO_END_PAIRS = 512
#: Training questions of the short fits that latency is measured on (``latency_models``).
LATENCY_FIT_QUESTIONS = 16

# The paper's WikiQA rows of Table 2 (P@1, MAP, MRR), Table 3 and 4 rows (IAS2) where WikiQA has none, and
# Table 5 latency (µs per sample, batch 128, V100). Its teachers are ALBERT-XXLARGE, RoBERTa-LARGE and
# ELECTRA-LARGE, its students ELECTRA-BASE: the analogy with our rows is of role, not of model.
PAPER = {
    "TR": {"row": "row 3, ELECTRA-LARGE teacher", "p@1": 86.7, "map": 91.0, "mrr": 92.2},
    "Cosinet": {"row": "row 2, RoBERTa-LARGE teacher", "p@1": 89.3, "map": 92.6, "mrr": 93.6},
    "Lexical": {"row": "row 1, ALBERT-XXLARGE teacher", "p@1": 87.2, "map": 91.4, "mrr": 92.6},
    "student": {"row": "row 6, ELECTRA-BASE, no teacher", "p@1": 86.3, "map": 90.7, "mrr": 91.9},
    "KD TR": {"row": "row 9, ELECTRA-LARGE → ELECTRA-BASE", "p@1": 88.1, "map": 91.6, "mrr": 92.9},
    "KD Cosinet": {"row": "row 8, RoBERTa-LARGE → RoBERTa-BASE", "p@1": 83.5, "map": 89.2, "mrr": 90.6},
    "KD Lexical": {"row": "row 7, ALBERT-XXLARGE → ALBERT-BASE", "p@1": 84.0, "map": 89.0, "mrr": 90.3},
    "KD ensemble": {"row": "row 12, ensemble of 3 distilled ELECTRA-BASE", "p@1": 88.6, "map": 91.5, "mrr": 92.8},
    "KD_Sum": {"row": "Table 3 (IAS2), KD_Sum ELECTRA-BASE", "p@1": 63.5, "map": 60.1, "mrr": 69.8},
    "KD_RR": {"row": "Table 3 (IAS2), KD_RR ELECTRA-BASE", "p@1": 63.1, "map": 60.2, "mrr": 69.6},
    "Hydra": {"row": "row 13, Hydra", "p@1": 88.1, "map": 91.5, "mrr": 92.8},
    "Cerberus B5 3H1": {"row": "row 14, CERBERUS B11 3H1", "p@1": 89.3, "map": 92.4, "mrr": 93.5},
    "Cerberus B4 3H2": {"row": "Table 4 (IAS2), B10 3H2", "p@1": 64.9, "map": 61.2, "mrr": 70.8},
}
PAPER_LATENCY = {"student": 2.0, "KD ensemble": 6.1, "Cerberus B5 3H1": 2.6}
#: The architecture whose forward pass each row's latency is (the models of one architecture share one
#: measurement); the other rows (Cosinet, Lexical, the teachers' ensemble) are timed end to end.
LATENCY_ARCHITECTURE = {
    "TR": "student", "student": "student", "KD TR": "student", "KD Cosinet": "student", "KD Lexical": "student",
    "KD_Sum": "student", "KD_RR": "student", "KD ensemble": "KD ensemble", "TR ensemble": "KD ensemble",
    "Hydra": "Cerberus B5 3H1",
    "Cerberus B5 3H1": "Cerberus B5 3H1", "Cerberus B4 3H2": "Cerberus B4 3H2",
    "Cerberus B5 3H1, in-sample teachers": "Cerberus B5 3H1",
}


def budget(seed: int, epochs: int) -> dict:
    # The whole budget trained, as in the paper (the transformers' early_stopping="auto" would hold out questions).
    return {"epochs": epochs, "batch_size": 32, "learning_rate": 1e-4, "max_length": 128, "early_stopping": False,
            "random_state": seed}


def teacher_specs(seed, epochs, teacher_model, paper):
    if not paper:
        return {"TR": TransformerRanker(model=teacher_model, random_state=seed), "Cosinet": Cosinet(random_state=seed),
                "Lexical": make_pipeline(LexicalFeatures(), PointwiseRanker(LogisticRegression(C=1.0, max_iter=1000)))}
    # num_layers=6 keeps the cache key of the cascade benchmark's 6-layer TR (same model, same data).
    layers = STUDENT_LAYERS if teacher_model == "minilm-l6" else None
    return {
        "TR": TransformerRanker(model=teacher_model, num_layers=layers, lexical_prior=False, segment_similarity=False,
                                **budget(seed, epochs)),
        "Cosinet": Cosinet(random_state=seed, **COSINET_PAPER_BUDGET),
        "Lexical": make_pipeline(LexicalFeatures(), PointwiseRanker(LogisticRegression(C=1.0, max_iter=1000))),
    }


def students(paper, seed, epochs, cols, hydra, insample) -> dict:
    """The student rows of one seed: the paper's pure models at one budget, or the library's defaults."""
    if not paper:
        return {"student": TransformerRanker(random_state=seed),
                **{f"KD {n}": DistilledRanker(teachers=[c], random_state=seed) for n, c in zip(TEACHERS, cols)},
                "Hydra": Cerberus(teachers=hydra, **ARCHITECTURES["Cerberus B5 3H1"], random_state=seed),
                "Cerberus B5 3H1": Cerberus(teachers=cols, **ARCHITECTURES["Cerberus B5 3H1"], random_state=seed)}
    b = budget(seed, epochs)
    # The paper's students: no lexical prior, no segment similarity (DistilledRanker's defaults have them).
    kd = {"kd_alpha": KD_ALPHA, "temperature": TEMPERATURE, "lexical_prior": False, "segment_similarity": False, **b}
    return {
        "student": TransformerRanker(num_layers=STUDENT_LAYERS, lexical_prior=False, segment_similarity=False, **b),
        **{f"KD {n}": DistilledRanker(teachers=[c], **kd) for n, c in zip(TEACHERS, cols)},
        "KD_Sum": DistilledRanker(teachers=cols, multi_teacher="sum", **kd),
        "KD_RR": DistilledRanker(teachers=cols, multi_teacher="round_robin", **kd),
        "Hydra": Cerberus(teachers=hydra, **ARCHITECTURES["Cerberus B5 3H1"], **kd),
        "Cerberus B5 3H1": Cerberus(teachers=cols, **ARCHITECTURES["Cerberus B5 3H1"], **kd),
        "Cerberus B4 3H2": Cerberus(teachers=cols, **ARCHITECTURES["Cerberus B4 3H2"], **kd),
        "Cerberus B5 3H1, in-sample teachers": Cerberus(
            teachers=[np.ascontiguousarray(c) for c in insample.T], **ARCHITECTURES["Cerberus B5 3H1"], **kd
        ),
    }


def load_data(data):
    """(X_train, y_train), (X_dev, y_dev), (X_test, y_test) of ``data``, test questions answered."""
    if data == "wikiqa":
        if not (SHARED_DATA / "wikiqa" / "WikiQA-train.tsv").exists():
            raise SystemExit(f"WikiQA not found under {SHARED_DATA / 'wikiqa'}; run with --data sample.")
        parts = wikiqa_splits()
        return parts["train"], parts["dev"], keep_answered(*parts["test"])
    X, y, X_test, y_test = load(data)
    train, dev = splits(X, y, "all", 0)
    return train, dev, (X_test, y_test)


def agreement(cols, X) -> dict:
    """How alike the teachers' targets are on the training pairs: the correlation of each two teachers' logits,
    and the share of questions whose top candidate they agree on (``cols``: one array per teacher)."""
    qid = X["qid"].to_numpy()
    tops = [pd.Series(c).groupby(qid).idxmax().to_numpy() for c in cols]
    pairs = [(a, b) for a in range(len(cols)) for b in range(a + 1, len(cols))]
    return {f"{TEACHERS[a]} / {TEACHERS[b]}": {"correlation": float(np.corrcoef(cols[a], cols[b])[0, 1]),
                                               "same_top": float(np.mean(tops[a] == tops[b]))} for a, b in pairs}


def heads_report(model, X, y) -> dict:
    """Each head of a fitted Cerberus on the test data: its MAP alone and the spread of its logits (a head
    whose logits spread wider weighs more in the mean that ``predict`` takes)."""
    heads = model.predict_heads(X)
    return {"map": [evaluate(y, heads[:, j], X, metrics=("map",), use_position=False)["map"] for j in range(heads.shape[1])],
            "std": heads.std(axis=0).tolist(), "correlation": np.corrcoef(heads.T).tolist()}


def ensemble_scores(ens, scores):
    """``ens.predict`` from the members' scores already in hand (columns in member order)."""
    return (scores * ens.calibration_[:, 0] + ens.calibration_[:, 1]) @ ens.weights_


# ----------------------------------------------------------------------------------------------- latency
def forward_fn(predictors, batches, device):
    """Time the forward passes of ``predictors`` (the ``predictor()`` of one architecture, or of the members of
    an ensemble) over ``batches``."""

    def run():
        with torch.inference_mode():
            for batch in batches:
                for p in predictors:
                    with autocast(device, p.dtype):
                        out = p.module(batch)
                    if out.ndim == 2:  # Cerberus: Eq. 5
                        out.mean(dim=1)
        if device.type == "cuda":
            torch.cuda.synchronize(device)  # CUDA runs asynchronously: time the work, not its launch

    return run


def latency(archs, X, rounds, n_pairs):
    """Median µs per sample of each architecture at batch 128 (tokenisation excluded), and per-round ratios,
    on the device the models predict on (``device="auto"``: the GPU when there is one)."""
    device = resolve_device("auto")
    first = next(iter(archs.values()))[0]
    rows = np.arange(min(n_pairs, len(X)))
    encoded = first.encode(X.iloc[rows])
    batches = [to_device(batch_tensors(encoded, rows[i : i + 128]), device) for i in range(0, len(rows), 128)]
    runs = {name: forward_fn([m.predictor(device) for m in models], batches, device) for name, models in archs.items()}
    # The heads' blocks: how many heads each call computes (all k = one computation for all heads), and how
    # many calls per batch (one per row block: CPU inference runs the heads over row blocks, see
    # CerberusEncoder.head_rows).
    calls = []
    cerberus = archs["Cerberus B5 3H1"][0].model_
    hooks = [b.register_forward_hook(lambda m, a, o: calls.append(a[0].shape[0])) for b in cerberus.heads]
    for run in runs.values():  # warm-up
        run()
    for h in hooks:
        h.remove()
    head_calls_per_batch = len(calls) / len(batches)
    times = {name: [] for name in runs}
    for r in range(rounds):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            times[name].append(1e6 * (time.perf_counter() - start) / len(rows))
        log(f"[latency] round {r}: " + ", ".join(f"{n} {t[-1]:.0f} µs" for n, t in times.items()))
    ratios = {
        "cerberus_vs_student": [c / s for c, s in zip(times["Cerberus B5 3H1"], times["student"])],
        "cerberus_vs_kd_ensemble": [c / e for c, e in zip(times["Cerberus B5 3H1"], times["KD ensemble"])],
    }
    if "TR teacher" in times:
        ratios["cerberus_vs_teacher"] = [c / t for c, t in zip(times["Cerberus B5 3H1"], times["TR teacher"])]
    return {
        "us_per_sample": {n: float(np.median(t)) for n, t in times.items()},
        "rounds": times,
        "ratios": ratios,
        "median_ratio": {k: float(np.median(v)) for k, v in ratios.items()},
        "n_pairs": len(rows),
        "batch_size": 128,
        "head_block_calls_per_batch": head_calls_per_batch,
        "heads_per_head_block_call": sorted(set(calls)),
        "n_heads": cerberus.n_heads,
        "n_head_blocks": len(cerberus.heads),
    }


def end_to_end_us(model, X):
    start = time.perf_counter()
    model.predict(X)
    return 1e6 * (time.perf_counter() - start) / len(X)


# ----------------------------------------------------------------------------------------------- main run
def seed_key(args, s, epochs, data) -> str:
    """What one seed's results depend on: the seed, the data, the teachers' fit keys (the library's code
    included), the students' training parameters (their teacher arrays follow from the teachers), the
    cross-fitting folds and the code of this script that computes a seed."""
    X_train, y_train = data[0]
    specs = [spec for t in teacher_seeds(args, s) for spec in teacher_specs(t, epochs, args.teacher_model, args.paper).values()]
    blank = [np.zeros(1)] * len(TEACHERS)
    studs = students(args.paper, s, epochs, blank, blank, np.zeros((1, len(TEACHERS))))
    config = {n: {k: v for k, v in training_params(e).items() if k != "teachers"} for n, e in studs.items()}
    code = [syntax(inspect.getsource(f)) for f in (seed_results, teacher_specs, students, budget, cross_fitted,
                                                    teacher_scores, heads_report, agreement, ensemble_scores, n_params,
                                                    train_map)]
    return joblib.hash(("cerberus seed", s, data, args.teacher_cv, teacher_seeds(args, s), args.hydra_seeds,
                        [cache_key(spec, X_train, y_train) for spec in specs], config, code))


def seed_results(args, s, epochs, data) -> tuple[dict, dict]:
    """One seed: ``(record, scores)``, the record JSON-able (parameters, heads, agreement, ensembles' weights,
    the teachers' training MAP, the fits) and ``scores`` the test scores of every row."""
    (X_train, y_train), (X_dev, y_dev), (X_test, y_test) = data
    fits = []

    def fit(est, row):
        model = fitted(est, X_train, y_train, fits)
        fits[-1]["row"] = row
        return model

    own, *_ = seeds = teacher_seeds(args, s)
    hydra_seeds = list(range(args.hydra_seeds))
    specs = {t: teacher_specs(t, epochs, args.teacher_model, args.paper) for t in seeds}
    oof = {(n, t): cross_fitted(specs[t][n], X_train, y_train, args.teacher_cv)
           for t in specs for n in TEACHERS if t == own or n == "TR"}
    rec = {"seed": s, "teacher_seed": own, "oof_map": {f"{n} seed {t}": train_map(y_train, v, X_train) for (n, t), v in oof.items()},
           "insample_map": {}, "params": {}, "ensemble_weights": {}, "fits": fits}
    # The teachers' scores from the teacher artefacts (a teacher's model is needed only the first time).
    stored = {name: teacher_scores(spec, data, fits, f"teacher {name}") for name, spec in specs[own].items()}
    # Hydra's teachers fitted on all the training questions: their ensemble is the strength of its teacher set.
    stored.update({f"TR seed {t}": stored["TR"] if t == own else teacher_scores(specs[t]["TR"], data, fits, f"teacher TR seed {t}")
                   for t in hydra_seeds})
    teachers = {name: StoredScores([(X_test, v["test"]), (X_dev, v["dev"])]) for name, (v, _) in stored.items()}
    cols = [np.ascontiguousarray(oof[(n, own)]) for n in TEACHERS]
    # Rounded: the arrays join the students' cache keys, which float noise in the last bits would change.
    insample = np.round(teacher_logits([stored[n][0]["train"] for n in TEACHERS], X_train, y_train), 5)
    for j, n in enumerate(TEACHERS):
        rec["insample_map"][f"{n} seed {own}"] = train_map(y_train, insample[:, j], X_train)
    rec["agreement"] = agreement(cols, X_train)
    hydra = [np.ascontiguousarray(oof[("TR", t)]) for t in hydra_seeds]
    studs = students(args.paper, s, epochs, cols, hydra, insample)
    models = {name: fit(est, name) for name, est in studs.items() if hydra_seeds or name != "Hydra"}
    rec["heads"] = heads_report(models["Cerberus B5 3H1"], X_test, y_test)
    rec["hydra_heads"] = heads_report(models["Hydra"], X_test, y_test) if hydra_seeds else None
    scores = {name: v["test"] for name, (v, _) in stored.items()}
    rec["params"] = {name: n for name, (_, n) in stored.items()}
    for name, model in models.items():
        log(f"[seed {s}] scoring {name}")
        scores[name] = np.asarray(model.predict(X_test), dtype=np.float64)
        rec["params"][name] = n_params(model)
    models.update(teachers)
    # Linear ensembles, weights tuned on dev; their test scores from the members' scores above.
    ensembles = (("teacher ensemble", list(TEACHERS)), ("TR ensemble", [f"TR seed {t}" for t in hydra_seeds]),
                 ("KD ensemble", [f"KD {n}" for n in TEACHERS]))
    for ens_name, members in ensembles:
        if not members:
            continue
        ens = LinearEnsemble([models[m] for m in members]).fit(X_dev, y_dev)
        scores[ens_name] = ensemble_scores(ens, np.column_stack([scores[m] for m in members]))
        rec["params"][ens_name] = sum(rec["params"][m] for m in members)
        rec["ensemble_weights"][ens_name] = {"weights": ens.weights_.tolist(), "dev_map": ens.dev_score_}
        log(f"[seed {s}] {ens_name}: weights {np.round(ens.weights_, 2).tolist()}, dev MAP {ens.dev_score_:.4f}")
    return rec, scores


def latency_models(args, X_train, y_train):
    """Each latency row's architecture (seed 0) fitted for one epoch on ``LATENCY_FIT_QUESTIONS`` training
    questions, the labels standing for the teachers' logits: a forward pass costs the same whatever the
    weights, so latency needs the rows' architectures, not their full fits (whose scores may be stored)."""
    X, y = subset_questions(X_train, y_train, LATENCY_FIT_QUESTIONS)
    labels = np.where(np.asarray(y) > 0, 2.0, -2.0)
    cols = [labels] * len(TEACHERS)

    def short(est):
        return fitted(est.set_params(epochs=1) if "epochs" in est.get_params() else est, X, y)

    teachers = {n: short(e) for n, e in teacher_specs(0, 1, args.teacher_model, args.paper).items()}
    studs = students(args.paper, 0, 1, cols, cols, np.column_stack(cols))
    keep = {k: short(studs[k]) for k in ("student", "KD TR", "KD Cosinet", "KD Lexical", "Cerberus B5 3H1", "Cerberus B4 3H2")
            if k in studs}
    return teachers, keep


def prepared(args):
    """The run's ``(train, dev, test)`` pairs: ``--data`` with ``--train-questions`` and ``--quick`` applied."""
    (X_train, y_train), (X_dev, y_dev), (X_test, y_test) = load_data(args.data)
    X_train, X_dev, X_test = (X.reset_index(drop=True) for X in (X_train, X_dev, X_test))
    if args.train_questions:
        X_train, y_train = subset_questions(X_train, y_train, args.train_questions)
    if args.quick:
        X_train, y_train = subset_questions(X_train, y_train, 100)
        X_dev, y_dev = subset_questions(X_dev, y_dev, 40)
        X_test, y_test = subset_questions(X_test, y_test, 60)
    return ((X_train, y_train), (X_dev, y_dev), (X_test, y_test))


def seed_path(args, s, data):
    return SCORES / f"cerberus-seed-{seed_key(args, s, args.epochs, data)}.npz"


def stored_seed(args, s, data) -> tuple[dict, dict, bool]:
    """``(record, scores, stored)`` of seed ``s``: read back while the library code its fits and scores ran
    (the record's ``code``) is unchanged, else computed and stored whole with that code."""
    path = seed_path(args, s, data)
    stored = read_fresh(path, f"results of seed {s}")
    if stored:
        log(f"[seed {s}] stored results <- {path.name}")
        return (*stored, True)
    with code_ledger() as code:
        rec, scores = seed_results(args, s, args.epochs, data)
    rec["code"] = code
    save_stored(path, rec, scores)
    return rec, scores, False


def store_teachers(args, t, data):
    """Seed ``t``'s teachers cross-fitted and fitted (the fit cache and the score store keep them), so that
    ``--store-seed`` processes running side by side do not each fit Hydra's shared transformer teachers."""
    X_train, y_train = data[0]
    for name, spec in teacher_specs(t, args.epochs, args.teacher_model, args.paper).items():
        if name == "TR" or t < args.seeds or t == args.teacher_seed:
            cross_fitted(spec, X_train, y_train, args.teacher_cv)
            teacher_scores(spec, data, [], f"teacher {name}")


def run(args):
    data = prepared(args)
    (X_train, y_train), (X_dev, y_dev), (X_test, y_test) = data
    seeds, epochs = list(range(args.seeds)), args.epochs
    res = {"data": args.data, "title": TITLES[args.data], "teachers": list(TEACHERS), "paper_config": args.paper, "args_train_questions": args.train_questions,
           "n_train_questions": int(X_train["qid"].nunique()), "n_train_rows": len(X_train),
           "n_dev_questions": int(X_dev["qid"].nunique()), "n_test_questions": int(X_test["qid"].nunique()),
           "n_test_rows": len(X_test), "seeds": seeds, "epochs": epochs, "teacher_cv": args.teacher_cv,
           "teacher_model": args.teacher_model, "kd_alpha": KD_ALPHA, "temperature": TEMPERATURE,
           "budget": {k: v for k, v in budget(0, epochs).items() if k not in ("epochs", "random_state")} if args.paper else None,
           "student_layers": STUDENT_LAYERS, "architectures": ARCHITECTURES, "hydra_teacher_seeds": list(range(args.hydra_seeds)),
           "teacher_seed": args.teacher_seed,
           "latency_architecture": LATENCY_ARCHITECTURE, "latency_fit_questions": LATENCY_FIT_QUESTIONS,
           "paper": PAPER, "paper_latency": PAPER_LATENCY, "fits": [], "ensemble_weights": {}}
    scores, params, oof_map, insample_map = {}, {}, {}, {}
    for s in seeds:
        # A seed's results are stored whole (benchmarks/results/scores/): a run that ends early keeps the seeds
        # it finished, and the next run, here or on another machine, goes on from there.
        rec, seed_scores, stored = stored_seed(args, s, data)
        for name, v in seed_scores.items():
            scores.setdefault(name, []).append(v)
        params.update(rec["params"])
        oof_map.update(rec["oof_map"])
        insample_map.update(rec["insample_map"])
        for key, out in (("agreement", "teacher_agreement"), ("heads", "heads"), ("hydra_heads", "hydra_heads")):
            res.setdefault(out, []).append(rec[key])
        for ens_name, w in rec["ensemble_weights"].items():
            res["ensemble_weights"].setdefault(ens_name, []).append(w)
        res["fits"] += [{**f, "cached": True} if stored else f for f in rec["fits"]]

    teachers, keep = latency_models(args, X_train, y_train)
    X_e2e = X_test.iloc[: min(END_TO_END_PAIRS, len(X_test))]
    archs = {"student": [keep["student"]], "KD ensemble": [keep[f"KD {n}"] for n in TEACHERS],
             **{a: [keep[a]] for a in ARCHITECTURES if a in keep}}
    if args.teacher_model != "minilm-l6":  # a teacher of another architecture: timed as the students are
        archs["TR teacher"] = [teachers["TR"]]
        res["latency_architecture"] = {**LATENCY_ARCHITECTURE, "TR": "TR teacher"}
    res["latency"] = latency(archs, X_test, rounds=2 if args.quick else 5, n_pairs=256 if args.quick else 1024)
    res["latency"]["end_to_end_us_per_sample"] = {name: end_to_end_us(teachers[name], X_e2e) for name in TEACHERS}
    res["latency"]["end_to_end_n_pairs"] = len(X_e2e)
    res["teacher_targets"] = {"cross_fitted_train_map": oof_map, "in_sample_train_map": insample_map}
    res["rows"], res["best_kd"] = summarise(scores, params, y_test, X_test, args.teacher_model)
    return res


ROW_ORDER = [
    ("TR", "Teacher: TransformerRanker (MiniLM-L6)", "teacher"),
    ("Cosinet", "Teacher: Cosinet + BiRNN", "teacher"),
    ("Lexical", "Teacher: Lexical + LR", "teacher"),
    ("teacher ensemble", "Teachers' linear ensemble (dev-tuned)", "ensemble"),
    ("TR ensemble", "Hydra's teachers' linear ensemble (TR seeds 0-2, dev-tuned)", "ensemble"),
    ("student", "Student, no teacher (= the TR teacher)", "student"),
    ("KD TR", "KD student ← TR", "student"),
    ("KD Cosinet", "KD student ← Cosinet", "student"),
    ("KD Lexical", "KD student ← Lexical", "student"),
    ("KD ensemble", "Ensemble of the 3 KD students (dev-tuned)", "ensemble"),
    ("KD_Sum", "KD_Sum (one head, 3 teachers)", "student"),
    ("KD_RR", "KD_RR (one head, round-robin)", "student"),
    ("Hydra", "Hydra B5 3H1 (3 TR teachers, seeds 0-2)", "student"),
    ("Cerberus B5 3H1", "**Cerberus B5 3H1**", "student"),
    ("Cerberus B4 3H2", "Cerberus B4 3H2", "student"),
    ("Cerberus B5 3H1, in-sample teachers", "Cerberus B5 3H1, in-sample teacher scores", "student"),
]


def train_map(y, scores, X) -> float:
    """MAP of a teacher's scores on the training questions."""
    return evaluate(y, scores, X, metrics=("map",), use_position=False)["map"]


def summarise(scores, params, y, X, teacher_model="minilm-l6") -> list:
    # Per-question AP, mean over seeds: what the paired tests compare.
    per_q = {n: np.mean([per_question(y, s, X, "map", use_position=False) for s in v], axis=0) for n, v in scores.items()}
    metrics = {n: [evaluate(y, s, X, metrics=METRICS) for s in v] for n, v in scores.items()}
    mean_map = {n: np.mean([m["map"] for m in ms]) for n, ms in metrics.items()}
    best_kd = max((f"KD {t}" for t in TEACHERS), key=mean_map.get)
    vs_student, vs_best_kd = compare(per_q, "student"), compare(per_q, best_kd)
    rows = []
    for key, label, group in ROW_ORDER:
        if key not in metrics:  # a row of the paper's configuration only
            continue
        ms = metrics[key]
        if teacher_model != "minilm-l6" and key in ("TR", "student"):  # the teacher is not the student's model
            label = f"Teacher: TransformerRanker ({teacher_model})" if key == "TR" else "Student, no teacher (MiniLM-L6)"
        row = {"key": key, "label": label, "group": group, "params": params[key], "n_seeds": len(ms)}
        for m in METRICS:
            vals = [r[m] for r in ms]
            row[m] = {"mean": float(np.mean(vals)), "std": float(np.std(vals)), "per_seed": vals}
        row["p_map_vs_student"] = None if key in ("student", "TR") else vs_student[key]["p"]
        row["p_map_vs_best_kd"] = None if key == best_kd else vs_best_kd[key]["p"]
        rows.append(row)
    return rows, best_kd


# ----------------------------------------------------------------------------------------------- report
def acceptance(res) -> list:
    rows = {r["key"]: r for r in res["rows"]}
    cer, student, kd = rows["Cerberus B5 3H1"], rows["student"], rows[res["best_kd"]]
    lat = res["latency"]["median_ratio"]
    c_map = cer["map"]["mean"]
    checks = [
        (f"MAP (mean of {cer['n_seeds']} seed(s)): Cerberus B5 3H1 > best single-teacher KD student ({kd['label']})",
         f"{100 * c_map:.2f} vs {100 * kd['map']['mean']:.2f} (Δ {100 * (c_map - kd['map']['mean']):+.2f}, p={cer['p_map_vs_best_kd']:.3f})",
         c_map > kd["map"]["mean"]),
        ("MAP: Cerberus B5 3H1 > the student with no teacher",
         f"{100 * c_map:.2f} vs {100 * student['map']['mean']:.2f} (Δ {100 * (c_map - student['map']['mean']):+.2f}, "
         f"p={cer['p_map_vs_student']:.3f})", c_map > student["map"]["mean"]),
        ("Latency, batch 128: Cerberus B5 3H1 ≤ 1.4× the single student",
         f"{lat['cerberus_vs_student']:.2f}× (median of per-round ratios: "
         + ", ".join(f"{r:.2f}" for r in res["latency"]["ratios"]["cerberus_vs_student"]) + ")",
         lat["cerberus_vs_student"] <= 1.4),
        ("Latency, batch 128: Cerberus B5 3H1 ≤ 0.5× the ensemble of the 3 KD students",
         f"{lat['cerberus_vs_kd_ensemble']:.2f}× (" + ", ".join(f"{r:.2f}" for r in res["latency"]["ratios"]["cerberus_vs_kd_ensemble"]) + ")",
         lat["cerberus_vs_kd_ensemble"] <= 0.5),
        ("The heads run as one batched computation: every call of a head block computes all k heads",
         f"heads per call: {res['latency']['heads_per_head_block_call']} of k={res['latency']['n_heads']}; "
         f"{res['latency']['head_block_calls_per_batch'] / res['latency']['n_head_blocks']:.0f} call(s) per block "
         "per batch of 128 (row blocks in CPU inference)",
         res["latency"]["heads_per_head_block_call"] == [res["latency"]["n_heads"]]),
    ]
    if "cerberus_vs_teacher" in lat:
        checks.append((f"Latency, batch 128: Cerberus B5 3H1 ≤ 0.5× the transformer teacher ({res['teacher_model']})",
                       f"{lat['cerberus_vs_teacher']:.2f}× (" + ", ".join(f"{r:.2f}" for r in res["latency"]["ratios"]["cerberus_vs_teacher"]) + ")",
                       lat["cerberus_vs_teacher"] <= 0.5))
    if "Hydra" in rows:  # the remedy: teachers as strong as the student
        hy = rows["Hydra"]
        checks.append((f"MAP: Hydra (Cerberus B5 3H1 ← TR seeds {', '.join(map(str, res['hydra_teacher_seeds']))}) > the student with no teacher",
                       f"{100 * hy['map']['mean']:.2f} vs {100 * student['map']['mean']:.2f} (p={hy['p_map_vs_student']:.3f})",
                       hy["map"]["mean"] > student["map"]["mean"]))
    return [{"check": c, "measured": m, "pass": bool(ok)} for c, m, ok in checks]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", choices=tuple(TITLES), default="wikiqa")
    parser.add_argument("--paper", action="store_true", help="the paper's pure models at one budget, every row")
    parser.add_argument("--train-questions", type=int, default=None, help="keep this many training questions")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=2, help="with --paper: epochs of every transformer")
    parser.add_argument("--teacher-cv", type=int, default=3, help="question folds of the cross-fitted teacher targets")
    parser.add_argument("--teacher-model", default="minilm-l6", help="backbone of the transformer teacher")
    parser.add_argument("--teacher-seed", type=int, default=None,
                        help="the one seed whose teachers every student seed distils (default: each seed its own)")
    parser.add_argument("--hydra-seeds", type=int, default=3, help="transformer teachers of Hydra (0: no Hydra row)")
    parser.add_argument("--quick", action="store_true", help="1 seed, 1 epoch, 100/40/60 train/dev/test questions, 2 folds")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--render", action="store_true", help="only re-write the Markdown page from the JSON")
    parser.add_argument("--store-teachers", type=int, metavar="S", default=None,
                        help="only fit and store seed S's teachers (run one process per seed, before --store-seed)")
    parser.add_argument("--store-seed", type=int, metavar="S", default=None,
                        help="only compute and store seed S's results (one process per seed, side by side)")
    args = parser.parse_args(argv)
    name = (("cerberus" if args.paper else "cerberus-library") + ("" if args.data == "wikiqa" else f"-{args.data}")
            + ("" if args.teacher_model == "minilm-l6" else f"-{args.teacher_model.replace('/', '-')}"))
    if args.render:
        res = json.loads((RESULTS / tagged(f"{name}.json")).read_text())
        write_text(DOCS / tagged(f"{name}.md"), render_page(res))
        log(f"re-rendered {DOCS / tagged(f'{name}.md')}")
        return
    if args.quick:
        args.seeds, args.epochs, args.teacher_cv = 1, 1, 2
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.store_teachers is not None or args.store_seed is not None:
        data = prepared(args)
        if args.store_teachers is not None:
            store_teachers(args, args.store_teachers, data)
        if args.store_seed is not None:
            stored_seed(args, args.store_seed, data)
        log("stored; a run without --store-teachers/--store-seed gathers the seeds and writes the page")
        return
    start = time.perf_counter()
    res = {
        **run_header("cerberus.py", argv),
        "quick": f"one seed{', one epoch' if args.paper else ''}, 100 training / 40 dev / 60 test questions (fixed random "
                 "subsets), 2-fold cross-fitting, 2 timing rounds on 256 pairs" if args.quick else "",
    }
    res.update(run(args))
    res["template"] = "cerberus"
    conclude(res, name, start, acceptance(res))


if __name__ == "__main__":
    main()
