import numpy as np

from as2rank.text import bag_of_words, vocabulary_indices


def test_vocabulary_indices_hand_computed():
    vocabulary = {"who": 0, "wrote": 1, "hamlet": 2}
    got = vocabulary_indices(["hamlet", "zebra", "who", "who"], vocabulary)
    assert got.dtype == np.intp
    assert got.tolist() == [2, -1, 0, 0]
    assert vocabulary_indices([], vocabulary).tolist() == []


def test_bag_of_words_on_a_given_vocabulary_ignores_unknown_tokens():
    counts, vocabulary = bag_of_words([["a", "b", "a"], ["c"], []])
    assert vocabulary == {"a": 0, "b": 1, "c": 2}
    assert counts.toarray().tolist() == [[2, 1, 0], [0, 0, 1], [0, 0, 0]]
    again, same = bag_of_words([["c", "zebra", "a"], ["zebra"]], vocabulary)
    assert same is vocabulary
    assert again.toarray().tolist() == [[1, 0, 1], [0, 0, 0]]
