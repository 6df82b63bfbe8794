"""CERBERUS: Tables 2, 3 and 5 of Matsubara et al. (2022) on WikiQA or the SQuAD sample (``cerberus.toml``).

    python benchmarks/cerberus.py [--data wikiqa|sample] [--paper] [--seeds 3] [--train-questions N] [--quick]
                                  [--threads N] [--teacher-cv 3] [--teacher-model NAME] [--teacher-seed T]
                                  [--hydra-seeds 3] [--render] [--cached-only]
    python benchmarks/cerberus.py ... --store-teachers S | --store-seed S   # one seed's part, in parallel

The functions that compute a seed (:func:`seed_results` and those :func:`seed_key` names) are part of the key of
each stored seed: an edit of their code computes the seeds again.
"""

from __future__ import annotations

import inspect
import time

import joblib
import numpy as np
import pandas as pd
import torch
from harness import experiment, fitted, log, subset_questions, syntax, training_params, wikiqa_splits
from harness.data import load_answered, training_subset
from harness.experiment import Experiment, read_paper
from harness.library import (Cerberus, Cosinet, DistilledRanker, LexicalFeatures, LinearEnsemble, PointwiseRanker,
                             TransformerRanker, autocast, batch_tensors, compare, evaluate, keep_answered, per_question,
                             resolve_device, teacher_logits, to_device)
from harness.paths import SCORES
from harness.store import cache_key, stored_or_computed
from harness.teachers import StoredScores, cross_fitted, n_params, teacher_scores, teacher_seeds
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline

CONFIG = Experiment(__file__).config
TEACHERS = tuple(CONFIG["models"]["teachers"])
KD_ALPHA, TEMPERATURE = CONFIG["models"]["kd_alpha"], CONFIG["models"]["temperature"]
METRICS = tuple(CONFIG["models"]["metrics"])
STUDENT_LAYERS = CONFIG["models"]["student_layers"]
ARCHITECTURES = CONFIG["models"]["architectures"]
COSINET_PAPER_BUDGET = read_paper("cosinet.json")["budget"]


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
    """(X_train, y_train), (X_dev, y_dev), (X_test, y_test) of ``data``, test questions answered: WikiQA's
    splits, or the SQuAD sample's train/test split with the defaults benchmark's validation articles as dev."""
    if data == "wikiqa":
        parts = wikiqa_splits()
        return parts["train"], parts["dev"], keep_answered(*parts["test"])
    X, y, X_test, y_test = load_answered(data)
    train, dev = training_subset(X, y, "all", 0)
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


# ----------------------------------------------------------------------------------------------- a seed
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


def latency_models(args, X_train, y_train, fit_questions):
    """Each latency row's architecture (seed 0) fitted for one epoch on ``fit_questions`` training questions, the
    labels standing for the teachers' logits: a forward pass costs the same whatever the weights, so latency needs
    the rows' architectures, not their full fits (whose scores may be stored)."""
    X, y = subset_questions(X_train, y_train, fit_questions)
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


def stored_seed(args, s, data) -> tuple[dict, dict, bool]:
    """``(record, scores, stored)`` of seed ``s``: read back while the library code its fits and scores ran is
    unchanged, else computed and stored whole with that code."""
    path = SCORES / f"cerberus-seed-{seed_key(args, s, args.epochs, data)}.npz"
    return stored_or_computed(path, f"results of seed {s}", lambda: seed_results(args, s, args.epochs, data))


def store_teachers(args, t, data):
    """Seed ``t``'s teachers cross-fitted and fitted (the fit cache and the score store keep them), so that
    ``--store-seed`` processes running side by side do not each fit Hydra's shared transformer teachers."""
    X_train, y_train = data[0]
    for name, spec in teacher_specs(t, args.epochs, args.teacher_model, args.paper).items():
        if name == "TR" or t < args.seeds or t == args.teacher_seed:
            cross_fitted(spec, X_train, y_train, args.teacher_cv)
            teacher_scores(spec, data, [], f"teacher {name}")


def page(args) -> str:
    return (("cerberus" if args.paper else "cerberus-library") + ("" if args.data == "wikiqa" else f"-{args.data}")
            + ("" if args.teacher_model == "minilm-l6" else f"-{args.teacher_model.replace('/', '-')}"))


def run(exp, args, res):
    data = prepared(args)
    if args.store_teachers is not None or args.store_seed is not None:
        if args.store_teachers is not None:
            store_teachers(args, args.store_teachers, data)
        if args.store_seed is not None:
            stored_seed(args, args.store_seed, data)
        log("stored; a run without --store-teachers/--store-seed gathers the seeds and writes the page")
        return False
    (X_train, y_train), (X_dev, y_dev), (X_test, y_test) = data
    cfg, seeds, epochs = exp.config, list(range(args.seeds)), args.epochs
    res.update(quick=f"one seed{', one epoch' if args.paper else ''}, 100 training / 40 dev / 60 test questions (fixed "
                     "random subsets), 2-fold cross-fitting, 2 timing rounds on 256 pairs" if args.quick else "",
               data=args.data, title=cfg["models"]["titles"][args.data], teachers=list(TEACHERS), paper_config=args.paper,
               args_train_questions=args.train_questions, n_train_questions=int(X_train["qid"].nunique()),
               n_train_rows=len(X_train), n_dev_questions=int(X_dev["qid"].nunique()),
               n_test_questions=int(X_test["qid"].nunique()), n_test_rows=len(X_test), seeds=seeds, epochs=epochs,
               teacher_cv=args.teacher_cv, teacher_model=args.teacher_model, kd_alpha=KD_ALPHA, temperature=TEMPERATURE,
               budget={k: v for k, v in budget(0, epochs).items() if k not in ("epochs", "random_state")} if args.paper else None,
               student_layers=STUDENT_LAYERS, architectures=ARCHITECTURES, hydra_teacher_seeds=list(range(args.hydra_seeds)),
               teacher_seed=args.teacher_seed, latency_architecture=cfg["latency"]["architecture"],
               latency_fit_questions=cfg["latency"]["fit_questions"], paper=exp.paper["table"],
               paper_latency=exp.paper["latency"], fits=[], ensemble_weights={})
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
    res["teacher_targets"] = {"cross_fitted_train_map": oof_map, "in_sample_train_map": insample_map}
    res["rows"], res["best_kd"] = summarise(cfg, scores, params, y_test, X_test, args.teacher_model)
    if args.teacher_model != "minilm-l6":  # a teacher of another architecture: timed as the students are
        res["latency_architecture"] = {**res["latency_architecture"], "TR": "TR teacher"}
    teachers, keep = latency_models(args, X_train, y_train, cfg["latency"]["fit_questions"])
    X_e2e = X_test.iloc[: min(cfg["latency"]["end_to_end_pairs"], len(X_test))]
    archs = {"student": [keep["student"]], "KD ensemble": [keep[f"KD {n}"] for n in TEACHERS],
             **{a: [keep[a]] for a in ARCHITECTURES if a in keep}}
    if args.teacher_model != "minilm-l6":
        archs["TR teacher"] = [teachers["TR"]]
    res["latency"] = latency(archs, X_test, rounds=2 if args.quick else 5, n_pairs=256 if args.quick else 1024)
    res["latency"]["end_to_end_us_per_sample"] = {name: end_to_end_us(teachers[name], X_e2e) for name in TEACHERS}
    res["latency"]["end_to_end_n_pairs"] = len(X_e2e)


def train_map(y, scores, X) -> float:
    """MAP of a teacher's scores on the training questions."""
    return evaluate(y, scores, X, metrics=("map",), use_position=False)["map"]


def summarise(cfg, scores, params, y, X, teacher_model="minilm-l6") -> tuple[list, str]:
    """The rows of the tables (mean, standard deviation and per-seed value of each metric; the p-values of the
    paired tests of per-question AP, averaged over seeds, against the student and the best KD student), and the
    best KD student."""
    per_q = {n: np.mean([per_question(y, s, X, "map", use_position=False) for s in v], axis=0) for n, v in scores.items()}
    metrics = {n: [evaluate(y, s, X, metrics=METRICS) for s in v] for n, v in scores.items()}
    mean_map = {n: np.mean([m["map"] for m in ms]) for n, ms in metrics.items()}
    best_kd = max((f"KD {t}" for t in TEACHERS), key=mean_map.get)
    vs_student, vs_best_kd = compare(per_q, "student"), compare(per_q, best_kd)
    rows = []
    for key, label, group in cfg["models"]["row_order"]:
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


if __name__ == "__main__":
    experiment.main(__file__, run, page=page)
