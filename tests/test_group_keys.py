"""One rule for question keys (``groups`` and ``X["qid"]``): one kind of key, none missing, never coerced."""

import numpy as np
import pandas as pd
import pytest

from as2rank import WordOverlapRanker
from as2rank.data import GroupIndex, check_group_keys, check_ranking_data, check_X, keep_answered
from as2rank.metrics import get_scorer, mean_average_precision, ranking_report

Y = np.array([1, 0, 0, 1])
S = np.array([0.9, 0.1, 0.5, 0.4])
# By hand: question A = rows 0, 1 (relevant row 0 ranked first, AP 1); question B = rows 2, 3 (relevant
# row 3 ranked second, AP 1/2); MAP 0.75. As one question: relevant at ranks 1 and 3, AP (1 + 2/3) / 2.
MAP_TWO, MAP_ONE = 0.75, (1 + 2 / 3) / 2


# --- the reproductions of the issue -------------------------------------------------------------------


def test_list_mixing_int_and_str_is_rejected_not_merged():
    # np.asarray turned [1, 1, "1", "1"] into four equal strings: one question, MAP 0.833.
    with pytest.raises(ValueError, match=r"groups mixes key types \(int in 2 row\(s\) \(index 0, 1\); str in 2"):
        mean_average_precision(Y, S, [1, 1, "1", "1"])


def test_object_series_mixing_int_and_str_is_rejected_too():
    # The same values as an object Series were two questions (MAP 0.75): the two spellings disagreed.
    # Decision: mixed kinds are an error whatever the container, so neither reading is ever chosen silently.
    with pytest.raises(ValueError, match="groups mixes key types"):
        mean_average_precision(Y, S, pd.Series([1, 1, "1", "1"], dtype=object))


@pytest.mark.parametrize("missing", [np.nan, None, pd.NA, pd.NaT], ids=["nan", "None", "NA", "NaT"])
def test_missing_key_is_rejected_not_a_question_named_nan(missing):
    with pytest.raises(ValueError, match=r"groups has missing values .* 1 row\(s\) \(index 1\)"):
        mean_average_precision(Y, S, ["a", missing, "a", "a"])


def test_int_and_integral_float_are_mixed_kinds():
    # np.asarray([1, 1, 1.0, 1.0]) is a float array with one key; as given, the keys are of two kinds.
    with pytest.raises(ValueError, match="int in 2 .*float in 2"):
        mean_average_precision(Y, S, [1, 1, 1.0, 1.0])


def test_booleans_are_not_question_ids():
    with pytest.raises(ValueError, match="booleans"):
        mean_average_precision(Y, S, [True, True, False, False])
    with pytest.raises(ValueError, match="booleans"):
        mean_average_precision(Y, S, np.array([True, True, False, False]))


def test_short_groups_blames_groups():
    with pytest.raises(ValueError, match="^groups has 3 entries but y_true has 4 labels"):
        mean_average_precision(Y, S, [1, 1, 2])


def test_short_groups_in_fit_blames_groups(toy):
    X, y = toy
    with pytest.raises(ValueError, match="^groups has 3 entries but X has 8 rows"):
        check_ranking_data(X, y, groups=["q1", "q1", "q2"])
    with pytest.raises(ValueError, match="^groups has 3 entries"):
        WordOverlapRanker().fit(X, y, groups=["q1", "q1", "q2"])
    with pytest.raises(ValueError, match="^groups must be one question id per row"):
        check_ranking_data(X, y, groups="q1")


# --- what still works ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "groups",
    [
        [1, 1, 2, 2],
        ["a", "a", "b", "b"],
        np.array([1, 1, 2, 2], dtype=np.int8),
        np.array(["a", "a", "b", "b"]),
        pd.Series(["a", "a", "b", "b"], dtype="string"),
        pd.Series(["a", "a", "b", "b"], dtype="category"),
        pd.array([1, 1, 2, 2], dtype="Int64"),
        np.array([1.0, 1.0, 2.0, 2.0]),  # all floats: one kind
        [np.int8(1), np.int64(1), np.uint16(2), 2],  # integers of any width: one kind, compared by value
    ],
    ids=["int-list", "str-list", "int8", "unicode", "string", "category", "Int64", "float", "int-widths"],
)
def test_one_kind_of_key_works(groups):
    assert mean_average_precision(Y, S, groups) == pytest.approx(MAP_TWO)


def test_one_question_when_the_keys_say_so():
    assert mean_average_precision(Y, S, ["q"] * 4) == pytest.approx(MAP_ONE)
    assert mean_average_precision(Y, S, [7] * 4) == pytest.approx(MAP_ONE)


def test_per_group_index_keeps_the_keys():
    per_q = mean_average_precision(Y, S, [10, 10, 2**70, 2**70], per_group=True)  # beyond int64
    assert per_q.to_dict() == {10: 1.0, 2**70: 0.5}


# --- the same rule on every path ----------------------------------------------------------------------


def test_check_X_applies_the_rule_and_names_index_labels(toy):
    X, _ = toy
    X = X.set_axis(range(100, 108))
    with pytest.raises(ValueError, match=r"Column 'qid' has missing values .*\(index 101\)"):
        check_X(X.assign(qid=X["qid"].where(X.index != 101, np.nan)))
    with pytest.raises(ValueError, match=r"Column 'qid' mixes key types .*int in 1 row\(s\) \(index 100\)"):
        check_X(X.assign(qid=pd.Series([1] + ["q1"] * 7, index=X.index, dtype=object)))
    with pytest.raises(ValueError, match="Column 'qid' holds booleans"):
        check_X(X.assign(qid=[True] * 8))


def test_fit_paths_go_through_the_rule(toy):
    X, y = toy
    mixed = [1, 1, 1, "2", 3, "2", 3, "2"]
    with pytest.raises(ValueError, match="groups mixes key types"):
        WordOverlapRanker().fit(X, y, groups=mixed)
    with pytest.raises(ValueError, match="Column 'qid' mixes key types"):
        WordOverlapRanker().fit(X.assign(qid=pd.Series(mixed, dtype=object)), y)
    with pytest.raises(ValueError, match="groups mixes key types"):
        keep_answered(X, y, groups=mixed)
    with pytest.raises(ValueError, match="groups mixes key types"):
        GroupIndex.from_frame(X, groups=mixed)
    # The estimator's scorer and ranking_report group by X["qid"] the same way.
    bad = X.assign(qid=pd.Series(mixed, dtype=object))
    with pytest.raises(ValueError, match="Column 'qid' mixes key types"):
        get_scorer("map")(WordOverlapRanker().fit(X, y), bad, y)
    with pytest.raises(ValueError, match="groups mixes key types"):
        ranking_report(y, np.zeros(len(y)), bad["qid"])


def test_check_group_keys_returns_arrays_for_factorize():
    assert check_group_keys([1, 2]).dtype == np.int64
    assert check_group_keys(["a", "b"]).dtype == object
    with pytest.raises(ValueError, match="shape"):
        check_group_keys(np.zeros((2, 2)))
    with pytest.raises(ValueError, match="tuple"):
        check_group_keys([(1,), (2, 3)])
