"""The teacher artefacts of the distillation benchmarks: a costly teacher (an MPNet ranker on a CPU takes hours)
is fitted once, by whichever run needs it first, and what the students need of it is stored in
``benchmarks/results/scores/`` (committed): its cross-fitted logits on the training rows (:func:`cross_fitted`)
and its scores of the test, training and dev rows (:func:`teacher_scores`). Each is keyed by what was asked
(the teacher's class, parameters, starting weights and data: :func:`harness.store.cache_key`) and holds the
code record of the library code that fitted and scored it (:mod:`harness.fitcode`): it is read back only
while that code is unchanged, and computed again otherwise."""

from __future__ import annotations

import contextlib
import time

import joblib
import numpy as np
from sklearn.base import BaseEstimator

from harness import fitcode
from harness.fitcode import code_record
from harness.library import teacher_logits
from harness.machine import log, machine
from harness.paths import SCORES
from harness.store import cache_key, computing, fitted, inference_params, note_code, read_fresh, save_stored


@contextlib.contextmanager
def traced():
    """:func:`harness.fitcode.traced` around what this module computes (a cross-fit, a teacher's scores), which a
    ``--cached-only`` run refuses. (The functions below keep their source: it is part of the keys of the seeds
    that the CERBERUS benchmark stores.)"""
    computing("a teacher artefact")
    with fitcode.traced() as ran:
        yield ran


def cross_fitted(spec, X, y, cv):
    """``teacher_logits([spec], X, y, cv=cv)[:, 0]``, stored in ``benchmarks/results/scores/`` (its ``cv`` fits
    are not cached otherwise, and Hydra's targets, the transformer teachers' of seeds 0-2, serve every seed)."""
    # The fit cache's key (estimator, parameters, weights, data and the library's code) and the folds: logits of
    # an earlier version of the library are not read back.
    key = joblib.hash(("teacher_logits", cache_key(spec, X, y), cv))
    path = SCORES / f"teacher_logits-{key}.npz"
    stored = read_fresh(path, f"{type(spec).__name__} teacher logits")
    if stored:
        return stored[1]["logits"]
    log(f"cross-fitting {type(spec).__name__} ({cv} folds)")
    start = time.perf_counter()
    with traced() as ran:
        # float64 as stored, so that the students' keys (which hold these arrays) are the same in a later run.
        logits = np.asarray(teacher_logits([spec], X, y, cv=cv)[:, 0], dtype=np.float64)
    code = code_record(ran)
    note_code(code)
    save_stored(path, {"teacher": type(spec).__name__, "cv": cv, "seconds": time.perf_counter() - start,
                       "machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M"), "code": code}, {"logits": logits})
    return logits


def n_params(model) -> int:
    if hasattr(model, "model_"):
        return int(sum(p.numel() for p in model.model_.parameters()))
    if hasattr(model, "n_params_"):
        return int(model.n_params_)
    if hasattr(model, "steps"):  # the lexical pipeline: logistic regression coefficients
        est = model[-1].estimator_
        return int(est.coef_.size + est.intercept_.size)
    return 0  # a rule


def teacher_seeds(args, s) -> list:
    """The seeds whose teachers seed ``s`` reads: its teachers' (``--teacher-seed``, or ``s``), then Hydra's."""
    own = s if args.teacher_seed is None else args.teacher_seed
    return [own] + [t for t in range(args.hydra_seeds) if t != own]


class StoredScores(BaseEstimator):
    """A teacher read back from the score store: ``predict`` gives its stored scores of the frames it scored
    (a linear ensemble of teachers needs only those), and refuses any other rows."""

    def __init__(self, frames):
        self.frames = frames

    def fit(self, X, y=None):
        raise TypeError("a stored teacher is fitted already")

    def __sklearn_is_fitted__(self):
        return True

    def predict(self, X):
        for frame, scores in self.frames:
            if len(frame) == len(X) and frame.equals(X):
                return scores
        raise ValueError("no stored scores for these rows")


def teacher_scores(spec, data, fits, row) -> tuple[dict, int]:
    """``({"test", "train", "dev": scores}, n_params)`` of the teacher ``spec`` fitted on the training rows: read
    from ``benchmarks/results/scores/`` (keyed by the fit's key, the inference parameters and the three frames;
    read back only while the code that fitted and scored it is unchanged), else fitted (``fitted``) and stored."""
    (X_train, y_train), (X_dev, _), (X_test, _) = data
    frames = {"test": X_test, "train": X_train, "dev": X_dev}
    key = joblib.hash(("teacher scores", cache_key(spec, X_train, y_train), inference_params(spec), frames))
    path = SCORES / f"teacher_scores-{type(spec).__name__}-{key}.npz"
    stored = read_fresh(path, f"scores of {row}")
    if stored:
        record, arrays = stored
        fits.append({**record, "cached": True, "row": row})
        return arrays, record["n_params"]
    model = fitted(spec, X_train, y_train, fits)
    with traced() as ran:
        arrays = {part: np.asarray(model.predict(X), dtype=np.float64) for part, X in frames.items()}
    record = {k: v for k, v in fits[-1].items() if k != "cached"}
    record.update(code={**record.get("code", {}), **code_record(ran)}, n_params=n_params(model), scored_on=machine())
    note_code(record["code"])
    save_stored(path, record, arrays)
    fits[-1]["row"] = row
    return arrays, record["n_params"]


