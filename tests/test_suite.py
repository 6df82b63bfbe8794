"""The leaderboard of ``as2rank bench``: the best row, rows tied with it, labelled percentages."""

import numpy as np
import pytest
from sklearn.pipeline import make_pipeline

from as2rank.app.suite import show_fit_progress, format_leaderboard, load_benchmark_data, run_suite
from as2rank.model_selection import SuiteEntry


@pytest.fixture(scope="module")
def board():
    from as2rank.lexical.baselines import OverlapRankRanker, ReciprocalRankRanker

    data = load_benchmark_data("sample")
    entries = [
        SuiteEntry("RR", lambda seed: ReciprocalRankRanker()),
        SuiteEntry("WO+RR", lambda seed: OverlapRankRanker()),
        SuiteEntry("WO+RR again", lambda seed: OverlapRankRanker()),
    ]
    return run_suite(entries, *data, progress=False)


def test_rows_are_tested_against_the_best_row(board):
    rows = board.set_index("model")
    assert rows["map"].idxmax() in ("WO+RR", "WO+RR again")
    # The best row has no p-value against itself; an identical row cannot be told apart from it.
    assert rows.loc[["WO+RR", "WO+RR again"], "tied_with_best"].all()
    assert np.nanmax(rows.loc[["WO+RR", "WO+RR again"], "p_vs_best"]) == 1.0
    assert not rows.loc["RR", "tied_with_best"] and rows.loc["RR", "p_vs_best"] < 0.001
    # Every row scores the same questions: those of the test split with a correct answer.
    assert rows["n_questions"].nunique() == 1 and 0 < rows["n_questions"].iloc[0] < 449


def test_leaderboard_labels_percentages_and_counts_questions(board):
    text = format_leaderboard(board)
    header = text.splitlines()[0]
    assert "MAP (%)" in header and "≈ best" in header
    n = int(board["n_questions"].iloc[0])
    assert f"Scored on {n} test questions" in text
    rr = next(line for line in text.splitlines() if line.startswith("| RR |"))
    assert "no (p<0.001)" in rr
    best = [line for line in text.splitlines() if "| best |" in line]
    assert len(best) == 1


def test_progress_turns_on_the_bars_of_the_models_inside_a_pipeline():
    pytest.importorskip("torch")
    from as2rank.lexical.baselines import LexicalFeatures
    from as2rank.cosinet.estimator import Cosinet

    pipe = make_pipeline(LexicalFeatures(), Cosinet())
    show_fit_progress(pipe)
    assert pipe.get_params()["cosinet__verbose"] is True
    assert pipe.get_params()["verbose"] is False  # the Pipeline's own step timing stays off
    model = Cosinet()
    show_fit_progress(model)
    assert model.verbose is True
