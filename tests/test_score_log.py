"""The score-digest comparison behind the bit-for-bit checks of a refactoring (:mod:`tests.score_log`)."""

from tests.score_log import compare, unsteady_groups


def test_calls_are_paired_by_number_where_both_runs_made_as_many():
    ref = {"t1|A.predict#1": "x", "t1|A.predict#2": "y", "t2|B.predict#1": "z"}
    assert compare(ref, dict(ref)) == ([], [])
    changed, recounted = compare(ref, {**ref, "t1|A.predict#2": "w"})
    assert changed == ["t1|A.predict#2"] and recounted == []
    # The same outputs in another order are changes: call n of one run is call n of the other.
    assert compare(ref, {**ref, "t1|A.predict#1": "y", "t1|A.predict#2": "x"})[0] == ["t1|A.predict#1", "t1|A.predict#2"]
    # A key that differs between two runs of the reference is not a change.
    assert compare(ref, {**ref, "t2|B.predict#1": "q"}, noisy={"t2|B.predict#1"}) == ([], [])


def test_a_test_called_a_different_number_of_times_is_compared_by_its_outputs():
    ref = {"t|A.predict#1": "x", "t|A.predict#2": "y", "t|A.predict#3": "x"}
    same = {"t|A.predict#1": "y", "t|A.predict#2": "x"}
    assert compare(ref, same) == ([], ["t|A.predict"])
    other = {"t|A.predict#1": "x", "t|A.predict#2": "z"}
    changed, recounted = compare(ref, other)
    assert changed == ["t|A.predict#2"] and recounted == []  # the output "y" is gone
    extra = {"t|A.predict#1": "x", "t|A.predict#2": "y", "t|A.predict#3": "x", "t|A.predict#4": "new"}
    assert compare(ref, extra)[0] == ["t|A.predict#new"]  # an output the reference never gave


def test_a_group_that_differs_between_reference_runs_is_compared_by_its_outputs():
    first = {"t|A.predict#1": "x", "t|A.predict#2": "y", "u|B.predict#1": "z", "v|C.predict#1": "r"}
    second = {"t|A.predict#1": "y", "t|A.predict#2": "x", "u|B.predict#1": "z", "v|C.predict#1": "s"}
    unsteady, random = unsteady_groups(first, second)
    assert unsteady == {"t|A.predict": {"x", "y"}} and random == {"v|C.predict"}  # u|B is steady
    # Any order of the outputs the reference runs gave is no change; an output they never gave is one.
    swapped = {**first, "t|A.predict#1": "y", "t|A.predict#2": "x", "v|C.predict#1": "anything"}
    assert compare(first, swapped, unsteady=unsteady, random=random) == ([], [])
    assert compare(first, {**first, "t|A.predict#2": "w"}, unsteady=unsteady, random=random)[0] == ["t|A.predict#2"]
    assert compare(first, {**first, "u|B.predict#1": "q"}, unsteady=unsteady, random=random)[0] == ["u|B.predict#1"]
