"""RankerSelector: grouped cross-validation, the paired test, the latency budget, the bounded cost, and the
table/CLI path from a user's CSV to ranked answers."""

import time

import numpy as np
import pandas as pd
import pytest
from sklearn.base import BaseEstimator, clone
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV, GroupKFold
from sklearn.pipeline import make_pipeline

import as2rank
from as2rank import LexicalFeatures, OverlapRankRanker, PointwiseRanker, RankerSelector, WordOverlapRanker
from as2rank.base import RankerMixin
from as2rank.app.cli import main
from as2rank.datasets import load_sample


@pytest.fixture(scope="module")
def data():
    X, y = load_sample()
    keep = X["qid"].isin(X["qid"].unique()[:240])
    return X[keep].reset_index(drop=True), y[keep.to_numpy()]


def _burn(seconds):
    """Spend ``seconds`` of CPU time (latency is measured in CPU time: a sleep costs none)."""
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


class _Delayed(RankerMixin, BaseEstimator):
    """Word overlap that waits ``fit_s`` in fit and computes ``predict_s`` in every predict (a costly model's
    stand-in)."""

    def __init__(self, fit_s=0.0, predict_s=0.0, negate=False):
        self.fit_s, self.predict_s, self.negate = fit_s, predict_s, negate

    def fit(self, X, y, groups=None):
        time.sleep(self.fit_s)
        self.inner_ = WordOverlapRanker().fit(X, y)
        return self

    def predict(self, X):
        _burn(self.predict_s)
        scores = self.inner_.predict(X)
        return -scores if self.negate else scores


class _Slowed(RankerMixin, BaseEstimator):
    """``estimator`` with ``predict_s`` of computing in every predict."""

    def __init__(self, estimator, predict_s=0.05):
        self.estimator, self.predict_s = estimator, predict_s

    def fit(self, X, y, groups=None):
        self.fitted_ = clone(self.estimator).fit(X, y)
        return self

    def predict(self, X):
        _burn(self.predict_s)
        return self.fitted_.predict(X)


def _lexical_lr():
    return make_pipeline(LexicalFeatures(), PointwiseRanker(LogisticRegression(max_iter=1000)))


def test_chooses_the_cheapest_model_tied_with_the_best(data):
    X, y = data
    sel = RankerSelector(candidates=[("slow", _Delayed(predict_s=0.02)), ("fast", _Delayed())], verbose=False).fit(X, y)
    table = sel.results_table()
    # The same scores: tied (p = 1), so the lower latency wins.
    assert (table["map"].iloc[0] == table["map"].iloc[1]) and table["tied_with_best"].all()
    # "slow" computes 20 ms per call: its latency is that CPU time.
    assert sel.best_name_ == "fast" and table.set_index("model").loc["slow", "latency_ms"] >= 15
    assert sel.cv_results_["chosen"].sum() == 1 and sel.cv_results_["model"][sel.best_index_] == "fast"
    np.testing.assert_array_equal(sel.predict(X), WordOverlapRanker().fit(X, y).predict(X))


def test_a_significantly_better_model_wins_and_the_budget_is_respected(data):
    X, y = data
    candidates = [("WO", _Delayed()), ("Lexical+LR", _Slowed(_lexical_lr()))]
    sel = RankerSelector(candidates=candidates, verbose=False).fit(X, y)
    table = sel.results_table().set_index("model")
    assert sel.best_name_ == "Lexical+LR" and table.loc["WO", "p_vs_best"] < 0.05
    # Refitted on all the data: the same predictions as a fit of a clone.
    np.testing.assert_allclose(sel.predict(X), _lexical_lr().fit(X, y).predict(X))
    # A budget below the better model's latency (it computes 50 ms) picks the fast one, saying why.
    assert table.loc["Lexical+LR", "latency_ms"] >= 50
    with pytest.warns(UserWarning, match="latency budget"):
        tight = RankerSelector(candidates=candidates, max_latency_ms=45, refit=False, verbose=False).fit(X, y)
    assert tight.best_name_ == "WO" and not hasattr(tight, "best_estimator_")
    assert list(tight.results_table().set_index("model")["within_budget"][["WO", "Lexical+LR"]]) == [True, False]


def test_a_model_that_cannot_win_stops_early(data):
    X, y = data
    sel = RankerSelector(candidates=[("WO", _Delayed()), ("reversed", _Delayed(fit_s=0.5, negate=True))], cv=3,
                         verbose=False).fit(X, y)
    table = sel.results_table().set_index("model")
    assert table.loc["WO", "n_folds"] == 3 and table.loc["reversed", "n_folds"] == 1
    assert "significantly below" in table.loc["reversed", "status"]


def test_time_budget_skips_what_cannot_fit(data, capsys):
    X, y = data
    # The probe alone (three fits of 1 s for "slow fit") spends the budget: the first candidate's first fold
    # (the cheapest's, WO's) still runs, nothing else does.
    sel = RankerSelector(candidates=[("WO", _Delayed()), ("slow fit", _Delayed(fit_s=1.0))], time_budget=0.1,
                         refit=False).fit(X, y)
    table = sel.results_table().set_index("model")
    assert table.loc["WO", "n_folds"] == 1 and table.loc["slow fit", "n_folds"] == 0
    assert table.loc["slow fit", "status"].startswith(("skipped", "excluded")) and sel.best_name_ == "WO"
    assert "stopped" not in table.loc["slow fit", "status"]  # not run, never "skipped; stopped" at once
    assert "--time-budget" in table.loc["slow fit", "status"] or "exceeds the time budget" in table.loc["slow fit", "status"]
    err = capsys.readouterr().err
    # The plan comes first, before any fold, and names the budget.
    assert err.index("Plan") < err.index("fold 1/3") and "time budget" in err
    assert "Not run in full: " in sel.format_table()


def test_sklearn_integration(data):
    X, y = data
    sel = RankerSelector(candidates=["WO+RR"], cv=GroupKFold(2), verbose=False)
    assert repr(clone(sel).get_params()) == repr(sel.get_params())
    sel.fit(X, y, groups=X["qid"].to_numpy())
    assert sel.best_name_ == "WO+RR" and 0 < sel.score(X, y) <= 1
    assert list(sel.cv_results_["n_folds"]) == [2]


def test_bad_arguments(data):
    X, y = data
    with pytest.raises(ValueError, match="Unknown candidate"):
        RankerSelector(candidates=["nope"], verbose=False).fit(X, y)
    with pytest.raises(ValueError, match="cv must be"):
        RankerSelector(cv=1, verbose=False).fit(X, y)
    with pytest.raises(ValueError, match="unique"):
        RankerSelector(candidates=[("a", _Delayed()), ("a", _Delayed())], verbose=False).fit(X, y)
    small = X["qid"].isin(X["qid"].unique()[:3]).to_numpy()
    with pytest.raises(ValueError, match="at least 6 questions"):
        RankerSelector(candidates=["WO+RR"], verbose=False).fit(X[small], y[small])


def test_rank_a_frame_with_any_fitted_estimator(data):
    X, y = data
    pipe = _lexical_lr().fit(X, y)
    search = GridSearchCV(_lexical_lr(), {"pointwiseranker__estimator__C": [1.0]}, cv=GroupKFold(2),
                          scoring=as2rank.get_scorer("map")).fit(X, y, groups=X["qid"])
    for est in (OverlapRankRanker().fit(X, y), pipe, search):
        ranked = as2rank.rank(est, X, top_k=2)
        assert list(ranked.columns) == ["qid", "question", "rank", "candidate", "score", "row"]
        assert ranked.groupby("qid", sort=False)["rank"].apply(list).map(lambda r: r in ([1], [1, 2])).all()
        best = ranked[ranked["rank"] == 1].set_index("qid")["score"]
        assert (best >= ranked.groupby("qid")["score"].max().loc[best.index] - 1e-12).all()
        np.testing.assert_array_equal(X.loc[ranked["row"], "candidate"].to_numpy(), ranked["candidate"].to_numpy())


def _user_table(X, y, path):
    """The sample under a user's own column names, without the position column."""
    table = pd.DataFrame({"Query": X["question"], "Sentence": X["candidate"], "IsAnswer": y.astype(int),
                          "QID": X["qid"]})
    table.to_csv(path, index=False)


def test_three_commands_from_a_csv(data, tmp_path, capsys):
    X, y = data
    train, test = tmp_path / "train.csv", tmp_path / "test.csv"
    questions = X["qid"].unique()
    first = X["qid"].isin(questions[:180]).to_numpy()
    _user_table(X[first], y[first], train)
    _user_table(X[~first], y[~first], test)
    cols = ["--question", "Query", "--candidate", "Sentence", "--label", "IsAnswer", "--qid", "QID"]
    assert main(["select", str(train), *cols, "--candidates", "WO+RR,Lexical+LR", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert out.count("Chosen: ") == 1 and "| Lexical+LR |" in out and "as2rank fit" in out
    model = tmp_path / "model"
    assert main(["fit", str(train), *cols, "--model", "auto", "--candidates", "WO+RR,Lexical+LR", "--output",
                 str(model), "--quiet"]) == 0
    card = (model / "README.md").read_text()
    assert card.count("library_name: as2rank") == 1
    # The card names the suite model (not its class), the user's columns, and the cross-validated figures.
    assert any(f"\n# {name}\n" in card for name in ("WO+RR", "Lexical+LR")) and "# Pipeline" not in card
    assert "| `question` | `Query` |" in card and "| `qid` | `QID` |" in card and "| `answer_f1` |" in card
    ranked = tmp_path / "ranked.csv"
    assert main(["rank", str(model), str(test), *cols[:4], "--qid", "QID", "--output", str(ranked), "--top-k", "1"]) == 0
    out = pd.read_csv(ranked)
    assert len(out) == X[~first]["qid"].nunique() and (out["rank"] == 1).all()
    assert main(["evaluate", "--model", str(model), "--data", str(test), *cols]) == 0
    assert "| pessimistic |" in capsys.readouterr().out
    # predict reads the same table, chunk by chunk: one score per row, ranks as rank's.
    scores = tmp_path / "scores"
    assert main(["predict", "--model", str(model), "--input", str(test), *cols, "--output", str(scores), "--quiet",
                 "--chunksize", "100"]) == 0
    parts = pd.read_parquet(scores).sort_values("row")
    assert list(parts["row"]) == list(range(int((~first).sum())))
    top = parts[parts["rank"] == 1].set_index("qid")["row"]
    assert (top.loc[out["qid"]].to_numpy() == out["row"].to_numpy()).all()


def test_table_commands_fail_in_one_line(tmp_path, capsys):
    path = tmp_path / "t.csv"
    pd.DataFrame({"q": ["a", "a"], "c": ["x", "y"], "label": [0, 1]}).to_csv(path, index=False)
    assert main(["select", str(path), "--candidate", "c"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'question'" in err
    assert main(["rank", str(tmp_path / "missing"), str(path), "--question", "q", "--candidate", "c", "--output",
                 str(tmp_path / "r.txt")]) == 2
    assert capsys.readouterr().err.startswith("as2rank: error:")


def test_plot_marks_the_choice(data):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    X, y = data
    sel = RankerSelector(candidates=[("WO", _Delayed()), ("Lexical+LR", _lexical_lr())], refit=False,
                         verbose=False).fit(X, y)
    ax = sel.plot()
    labels = {t.get_text() for t in ax.texts}
    assert labels == {"WO", "Lexical+LR"} and ax.get_xscale() == "log"
    assert "| Lexical+LR |" in sel.format_table() and "**yes**" in sel.format_table()


def test_calibration_error_and_answer_f1_are_those_of_the_out_of_fold_scores(data):
    """The table's ECE and answer F1 are held_out_answering's on the candidate's out-of-fold scores, every
    question included (those without a correct candidate too); with fewer than 3 folds there are none."""
    from as2rank.answer.heldout import held_out_answering
    from as2rank.base import rank_tiebreak
    from as2rank.data import GroupIndex

    X, y = data
    sel = RankerSelector(candidates=[("Lexical+LR", _lexical_lr())], cv=3, refit=False, verbose=False).fit(X, y)
    splitter = GroupKFold(n_splits=3, shuffle=True, random_state=0)
    scores, fold_of = np.empty(len(X)), np.empty(len(X), dtype=np.intp)
    for k, (train, test) in enumerate(splitter.split(X, y, X["qid"])):
        scores[test] = clone(_lexical_lr()).fit(X.iloc[train], y[train]).predict(X.iloc[test])
        fold_of[test] = k
    order = np.argsort(fold_of, kind="stable")  # the selector's rows: fold by fold
    Xo = X.iloc[order]
    expected = held_out_answering(GroupIndex.from_frame(Xo), scores[order], y[order], fold_of[order],
                                  tiebreak=rank_tiebreak(Xo))
    assert sel.cv_results_["ece"][0] == pytest.approx(expected["ece"])
    assert sel.cv_results_["answer_f1"][0] == pytest.approx(expected["f1"])
    assert expected["n_questions"] == X["qid"].nunique() > expected["n_answerable"]
    assert "| Lexical+LR |" in sel.format_table() and "ECE" in sel.format_table()
    two = RankerSelector(candidates=[("Lexical+LR", _lexical_lr())], cv=2, refit=False, verbose=False).fit(X, y)
    assert np.isnan(two.cv_results_["ece"][0]) and np.isnan(two.cv_results_["answer_f1"][0])
    assert "| – | – |" in two.format_table()


def test_few_shared_questions_after_a_budget_stop_are_warned_about():
    """A candidate stopped by the time budget after one fold leaves the others compared on its questions only: a
    warning says so. A candidate stopped for being significantly below the best is no reason to warn."""
    import warnings

    def table(status):
        return pd.DataFrame({"model": ["fast", "slow"], "n_folds": [3, 1], "n_questions": [300, 100],
                             "status": ["ok", status]})

    with pytest.warns(UserWarning, match="compared on 100 shared questions \\(slow ran 1 fold"):
        RankerSelector()._warn_if_few_shared(table("ok; stopped: time budget, after 1 of 3 folds"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        RankerSelector()._warn_if_few_shared(table("ok; stopped: significantly below the best after 1 of 3 folds"))
        RankerSelector()._warn_if_few_shared(table("ok").assign(n_folds=3, n_questions=300))


def test_successive_halving_sizes_every_first_fold_into_its_share():
    """Cheapest first, each candidate's first fold gets an equal share of half the budget left after the probe
    (what the cheaper ones left): the largest of 1, 1/2, 1/4, ... of the fold's training questions whose estimate,
    in wall time at the machine's pace, fits; one that does not fit at 40 questions is excluded, with the smallest
    budget in whole minutes that includes it."""
    from as2rank.model_selection.selector import _Run
    from as2rank.model_selection.measures import first_fold_sizes, fold_estimate, halvings, subsample

    keys = np.repeat(np.arange(480), 5).astype(str)  # 480 questions of 5 rows
    y = np.tile([1, 0, 0, 0, 0], 480)
    train, test = np.arange(0, 1600), np.arange(1600, 2400)  # 320 training questions, 160 test questions
    ones = np.ones(len(keys))  # costs per row

    def runs():
        return [_Run("cheap", None, cost=(1.0, 0.001, 1.0)),    # ~3.6 s a fold: fits whole
                _Run("mid", None, cost=(2.0, 0.2, 10.0)),       # ~332 s whole, ~172 s on 1/2
                _Run("dear", None, cost=(5.0, 5.0, 50.0))]      # ~1055 s even on 40 questions

    first = runs()
    RankerSelector(time_budget=1000.0)._size_first_folds(first, [(train, test)], keys, y, probe_s=100.0, lengths=ones)
    # Half of the 900 s left, 450 s, or all of it when the smallest folds need more. At their smallest sizes (40
    # questions) the three need 2.2 + 52 + 1055 s, more than the 900 s: dear cannot be measured and is excluded. Cheap gets its 2.2 s plus half of the 396 s beyond both smallest sizes
    # and fits whole (3.6 s); mid gets 52 s plus all the 394 s left beyond them and fits whole (332 s).
    assert first[0].fraction == 1.0 and first[1].fraction == 1.0
    assert first[1].fold_estimate_s == pytest.approx(fold_estimate(first[1].cost, 1600))
    assert first[2].status.startswith("excluded: a fold on 40 training questions") and "--time-budget" in first[2].status
    needed = int(first[2].status.rsplit("--time-budget ", 1)[1].split()[0])
    assert needed % 60 == 0
    for budget, included in ((needed, True), (needed - 60, False)):  # the smallest whole-minute budget
        again = runs()
        RankerSelector(time_budget=float(budget))._size_first_folds(again, [(train, test)], keys, y,
                                                                    probe_s=100.0, lengths=ones)
        assert (again[2].status == "ok") is included
    # On a machine running at half speed (pace 2), the same budget holds mid only on half of the questions.
    slow = runs()
    RankerSelector(time_budget=1000.0)._size_first_folds(slow, [(train, test)], keys, y, probe_s=100.0,
                                                         pace=2.0, lengths=ones)
    assert slow[1].fraction == 0.5 and slow[1].fold_estimate_s == pytest.approx(fold_estimate(slow[1].cost, 800))
    assert first_fold_sizes([{1.0: 10.0, 0.5: 6.0}, {1.0: 9.0, 0.5: 4.0}], 10.0) == [0.5, 0.5]
    assert first_fold_sizes([{1.0: 50.0}, {1.0: 50.0}], 10.0) == [1.0, None]  # the first always runs
    # 50 s left: cheap and mid need 4.4 + 104 s at pace 2, beyond even all of it: mid is excluded. 200 s left:
    # half of it excludes mid, all of it includes it, so the first folds take all of it.
    few = runs()[:2]
    RankerSelector(time_budget=950.0)._size_first_folds(few, [(train, test)], keys, y, probe_s=900.0,
                                                        pace=2.0, lengths=ones)
    assert few[0].status == "ok" and few[1].status.startswith("excluded")
    few = runs()[:2]
    RankerSelector(time_budget=1100.0)._size_first_folds(few, [(train, test)], keys, y, probe_s=900.0,
                                                         pace=2.0, lengths=ones)
    assert few[0].status == "ok" and few[1].status == "ok"
    # A cheap candidate early in the order leaves what a dear one needs at its smallest size.
    assert first_fold_sizes([{1.0: 300.0, 0.5: 150.0, 0.25: 80.0}, {1.0: 900.0, 0.5: 400.0, 0.25: 250.0}],
                            400.0) == [0.25, 0.25]
    assert halvings(320) == [1.0, 0.5, 0.25, 0.125] and halvings(50) == [1.0]
    half, quarter = subsample(train, keys, 0.5, seed=(0, 0)), subsample(train, keys, 0.25, seed=(0, 0))
    assert len(np.unique(keys[half])) == 160 and set(keys[quarter]) <= set(keys[half])  # nested
    assert (np.diff(half) > 0).all() and subsample(train, keys, 1.0, seed=0) is train


def test_a_halved_candidate_trains_on_fewer_questions_and_is_scored_on_the_same_ones(data, monkeypatch):
    X, y = data

    def halve_lexical(self, runs, folds, keys, y, probe_s, pace=1.0, *, lengths):
        next(r for r in runs if r.name == "Lexical+LR").fraction = 0.5

    monkeypatch.setattr(RankerSelector, "_size_first_folds", halve_lexical)
    sel = RankerSelector(candidates=[("WO", _Delayed()), ("Lexical+LR", _lexical_lr())], refit=False,
                         time_budget=None, verbose=False).fit(X, y)
    table = sel.results_table().set_index("model")
    whole, half = table.loc["WO", "train_questions"], table.loc["Lexical+LR", "train_questions"]
    assert half == pytest.approx(np.ceil(whole / 2), abs=1)  # half of each fold's training questions
    assert table.loc["WO", "n_questions"] == table.loc["Lexical+LR", "n_questions"] == sel.n_questions_
    assert "| Lexical+LR |" in sel.format_table()


def test_fit_work_counts_the_epochs_a_fit_will_run():
    """The probe's unit of fit cost: rows once for a model without epochs; rows per epoch otherwise, answered
    questions only under a listwise loss, and ``epochs="auto"`` resolved from the questions as Cosinet does (at
    least 200 steps: 8 questions at 4 per step run 100 epochs, 800 run 3)."""
    from as2rank.model_selection.measures import fit_work, probe_estimator
    from as2rank import Cosinet

    keys = np.repeat(np.arange(800), 5).astype(str)
    y = np.tile([1, 0, 0, 0, 0], 800)
    y[:5] = 0  # the first question has no correct answer
    assert fit_work(WordOverlapRanker(), keys, y) == 4000
    assert fit_work(None, keys[:10], y[:10]) == 10
    listwise = Cosinet(loss="listwise", batch_size=4)
    assert fit_work(listwise, keys, y) == 3 * 3995
    assert fit_work(listwise, keys[5:45], y[5:45]) == 100 * 40
    assert fit_work(Cosinet(loss="pointwise", epochs=2), keys[:45], y[:45]) == 2 * 45
    once = probe_estimator(listwise)
    assert once.epochs == 1 and fit_work(once, keys, y) == 3995 and listwise.epochs == "auto"


def test_the_probes_work_pads_a_neural_models_batches():
    """A neural model's rows cost the longest of their batch, sorted by length (a few rows in one batch cost what
    the longest does); a lexical model's, their lengths; an epoch's batches are of ``batch_size`` rows."""
    from as2rank import Cosinet, ZeroShotRanker
    from as2rank.model_selection.measures import BATCH_ROWS, fit_work, padded_length, read_work

    assert padded_length([5, 1, 3, 10, 2], 2) == 2 * 2 + 2 * 5 + 10  # [1 2] [3 5] [10]
    assert padded_length([5, 1, 3], None) == padded_length([5, 1, 3], 1) == 9 and padded_length([], 4) == 0
    lengths = np.arange(1.0, 2 * BATCH_ROWS + 1)  # 1 .. 64: two batches, the longest 32 and 64
    assert read_work(WordOverlapRanker(), lengths) == lengths.sum()
    assert read_work(ZeroShotRanker(), lengths) == BATCH_ROWS * (BATCH_ROWS + 2 * BATCH_ROWS)
    keys = np.repeat(np.arange(4), 2).astype(str)
    y = np.tile([1, 0], 4)
    # 2 epochs of [1 2 3] [4 5 6] [7 8] at 3 rows a batch
    assert fit_work(Cosinet(loss="pointwise", epochs=2, batch_size=3), keys, y, np.arange(1.0, 9)) == 2 * (9 + 18 + 16)


def test_the_probes_questions_have_both_labels_where_they_can():
    """``some_questions`` draws answered questions with a wrong candidate too before those with only correct
    ones, so that a one-question probe fit sees both labels."""
    from as2rank.model_selection.measures import some_questions

    keys = np.repeat(np.arange(6), 2).astype(str)
    y = np.array([1, 1, 0, 0, 1, 0, 1, 1, 1, 1, 1, 0])  # q0, q3, q4: only correct; q1: none; q2, q5: both
    rows = np.arange(12)
    for seed in range(20):
        one = some_questions(rows, keys, y, np.random.default_rng(seed), fraction=0.0, minimum=1)
        assert set(keys[one]) <= {"2", "5"} and len(one) == 2 and set(y[one]) == {0, 1}
    every = some_questions(rows, keys, y, np.random.default_rng(0), fraction=1.0, minimum=1)
    assert set(keys[every]) == {"0", "2", "3", "4", "5"} and (np.diff(every) > 0).all()


class _Counted(RankerMixin, BaseEstimator):
    """Word overlap whose first ``slow_calls`` predicts compute 20 ms and later ones 1 ms, counting the calls."""

    def __init__(self, slow_calls=0):
        self.slow_calls = slow_calls

    def fit(self, X, y, groups=None):
        self.inner_, self.calls_ = WordOverlapRanker().fit(X, y), 0
        return self

    def predict(self, X):
        self.calls_ += 1
        _burn(0.02 if self.calls_ <= self.slow_calls else 0.001)
        return self.inner_.predict(X)


def test_latency_is_the_least_cpu_time_over_rounds_that_run_until_enough_is_spent(data, monkeypatch):
    """Rounds of one call per question (20 questions) after a warm-up call at the process's threads (one per
    question, for the wall time) and one on one thread: at least 3 rounds, more while under ``LATENCY_CPU_S``
    seconds are spent; the least of a question's calls counts, so a slow start (the first 2 rounds) does not."""
    import as2rank.model_selection.measures as measures

    X, y = data
    monkeypatch.setattr(measures, "LATENCY_CPU_S", 0.2)
    est = _Counted(slow_calls=1 + 20 + 1 + 2 * 20).fit(X, y)
    cpu_ms, wall_ms = measures.latency_ms(est, X, seed=0)
    # 0.2 s at 1 ms a call after two rounds of 20 ms: 0.8 s spent by round 2, so 3 rounds and no more. The
    # latency is a fast call's (1 ms of burn plus the overlap's own work, a few ms on a loaded machine), not a
    # slow one's 20 ms.
    assert est.calls_ == 1 + 20 + 1 + 3 * 20 and 0.9 <= cpu_ms < 15 and wall_ms >= 15
    # Fast calls (1 ms and the overlap's own few ms): more rounds, whole ones, until 0.6 s is spent.
    monkeypatch.setattr(measures, "LATENCY_CPU_S", 0.6)
    est = _Counted().fit(X, y)
    start = time.process_time()
    cpu_ms, _ = measures.latency_ms(est, X, seed=0)
    rounds = (est.calls_ - 22) / 20
    assert rounds == int(rounds) and 3 < rounds <= 100 and time.process_time() - start >= 0.6 and cpu_ms >= 0.9


def test_the_probe_predicts_training_questions_it_did_not_fit_on():
    """The fold's test questions stay unread until the fold predicts them (caches warm with what was read): the
    probe fits a fraction of the training questions and predicts as many others of them as that fraction of the
    test questions."""
    from as2rank.model_selection.measures import probe_rows

    keys = np.repeat(np.arange(300), 4).astype(str)
    y = np.tile([1, 0, 0, 0], 300)
    train, test = np.arange(0, 800), np.arange(800, 1200)  # 200 training questions, 100 test questions
    fit, predict = probe_rows(train, test, keys, y, 0, fraction=0.2, minimum=6)
    assert len(set(keys[fit])) == 40 and len(set(keys[predict])) == 20  # 0.2 of 200; 0.2 of 100
    assert not set(keys[fit]) & set(keys[predict]) and set(predict) <= set(train) and set(fit) <= set(train)
    fit, predict = probe_rows(train, test, keys, y, 0, fraction=0.0, minimum=6)
    assert len(set(keys[fit])) == 6 and len(set(keys[predict])) == 3
    fit, predict = probe_rows(train[:8], test, keys, y, 0, fraction=1.0, minimum=6)  # nothing left: the fit's own
    assert list(fit) == list(predict) == list(train[:8])


def test_candidate_names_are_read_from_the_catalogue(data):
    """Names are the catalogue's (``as2rank.get_ranker``), case-insensitive, reported under the catalogue's
    spelling; two spellings of one name are one candidate twice."""
    X, y = data
    sel = RankerSelector(candidates=["wo+rr", "wo"], cv=2, time_budget=None, refit=False, verbose=False).fit(X, y)
    assert sorted(sel.cv_results_["model"]) == ["WO", "WO+RR"]
    with pytest.raises(ValueError, match="unique"):
        RankerSelector(candidates=["WO+RR", "wo+rr"], verbose=False).fit(X, y)
