"""read_pairs: a user's own table (CSV, TSV, Parquet, JSON Lines, DataFrame) into X, y; bad input named by row."""

import json

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline

from as2rank.lexical.baselines import (
    LexicalFeatures,
    OverlapRankRanker,
    PointwiseRanker,
    ReciprocalRankRanker,
    WordOverlapRanker,
)
from as2rank.datasets import load_sample, read_pairs


def table():
    """A user's table with their own column names: two questions, text that looks like missing values or numbers."""
    return pd.DataFrame(
        {
            "query": ["who wrote hamlet ?"] * 3 + ["capital of france ?"] * 2,
            "sentence": ["NA", "Shakespeare wrote Hamlet .", "null", "0123", "Paris is the capital ."],
            "relevant": [0, 1, 0, 0, 1],
            "rank": [2, 0, 1, 0, 1],
            "id": ["q1", "q1", "q1", "q2", "q2"],
        }
    )


NAMES = dict(question="query", candidate="sentence", label="relevant", position="rank", qid="id")


def write(frame, path):
    """``frame`` written in the format of ``path``'s suffix."""
    suffix = path.suffix
    if suffix == ".csv":
        frame.to_csv(path, index=False)
    elif suffix == ".tsv":
        frame.to_csv(path, sep="\t", index=False)
    elif suffix == ".parquet":
        frame.to_parquet(path, index=False)
    else:
        frame.to_json(path, orient="records", lines=True)
    return path


def read_bad(tmp_path, frame, suffix=".csv", **names):
    """The one-line ValueError that reading ``frame`` (written as ``suffix``) raises."""
    with pytest.raises(ValueError) as info:
        read_pairs(write(frame, tmp_path / f"t{suffix}"), **names)
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".parquet", ".jsonl"])
def test_round_trip_with_custom_column_names(tmp_path, suffix):
    if suffix == ".parquet":
        pytest.importorskip("pyarrow")
    X, y = read_pairs(write(table(), tmp_path / f"pairs{suffix}"), **NAMES)
    expected, expected_y = read_pairs(table(), **NAMES)
    pd.testing.assert_frame_equal(X, expected, check_dtype=False)
    np.testing.assert_array_equal(y, expected_y)
    assert y.dtype == np.float64 and y.tolist() == [0.0, 1.0, 0.0, 0.0, 1.0]
    assert list(X.columns) == ["qid", "question", "candidate", "position"]
    assert X["candidate"].tolist() == ["NA", "Shakespeare wrote Hamlet .", "null", "0123", "Paris is the capital ."]
    assert X["position"].tolist() == [2, 0, 1, 0, 1] and X["position"].dtype == np.int64
    pd.testing.assert_index_equal(X.index, pd.RangeIndex(5))


def test_text_that_looks_like_missing_or_numbers_stays_text(tmp_path):
    frame = pd.DataFrame({"question": ["q"] * 4, "candidate": ["NA", "null", "0123", "nan"], "label": [0, 1, 0, 0]})
    for suffix in (".csv", ".tsv", ".jsonl"):
        X, _ = read_pairs(write(frame, tmp_path / f"t{suffix}"))
        assert X["candidate"].tolist() == ["NA", "null", "0123", "nan"]


def test_qid_from_question_text_and_no_labels(tmp_path):
    frame = table().drop(columns=["relevant", "id"])
    X, y = read_pairs(write(frame, tmp_path / "t.csv"), question="query", candidate="sentence")
    assert y is None  # the default label column is optional
    assert X["qid"].tolist() == X["question"].tolist() == frame["query"].tolist()
    assert "position" not in X.columns  # no position column named: no order
    assert read_pairs(table(), label=None, question="query", candidate="sentence")[1] is None


def test_text_label_forms(tmp_path):
    labels = ["1", "0", "TRUE", "false", "1.0", "0.0"]
    frame = pd.DataFrame({"question": ["q"] * 6, "candidate": list("abcdef"), "label": labels})
    assert read_pairs(write(frame, tmp_path / "t.csv"))[1].tolist() == [1, 0, 1, 0, 1, 0]
    frame = frame.assign(label=[True, False, 1, 0, 1.0, 0.0])
    assert read_pairs(frame)[1].tolist() == [1, 0, 1, 0, 1, 0]


def test_unknown_suffix(tmp_path):
    path = tmp_path / "pairs.xlsx"
    path.write_text("x")
    with pytest.raises(ValueError, match=r"suffix; read_pairs reads \.csv, \.tsv, \.tab, \.parquet"):
        read_pairs(path)


def test_missing_column_names_the_available_ones(tmp_path):
    message = read_bad(tmp_path, table(), question="query", candidate="text")
    assert "no column(s) ['text']" in message and "'query', 'sentence', 'relevant', 'rank', 'id'" in message
    # A label column named explicitly must exist; the default "label" may be absent.
    assert "['score']" in read_bad(tmp_path, table(), question="query", candidate="sentence", label="score")


@pytest.mark.parametrize("value", ["", "   ", None])
@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_empty_text(tmp_path, value, suffix):
    frame = table()
    frame.loc[[1, 4], "sentence"] = value
    message = read_bad(tmp_path, frame, suffix, **NAMES)
    assert message.startswith("Column 'sentence' has no text") and "2 row(s) (data row 1, 4)" in message
    frame = table()
    frame.loc[3, "query"] = value
    assert "Column 'query' has no text" in read_bad(tmp_path, frame, suffix, **NAMES)


def test_many_bad_rows_show_a_few_and_count_the_rest(tmp_path):
    frame = pd.DataFrame({"question": ["q"] * 9, "candidate": list("abcdefghi"), "label": [2] * 8 + [1]})
    message = read_bad(tmp_path, frame)
    assert "Column 'label'" in message and "8 row(s) (data row 0, 1, 2, 3, 4 and 3 more)" in message


@pytest.mark.parametrize("bad", ["2", "-1", "0.5", "yes", ""])
def test_labels_that_are_not_0_or_1(tmp_path, bad):
    frame = table().astype({"relevant": str})
    frame.loc[2, "relevant"] = bad
    message = read_bad(tmp_path, frame, **NAMES)
    assert message.startswith("Column 'relevant' must hold 0/1 labels") and "(data row 2)" in message
    assert repr(bad) in message


@pytest.mark.parametrize("bad", [2, -1, 0.5, np.nan])
def test_numeric_labels_that_are_not_0_or_1(bad):
    frame = table().astype({"relevant": float})
    frame.loc[3, "relevant"] = bad
    with pytest.raises(ValueError, match=r"Column 'relevant' must hold 0/1 labels.*\(data row 3\)"):
        read_pairs(frame, **NAMES)


def test_duplicate_rows(tmp_path):
    names = {k: v for k, v in NAMES.items() if k != "position"}
    frame = table()
    frame.loc[2, "sentence"] = "NA"  # the same candidate as row 0, in the same question
    message = read_bad(tmp_path, frame, **names)
    assert message.startswith("Column 'sentence' repeats a candidate inside a question")
    assert "(data row 0, 2)" in message
    # The same text under two questions is not a repeat.
    frame = table()
    frame.loc[3, "sentence"] = "NA"
    read_pairs(frame, **names)
    # With positions, a repeated text is a sentence that its document repeats: two rows, told apart.
    frame = table()
    frame.loc[2, "sentence"] = "NA"
    X, _ = read_pairs(frame, **NAMES)
    assert X["candidate"].tolist()[:3] == ["NA", "Shakespeare wrote Hamlet .", "NA"]


def test_question_split_across_the_file(tmp_path):
    frame = table().iloc[[0, 1, 3, 4, 2]]
    message = read_bad(tmp_path, frame, **NAMES)
    assert message.startswith("Column 'id': the rows of a question must be contiguous")
    assert "(data row 4)" in message and "sort the table by question first" in message
    # Without a qid column the question text is the id: the same rule holds.
    message = read_bad(tmp_path, frame.drop(columns="id"), question="query", candidate="sentence")
    assert "Column 'query' (the question text is the question id)" in message and "(data row 4)" in message


def test_one_qid_with_two_question_texts(tmp_path):
    frame = table()
    frame.loc[2, "query"] = "who wrote macbeth ?"
    message = read_bad(tmp_path, frame, **NAMES)
    assert message.startswith("Column 'id': a question id holds two or more question texts (column 'query')")
    assert "'q1'" in message and "(data row 2)" in message


@pytest.mark.parametrize("bad", ["-1", "1.5", "x", ""])
def test_positions_that_are_not_non_negative_integers(tmp_path, bad):
    frame = table().astype({"rank": str})
    frame.loc[1, "rank"] = bad
    message = read_bad(tmp_path, frame, **NAMES)
    assert message.startswith("Column 'rank' must hold 0-based positions") and "(data row 1)" in message


def test_positions_repeated_inside_a_question(tmp_path):
    frame = table()
    frame.loc[0, "rank"] = 1
    message = read_bad(tmp_path, frame, **NAMES)
    assert message.startswith("Column 'rank' repeats a position inside a question") and "(data row 0, 2)" in message
    frame = table()
    frame.loc[3, "rank"] = 2  # position 2 again, but in another question
    read_pairs(frame, **NAMES)


def test_missing_question_id(tmp_path):
    frame = table()
    frame.loc[4, "id"] = ""
    assert "Column 'id' has no question id" in read_bad(tmp_path, frame, **NAMES)


def test_dataframe_input_keeps_data_rows_and_leaves_the_input_alone():
    frame = table().set_axis([10, 11, 12, 13, 14])
    before = frame.copy()
    X, _ = read_pairs(frame, **NAMES)
    pd.testing.assert_index_equal(X.index, pd.RangeIndex(5))
    pd.testing.assert_frame_equal(frame, before)
    frame.loc[13, "relevant"] = 5
    with pytest.raises(ValueError, match=r"\(data row 3\)"):
        read_pairs(frame, **NAMES)


def shuffled_within_questions(qid, seed=0):
    """A permutation ``perm`` of the rows such that row ``i`` of ``X.iloc[perm]`` belongs to the question of row
    ``i`` of ``X``: the rows of each question change places among themselves, the questions' slots stay."""
    codes = pd.factorize(np.asarray(qid))[0]
    slots = np.lexsort((np.arange(len(codes)), codes))
    perm = np.empty(len(codes), dtype=np.intp)
    perm[slots] = np.lexsort((np.random.default_rng(seed).random(len(codes)), codes))
    return perm


@pytest.mark.parametrize(
    "model",
    [WordOverlapRanker(), OverlapRankRanker(), make_pipeline(LexicalFeatures(), PointwiseRanker(LogisticRegression()))],
    ids=["WO", "WO+RR", "Lexical+LR"],
)
def test_a_table_without_positions_feeds_no_row_order_to_a_model(tmp_path, model):
    X, y = load_sample()
    first = X["qid"].isin(X["qid"].unique()[:80])
    frame = X[first].drop(columns="position").assign(label=y[first])  # rows in paragraph order, which is no rank
    perm = shuffled_within_questions(frame["qid"])
    assert (perm != np.arange(len(frame))).mean() > 0.5
    read = [read_pairs(write(f, tmp_path / f"{i}.csv"), qid="qid") for i, f in enumerate((frame, frame.iloc[perm]))]
    (X_rows, y_rows), (X_shuffled, y_shuffled) = read
    assert "position" not in X_rows.columns
    scores = clone(model).fit(X_rows, y_rows).predict(X_rows)
    shuffled = clone(model).fit(X_shuffled, y_shuffled).predict(X_shuffled)
    np.testing.assert_allclose(shuffled, scores[perm], rtol=0, atol=1e-9)
    with pytest.raises(ValueError, match="no 'position' column"):
        ReciprocalRankRanker().fit(X_rows, y_rows)


# ----------------------------------------------------------------------------------------------- strict reading
def test_an_unmatched_quote_that_merges_rows_is_refused(tmp_path):
    """The reported case: a TSV with one unmatched quote read 6 rows as 4 (3 merged into one candidate holding
    tabs and newlines, a label lost), with no error."""
    path = tmp_path / "t.tsv"
    path.write_text('question\tcandidate\tlabel\nq1\t"Hamlet is a play\t1\nq1\tIt was written\t0\nq1\tby him\t0\n'
                    'q2\tParis is" big\t0\nq2\tLyon\t1\nq2\tNice\t0\n')
    with pytest.raises(ValueError, match=r"data row 0 of column 'candidate' is a quoted field that spans 4 lines"):
        read_pairs(path)


def test_quoted_line_breaks_that_hold_no_rows_are_kept(tmp_path):
    frame = pd.DataFrame({"question": ["q", "q"], "candidate": ["two\nlines", "one, with a comma"], "label": [1, 0]})
    X, _ = read_pairs(write(frame, tmp_path / "t.csv"))
    assert X["candidate"].tolist() == ["two\nlines", "one, with a comma"]


def test_a_lone_carriage_return_is_refused(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes(b"question,candidate,label\nq,a\rb,1\nq,c,0\n")
    with pytest.raises(ValueError, match=r"line 2 holds a carriage return"):
        read_pairs(path)
    path.write_bytes(b"question,candidate,label\r\nq,a,1\r\nq,c,0\r\n")  # Windows line ends are fine
    assert len(read_pairs(path)[0]) == 2


def test_a_repeated_header_is_refused(tmp_path):
    """The reported case: a CSV naming 'candidate' twice had its second column renamed by pandas, silently."""
    path = tmp_path / "t.csv"
    path.write_text("question,candidate,candidate,label\nq,a,b,1\n")
    with pytest.raises(ValueError, match=r"header names the column\(s\) \['candidate'\] more than once"):
        read_pairs(path)
    path = tmp_path / "t.jsonl"
    path.write_text('{"question": "q", "candidate": "a", "candidate": "b", "label": 1}\n')
    with pytest.raises(ValueError, match="line 1: the key 'candidate' appears twice"):
        read_pairs(path)


def test_json_lines_ids_are_exact_integers_never_floats(tmp_path):
    """The reported case: ids 2**53 and 2**53 + 1 beside one float id became one question (float64)."""
    rows = [{"id": 2**53, "q": "a?", "c": "x", "label": 1}, {"id": 2**53 + 1, "q": "b?", "c": "y", "label": 0}]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    X, _ = read_pairs(path, question="q", candidate="c", qid="id")
    assert X["qid"].tolist() == [str(2**53), str(2**53 + 1)]
    path.write_text("\n".join(json.dumps(r) for r in [*rows, {"id": 1.5, "q": "c?", "c": "z", "label": 0}]))
    with pytest.raises(ValueError, match="mixes key types"):
        read_pairs(path, question="q", candidate="c", qid="id")
    path.write_text(json.dumps({"id": 3.0, "q": "c?", "c": "z", "label": 0}))
    with pytest.raises(ValueError, match="ids are read as text, so they must be strings or integers"):
        read_pairs(path, question="q", candidate="c", qid="id")


@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".jsonl"])
def test_ids_are_text_whatever_the_format(suffix, tmp_path):
    if suffix == ".parquet":
        pytest.importorskip("pyarrow")
    frame = pd.DataFrame({"id": [7, 7, 8], "question": ["a?", "a?", "b?"], "candidate": ["x", "y", "z"],
                          "label": [1, 0, 1]})
    X, _ = read_pairs(write(frame, tmp_path / f"t{suffix}"), qid="id")
    assert X["qid"].tolist() == ["7", "7", "8"]
    assert read_pairs(frame, qid="id")[0]["qid"].tolist() == ["7", "7", "8"]


def test_a_directory_is_not_a_table(tmp_path):
    (tmp_path / "x.csv").mkdir()
    with pytest.raises(ValueError, match="is a directory, not a CSV file"):
        read_pairs(tmp_path / "x.csv")
