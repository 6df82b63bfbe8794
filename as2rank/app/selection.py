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
from ..evaluation import per_question
from ..metrics import paired_significance
from ..params import Boolean, HasMethods, InstanceOf, Interval, Options, validate_params
from .selection_measures import (answering, duration, fit_predict, fold_estimate, halvings, latency_ms, n_questions_of,
                                 some_questions, subsample)
from .stopwatch import Stopwatch

__all__ = ["DEFAULT_CANDIDATES", "RankerSelector", "choose"]

#: The candidates of ``RankerSelector(candidates="default")``: names of :data:`as2rank.app.suite.ENTRIES`, cheapest
#: first. ``RR`` joins only when the data has a ``position`` column (a retrieval order to read). A candidate whose
#: packages are missing (the MPNet Transformer's five packaged wheels) is listed as skipped with the command that
#: installs them.
DEFAULT_CANDIDATES = ("RR", "WO+RR", "Lexical+LR", "Zero-shot", "Cosinet+BiRNN", "Transformer", "Transformer (MPNet)")

#: How far the probe's estimate of a first fold may exceed the real time: a fit on a few questions pays the
#: start-up costs of every new batch shape, which a long fit amortises; measured up to about 2x on a CPU.
_PROBE_SLACK = 2.0

#: When the time budget stopped a candidate early, fewer shared questions than this (or than half the most any
#: candidate scored) are warned about.
_FEW_SHARED = 100

#: The share of the budget left after the probe that the plan gives the candidates' first folds, shared equally:
#: a busy machine, slower than the steady estimates, still fits them; the rest goes to further folds.
_FIRST_FOLDS_SHARE = 0.5

#: The share of ``time_budget`` that timing the candidates (the probe) aims to stay within.
_PROBE_SHARE = 0.05


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
    cost: tuple = ()  # the probe's (fixed fit seconds, fit seconds per training pair, predict seconds of a fold)
    fraction: float = 1.0  # of a fold's training questions it trains on (successive halving)
    train_questions: list = field(default_factory=list)  # training questions of each fold done
    stopped: str = ""

    @property
    def scored(self) -> pd.Series:
        return pd.concat(self.per_question) if self.per_question else pd.Series(dtype=np.float64)


class RankerSelector(RankerMixin, BaseEstimator):
    """Choose a ranker for your data by grouped cross-validation, then refit it.

    Every candidate is cross-validated with whole questions per fold; its out-of-fold average precision is
    collected per question. The best candidate is the one with the highest MAP on the questions that every
    evaluated candidate scored; each other candidate is compared with it by a paired randomisation test over
    the questions both scored. The choice is the candidate with the lowest latency (median time to rank one
    question's candidates on this machine) among those within ``max_latency_ms`` whose MAP is not
    significantly below the best's; it is then refitted on all the data (``best_estimator_``).

    Parameters
    ----------
    candidates : "default", list or dict, default="default"
        ``"default"``: :data:`DEFAULT_CANDIDATES` (those whose packages are installed). A list of names of the
        benchmark suite (``as2rank bench --models``), of ``(name, estimator)`` pairs, or a dict
        ``{name: estimator}``; estimators are cloned, never fitted in place.
    cv : int or splitter, default=3
        Number of :class:`~sklearn.model_selection.GroupKFold` folds (shuffled with ``random_state``), or a
        splitter with ``split(X, y, groups)`` that keeps each question inside one fold.
    max_latency_ms : float, default=None
        Latency budget: only candidates whose median latency per question is at most this are chosen.
    time_budget : float, default=1200
        Seconds the selection may take before the refit: the probe (a few small fits per candidate, aiming at
        5 % of the budget, a line each as it goes) and the cross-validation. Half of what the probe leaves is
        shared among the candidates' first folds, cheapest first; a candidate whose fold does not fit its share
        trains on 1/2, 1/4, ... of each fold's training questions (at least 40; successive halving) and is
        scored on the same test questions as the others (``train_questions`` in ``cv_results_``); one that
        does not fit even then is excluded, with the budget that would include it. Every candidate's first
        fold runs before any second one; a first fold is judged on the probe's estimate, which errs long (a
        fit on a few questions pays start-up costs that a long one amortises): it runs unless half the estimate
        overruns what is left; a later fold runs when the candidate's last fold's time fits in what is left. The
        first candidate's first fold always runs: something is always measured. ``None``: no limit.
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
        waits for a CPU that other processes held, :mod:`as2rank.app.stopwatch`), ``latency_ms`` (median over
        questions of the least steady time of 3 calls) beside ``latency_wall_ms`` (median wall time of one
        call), ``within_budget``, ``chosen``; ``ece`` (expected calibration
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
    """

    _parameter_constraints = {
        "candidates": [Options(("default",)), InstanceOf((list, tuple, dict), "a list or dict of candidates")],
        "cv": [Interval(Integral, 2, None), HasMethods("split", "a splitter with a split method")],
        "max_latency_ms": [Interval(Real, 0, None, closed="neither"), None],
        "time_budget": [Interval(Real, 0, None, closed="neither"), None],
        "alpha": [Interval(Real, 0, 1, closed="neither")],
        "refit": [Boolean()],
        "random_state": [Interval(Integral, 0, None)],
        "verbose": [Boolean()],
    }

    def __init__(self, candidates="default", cv=3, max_latency_ms=None, time_budget=1200.0, alpha=0.05, refit=True,
                 random_state=0, verbose=True):
        self.candidates = candidates
        self.cv = cv
        self.max_latency_ms = max_latency_ms
        self.time_budget = time_budget
        self.alpha = alpha
        self.refit = refit
        self.random_state = random_state
        self.verbose = verbose

    # ------------------------------------------------------------------------------------------ fitting
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
        validate_params(self, self._parameter_constraints)
        X, y, index = check_ranking_data(X, y, groups)
        keys = index.keys[index.codes]
        answered = int((index.max(y) > 0).sum())
        splitter = self._splitter()
        n_splits = splitter.get_n_splits(X, y, keys)
        if answered < 2 * n_splits:
            raise ValueError(
                f"RankerSelector needs at least {2 * n_splits} questions with a correct answer for {n_splits} folds; "
                f"the data has {answered}."
            )
        folds = list(splitter.split(X, y, keys))
        runs = self._runs("position" in X.columns)
        started = time.perf_counter()
        budget = "no time limit" if self.time_budget is None else f"a time budget of {duration(self.time_budget)}"
        self._say(f"RankerSelector: {index.n_groups:,} questions ({answered:,} with a correct answer), {len(X):,} "
                  f"pairs; {len(folds)} grouped folds; {budget}. Timing each candidate on a few questions:")
        self._probe(runs, X, y, keys, folds)
        runs.sort(key=lambda r: r.fold_estimate_s if r.status == "ok" else np.inf)  # cheapest first (stable)
        probe_s = time.perf_counter() - started
        self._size_first_folds(runs, folds, keys, probe_s)
        self._say(self._plan(runs, folds, probe_s))
        # Fold by fold: every candidate's first fold before any second one, so that the budget goes to
        # measuring every candidate once before measuring any of them again.
        for k in range(len(folds)):
            for run in runs:
                if run.status == "ok" and not run.stopped and self._admits(run, k, runs, folds, keys, started):
                    self._run_fold(run, k, X, y, keys, folds, runs)
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
        from .suite import ENTRIES

        entries = {e.name: e for e in ENTRIES}
        if isinstance(self.candidates, str):
            named = [n for n in DEFAULT_CANDIDATES if has_position or n != "RR"]
        elif isinstance(self.candidates, dict):
            named = list(self.candidates.items())
        else:
            named = list(self.candidates)
        runs = []
        for item in named:
            if isinstance(item, str):
                if item not in entries:
                    raise ValueError(f"Unknown candidate {item!r}; the suite's models are {sorted(entries)}.")
                entry = entries[item]
                missing = entry.missing()
                if missing:
                    runs.append(_Run(item, None, status=f"skipped: pip install {' '.join(missing)}"))
                    continue
                runs.append(_Run(item, entry.make(self.random_state)))
            elif isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str) and hasattr(item[1], "fit"):
                runs.append(_Run(item[0], item[1]))
            else:
                raise ValueError(f"A candidate must be a suite model name or a (name, estimator) pair, got {item!r}.")
        names = [r.name for r in runs]
        if len(set(names)) != len(names):
            raise ValueError(f"Candidate names must be unique, got {names}.")
        if not any(r.status == "ok" for r in runs):
            raise ValueError("No candidate can run: " + "; ".join(f"{r.name} {r.status}" for r in runs))
        return runs

    def _probe(self, runs, X, y, keys, folds) -> None:
        """Estimate each candidate's fold time from fits on a few questions of the first fold, one line each.

        Three timed rounds: a tiny one that loads what the model loads once (weights, spaCy), the tiny one
        again (the fixed cost of a fit and a predict), and a larger one (the cost per pair: up to 5 % of the
        questions, fewer when the tiny rounds say it would overrun the candidate's share of
        :data:`_PROBE_SHARE` of the budget); the estimate is the fixed cost plus the cost per pair times the
        fold's pairs. Times are steady seconds (:mod:`as2rank.app.stopwatch`): what other work on the machine
        takes from them is left out, so the plan does not depend on it.
        """
        train, test = folds[0]
        rng = np.random.default_rng(self.random_state)
        tiny = (some_questions(train, keys, y, rng, fraction=0.0, minimum=4),
                some_questions(test, keys, y, rng, fraction=0.0, minimum=2))
        allowance = np.inf if self.time_budget is None else _PROBE_SHARE * float(self.time_budget)
        spent, waiting = 0.0, sum(r.status == "ok" for r in runs)
        n_questions = len(pd.unique(keys))
        for run in runs:
            if run.status != "ok":
                continue
            try:
                with Stopwatch() as watch:
                    first = fit_predict(run.estimator, X, y, *tiny)
                    small = fit_predict(run.estimator, X, y, *tiny)
                    # As many questions as the rest of this candidate's share affords at the tiny rounds' cost
                    # per question (an upper bound: it includes the fixed cost), between 8 and 5 % of them; drawn
                    # as a prefix of one permutation, so that a smaller round's questions are in a larger one's.
                    share = (allowance - spent) / waiting - sum(first) - sum(small)
                    per_question = sum(small) / (len(np.unique(keys[tiny[0]])) + len(np.unique(keys[tiny[1]])))
                    fraction = min(0.05, share / max(per_question, 1e-9) / n_questions)
                    probe = tuple(some_questions(rows, keys, y, np.random.default_rng(self.random_state + 1),
                                                  fraction=max(0.0, fraction), minimum=minimum)
                                  for rows, minimum in ((train, 8), (test, 4)))
                    large = fit_predict(run.estimator, X, y, *probe)
            except Exception as exc:  # a candidate that cannot run on this data is reported, not fatal
                run.status = f"failed: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
                self._say(f"  {run.name:<14} {run.status}")
                continue
            finally:
                waiting -= 1
            spent += watch.lap.steady
            per_pair = [max(0.0, large[k] - small[k]) / max(1, len(probe[k]) - len(tiny[k])) for k in (0, 1)]
            run.cost = (max(0.0, small[0] - per_pair[0] * len(tiny[0])), per_pair[0],
                        small[1] + per_pair[1] * (len(test) - len(tiny[1])))
            estimate = run.fold_estimate_s = run.probe_estimate_s = fold_estimate(run.cost, len(train))
            self._say(f"  {run.name:<14} ~{duration(estimate)} per fold (timed in {duration(watch.lap.steady)})")

    def _size_first_folds(self, runs, folds, keys, probe_s) -> None:
        """Successive halving over training questions: each candidate, cheapest first, trains its folds on the
        largest of 1, 1/2, 1/4, ... of a fold's training questions (at least :data:`MIN_TRAIN_QUESTIONS`) whose
        estimate fits its share of :data:`_FIRST_FOLDS_SHARE` of the budget left after the probe (an equal
        share of what the candidates before it left). A candidate that does not fit even at the smallest size is
        excluded, with the budget that would include it; the first always runs."""
        if self.time_budget is None:
            return
        train = folds[0][0]
        n_questions = len(pd.unique(keys[train]))
        first = _FIRST_FOLDS_SHARE * (float(self.time_budget) - probe_s)
        ok = [r for r in runs if r.status == "ok"]
        for i, run in enumerate(ok):
            allowance = first / (len(ok) - i)
            sizes = halvings(n_questions)
            fits = [f for f in sizes if fold_estimate(run.cost, f * len(train)) / _PROBE_SLACK <= allowance]
            if not fits and i > 0:
                needed = fold_estimate(run.cost, sizes[-1] * len(train)) / _PROBE_SLACK * (len(ok) - i)
                used = _FIRST_FOLDS_SHARE * (float(self.time_budget) - probe_s) - first  # by the cheaper ones
                budget = probe_s + (used + needed) / _FIRST_FOLDS_SHARE
                run.status = (f"excluded: a fold on {n_questions_of(sizes[-1], n_questions)} training questions needs "
                              f"~{duration(fold_estimate(run.cost, sizes[-1] * len(train)))}; --time-budget "
                              f"{60 * int(np.ceil(budget / 60)):.0f} would include it")
                continue
            run.fraction = fits[0] if fits else sizes[-1]
            run.fold_estimate_s = run.probe_estimate_s = fold_estimate(run.cost, run.fraction * len(train))
            first -= run.fold_estimate_s / _PROBE_SLACK

    def _plan(self, runs, folds, probe_s) -> str:
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
                est = run.fold_estimate_s
                if (k == 0 and (i == 0 or est / _PROBE_SLACK <= left)) or (k > 0 and planned[run.name] == k
                                                                              and est <= left):
                    planned[run.name] += 1
                    left -= est
        total = sum(planned[r.name] * r.fold_estimate_s for r in ok)
        for run in runs:
            if run.status != "ok":
                lines.append(f"  {run.name:<14} {run.status}")
                continue
            n = planned[run.name]
            shown = f"{n} of {len(folds)} folds" if 0 < n < len(folds) else f"{n} folds" if n else "skipped: beyond the time budget"
            size = "" if run.fraction == 1 else f", training on {run.fraction:.3g} of each fold's questions"
            lines.append(f"  {run.name:<14} ~{duration(run.fold_estimate_s)} per fold{size} -> {shown}")
        lines.append(f"Estimated: ~{duration(probe_s + total)} in all (estimates err long)"
                     + (", then the refit of the choice." if self.refit else "."))
        return "\n".join(lines)

    def _admits(self, run, k, runs, folds, keys, started) -> bool:
        """Whether ``run``'s fold ``k`` fits in the time budget; marks the run stopped (or skipped) if not. A
        first fold that no longer fits at its planned size (the machine ran slower than planned) is halved
        further while its size stays at least ``MIN_TRAIN_QUESTIONS``."""
        if self.time_budget is None or (k == 0 and not any(r.per_question for r in runs)):
            return True  # the first candidate's first fold always runs: something is always measured
        left = float(self.time_budget) - (time.perf_counter() - started)
        # A first fold is judged on the probe's estimate, which errs long: it runs unless even the estimate's
        # lower bound (a factor _PROBE_SLACK) overruns what is left; later folds on the last fold's time.
        if run.fold_estimate_s / (_PROBE_SLACK if k == 0 else 1.0) <= left:
            return True
        if k == 0:
            train = folds[0][0]
            smaller = [f for f in halvings(len(pd.unique(keys[train]))) if f < run.fraction
                       and fold_estimate(run.cost, f * len(train)) / _PROBE_SLACK <= left]
            if smaller:
                run.fraction = smaller[0]
                run.fold_estimate_s = run.probe_estimate_s = fold_estimate(run.cost, run.fraction * len(train))
                return True
        if k == 0:  # never run: skipped, not stopped
            run.status = f"skipped: a fold (~{duration(run.fold_estimate_s)}) exceeds the time budget left"
        else:
            run.stopped = f"time budget, after {k} of {len(folds)} folds"
        return False

    def _run_fold(self, run, k, X, y, keys, folds, runs) -> None:
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
        """The results as a Markdown table (see :func:`as2rank.app.selection_report.format_selection`)."""
        from .selection_report import format_selection

        check_is_fitted(self, "cv_results_")
        return format_selection(self.results_table(), alpha=self.alpha, max_latency_ms=self.max_latency_ms,
                                reason=self.choice_reason_)

    def plot(self, ax=None):
        """MAP against latency per question, one point per candidate, the choice marked (needs matplotlib)."""
        from .selection_report import plot_selection

        check_is_fitted(self, "cv_results_")
        return plot_selection(self.results_table(), max_latency_ms=self.max_latency_ms, ax=ax)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.two_d_array = False
        tags.input_tags.string = True
        return tags


def choose(table: pd.DataFrame, *, max_latency_ms=None) -> tuple[int, str]:
    """The choice of :class:`RankerSelector` from its results: the candidate with the lowest latency among
    those within ``max_latency_ms`` that are not significantly below the best (``tied_with_best``).

    When no candidate within the budget is tied with the best, the one with the best shared MAP within the
    budget is chosen; when none is within it, the fastest; both with a warning. A pure function of the
    results, so that the choice under another budget needs no new cross-validation.

    Parameters
    ----------
    table : pandas.DataFrame
        ``RankerSelector.cv_results_`` as a frame (``results_table()``).
    max_latency_ms : float, default=None

    Returns
    -------
    index : int
        The row of ``table`` chosen.
    reason : str
        Why, in words.
    """
    evaluated = table[table["n_folds"] > 0]
    if evaluated.empty:
        raise ValueError("No candidate was evaluated: " + "; ".join(f"{m} {s}" for m, s in zip(table["model"],
                                                                                              table["status"])))
    best = evaluated.loc[evaluated["p_vs_best"].isna()].iloc[0]
    eligible = evaluated if max_latency_ms is None else evaluated[evaluated["latency_ms"] <= max_latency_ms]
    tied = eligible[eligible["tied_with_best"]]
    if len(tied):
        pick = tied.sort_values(["latency_ms", "fit_s"]).iloc[0]
        if pick["model"] == best["model"]:
            why = "the best MAP"
        else:
            why = (f"not significantly below the best ({best['model']}, MAP {100 * best['map_shared']:.2f}; "
                   f"p = {pick['p_vs_best']:.3f})")
        reason = (f"{pick['model']}: MAP {100 * pick['map_shared']:.2f} on the shared questions, {why}, "
                  f"{pick['latency_ms']:.1f} ms per question")
    elif len(eligible):
        pick = eligible.sort_values("map_shared", ascending=False).iloc[0]
        reason = (f"{pick['model']}: the best MAP within {max_latency_ms:g} ms per question "
                  f"({100 * pick['map_shared']:.2f}), significantly below {best['model']} "
                  f"({100 * best['map_shared']:.2f}, {best['latency_ms']:.1f} ms)")
        warnings.warn(f"No model within the latency budget matches the best; chose {reason}.", stacklevel=3)
    else:
        pick = evaluated.sort_values("latency_ms").iloc[0]
        reason = f"{pick['model']}: the fastest ({pick['latency_ms']:.1f} ms), none is within {max_latency_ms:g} ms"
        warnings.warn(f"No candidate meets max_latency_ms={max_latency_ms:g}; chose {reason}.", stacklevel=3)
    return int(pick.name), reason
