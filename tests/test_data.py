import numpy as np
import pandas as pd
import pytest

from as2rank.data import GroupIndex, check_ranking_data, keep_answered, make_frame


def test_group_index_non_contiguous(toy):
    X, _ = toy
    idx = GroupIndex.from_frame(X)
    assert idx.keys.tolist() == ["q1", "q2", "q3"]
    assert idx.sizes.tolist() == [3, 3, 2]
    # Rows of q2 sorted by position: row 5 (pos 0), row 7 (pos 1), row 3 (pos 2).
    assert idx.order[idx.offsets[1] : idx.offsets[2]].tolist() == [5, 7, 3]
    assert idx.position_index().tolist() == [0, 1, 2, 2, 0, 0, 1, 1]


def test_group_index_without_position_uses_row_order(toy):
    X, _ = toy
    idx = GroupIndex.from_frame(X.drop(columns="position"))
    assert idx.position_index().tolist() == [0, 1, 2, 0, 0, 1, 1, 2]


def test_rank_is_permutation_with_position_tiebreak(toy):
    X, _ = toy
    idx = GroupIndex.from_frame(X)
    ranks = idx.rank(np.zeros(len(X)))
    assert ranks.tolist() == [1, 2, 3, 3, 1, 1, 2, 2]
    ranks = idx.rank(np.arange(len(X), dtype=float))
    for g in range(idx.n_groups):
        assert sorted(ranks[idx.codes == g]) == list(range(1, idx.sizes[g] + 1))


def test_groups_argument_overrides_qid(toy):
    X, y = toy
    _, _, idx = check_ranking_data(X, y, groups=X["qid"].str.upper().to_numpy())
    assert idx.keys.tolist() == ["Q1", "Q2", "Q3"]
    with pytest.raises(ValueError, match="duplicated"):  # one group now holds repeated positions
        check_ranking_data(X, y, groups=np.zeros(len(X)))


def test_keep_answered():
    X = make_frame("q", ["a", "b"], qid=1)
    X = pd.concat([X, make_frame("r", ["c"], qid=2)], ignore_index=True)
    Xk, yk = keep_answered(X, [0, 1, 0])
    assert Xk["qid"].tolist() == [1, 1] and yk.tolist() == [0, 1]


@pytest.mark.parametrize(
    "mutate, y_mut, err, match",
    [
        (lambda X: X.to_numpy(), None, TypeError, "pandas DataFrame"),
        (lambda X: X.drop(columns="qid"), None, ValueError, r"missing the required column\(s\) \['qid'\]"),
        (lambda X: X.drop(columns="candidate"), None, ValueError, "candidate"),
        (lambda X: X.iloc[:0], lambda y: y[:0], ValueError, "empty"),
        (lambda X: X.assign(candidate=X["candidate"].where(X.index != 2, None)), None, TypeError, "'candidate'.*index 2"),
        (lambda X: X.assign(question=[1] * len(X)), None, TypeError, "'question' must hold text"),
        (lambda X: X.assign(qid=X["qid"].where(X.index != 0, None)), None, ValueError, "'qid' has missing"),
        (lambda X: X.assign(position=[0, 1, 1, 2, 0, 0, 1, 1]), None, ValueError, "duplicated inside question 'q1'"),
        (lambda X: X.assign(position=X["position"].astype(float).where(X.index != 1)), None, ValueError, "'position' has missing"),
        (lambda X: X.assign(position=-X["position"] - 1), None, ValueError, "0-based"),
        (lambda X: X.assign(position=list("abcdefgh")), None, TypeError, "'position' must be numeric"),
        (lambda X: X, lambda y: y[:-1], ValueError, "8 rows but y has 7"),
        (lambda X: X, lambda y: np.array(["yes"] * 8), TypeError, "numeric relevance labels"),
        (lambda X: X, lambda y: np.where(y > 0, np.nan, 0.0), ValueError, "missing or infinite"),
        (lambda X: X, lambda y: np.c_[y, y], ValueError, "one-dimensional"),
    ],
)
def test_bad_input_errors(toy, mutate, y_mut, err, match):
    X, y = toy
    with pytest.raises(err, match=match):
        check_ranking_data(mutate(X), y_mut(y) if y_mut else y)


def test_groups_length_mismatch(toy):
    X, y = toy
    with pytest.raises(ValueError, match="groups has 3"):
        check_ranking_data(X, y, groups=[1, 2, 3])


def test_numeric_string_labels_are_accepted(toy):
    X, y = toy
    _, y2, _ = check_ranking_data(X, y.astype(object))
    assert y2.dtype == np.float64


def test_make_frame_errors():
    with pytest.raises(TypeError):
        make_frame("q", "single string")
    with pytest.raises(ValueError):
        make_frame("q", [])
