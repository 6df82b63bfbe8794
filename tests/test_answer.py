"""Answer or abstain: the measures over all questions (as2rank.metrics.answering,
ranking_report(unanswered="include")), CalibratedRanker (calibration, question-level probability, threshold,
persistence, scikit-learn integration), rank(abstain=...) and the command line's fit --calibrate / rank
--target-precision. Synthetic tables with a numeric feature column and rankers that tokenise nothing, so the file
runs in seconds, offline, without torch."""

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV, GroupKFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer

import as2rank
from as2rank import PointwiseRanker, ReciprocalRankRanker
from as2rank.answer import CalibratedRanker
from as2rank.answer.ranker import PREFIT_FOLDS
from as2rank.answer.threshold import choose_threshold
from as2rank.app.cli import main
from as2rank.data import GroupIndex
from as2rank.metrics import (
    answer_triggering,
    brier_score,
    expected_calibration_error,
    get_scorer,
    precision_at_coverage,
    precision_coverage_auc,
    precision_coverage_curve,
    ranking_report,
    wilson_interval,
)


def table(n_questions=120, seed=0, answerable=0.5):
    """Questions of 2-8 candidates; a fraction ``answerable`` have one correct candidate. Feature ``f`` is higher
    for the correct one; retrieval ``position`` puts it early more often than not."""
    rng = np.random.default_rng(seed)
    rows = []
    for q in range(n_questions):
        n = int(rng.integers(2, 9))
        good = int(rng.integers(n)) if rng.random() < answerable else -1
        for j in range(n):
            label = int(j == good)
            rows.append({"qid": f"q{q}", "question": f"question {q}", "candidate": f"sentence {q}-{j}",
                         "position": (j - good) % n if good >= 0 else j, "f": 1.5 * label + rng.normal(),
                         "label": label})
    frame = pd.DataFrame(rows)
    return frame.drop(columns="label"), frame["label"].to_numpy()


def pointwise():
    return PointwiseRanker(LogisticRegression(), features=["f"])


@pytest.fixture(scope="module")
def data():
    return table()


@pytest.fixture(scope="module")
def fitted(data):
    X, y = data
    return CalibratedRanker(pointwise(), cv=3).fit(X, y)


# ----------------------------------------------------------------------------------------------- measures by hand
#: Four questions: q1 ranks its correct candidate first, q2 a wrong one, q3 has no correct candidate, q4 one
#: candidate, correct.
TINY_Y = np.array([1, 0, 1, 0, 0, 0, 1])
TINY_S = np.array([2.0, 1.0, 1.0, 3.0, 1.0, 2.0, 5.0])
TINY_G = np.array(["q1", "q1", "q2", "q2", "q3", "q3", "q4"])


def test_answer_triggering_by_hand():
    r = answer_triggering(TINY_Y, TINY_S, TINY_G, np.array([True, True, False, False]))
    # answered q1 (right) and q2 (wrong): precision 1/2; 3 questions have a correct candidate: recall 1/3
    assert (r["precision"], r["recall"], r["n_answered"], r["n_answerable"], r["n_correct"]) == (0.5, 1 / 3, 2, 3, 1)
    assert r["f1"] == pytest.approx(2 * 0.5 * (1 / 3) / (0.5 + 1 / 3))
    # A Series is aligned on the question ids, whatever its order.
    series = pd.Series([False, True, False, True], index=["q4", "q2", "q3", "q1"])
    assert answer_triggering(TINY_Y, TINY_S, TINY_G, series) == r
    assert answer_triggering(TINY_Y, TINY_S, TINY_G, np.zeros(4, dtype=bool))["precision"] == 0.0
    with pytest.raises(ValueError, match="no value for question"):
        answer_triggering(TINY_Y, TINY_S, TINY_G, series.drop("q3"))
    with pytest.raises(TypeError, match="booleans"):
        answer_triggering(TINY_Y, TINY_S, TINY_G, np.array([1, 1, 0, 0]))


def test_ranking_report_includes_unanswered_questions_only_when_asked():
    clean = ranking_report(TINY_Y, TINY_S, TINY_G)
    assert "answer_f1" not in clean and clean["n_evaluated"] == 3
    r = ranking_report(TINY_Y, TINY_S, TINY_G, unanswered="include")  # a system that always answers
    assert (r["answer_precision"], r["answer_recall"], r["n_answered"]) == (0.5, 2 / 3, 4)
    assert r["answer_f1"] == pytest.approx(4 / 7) and r["map"] == clean["map"]
    given = ranking_report(TINY_Y, TINY_S, TINY_G, unanswered="include", answered=np.array([True, True, False, False]))
    assert given["answer_precision"] == 0.5 and given["answer_recall"] == 1 / 3
    with pytest.raises(ValueError, match="only used with unanswered='include'"):
        ranking_report(TINY_Y, TINY_S, TINY_G, answered=np.ones(4, dtype=bool))


def test_precision_coverage_by_hand():
    confidence = np.array([0.9, 0.8, 0.8, 0.1])  # q2 and q3 tie: answered together
    coverage, precision, thresholds = precision_coverage_curve(TINY_Y, TINY_S, TINY_G, confidence)
    np.testing.assert_allclose(coverage, [0.25, 0.75, 1.0])
    np.testing.assert_allclose(precision, [1.0, 1 / 3, 0.5])
    np.testing.assert_allclose(thresholds, [0.9, 0.8, 0.1])
    assert precision_at_coverage(TINY_Y, TINY_S, TINY_G, confidence, 0.5) == pytest.approx(1 / 3)
    assert precision_at_coverage(TINY_Y, TINY_S, TINY_G, confidence, 0.25) == 1.0
    auc = precision_coverage_auc(TINY_Y, TINY_S, TINY_G, confidence)
    assert auc == pytest.approx(1.0 * 0.25 + (1 / 3) * 0.5 + 0.5 * 0.25)


def test_ece_and_brier_by_hand():
    y = np.array([0, 1, 1, 1, 0])
    p = np.array([0.05, 0.15, 0.95, 1.0, 0.55])
    # bins of width 0.1: {0.05}: |0 - 0.05|; {0.15}: |1 - 0.15|; {0.55}: |0 - 0.55|; {0.95, 1.0}: |2 - 1.95|
    assert expected_calibration_error(y, p) == pytest.approx((0.05 + 0.85 + 0.55 + 0.05) / 5)
    assert expected_calibration_error(y, p, n_bins=1) == pytest.approx(abs(3 - p.sum()) / 5)
    assert brier_score(y, p) == pytest.approx((0.05**2 + 0.85**2 + 0.05**2 + 0 + 0.55**2) / 5)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        brier_score(y, p + 0.1)


def test_wilson_interval():
    low, high = wilson_interval(8, 10)
    assert (round(low, 4), round(high, 4)) == (0.4902, 0.9433)
    assert wilson_interval(0, 0) == (0.0, 1.0)
    assert wilson_interval(5, 5)[1] == 1.0 and wilson_interval(0, 5)[0] == 0.0


def test_threshold_for_a_target_on_a_synthetic_table():
    confidence = np.array([0.9, 0.8, 0.7, 0.6, 0.5, 0.4])
    correct = np.array([True, True, False, True, False, False])
    answerable = np.array([True, True, True, True, False, False])
    # precision of the k most confident: 1, 1, 2/3, 3/4, 3/5, 1/2
    r = choose_threshold(confidence, correct, answerable, target_precision=0.75)
    assert r["threshold"] == pytest.approx(0.55) and (r["n_answered"], r["n_correct"], r["precision"]) == (4, 3, 0.75)
    assert (r["precision_low"], r["precision_high"]) == wilson_interval(3, 4)
    assert choose_threshold(confidence, correct, answerable, target_precision=0.9)["threshold"] == pytest.approx(0.75)
    r = choose_threshold(confidence, correct, answerable, target_coverage=0.5)
    assert r["threshold"] == pytest.approx(0.65) and r["coverage"] == 0.5
    r = choose_threshold(confidence, correct, answerable)  # F1 = 2 correct / (answered + 4): best at 4 answered
    assert r["rule"] == "f1" and r["threshold"] == pytest.approx(0.55) and r["f1"] == pytest.approx(0.75)
    assert choose_threshold(confidence, correct, answerable, target_coverage=1.0)["threshold"] == 0.0
    wrong_first = choose_threshold(confidence, correct[::-1], answerable, target_precision=0.9)  # best: 1/2
    assert wrong_first["threshold"] == 1.0 and wrong_first["n_answered"] == 0 and wrong_first["precision"] is None


# ----------------------------------------------------------------------------------------------- the estimator
@pytest.mark.parametrize("method", ["sigmoid", "isotonic"])
def test_probabilities_are_monotone_in_the_score_and_keep_the_ranking(data, method):
    X, y = data
    model = CalibratedRanker(pointwise(), method=method, cv=3).fit(X, y)
    proba = model.predict_proba(X)
    scores = model.predict(X)
    assert proba.shape == (len(X), 2) and np.allclose(proba.sum(axis=1), 1.0)
    assert (proba >= 0).all() and (proba <= 1).all()
    by_score = proba[np.argsort(scores, kind="stable"), 1]
    assert (np.diff(by_score) >= 0).all()
    if method == "sigmoid":
        assert (np.diff(by_score[np.diff(np.sort(scores), prepend=-np.inf) > 0]) > 0).all()  # strictly
    np.testing.assert_array_equal(scores, model.estimator_.predict(X))
    assert expected_calibration_error(y, proba[:, 1]) < 0.1


def test_held_out_probabilities_never_read_their_own_fold_labels(data):
    X, y = data
    train = X["qid"].isin([f"q{i}" for i in range(40)]).to_numpy()
    ranker = pointwise().fit(X[train], y[train])
    X_dev, y_dev = X[~train].reset_index(drop=True), y[~train]
    index = GroupIndex(X_dev["qid"])
    cases = ((CalibratedRanker(ranker, cv="prefit"), PREFIT_FOLDS), (CalibratedRanker(ReciprocalRankRanker(), cv=4), 4))
    for model, n_folds in cases:
        test = list(GroupKFold(n_folds).split(X_dev, y_dev, index.codes))[1][1]
        shuffled = y_dev.copy()
        shuffled[test] = np.random.default_rng(0).permutation(y_dev[test])
        assert not np.array_equal(shuffled, y_dev)
        a, b = clone(model).fit(X_dev, y_dev), clone(model).fit(X_dev, shuffled)
        fold = np.isin(np.arange(index.n_groups), index.codes[test])
        np.testing.assert_array_equal(a.holdout_confidence_[fold], b.holdout_confidence_[fold])
        assert not np.array_equal(a.holdout_confidence_[~fold], b.holdout_confidence_[~fold])  # the others do read them


def test_predict_answer_and_rank_with_abstention(data, fitted):
    X, y = data
    answers = fitted.predict_answer(X)
    assert list(answers.columns) == ["qid", "question", "answer", "row", "probability", "answered"]
    assert list(answers["qid"]) == list(pd.unique(X["qid"]))
    np.testing.assert_array_equal(answers["answered"], answers["probability"] > fitted.threshold_)
    assert answers.loc[~answers["answered"], "answer"].isna().all()
    top = as2rank.rank(fitted, X, top_k=1)
    answered = answers["answered"].to_numpy()
    assert list(answers.loc[answered, "answer"]) == list(top.loc[answered, "candidate"])
    assert list(answers["row"]) == list(top["row"])
    ranked = as2rank.rank(fitted, X, abstain=True)
    assert ranked["answer"].sum() == answers["answered"].sum() and (ranked.loc[ranked["answer"], "rank"] == 1).all()
    same = ["qid", "rank", "candidate", "score"]
    assert ranked[same].equals(as2rank.rank(fitted, X)[same])
    assert as2rank.rank(fitted, X, abstain=0.0)["answer"].sum() == X["qid"].nunique()
    assert not as2rank.rank(fitted, X, abstain=1.0)["answer"].any()
    with pytest.raises(ValueError, match="cannot: wrap it in"):
        as2rank.rank(fitted.estimator_, X, abstain=True)
    with pytest.raises(ValueError, match="abstain must be"):
        as2rank.rank(fitted, X, abstain=2.0)
    r = answer_triggering(y, fitted.predict(X), X["qid"], answers.set_index("qid")["answered"], ties="stable",
                          position=X["position"])
    assert 0 < r["precision"] <= 1 and 0 < r["recall"] <= 1


def test_threshold_is_stored_with_the_model_and_others_chosen_from_the_held_out_questions(data, fitted):
    X, y = data
    report = fitted.threshold_report_
    assert report["rule"] == "f1" and report["threshold"] == fitted.threshold_ and 0 <= fitted.threshold_ <= 1
    assert report["precision_low"] <= report["precision"] <= report["precision_high"]
    assert len(fitted.holdout_confidence_) == X["qid"].nunique() == report["n_questions"]
    assert fitted.threshold_for() == report
    strict = fitted.threshold_for(target_precision=0.7)
    assert strict["precision"] >= 0.7 and strict["threshold"] >= fitted.threshold_
    again = CalibratedRanker(pointwise(), cv=3, target_precision=0.7).fit(X, y)
    assert again.threshold_ == strict["threshold"] and again.threshold_report_ == strict
    coverage = fitted.threshold_for(target_coverage=0.3)
    assert coverage["coverage"] >= 0.3
    answered = (fitted.predict_answer(X, threshold=coverage["threshold"])["answered"]).mean()
    assert 0.1 < answered < 0.6  # on the training questions, near the held-out coverage
    broken = clone(fitted).fit(X, y)
    broken.holdout_correct_ = np.zeros_like(broken.holdout_correct_)
    with pytest.raises(ValueError, match="No threshold reaches precision 0.5"):
        broken.threshold_for(target_precision=0.5)


def test_an_unreachable_target_warns_and_answers_nothing(data):
    X, _ = data
    last = X["position"] == X.groupby("qid")["position"].transform("max")
    y = last.to_numpy().astype(int)  # the last candidate is the right one: RR's top candidate never is
    with pytest.warns(UserWarning, match="answers no question"):
        model = CalibratedRanker(ReciprocalRankRanker(), cv=3, target_precision=0.5).fit(X, y)
    assert model.threshold_ == 1.0 and not model.predict_answer(X)["answered"].any()


@pytest.mark.parametrize("method", ["sigmoid", "isotonic"])
def test_save_and_load_keep_the_calibration_and_the_threshold(data, tmp_path, method):
    X, y = data
    model = CalibratedRanker(pointwise(), method=method, cv=3, target_coverage=0.4).fit(X, y)
    as2rank.save(model, tmp_path / "m")
    loaded = as2rank.load(tmp_path / "m")
    assert type(loaded) is CalibratedRanker and loaded.get_params()["method"] == method
    np.testing.assert_array_equal(loaded.predict_proba(X), model.predict_proba(X))
    assert loaded.threshold_ == model.threshold_ and loaded.threshold_report_ == model.threshold_report_
    assert loaded.predict_answer(X).equals(model.predict_answer(X))
    assert loaded.threshold_for(target_precision=0.6) == model.threshold_for(target_precision=0.6)


def test_a_damaged_threshold_is_refused_at_load(fitted, tmp_path):
    import json

    from .utils import reseal

    as2rank.save(fitted, tmp_path / "m")
    meta = json.loads((tmp_path / "m" / "as2rank.json").read_text())
    meta["fitted"]["threshold_"] = 3.0
    (tmp_path / "m" / "as2rank.json").write_text(json.dumps(meta))
    reseal(tmp_path / "m")
    with pytest.raises(ValueError, match=r"threshold_ must lie in \[0, 1\]"):
        as2rank.load(tmp_path / "m")


def test_scikit_learn_integration(data):
    X, y = data
    model = CalibratedRanker(pointwise(), cv=3)
    params = model.get_params()
    assert params["estimator__features"] == ["f"] and params["method"] == "sigmoid"
    twin = clone(model).set_params(method="isotonic", estimator__estimator__C=0.5)
    assert twin.method == "isotonic" and model.method == "sigmoid" and twin.estimator is not model.estimator
    search = GridSearchCV(model, {"method": ["sigmoid", "isotonic"]}, scoring=get_scorer("map"), cv=GroupKFold(3))
    search.fit(X, y, groups=X["qid"])
    assert search.best_params_["method"] in ("sigmoid", "isotonic") and 0 < search.best_score_ <= 1
    assert search.best_estimator_.predict_answer(X)["answered"].any()
    # A pipeline as the ranker; a prefit ranker is shared by clones, not refitted.
    pipe = make_pipeline(FunctionTransformer(lambda frame: frame.assign(g=2 * frame["f"])),
                         PointwiseRanker(LogisticRegression(), features=["f", "g"]))
    assert CalibratedRanker(pipe, cv=3).fit(X, y).predict_proba(X).shape == (len(X), 2)
    prefit = CalibratedRanker(pipe.fit(X, y), cv="prefit")
    assert clone(prefit).estimator is pipe and clone(model).estimator is not model.estimator
    prefit.fit(X, y)
    np.testing.assert_array_equal(prefit.predict(X), pipe.predict(X))


def test_a_selectors_choice_and_a_loaded_model_are_calibrated(data, tmp_path):
    X, y = data
    train = X["qid"].isin([f"q{i}" for i in range(60)]).to_numpy()
    selector = as2rank.RankerSelector(candidates={"pointwise": pointwise(), "RR": ReciprocalRankRanker()}, cv=3,
                                      verbose=False).fit(X[train], y[train])
    on_dev = CalibratedRanker(selector, cv="prefit").fit(X[~train], y[~train])
    np.testing.assert_array_equal(on_dev.predict(X), selector.predict(X))
    refitted = CalibratedRanker(selector.best_estimator_, cv=3).fit(X, y)  # a clone of the choice, fitted on folds
    assert type(refitted.estimator_) is type(selector.best_estimator_)
    as2rank.save(pointwise().fit(X[train], y[train]), tmp_path / "ranker")
    loaded = CalibratedRanker(as2rank.load(tmp_path / "ranker"), cv="prefit").fit(X[~train], y[~train])
    assert loaded.predict_answer(X)["probability"].between(0, 1).all()


def test_parameters_are_checked(data):
    X, y = data
    with pytest.raises(ValueError, match="not both"):
        CalibratedRanker(pointwise(), target_precision=0.8, target_coverage=0.5).fit(X, y)
    with pytest.raises(ValueError, match="cv must be"):
        CalibratedRanker(pointwise(), cv=2).fit(X, y)
    with pytest.raises(ValueError, match="method must be"):
        CalibratedRanker(pointwise(), method="beta").fit(X, y)
    with pytest.raises(ValueError, match="estimator must be"):
        CalibratedRanker().fit(X, y)
    from sklearn.exceptions import NotFittedError
    from sklearn.model_selection import KFold

    with pytest.raises(NotFittedError, match="cv='prefit' needs a fitted estimator"):
        CalibratedRanker(pointwise(), cv="prefit").fit(X, y)
    with pytest.raises(ValueError, match="splits a question"), pytest.warns(UserWarning, match="groups parameter"):
        CalibratedRanker(pointwise(), cv=KFold(3)).fit(X, y)


# ----------------------------------------------------------------------------------------------- command line
def test_fit_calibrate_and_rank_with_a_target_precision(data, tmp_path, capsys):
    X, y = data
    path = tmp_path / "train.csv"
    X.assign(label=y).to_csv(path, index=False)
    columns = ["--qid", "qid", "--position", "position"]
    assert main(["fit", str(path), "--model", "RR", "--calibrate", "--cv", "3", "--output", str(tmp_path / "m"),
                 "--quiet", *columns]) == 0
    model = as2rank.load(tmp_path / "m")
    assert isinstance(model, CalibratedRanker) and "Calibrated" in (tmp_path / "m" / "README.md").read_text()
    assert main(["rank", str(tmp_path / "m"), str(path), "--output", str(tmp_path / "r.csv"), *columns]) == 0
    ranked = pd.read_csv(tmp_path / "r.csv")
    assert {"answer", "answer_probability"} <= set(ranked.columns)
    assert ranked["answer"].sum() == model.predict_answer(X)["answered"].sum()
    target = model.threshold_for(target_precision=0.4)
    assert main(["rank", str(tmp_path / "m"), str(path), "--output", str(tmp_path / "p.csv"), "--target-precision",
                 "0.4", *columns]) == 0
    expected = model.predict_answer(X, threshold=target["threshold"])["answered"].sum()
    assert pd.read_csv(tmp_path / "p.csv")["answer"].sum() == expected
    capsys.readouterr()
    for argv, message in (
        (["rank", str(tmp_path / "m"), str(path), "--output", str(tmp_path / "x.csv"), "--target-precision", "1.5"],
         "--target-precision must be a float in (0, 1]"),
        (["rank", str(tmp_path / "m"), str(path), "--output", str(tmp_path / "x.csv"), "--target-precision", "0.99"],
         "No threshold reaches precision 0.99"),
        (["fit", str(path), "--model", "RR", "--target-precision", "0.5", "--output", str(tmp_path / "n")],
         "add --calibrate"),
        (["fit", str(path), "--model", "RR", "--calibrate", "--cv", "2", "--output", str(tmp_path / "n")],
         "--cv must be"),
    ):
        assert main(argv + columns) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err
    plain = tmp_path / "plain"
    assert main(["fit", str(path), "--model", "RR", "--output", str(plain), "--quiet", *columns]) == 0
    capsys.readouterr()
    assert main(["rank", str(plain), str(path), "--output", str(tmp_path / "q.csv"), "--target-precision", "0.5",
                 *columns]) == 2
    assert "fit it with as2rank fit --calibrate" in capsys.readouterr().err


def test_held_out_answering_of_scores_that_separate_perfectly():
    """Scores that put every correct candidate far above every wrong one, and leave the questions without a
    correct candidate low: each fold's threshold, learned on the others, answers exactly the answerable
    questions (F1 1) and the probabilities are sharp (small ECE); reversed scores answer badly."""
    from as2rank.answer.heldout import held_out_answering
    from as2rank.data import GroupIndex

    rng = np.random.default_rng(0)
    n_questions, per = 60, 5
    qid = np.repeat(np.arange(n_questions), per)
    answerable = np.arange(n_questions) % 3 != 0
    y = np.zeros(len(qid), dtype=int)
    y[::per] = answerable  # the first candidate of an answerable question is correct
    scores = np.where(y > 0, 5.0, -5.0) + rng.normal(0, 0.1, len(qid))
    fold_of = qid % 4
    index = GroupIndex(qid)
    good = held_out_answering(index, scores, y, fold_of)
    assert good["f1"] == 1.0 and good["n_answered"] == answerable.sum() == good["n_answerable"]
    assert good["ece"] < 0.05 and good["n_questions"] == n_questions
    bad = held_out_answering(index, -scores, y, fold_of)
    assert bad["f1"] < 0.5
