"""What :class:`~as2rank.model_selection.selector.RankerSelector` measures of a candidate, as functions of arrays: the
timing probe's fits, fold-time estimates and the training subsamples of successive halving, the latency of one
question, and how well its out-of-fold scores answer or abstain. NumPy/pandas only."""

from __future__ import annotations

import sys
from contextlib import contextmanager

import numpy as np
import pandas as pd
from sklearn.base import clone

from ..base import rank_tiebreak
from ..data import GroupIndex
from .stopwatch import Stopwatch

#: The fewest training questions of a fold that successive halving trains a candidate on.
MIN_TRAIN_QUESTIONS = 40

#: The fewest rounds of one call per question in the latency measurement; the least CPU time of each counts.
LATENCY_REPEATS = 3

#: The most rounds of the latency measurement.
LATENCY_MAX_ROUNDS = 100

#: CPU seconds the latency rounds go on for (at least :data:`LATENCY_REPEATS`, at most
#: :data:`LATENCY_MAX_ROUNDS` rounds): a call of a few milliseconds runs slower in some seconds than in others on
#: a shared host, and the least over rounds spread over this long is the one those seconds do not inflate.
LATENCY_CPU_S = 2.0

#: A probe round shorter than this many seconds is repeated (up to 3 times, where asked) and the least time kept.
REPEAT_UNDER_S = 0.5

#: Rows a neural model runs at once, in length order, in the probe's cost model (:func:`read_work`).
BATCH_ROWS = 32

#: Questions whose one-question prediction is timed for the latency of a candidate (the median is reported).
LATENCY_QUESTIONS = 20


def answering(fold_scores, X, y, index: GroupIndex) -> dict:
    """``ece`` and ``answer_f1`` of a candidate's out-of-fold scores (``fold_scores``: ``(test rows, scores)`` per
    fold done) over every question its folds scored
    (those without a correct candidate included): candidate probabilities and the answer threshold learned on
    the other folds (:func:`as2rank.answer.heldout.held_out_answering`, sigmoid). NaN with fewer than 3 folds
    done, or when a fold's rows hold only one label (nothing to calibrate against)."""
    from ..answer.heldout import held_out_answering

    nothing = {"ece": np.nan, "answer_f1": np.nan}
    if len(fold_scores) < 3:
        return nothing
    rows = np.concatenate([test for test, _ in fold_scores])
    fold_of = np.repeat(np.arange(len(fold_scores)), [len(test) for test, _ in fold_scores])
    X_scored = X.iloc[rows]
    position = X_scored["position"].to_numpy() if "position" in X_scored.columns else None
    scored_index = GroupIndex._from_keys(index.keys[index.codes[rows]], position)
    try:
        report = held_out_answering(scored_index, np.concatenate([s for _, s in fold_scores]), y[rows], fold_of,
                                    tiebreak=rank_tiebreak(X_scored))
    except ValueError:  # a fold whose rows are all correct or all wrong
        return nothing
    return {"ece": report["ece"], "answer_f1": report["f1"]}


def fold_estimate(cost: tuple, work: float) -> float:
    """The probe's estimate of a fold whose fit does ``work`` (:func:`fit_work`; fit and predict, steady seconds)
    from its ``cost``: (fixed fit seconds, fit seconds per unit of work, predict seconds of a fold's test rows)."""
    fixed, per_unit, predict = cost
    return fixed + per_unit * work + predict


def fit_work(estimator, keys, y, lengths=None) -> float:
    """What a fit of ``estimator`` on rows of question ``keys`` and labels ``y`` does: the rows' ``lengths``
    (characters of question and candidate; 1 per row when None) passed through its model, padded as
    :func:`read_work` pads them; the rows it trains on once per epoch for an estimator with an ``epochs``
    parameter (those of answered questions under ``loss="listwise"``; ``epochs="auto"`` resolved as
    :class:`~as2rank.cosinet.estimator.Cosinet` does, from ``batch_size`` questions per step, and batches of
    ``batch_size`` rows), the rows once otherwise. An upper bound where early stopping ends a fit sooner. A fit's
    cost is nearly proportional to it where a fit's schedule is not (a minimum number of steps makes a small fit
    as long as a large one)."""
    params = estimator.get_params(deep=False) if hasattr(estimator, "get_params") else {}
    lengths = np.ones(len(keys)) if lengths is None else np.asarray(lengths, dtype=np.float64)
    if "epochs" not in params:
        return read_work(estimator, lengths)
    codes = pd.factorize(keys)[0]
    trained = np.ones(len(keys), dtype=bool)
    if params.get("loss") == "listwise":
        trained = (np.bincount(codes, weights=np.asarray(y) > 0) > 0)[codes]
    epochs = params["epochs"]
    if epochs == "auto":
        from ..cosinet.estimator import resolve_epochs

        epochs = resolve_epochs("auto", -(-len(np.unique(codes[trained])) // int(params.get("batch_size", 1))))
    return float(epochs) * padded_length(lengths[trained], params.get("batch_size"))


def read_work(estimator, lengths) -> float:
    """What passing rows of these ``lengths`` through ``estimator``'s model once costs: a neural model's (one
    with a ``batch_size`` or ``batch_tokens`` parameter) rows sorted by length into batches of
    :data:`BATCH_ROWS`, each row costing the longest of its batch (a few rows in one batch cost what their longest
    does; many cost little more than their lengths); another's, the lengths."""
    params = estimator.get_params(deep=False) if hasattr(estimator, "get_params") else {}
    neural = "batch_size" in params or "batch_tokens" in params
    return padded_length(lengths, BATCH_ROWS if neural else None)


def padded_length(lengths, batch_size=None) -> float:
    """The summed length of rows sorted by length into batches of ``batch_size``, each row counting the longest
    of its batch (its own where ``batch_size`` is None or not a whole number of rows)."""
    lengths = np.sort(np.asarray(lengths, dtype=np.float64))
    if not isinstance(batch_size, (int, np.integer)) or batch_size <= 1 or not len(lengths):
        return float(lengths.sum())
    ends = np.minimum(np.arange(batch_size, len(lengths) + batch_size, batch_size), len(lengths))
    return float((lengths[ends - 1] * np.diff(ends, prepend=0)).sum())


def probe_estimator(estimator):
    """A clone of ``estimator`` for the probe's fits: one epoch where it has ``epochs`` (the cost of an epoch is
    what the probe measures; :func:`fit_work` counts a fold's epochs) and never a cached fit (a cache hit is not
    a fit to time)."""
    est = clone(estimator)
    params = est.get_params(deep=False)
    return est.set_params(**{k: v for k, v in (("epochs", 1), ("reuse_fit", False)) if k in params})


def first_fold_sizes(estimates: list, total: float) -> list:
    """Successive halving's training size of each candidate's first folds, cheapest first. Every candidate is
    first given its smallest size; while those do not fit in ``total`` seconds, the dearest candidates are
    excluded (None; the first always runs). Each then gets the largest size whose estimate fits its smallest
    one plus an equal share of what the candidates before it left beyond the smallest sizes of all the rest,
    so that a candidate early in the order never takes what a later one needs to be measured at all.

    Parameters
    ----------
    estimates : list of dict
        Per candidate, in order, ``{fraction of the training questions: estimated seconds of a fold}``, largest
        fraction first.
    total : float
        Seconds for the first folds of all of them.
    """
    smallest = [list(e.values())[-1] for e in estimates]
    included = [True] * len(estimates)
    while sum(s for s, keep in zip(smallest, included) if keep) > total and sum(included) > 1:
        included[max(i for i, keep in enumerate(included) if keep)] = False
    sizes, left = [], total
    for i, estimate in enumerate(estimates):
        if not included[i]:
            sizes.append(None)
            continue
        later = [s for s, keep in zip(smallest[i:], included[i:]) if keep]
        allowance = smallest[i] + max(0.0, left - sum(later)) / len(later)
        size = next((f for f, seconds in estimate.items() if seconds <= allowance), list(estimate)[-1])
        sizes.append(size)
        left -= estimate[size]
    return sizes


def halvings(n_questions: int) -> list:
    """1, 1/2, 1/4, ... of ``n_questions`` training questions, down to :data:`MIN_TRAIN_QUESTIONS` (or 1 alone)."""
    out = [1.0]
    while out[-1] / 2 * n_questions >= MIN_TRAIN_QUESTIONS:
        out.append(out[-1] / 2)
    return out


def n_questions_of(fraction: float, n_questions: int) -> int:
    return int(np.ceil(fraction * n_questions))


def subsample(rows, keys, fraction: float, seed) -> np.ndarray:
    """The rows of a seeded ``fraction`` of the questions among ``rows`` (all of them for 1), in their order; a
    smaller fraction's questions are among a larger one's."""
    if fraction >= 1:
        return rows
    question = pd.factorize(keys[rows])[0]
    n = question.max() + 1
    return _rows_of(rows, question, np.random.default_rng(seed).permutation(n)[:n_questions_of(fraction, n)])


def _rows_of(rows, question, picked) -> np.ndarray:
    """The ``rows`` (in their order) whose question code (``question``, one per row) is among ``picked``."""
    chosen = np.zeros(question.max() + 1, dtype=bool)
    chosen[picked] = True
    return rows[chosen[question]]


def some_questions(rows, keys, y, rng, *, fraction: float, minimum: int) -> np.ndarray:
    """Rows of a random ``fraction`` (at least ``minimum``) of the questions among ``rows`` that have a correct
    answer, those with a wrong one too drawn first (so that every probe fit sees both labels), in their original
    order."""
    question = pd.factorize(keys[rows])[0]
    correct = np.bincount(question, weights=y[rows] > 0) > 0
    wrong = np.bincount(question, weights=y[rows] <= 0) > 0
    both, only = np.flatnonzero(correct & wrong), np.flatnonzero(correct & ~wrong)
    take = min(len(both) + len(only), max(minimum, int(np.ceil(fraction * (question.max() + 1)))))
    return _rows_of(rows, question, np.concatenate([rng.permutation(both), rng.permutation(only)])[:take])


def probe_rows(train, test, keys, y, seed, *, fraction: float, minimum: int) -> tuple:
    """The rows a probe round fits on and predicts: ``fraction`` (at least ``minimum``) of the first fold's
    training questions ``train`` to fit on, and as many of its other training questions as that fraction of its
    test questions ``test`` (at least half the minimum) to predict, so that the fold's test questions stay
    unread until the fold predicts them: what a process has read warms caches (spaCy's tokenizer's), and the
    fold's predict should find them as cold as the probe's did. The fitted questions are drawn by
    :func:`some_questions`, the predicted ones among all the others."""
    rng = np.random.default_rng(seed)
    fit = some_questions(train, keys, y, rng, fraction=fraction, minimum=minimum)
    rest = train[~np.isin(keys[train], keys[fit])]
    if not len(rest):  # a fold too small to leave any: the fit's own questions
        return fit, fit
    question = pd.factorize(keys[rest])[0]
    n = question.max() + 1
    take = min(n, max(1, minimum // 2, int(np.ceil(fraction * len(np.unique(keys[test]))))))
    return fit, _rows_of(rest, question, rng.permutation(n)[:take])


def fit_predict(estimator, X, y, train, test, *, repeats: int = 1) -> tuple[float, float]:
    """Steady seconds to fit a clone of ``estimator`` on the rows ``train`` and to predict the rows ``test``: the
    least of up to ``repeats`` rounds, repeated only while a round takes under :data:`REPEAT_UNDER_S` (a call
    this short varies by more than itself with what the host does in that second)."""
    fit_s = predict_s = np.inf
    for _ in range(repeats):
        est = clone(estimator)
        with Stopwatch() as fit:
            est.fit(X.iloc[train], y[train])
        with Stopwatch() as predict:
            est.predict(X.iloc[test])
        fit_s, predict_s = min(fit_s, fit.lap.steady), min(predict_s, predict.lap.steady)
        if fit.lap.steady + predict.lap.steady >= REPEAT_UNDER_S:
            break
    return fit_s, predict_s


def latency_ms(estimator, X_test: pd.DataFrame, seed: int) -> tuple[float, float]:
    """Milliseconds to rank one question's candidates alone (one ``predict`` call per question) over up to
    :data:`LATENCY_QUESTIONS` questions of ``X_test``, after one warm-up call: the median over questions of
    the least CPU time of a question's calls on one thread, in rounds of one call per question (at least
    :data:`LATENCY_REPEATS`, until :data:`LATENCY_CPU_S` CPU seconds are spent), which is what a question costs
    the machine whatever else runs on it (one thread waits at no barrier of a thread pool, a thread's CPU time
    leaves out the waits for a CPU, and the least over rounds spread in time leaves out the host's slow
    seconds); and the median wall time of one call at the process's threads (what it took here)."""
    codes, _ = pd.factorize(X_test["qid"])
    rng = np.random.default_rng(seed)
    picked = rng.permutation(codes.max() + 1)[:LATENCY_QUESTIONS]
    frames = [X_test[codes == q] for q in picked]
    estimator.predict(frames[0])
    wall = []
    for frame in frames:
        with Stopwatch() as watch:
            estimator.predict(frame)
        wall.append(watch.lap.wall)
    least = np.full(len(frames), np.inf)
    with threads(1):
        estimator.predict(frames[0])
        spent, rounds = 0.0, 0
        while rounds < LATENCY_REPEATS or (spent < LATENCY_CPU_S and rounds < LATENCY_MAX_ROUNDS):
            for i, frame in enumerate(frames):
                with Stopwatch() as watch:
                    estimator.predict(frame)
                least[i] = min(least[i], watch.lap.cpu)
                spent += watch.lap.cpu
            rounds += 1
    return 1000.0 * float(np.median(least)), 1000.0 * float(np.median(wall))


@contextmanager
def threads(n: int | None):
    """Run the block on at most ``n`` threads: torch's (when it is loaded) and the BLAS and OpenMP pools';
    ``None`` leaves them as they are."""
    if n is None:
        yield
        return
    from threadpoolctl import threadpool_limits

    torch = sys.modules.get("torch")
    before = torch.get_num_threads() if torch is not None else None
    try:
        with threadpool_limits(limits=n):
            if torch is not None:
                torch.set_num_threads(min(n, before))
            yield
    finally:
        if torch is not None:
            torch.set_num_threads(before)


def has_gpu() -> bool:
    """Whether torch is installed and sees a CUDA device."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return bool(torch.cuda.is_available())


def duration(seconds: float) -> str:
    if not np.isfinite(seconds):
        return "?"
    if seconds < 60:
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min"
