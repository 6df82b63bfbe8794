"""Choosing a model by measurement on the user's own data: :class:`RankerSelector`.

The selector cross-validates candidate rankers with whole questions per fold, measures what each costs on
this machine (fit time, and the latency of ranking one question), and chooses the cheapest candidate whose
MAP is not significantly below the best one's (paired randomisation test over questions), within a latency
budget. Its cost is bounded: cheap candidates run first, a timing probe on a few questions says what each
fold will cost before the cross-validation starts, a candidate's further folds stop when it is
significantly below the best or when they would overrun ``time_budget``, and neural fits go through the
library's fit cache. NumPy-only until a neural candidate is fitted.
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from dataclasses import dataclass, field
from numbers import Integral, Real

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, clone
from sklearn.utils.validation import check_is_fitted

from ..base import RankerMixin
from ..data import check_ranking_data
from ..metrics import paired_significance, per_question
from ..params import Boolean, HasMethods, InstanceOf, Interval, Options, ParameterMixin, validated
from .catalogue import get_entry, get_ranker
from .measures import (answering, duration, first_fold_sizes, fit_predict, fit_work, fold_estimate, halvings, has_gpu,
                       latency_ms, n_questions_of, probe_estimator, probe_rows, read_work, subsample, threads)
from .report import choose
from .stopwatch import Pace, Stopwatch, free_cores

__all__ = ["DEFAULT_CANDIDATES", "GPU_CANDIDATES", "SELECTOR_CONSTRAINTS", "RankerSelector"]

#: The candidates of ``RankerSelector(candidates="default")``: names of the catalogue
#: (:func:`~as2rank.model_selection.catalogue.get_ranker_names`), cheapest first. ``RR`` joins only when the data has a ``position`` column (a retrieval order to read), the
#: candidates of :data:`GPU_CANDIDATES` only where a GPU is. A candidate whose packages are missing is listed as
#: skipped with the command that installs them.
DEFAULT_CANDIDATES = ("RR", "WO+RR", "Lexical+LR", "Zero-shot", "Cosinet+BiRNN", "Transformer", "Transformer (MPNet)")

#: Default candidates that join only where a GPU is: on a CPU the BASE-size encoder trains far slower than MiniLM,
#: and one fold on the fewest training questions successive halving allows does not fit the default budget (the
#: defaults benchmark times it). Name it in ``candidates`` to measure it on a CPU.
GPU_CANDIDATES = ("Transformer (MPNet)",)

#: When the time budget stopped a candidate early, fewer shared questions than this (or than half the most any
#: candidate scored) are warned about.
_FEW_SHARED = 100

#: The share of the budget left after the probe that the plan gives the candidates' first folds, shared equally:
#: a busy machine, slower than the steady estimates, still fits them; the rest goes to further folds.
_FIRST_FOLDS_SHARE = 0.5

#: The share of ``time_budget`` (wall time, counted from the start of ``fit``) that planning aims to stay within:
#: what the tiny rounds take cannot shrink, so it aims below the 5 % it promises.
_PROBE_SHARE = 0.025

#: The largest share of the questions a probe's larger round fits and predicts: a cheap model's cost per row
#: falls with the size of a call, so its round is as large as its share of the time allows, up to this.
_PROBE_MAX_FRACTION = 0.5


#: The constraint table of :class:`RankerSelector`'s parameters, which the command line also checks its flags
#: against (``--cv``, ``--max-latency-ms``, ``--time-budget``) before any work starts.
SELECTOR_CONSTRAINTS = {
    "candidates": [Options(("default",)), InstanceOf((list, tuple, dict), "a list or dict of candidates")],
    "cv": [Interval(Integral, 2, None), HasMethods("split", "a splitter with a split method")],
    "max_latency_ms": [Interval(Real, 0, None, closed="neither"), None],
    "time_budget": [Interval(Real, 0, None, closed="neither"), None],
    "alpha": [Interval(Real, 0, 1, closed="neither")],
    "refit": [Boolean()],
    "random_state": [Interval(Integral, 0, None)],
    "verbose": [Boolean()],
}


@dataclass
class _Run:
    """What the cross-validation learnt about one candidate (the selector's working record)."""

    name: str
    estimator: object
    status: str = "ok"
    per_question: list = field(default_factory=list)  # one Series of average precision per fold done
    scores: list = field(default_factory=list)  # (test rows, out-of-fold scores) per fold done
    fold_maps: list = field(default_factory=list)
    fit_s: list = field(default_factory=list)
    fold_estimate_s: float = np.nan  # what the next fold should take (steady seconds, see stopwatch.py)
    probe_estimate_s: float = np.nan  # the probe's estimate of a fold, kept to set against the folds measured
    fold_steady_s: list = field(default_factory=list)  # steady seconds of each fold done (fit and predict)
    latency_ms: float = np.nan
    latency_wall_ms: float = np.nan
    cost: tuple = ()  # the probe's (fixed fit seconds, fit seconds per unit of fit_work, predict seconds of a fold)
    fraction: float = 1.0  # of a fold's training questions it trains on (successive halving)
    train_questions: list = field(default_factory=list)  # training questions of each fold done
    stopped: str = ""

    @property
    def scored(self) -> pd.Series:
        return pd.concat(self.per_question) if self.per_question else pd.Series(dtype=np.float64)


class RankerSelector(ParameterMixin, RankerMixin, BaseEstimator):
    """Choose a ranker for your data by grouped cross-validation, then refit it.

    Every candidate is cross-validated with whole questions per fold; its out-of-fold average precision is
    collected per question. The best candidate is the one with the highest MAP on the questions that every
    evaluated candidate scored; each other candidate is compared with it by a paired randomisation test over
    the questions both scored. The choice is the candidate with the lowest latency (median CPU time to rank one
    question's candidates on one thread of this machine) among those within ``max_latency_ms`` whose MAP is not
    significantly below the best's; it is then refitted on all the data (``best_estimator_``).

    Parameters
    ----------
    candidates : "default", list or dict, default="default"
        ``"default"``: :data:`DEFAULT_CANDIDATES` (those whose packages are installed). A list of names of the
        catalogue (:func:`~as2rank.model_selection.catalogue.get_ranker_names`, case-insensitive), of
        ``(name, estimator)`` pairs, or a dict ``{name: estimator}``; estimators are cloned, never fitted in place.
    cv : int or splitter, default=3
        Number of :class:`~sklearn.model_selection.GroupKFold` folds (shuffled with ``random_state``), or a
        splitter with ``split(X, y, groups)`` that keeps each question inside one fold.
    max_latency_ms : float, default=None
        Latency budget: only candidates whose median latency per question is at most this are chosen.
    time_budget : float, default=1200
        Seconds the selection may take before the refit: the probe (a few small fits per candidate, within
        5 % of the budget, a line each as it goes) and the cross-validation. Half of what the probe leaves is
        shared among the candidates' first folds, cheapest first, each keeping what the later ones need to run at
        their smallest size; a candidate whose fold does not fit its share
        trains on 1/2, 1/4, ... of each fold's training questions (at least 40; successive halving) and is
        scored on the same test questions as the others (``train_questions`` in ``cv_results_``); one that
        does not fit even then is excluded, with the budget that would include it. Estimates are steady seconds
        (what the work takes on a quiet machine), planned against the budget at the pace the machine runs now
        (wall per steady second so far). Every candidate's first fold runs before any second one; a first fold
        runs when the probe's estimate fits in what is left (halved further if need be), a later fold when the
        candidate's last fold's time does. The first candidate's first fold always runs: something is always
        measured. ``None``: no limit.
    alpha : float, default=0.05
        Significance level of the paired tests.
    refit : bool, default=True
        Refit the chosen candidate on all the data.
    random_state : int, default=0
        Seed of the folds, the probe's questions and the candidates that take one.
    verbose : bool, default=True
        Print a first line at once, one line per candidate as the probe times it, the plan before the
        cross-validation starts and one line per fold (to stderr).

    Attributes
    ----------
    cv_results_ : dict of ndarray
        One entry per candidate, in evaluation order: ``model``, ``status``, ``n_folds``, ``n_questions``,
        ``map`` (out-of-fold MAP over the questions it scored), ``map_std`` (across folds), ``map_shared``
        (MAP on the questions every evaluated candidate scored), ``train_questions`` (training questions per
        fold, fewer than the fold's when the budget halved them), ``p_vs_best``, ``tied_with_best``,
        ``fit_s`` (mean wall seconds per fold), ``fold_estimate_s`` (the probe's estimate of a fold, fit and
        predict) beside ``fold_steady_s`` (what the folds took, mean), both in steady seconds (wall time less the
        waits for a CPU that other processes held, :mod:`as2rank.model_selection.stopwatch`), ``latency_ms``
        (median over questions of the least CPU time of its calls on one thread, over rounds spread in time: a property of the
        model, not of the load)
        beside ``latency_wall_ms`` (median wall time of one call at the process's threads), ``within_budget``, ``chosen``; ``ece`` (expected calibration
        error of sigmoid-calibrated candidate probabilities) and ``answer_f1`` (answer-triggering F1 over every
        scored question, those without a correct candidate included, at the threshold of the best F1), each
        fold judged by maps learned on the other folds (NaN with fewer than 3 folds done).
    best_name_ : str
        The chosen candidate.
    best_index_ : int
        Its row in ``cv_results_``.
    best_estimator_ : estimator
        The chosen candidate refitted on all the data (``refit=True`` only).
    choice_reason_ : str
        Why it was chosen, in words.
    n_questions_ : int
        Questions with a correct answer in the data (those the metrics score).
    n_threads_ : int or None
        The threads the candidates fitted and predicted on during the selection: the cores that other work left
        idle when it started, where that was fewer than this process may use (``None``: the libraries'
        defaults).
    """

    _parameter_constraints = SELECTOR_CONSTRAINTS

    def __init__(self, candidates="default", cv=3, max_latency_ms=None, time_budget=1200.0, alpha=0.05, refit=True,
                 random_state=0, verbose=True):
        self._keep_params(locals())

    # ------------------------------------------------------------------------------------------ fitting
    @validated
    def fit(self, X, y, groups=None):
        """Cross-validate the candidates, choose one and (``refit=True``) refit it on all the data.

        Parameters
        ----------
        X : pandas.DataFrame
            Grouped-candidate frame (e.g. from :func:`as2rank.datasets.read_pairs`).
        y : array-like of shape (n_rows,)
            0/1 labels.
        groups : array-like of shape (n_rows,), default=None
            Question ids; ``X["qid"]`` when not given.

        Returns
        -------
        self
        """
        X, y, index = check_ranking_data(X, y, groups)
        keys = index.keys[index.codes]
        lengths = (X["question"].str.len() + X["candidate"].str.len()).to_numpy(dtype=np.float64)
        answered = int((index.max(y) > 0).sum())
        splitter = self._splitter()
        n_splits = splitter.get_n_splits(X, y, keys)
        if answered < 2 * n_splits:
            raise ValueError(
                f"RankerSelector needs at least {2 * n_splits} questions with a correct answer for {n_splits} folds; "
                f"the data has {answered}."
            )
        folds = list(splitter.split(X, y, keys))
        started = time.perf_counter()
        # Threads beyond the cores other work leaves idle wait at every barrier of a thread pool for a thread
        # that another process holds: the candidates fit and predict on the idle ones.
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        idle = free_cores()
        self.n_threads_ = idle if idle < cores else None
        budget = "no time limit" if self.time_budget is None else f"a time budget of {duration(self.time_budget)}"
        busy = "" if self.n_threads_ is None else f"; other work keeps cores busy, so fits use {idle} of {cores} threads"
        self._say(f"RankerSelector: {index.n_groups:,} questions ({answered:,} with a correct answer), {len(X):,} "
                  f"pairs; {len(folds)} grouped folds; {budget}{busy}. Timing each candidate on a few questions:")
        runs = self._runs("position" in X.columns)  # after the first line: building them loads torch
        pace = Pace()  # how much slower than steady time the machine runs now (the laps so far)
        with threads(self.n_threads_):
            self._probe(runs, X, y, keys, folds, pace, started, lengths)
            runs.sort(key=lambda r: r.fold_estimate_s if r.status == "ok" else np.inf)  # cheapest first (stable)
            probe_s = time.perf_counter() - started
            self._size_first_folds(runs, folds, keys, y, probe_s, pace.ratio, lengths=lengths)
            self._say(self._plan(runs, folds, probe_s, pace.ratio))
            # Fold by fold: every candidate's first fold before any second one, so that the budget goes to
            # measuring every candidate once before measuring any of them again.
            for k in range(len(folds)):
                for run in runs:
                    if run.status == "ok" and not run.stopped and self._admits(run, k, runs, folds, keys, y, started,
                                                                               pace.ratio, lengths=lengths):
                        self._run_fold(run, k, X, y, keys, folds, runs, pace)
        table = self._results(runs, {r.name: answering(r.scores, X, y, index) for r in runs})
        self.best_index_, self.choice_reason_ = choose(table, max_latency_ms=self.max_latency_ms)
        table.loc[self.best_index_, "chosen"] = True
        self.cv_results_ = {c: table[c].to_numpy(copy=True) for c in table.columns}
        self.best_name_ = str(table["model"].iloc[self.best_index_])
        self.n_questions_ = answered
        self._warn_if_few_shared(table)
        for name in ("best_estimator_", "refit_time_"):  # an earlier fit's refit is not this fit's choice
            self.__dict__.pop(name, None)
        if self.refit:
            chosen = next(r for r in runs if r.name == self.best_name_)
            t0 = time.perf_counter()
            self.best_estimator_ = clone(chosen.estimator).fit(X, y)
            self.refit_time_ = time.perf_counter() - t0
            self._say(f"Refitted {self.best_name_} on all {len(X):,} pairs in {self.refit_time_:.0f} s.")
        return self

    def _splitter(self):
        if isinstance(self.cv, Integral):
            from sklearn.model_selection import GroupKFold

            return GroupKFold(n_splits=int(self.cv), shuffle=True, random_state=self.random_state)
        return self.cv

    def _runs(self, has_position: bool) -> list:
        """The candidates as runs, in evaluation order (the default ones cheapest first)."""
        if isinstance(self.candidates, str):
            gpu = has_gpu()
            named = [n for n in DEFAULT_CANDIDATES if (has_position or n != "RR") and (gpu or n not in GPU_CANDIDATES)]
        elif isinstance(self.candidates, dict):
            named = list(self.candidates.items())
        else:
            named = list(self.candidates)
        runs = []
        for item in named:
            if isinstance(item, str):
                try:
                    entry = get_entry(item)
                except ValueError as exc:
                    raise ValueError(f"Unknown candidate {item!r}: {exc}") from None
                missing = entry.missing()
                if missing:
                    runs.append(_Run(entry.name, None, status=f"skipped: pip install {' '.join(missing)}"))
                    continue
                runs.append(_Run(entry.name, get_ranker(entry.name, random_state=self.random_state)))
            elif isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str) and hasattr(item[1], "fit"):
                runs.append(_Run(item[0], item[1]))
            else:
                raise ValueError(f"A candidate must be a catalogue model name or a (name, estimator) pair, got {item!r}.")
        names = [r.name for r in runs]
        if len(set(names)) != len(names):
            raise ValueError(f"Candidate names must be unique, got {names}.")
        if not any(r.status == "ok" for r in runs):
            raise ValueError("No candidate can run: " + "; ".join(f"{r.name} {r.status}" for r in runs))
        return runs

    def _probe(self, runs, X, y, keys, folds, pace, started, lengths) -> None:
        """Estimate each candidate's fold time from fits on a few questions of the first fold, one line each.

        Three timed rounds of a one-epoch, uncached copy (:func:`probe_estimator`) that fit on questions of the
        first fold's training part and predict others of it (:func:`probe_rows`): a tiny one (one question each)
        that pays what a class loads once in a process (spaCy, cached word vectors), the tiny one again (the
        fixed cost of a fit and a predict; repeated while under half a second, the least time kept) and a larger
        one (at least 6 and 3 questions, at most :data:`_PROBE_MAX_FRACTION`: as many as the candidate's share
        of what is left of :data:`_PROBE_SHARE` of the budget affords at the tiny rounds' cost; not repeated, as
        a repeat on the same texts hits the caches that a fold's new texts miss). A fit's cost is fixed seconds
        plus seconds per unit of :func:`fit_work` (characters through the model, each batch padded to its
        longest, once per epoch), which counts the epochs a fold's fit will run (``epochs="auto"`` runs at least
        200 steps however few the questions); a predict's, its fixed cost plus a cost per unit of
        :func:`read_work`. Times are steady seconds (:mod:`as2rank.model_selection.stopwatch`): what other work on the
        machine takes from them is left out, so the estimates do not depend on it. The share of the budget is
        counted in wall time, which ``pace`` (updated here) relates to steady time.
        """
        train, test = folds[0]
        tiny = probe_rows(train, test, keys, y, self.random_state, fraction=0.0, minimum=1)
        allowance = (np.inf if self.time_budget is None
                     else _PROBE_SHARE * float(self.time_budget) - (time.perf_counter() - started))
        spent, waiting = 0.0, sum(r.status == "ok" for r in runs)
        n_questions = len(pd.unique(keys))
        for run in runs:
            if run.status != "ok":
                continue
            probe_est = probe_estimator(run.estimator)
            try:
                with Stopwatch() as watch:
                    first = fit_predict(probe_est, X, y, *tiny)  # pays what a class loads once (spaCy, vectors)
                    small = fit_predict(probe_est, X, y, *tiny, repeats=3)
                    # As many questions as the rest of this candidate's share affords at the tiny rounds' cost
                    # per question (an upper bound: it includes the fixed cost), between the minimum and
                    # _PROBE_MAX_FRACTION of them.
                    share = (allowance - spent) / waiting - sum(first) - sum(small)
                    per_question = sum(small) / (len(np.unique(keys[tiny[0]])) + len(np.unique(keys[tiny[1]])))
                    fraction = min(_PROBE_MAX_FRACTION, share / max(per_question, 1e-9) / n_questions)
                    probe = probe_rows(train, test, keys, y, self.random_state + 1, fraction=max(0.0, fraction),
                                       minimum=6)
                    large = fit_predict(probe_est, X, y, *probe)
            except Exception as exc:  # a candidate that cannot run on this data is reported, not fatal
                run.status = f"failed: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
                self._say(f"  {run.name:<14} {run.status}")
                continue
            finally:
                waiting -= 1
            spent += watch.lap.wall
            pace.add(watch.lap)
            work = [fit_work(probe_est, keys[rows], y[rows], lengths[rows]) for rows in (tiny[0], probe[0])]
            if work[1] >= 1.5 * work[0] and large[0] > small[0]:
                per_unit = (large[0] - small[0]) / (work[1] - work[0])
            else:  # too little between the rounds to tell a fixed cost from a cost per unit: all per unit
                per_unit = large[0] / max(work[1], 1.0)
            read = [read_work(probe_est, lengths[rows]) for rows in (tiny[1], probe[1], test)]
            per_read = max(0.0, large[1] - small[1]) / max(1.0, read[1] - read[0])
            run.cost = (max(0.0, small[0] - per_unit * work[0]), per_unit, small[1] + per_read * (read[2] - read[0]))
            estimate = run.fold_estimate_s = run.probe_estimate_s = self._estimate(run, train, keys, y, 1.0, lengths=lengths)
            self._say(f"  {run.name:<14} ~{duration(estimate)} per fold (timed in {duration(watch.lap.steady)})")

    def _estimate(self, run, train, keys, y, fraction, *, lengths) -> float:
        """The probe's estimate of a fold of ``run`` that trains on ``fraction`` of the questions of ``train``
        (``lengths``: of every row, in the unit of ``run.cost``)."""
        rows = subsample(train, keys, fraction, seed=(self.random_state, 0))
        return fold_estimate(run.cost, fit_work(run.estimator, keys[rows], y[rows], lengths[rows]))

    def _size_first_folds(self, runs, folds, keys, y, probe_s, pace=1.0, *, lengths) -> None:
        """Successive halving over training questions (:func:`first_fold_sizes`): each candidate, cheapest first,
        trains its folds on the largest of 1, 1/2, 1/4, ... of a fold's training questions (at least
        :data:`MIN_TRAIN_QUESTIONS`) whose estimate, in wall time at this ``pace``, fits its share of
        :data:`_FIRST_FOLDS_SHARE` of the budget left after the probe (beyond what the others need at their
        smallest size). A candidate that does not fit even at the
        smallest size is excluded, with the smallest budget (in whole minutes) that would include it."""
        if self.time_budget is None:
            return
        train = folds[0][0]
        n_questions = len(pd.unique(keys[train]))
        sizes = halvings(n_questions)
        ok = [r for r in runs if r.status == "ok"]
        steady = [{f: self._estimate(run, train, keys, y, f, lengths=lengths) for f in sizes} for run in ok]
        wall = [{f: seconds * pace for f, seconds in e.items()} for e in steady]

        def sizes_for(budget):
            # Measuring every candidate comes first: when the first folds' share excludes one that all that the
            # probe left would include, the first folds may take all of it.
            shared = first_fold_sizes(wall, _FIRST_FOLDS_SHARE * (budget - probe_s))
            whole = first_fold_sizes(wall, budget - probe_s)
            return whole if whole.count(None) < shared.count(None) else shared

        chosen = sizes_for(float(self.time_budget))
        for i, (run, size) in enumerate(zip(ok, chosen)):
            if size is None:
                minutes = int(np.ceil(float(self.time_budget) / 60))
                while sizes_for(60.0 * minutes)[i] is None:
                    minutes += 1
                run.status = (f"excluded: a fold on {n_questions_of(sizes[-1], n_questions)} training questions needs "
                              f"~{duration(wall[i][sizes[-1]])}; --time-budget {60 * minutes} would include it")
                continue
            run.fraction = size
            run.fold_estimate_s = run.probe_estimate_s = steady[i][size]

    def _plan(self, runs, folds, probe_s, pace=1.0) -> str:
        share = "" if self.time_budget is None else f" ({100 * probe_s / float(self.time_budget):.0f} % of the budget)"
        lines = [
            f"Timing took {duration(probe_s)}{share}. Plan (cheapest first; every candidate's first fold, then the "
            "next folds while they fit):",
        ]
        left = np.inf if self.time_budget is None else float(self.time_budget) - probe_s
        ok = [r for r in runs if r.status == "ok"]
        planned = dict.fromkeys((r.name for r in ok), 0)
        for k in range(len(folds)):  # the rule of _admits, on the estimates
            for i, run in enumerate(ok):
                est = run.fold_estimate_s * pace
                if (k == 0 and (i == 0 or est <= left)) or (k > 0 and planned[run.name] == k and est <= left):
                    planned[run.name] += 1
                    left -= est
        total = sum(planned[r.name] * r.fold_estimate_s * pace for r in ok)
        for run in runs:
            if run.status != "ok":
                lines.append(f"  {run.name:<14} {run.status}")
                continue
            n = planned[run.name]
            shown = f"{n} of {len(folds)} folds" if 0 < n < len(folds) else f"{n} folds" if n else "skipped: beyond the time budget"
            size = "" if run.fraction == 1 else f", training on {run.fraction:.3g} of each fold's questions"
            lines.append(f"  {run.name:<14} ~{duration(run.fold_estimate_s)} per fold{size} -> {shown}")
        slower = "" if pace < 1.1 else f" at this machine's pace ({pace:.1f}x the steady time: other work shares it)"
        lines.append(f"Estimated: ~{duration(probe_s + total)} in all{slower}"
                     + (", then the refit of the choice." if self.refit else "."))
        return "\n".join(lines)

    def _admits(self, run, k, runs, folds, keys, y, started, pace=1.0, *, lengths) -> bool:
        """Whether ``run``'s fold ``k`` fits, in wall time at this ``pace``, in what is left of the time budget;
        marks the run stopped (or skipped) if not. A first fold that no longer fits at its planned size (the
        machine ran slower than planned) is halved further while its size stays at least
        ``MIN_TRAIN_QUESTIONS``."""
        if self.time_budget is None or (k == 0 and not any(r.per_question for r in runs)):
            return True  # the first candidate's first fold always runs: something is always measured
        left = float(self.time_budget) - (time.perf_counter() - started)
        if run.fold_estimate_s * pace <= left:
            return True
        if k == 0:
            train = folds[0][0]
            smaller = [(f, e) for f in halvings(len(pd.unique(keys[train]))) if f < run.fraction
                       and (e := self._estimate(run, train, keys, y, f, lengths=lengths)) * pace <= left]
            if smaller:
                run.fraction, run.fold_estimate_s = smaller[0]
                run.probe_estimate_s = run.fold_estimate_s
                return True
            run.status = f"skipped: a fold (~{duration(run.fold_estimate_s * pace)}) exceeds the time budget left"
        else:
            run.stopped = f"time budget, after {k} of {len(folds)} folds"
        return False

    def _run_fold(self, run, k, X, y, keys, folds, runs, pace) -> None:
        """Fit ``run`` on its share (``run.fraction``) of fold ``k``'s training questions and score it on all of
        the fold's test questions; after its first fold, time its latency with that fold's model; stop it when
        it is significantly below another candidate."""
        train, test = folds[k]
        train = subsample(train, keys, run.fraction, seed=(self.random_state, k))
        est = clone(run.estimator)
        X_test = X.iloc[test]
        with Stopwatch() as fold:
            with Stopwatch() as fit:
                est.fit(X.iloc[train], y[train])
            scores = np.asarray(est.predict(X_test), dtype=np.float64)
        ap = per_question(y[test], scores, X_test)
        run.per_question.append(ap)
        run.scores.append((test, scores))
        run.fold_maps.append(float(ap.mean()))
        run.fit_s.append(fit.lap.wall)
        run.train_questions.append(len(pd.unique(keys[train])))
        run.fold_steady_s.append(fold.lap.steady)
        pace.add(fold.lap)
        run.fold_estimate_s = fold.lap.steady * 1.1  # the next fold: like this one, with a margin for noise
        self._say(f"  {run.name:<14} fold {k + 1}/{len(folds)}: MAP {100 * run.fold_maps[-1]:.2f}, fit "
                  f"{duration(fit.lap.wall)}, predict {duration(fold.lap.wall - fit.lap.wall)}")
        if k == 0:
            run.latency_ms, run.latency_wall_ms = latency_ms(est, X_test, self.random_state)
        if k < len(folds) - 1 and self._cannot_win(run, runs):
            run.stopped = f"significantly below the best after {k + 1} of {len(folds)} folds"

    def _cannot_win(self, run, runs) -> bool:
        """Whether ``run`` is significantly below a candidate with a higher MAP on the questions both scored."""
        mine = run.scored
        for other in runs:
            if other is run or not other.per_question:
                continue
            a, b = mine.align(other.scored, join="inner")
            if len(a.dropna()) >= 2 and b.mean() > a.mean() and paired_significance(a, b) < self.alpha:
                return True
        return False

    # ------------------------------------------------------------------------------------------ the choice
    def _results(self, runs, answering) -> pd.DataFrame:
        """One row per candidate (see ``cv_results_``); the best is the highest MAP on the shared questions.
        ``answering``: each candidate's :func:`answering`."""
        done = [r for r in runs if r.per_question]
        shared = None
        for r in done:
            idx = r.scored.dropna().index
            shared = idx if shared is None else shared.intersection(idx)
        shared_map = {r.name: float(r.scored.loc[shared].mean()) for r in done}
        best = max(shared_map, key=shared_map.get) if shared_map else None
        best_scores = next((r.scored for r in done if r.name == best), None)
        rows = []
        for r in runs:
            row = {"model": r.name, "status": r.status if not r.stopped else f"{r.status}; stopped: {r.stopped}",
                   "n_folds": 0, "n_questions": 0, "map": np.nan, "map_std": np.nan, "map_shared": np.nan,
                   "p_vs_best": np.nan, "tied_with_best": False, "fit_s": np.nan, "latency_ms": np.nan,
                   "within_budget": False, "ece": np.nan, "answer_f1": np.nan,
                   "fold_estimate_s": r.probe_estimate_s, "fold_steady_s": np.nan, "latency_wall_ms": np.nan,
                   "train_questions": np.nan}
            if r.per_question:
                scored = r.scored.dropna()
                p = np.nan if r.name == best else paired_significance(r.scored, best_scores)
                within = self.max_latency_ms is None or r.latency_ms <= self.max_latency_ms
                row |= {
                    "n_folds": len(r.per_question),
                    "n_questions": len(scored),
                    "map": float(scored.mean()),
                    "map_std": float(np.std(r.fold_maps, ddof=1)) if len(r.fold_maps) > 1 else np.nan,
                    "map_shared": shared_map[r.name],
                    "p_vs_best": p,
                    "tied_with_best": bool(r.name == best or p >= self.alpha),
                    "fit_s": float(np.mean(r.fit_s)),
                    "latency_ms": r.latency_ms,
                    "latency_wall_ms": r.latency_wall_ms,
                    "fold_steady_s": float(np.mean(r.fold_steady_s)),
                    "train_questions": float(np.mean(r.train_questions)),
                    "within_budget": bool(within),
                    **answering[r.name],
                }
            rows.append(row)
        table = pd.DataFrame(rows)
        table["chosen"] = False
        return table

    def _warn_if_few_shared(self, table) -> None:
        """Warn when the shared questions, on which the best is chosen, are few because the time budget stopped a
        candidate early: the others are then compared on its folds' questions only."""
        evaluated = table[table["n_folds"] > 0]
        shared, most = int(evaluated["n_questions"].min()), int(evaluated["n_questions"].max())
        fewest = evaluated.loc[evaluated["n_questions"].idxmin()]
        if shared < most and "time budget" in fewest["status"] and (shared < _FEW_SHARED or shared < most / 2):
            warnings.warn(f"The models are compared on {shared} shared questions ({fewest['model']} ran "
                          f"{int(fewest['n_folds'])} fold(s) in the time budget; the most scored {most}): differences "
                          "of a few MAP points cannot be told apart. Raise time_budget (--time-budget) to score more.",
                          UserWarning, stacklevel=3)

    def _say(self, text: str) -> None:
        if self.verbose:
            print(text, file=sys.stderr, flush=True)

    # ------------------------------------------------------------------------------------------ using it
    def predict(self, X):
        """Scores of the refitted choice (``best_estimator_.predict``)."""
        check_is_fitted(self, "best_estimator_")
        return self.best_estimator_.predict(X)

    def results_table(self) -> pd.DataFrame:
        """``cv_results_`` as a frame, best shared MAP first (evaluated candidates, then the others)."""
        check_is_fitted(self, "cv_results_")
        table = pd.DataFrame(self.cv_results_)
        evaluated = table["n_folds"] > 0
        return pd.concat([table[evaluated].sort_values("map_shared", ascending=False, kind="stable"),
                          table[~evaluated]], ignore_index=True)

    def format_table(self) -> str:
        """The results as a Markdown table (see :func:`as2rank.model_selection.report.format_selection`)."""
        from .report import format_selection

        check_is_fitted(self, "cv_results_")
        return format_selection(self.results_table(), alpha=self.alpha, max_latency_ms=self.max_latency_ms,
                                reason=self.choice_reason_)

    def plot(self, ax=None):
        """MAP against latency per question, one point per candidate, the choice marked (needs matplotlib)."""
        from .report import plot_selection

        check_is_fitted(self, "cv_results_")
        return plot_selection(self.results_table(), max_latency_ms=self.max_latency_ms, ax=ax)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.two_d_array = False
        tags.input_tags.string = True
        return tags

