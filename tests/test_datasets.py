import gzip
import json
import math

import numpy as np
import pandas as pd
import pytest

import as2rank.datasets
from as2rank.data import GroupIndex, check_ranking_data
from as2rank.datasets import expand_candidates, load_asnq, load_sample, load_squad_sent, load_wikiqa
from as2rank.datasets import squad as squad_module
from as2rank.datasets.sample import SAMPLE_PATH
from as2rank.text import tokenize

from .utils import shared_path as shared

FORMAT = ["qid", "question", "candidate", "position", "doc_id", "doc_position", "title"]


@pytest.fixture(scope="module")
def squad_sample():
    return load_squad_sent(shared("squad", "squad-v2.0-dev-sample.json"))


def test_public_api():
    assert set(as2rank.datasets.__all__) == {
        "read_pairs",
        "load_wikiqa",
        "load_squad_sent",
        "load_asnq",
        "load_parquet",
        "load_sample",
        "expand_candidates",
    }


# ---------------------------------------------------------------------------------------------- SQuAD

CONTEXT = "The Normans lived in Normandy. They spoke Norman French. Rollo was their first ruler."


def squad_json(tmp_path, data, name="squad.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def span(text, context=CONTEXT):
    return {"text": text, "answer_start": context.index(text)}


@pytest.fixture
def squad_file(tmp_path):
    other = "Steam engines burn coal. They power trains."
    data = {
        "version": "v2.0",
        "data": [
            {
                "title": "Normans",
                "paragraphs": [
                    {
                        "context": CONTEXT,
                        "qas": [
                            {"id": "q-where", "question": "Where did the Normans live?",
                             "answers": [span("Normandy"), span("Normandy")], "is_impossible": False},
                            # Two annotators pointing at different sentences: both are positive.
                            {"id": "q-two", "question": "Who were the Normans?",
                             "answers": [span("Norman French"), span("Rollo")], "is_impossible": False},
                            # plausible_answers of an unanswerable question must not make a positive.
                            {"id": "q-none", "question": "What did the Normans eat?", "answers": [],
                             "plausible_answers": [span("Norman French")], "is_impossible": True},
                            # An answer crossing a sentence boundary marks both sentences.
                            {"id": "q-cross", "question": "Where and what?",
                             "answers": [span("Normandy. They")], "is_impossible": False},
                        ],
                    }
                ],
            },
            {
                "title": "Steam",
                "paragraphs": [
                    {"context": "Empty.", "qas": []},
                    # SQuAD v1.1 style: no is_impossible key.
                    {"context": other, "qas": [{"id": "q-steam", "question": "What do steam engines power?",
                                                "answers": [span("trains", other)]}]},
                ],
            },
        ],
    }
    return squad_json(tmp_path, data)


def test_squad_sent_rows_and_labels(squad_file):
    X, y = load_squad_sent(squad_file)
    assert list(X.columns) == FORMAT
    for col in ("qid", "question", "candidate", "doc_id", "title"):
        assert X[col].dtype == "str", col
    assert X["position"].dtype == np.int64 and X["doc_position"].dtype == np.int64
    assert y.dtype == np.int64
    check_ranking_data(X, y)

    assert X["qid"].unique().tolist() == ["q-where", "q-two", "q-none", "q-cross", "q-steam"]
    sentences = ["The Normans lived in Normandy.", "They spoke Norman French.", "Rollo was their first ruler."]
    labels = {qid: y[(X["qid"] == qid).to_numpy()].tolist() for qid in X["qid"].unique()}
    assert labels == {
        "q-where": [1, 0, 0],
        "q-two": [0, 1, 1],
        "q-none": [0, 0, 0],
        "q-cross": [1, 1, 0],
        "q-steam": [0, 1],
    }
    first = X[X["qid"] == "q-where"]
    assert first["candidate"].tolist() == sentences
    assert first["position"].tolist() == [0, 1, 2]
    assert first["doc_position"].tolist() == [0, 1, 2]
    assert set(first["doc_id"]) == {"Normans#0"} and set(first["title"]) == {"Normans"}
    steam = X[X["qid"] == "q-steam"]
    assert steam["candidate"].tolist() == ["Steam engines burn coal.", "They power trains."]
    assert set(steam["doc_id"]) == {"Steam#1"}


def test_squad_sent_splits_each_paragraph_once(squad_file, monkeypatch):
    calls = []
    original = squad_module.split_sentences

    def counting(text):
        calls.append(text)
        return original(text)

    monkeypatch.setattr(squad_module, "split_sentences", counting)
    load_squad_sent(squad_file)
    assert len(calls) == 3 and len(set(calls)) == 3


@pytest.mark.parametrize(
    "content, message",
    [
        ("not json at all", "not valid JSON"),
        (json.dumps([1, 2]), '"data"'),
        (json.dumps({"data": [{"title": "t", "paragraphs": [{"qas": []}]}]}), "context"),
        (json.dumps({"data": [{"title": "t", "paragraphs": [{"context": "A.", "qas": [{"id": "x"}]}]}]}), "question"),
    ],
)
def test_squad_sent_rejects_non_squad(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match="not a SQuAD") as info:
        load_squad_sent(path)
    assert message in str(info.value)


def test_squad_sent_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_squad_sent(tmp_path / "missing.json")
    with pytest.raises(ValueError, match="no question"):
        load_squad_sent(squad_json(tmp_path, {"version": "v2.0", "data": []}))


def test_squad_sent_shared_sample_counts(squad_sample):
    X, y = squad_sample
    index = GroupIndex.from_frame(X)
    assert index.n_groups == 1494
    assert int((index.max(y) > 0).sum()) == 725
    assert X["doc_id"].nunique() == 177
    assert len(X[["doc_id", "doc_position"]].drop_duplicates()) == 842
    assert len(X) == 7307 and int(y.sum()) == 780


# ---------------------------------------------------------------------------------------------- WikiQA


def test_wikiqa_test_counts():
    X, y = load_wikiqa(shared("wikiqa", "WikiQA-test.tsv"))
    assert list(X.columns) == FORMAT
    index = GroupIndex.from_frame(X)
    assert index.n_groups == 633 and len(X) == 6165
    assert int(y.sum()) == 293
    assert int((index.max(y) > 0).sum()) == 243


# ---------------------------------------------------------------------------------------------- ASNQ


def write_tsv(path, rows):
    path.write_text("".join(f"{q}\t{s}\t{label}\n" for q, s, label in rows), encoding="utf-8")
    return path


def random_asnq_rows(n_questions=60, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for q in range(n_questions):
        for s in range(int(rng.integers(1, 15))):
            rows.append((f"question {q} ?", f'sentence {s} of "{q}', int(rng.integers(1, 5))))
    return rows


def test_asnq_whole_file(tmp_path):
    rows = [("who", "a", 1), ("who", 'b "quoted', 4), ("what", "null", 3), ("what", "NA", 4), ("what", "c", 2)]
    X, y = load_asnq(write_tsv(tmp_path / "asnq.tsv", rows))
    assert list(X.columns) == ["qid", "question", "candidate", "position"]
    assert X["qid"].tolist() == [0, 0, 1, 1, 1]
    assert X["question"].astype(str).tolist() == ["who", "who", "what", "what", "what"]
    assert X["candidate"].tolist() == ["a", 'b "quoted', "null", "NA", "c"]
    assert X["position"].tolist() == [0, 1, 0, 1, 2]
    assert X["qid"].dtype == np.int64 and isinstance(X["question"].dtype, pd.CategoricalDtype)
    assert y.tolist() == [0, 1, 0, 1, 0] and y.dtype == np.int8
    check_ranking_data(X, y)


@pytest.mark.parametrize("chunksize", [1, 7, 50, 10_000])
def test_asnq_chunks_never_split_a_question(tmp_path, chunksize):
    rows = random_asnq_rows()
    path = write_tsv(tmp_path / "asnq.tsv", rows)
    X_all, y_all = load_asnq(path)
    chunks = list(load_asnq(path, chunksize=chunksize))
    seen = set()
    for X, _ in chunks:
        qids = set(X["qid"])
        assert not qids & seen
        seen |= qids
        # Each question is whole: its positions run 0..size-1.
        size = X.groupby("qid")["position"].agg(["min", "max", "size"])
        assert (size["min"] == 0).all() and (size["max"] == size["size"] - 1).all()
    if chunksize < 50:
        assert len(chunks) > 3
        assert all(len(X) < chunksize + 15 for X, _ in chunks)
    X_cat = pd.concat([X for X, _ in chunks])
    assert X_cat.index.tolist() == list(range(len(rows)))
    assert X_cat["qid"].tolist() == X_all["qid"].tolist()
    assert X_cat["question"].astype(str).tolist() == X_all["question"].astype(str).tolist()
    assert X_cat["candidate"].tolist() == X_all["candidate"].tolist() == [s for _, s, _ in rows]
    assert X_cat["position"].tolist() == X_all["position"].tolist()
    assert np.concatenate([y for _, y in chunks]).tolist() == y_all.tolist() == [int(l == 4) for *_, l in rows]


def test_asnq_unsorted_file(tmp_path):
    rows = random_asnq_rows(10) + [("question 2 ?", "late", 4)]
    path = write_tsv(tmp_path / "asnq.tsv", rows)
    with pytest.raises(ValueError, match=rf"line {len(rows)}: question 'question 2 \?' appears again.*sort"):
        load_asnq(path)
    with pytest.raises(ValueError, match="appears again"):
        list(load_asnq(path, chunksize=3))


@pytest.mark.parametrize(
    "text, message",
    [
        ("q\ts\t1\nq\ts2\t5\n", "line 2: label '5'"),
        ("q\ts\t1\nq\ts2\n", "line 2: fewer than three"),
        ("q\ts\t1\textra\n", "4 tab-separated fields"),
        ("q\ts\t1\nq\ts\t1\textra\n", "not an ASNQ TSV"),
        ("QUESTION\tSENTENCE\tLABEL\nq\ts\t1\n", "line 1: label 'LABEL'"),
        ("", "empty"),
    ],
)
def test_asnq_bad_files(tmp_path, text, message):
    path = tmp_path / "bad.tsv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        load_asnq(path)


def test_asnq_arguments(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_asnq(tmp_path / "missing.tsv")
    path = write_tsv(tmp_path / "asnq.tsv", [("q", "s", 4)])
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="chunksize"):
            load_asnq(path, chunksize=bad)


# ---------------------------------------------------------------------------------------------- expansion


def bm25_reference(question, sentences, collection, k1=1.5, b=0.75):
    """Plain-Python BM25 (Lucene idf, distinct query terms) over ``collection``."""
    docs = tokenize(collection, drop_punct=True)
    avg = np.mean([len(d) for d in docs])
    terms = set(tokenize([question], drop_punct=True)[0])
    out = []
    for tokens in tokenize(sentences, drop_punct=True):
        score = 0.0
        for t in terms:
            tf = tokens.count(t)
            if tf:
                df = sum(t in d for d in docs)
                idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
                score += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(tokens) / avg))
        out.append(score)
    return np.array(out)


@pytest.fixture
def small_set():
    X = pd.DataFrame(
        {
            "qid": ["a", "a", "b"],
            "question": ["who wrote hamlet", "who wrote hamlet", "capital of france"],
            "candidate": ["Hamlet is a play.", "Shakespeare wrote Hamlet.", "Paris is nice."],
            "position": [1, 0, 0],
            "doc_position": [5, 6, 7],
        },
        index=[10, 11, 12],
    )
    pool = [
        "Paris is the capital of France.",
        "Shakespeare wrote Hamlet.",
        "Hamlet, prince of Denmark.",
        "Nothing here.",
        "France has a capital.",
        "Paris is the capital of France.",
    ]
    return X, np.array([0, 1, 1]), pool


def test_expand_small(small_set):
    X, y, pool = small_set
    Xe, ye = expand_candidates(X, y, pool, k=4)
    check_ranking_data(Xe, ye)
    assert Xe.index.tolist() == list(range(8))
    assert Xe["qid"].tolist() == ["a"] * 4 + ["b"] * 4
    assert Xe["position"].tolist() == [0, 1, 2, 3] * 2
    assert Xe["candidate"].dtype == "str" and Xe["doc_position"].dtype == "Int64"
    collection = list(dict.fromkeys(pool + X["candidate"].tolist()))
    for qid in ("a", "b"):
        rows = Xe[Xe["qid"] == qid]
        scores = bm25_reference(rows["question"].iloc[0], rows["candidate"].tolist(), collection)
        assert (np.diff(scores) <= 1e-12).all()
    a = Xe[Xe["qid"] == "a"]
    # "Shakespeare wrote Hamlet." is in the pool but already a candidate of "a": not added again. The tie
    # between the original "Hamlet is a play." and the added "Hamlet, prince of Denmark." goes to the original.
    assert a["candidate"].tolist()[:3] == [
        "Shakespeare wrote Hamlet.",
        "Hamlet is a play.",
        "Hamlet, prince of Denmark.",
    ]
    assert a["orig_position"].tolist()[:3] == [0, 1, -1]
    assert a["doc_position"].tolist()[:2] == [6, 5] and a["doc_position"].iloc[2:].isna().all()
    assert ye.tolist() == [1, 0, 0, 0, 0, 0, 0, 1]
    b = Xe[Xe["qid"] == "b"]
    assert b["candidate"].tolist()[-1] == "Paris is nice."  # shares no term with the question
    assert b["candidate"].tolist()[0] == "Paris is the capital of France."


def test_expand_pool_too_small_and_large_groups(small_set):
    X, y, pool = small_set
    Xe, ye = expand_candidates(X, y, pool[:2], k=10)
    assert Xe.groupby("qid").size().to_dict() == {"a": 3, "b": 3}
    Xe, ye = expand_candidates(X, y, pool, k=1)  # no question needs more: only reordered
    assert len(Xe) == 3 and (Xe["orig_position"] >= 0).all()
    assert sorted(zip(Xe["qid"], Xe["candidate"], ye)) == sorted(zip(X["qid"], X["candidate"], y))


def test_expand_pool_frame_and_no_position(small_set):
    X, y, pool = small_set
    frame = pd.DataFrame({"candidate": pool, "doc_id": [f"D{i}" for i in range(len(pool))], "other": 1})
    Xe, _ = expand_candidates(X.drop(columns="position"), y, frame, k=4)
    added = Xe[Xe["orig_position"] < 0]
    assert "other" not in Xe.columns
    assert added["doc_id"].notna().all() and Xe.loc[Xe["orig_position"] >= 0, "doc_id"].isna().all()
    assert dict(zip(added["candidate"], added["doc_id"])) == {c: f"D{pool.index(c)}" for c in added["candidate"]}
    # Without a position column, the original position is the row order inside the question.
    kept = Xe[Xe["orig_position"] >= 0]
    assert dict(zip(kept["candidate"], kept["orig_position"])) == {
        "Hamlet is a play.": 0,
        "Shakespeare wrote Hamlet.": 1,
        "Paris is nice.": 0,
    }


@pytest.mark.parametrize(
    "pool, k, error, message",
    [
        ("one sentence", 5, TypeError, "not a str"),
        ([], 5, ValueError, "empty"),
        (["ok", None], 5, TypeError, "must all be str"),
        (pd.DataFrame({"text": ["a"]}), 5, ValueError, "'candidate' column"),
        (["ok"], 0, ValueError, "k must be >= 1"),
        (["ok"], 2.5, TypeError, "k must be an integer"),
    ],
)
def test_expand_errors(small_set, pool, k, error, message):
    X, y, _ = small_set
    with pytest.raises(error, match=message):
        expand_candidates(X, y, pool, k=k)


def test_expand_wikiqa_invariants():
    X, y = load_wikiqa(shared("wikiqa", "WikiQA-test.tsv"))
    pool = X.drop_duplicates("candidate")
    first_60 = X["qid"].isin(X["qid"].unique()[:60]).to_numpy()
    X, y = X[first_60], y[first_60]
    k = 40
    Xe, ye = expand_candidates(X, y, pool, k=k)
    check_ranking_data(Xe, ye)
    assert (Xe.groupby("qid", sort=False).size() == k).all()
    assert Xe["qid"].unique().tolist() == X["qid"].unique().tolist()
    # Positions are a permutation of 0..k-1 inside each question, and rows are in that order.
    assert (Xe["position"].to_numpy() == np.tile(np.arange(k), 60)).all()
    # Every original row is kept, with all its columns and its label.
    kept = Xe[Xe["orig_position"] >= 0].drop(columns="position").rename(columns={"orig_position": "position"})
    merged = X.assign(y=y).merge(kept.assign(y=ye[(Xe["orig_position"] >= 0).to_numpy()]), on=["qid", "position"])
    assert len(merged) == len(X)
    for col in ["question", "candidate", "doc_id", "doc_position", "title", "y"]:
        assert (merged[f"{col}_x"] == merged[f"{col}_y"]).all(), col
    # Added rows: negatives, never a sentence the question already has, never twice.
    added = Xe[Xe["orig_position"] < 0]
    assert (ye[(Xe["orig_position"] < 0).to_numpy()] == 0).all() and len(added) == 60 * k - len(X)
    assert not added.duplicated(["qid", "candidate"]).any()
    assert not added.merge(X, on=["qid", "candidate"]).shape[0]
    assert added["doc_id"].notna().all()


# ---------------------------------------------------------------------------------------------- sample


def test_load_sample():
    X, y = load_sample()
    assert list(X.columns) == FORMAT
    assert X.shape == (7307, 7) and y.shape == (7307,) and y.dtype == np.int64
    index = GroupIndex.from_frame(X)
    assert index.n_groups == 1494 and int((index.max(y) > 0).sum()) == 725 and int(y.sum()) == 780
    check_ranking_data(X, y)
    assert SAMPLE_PATH.stat().st_size < 500_000
    with gzip.open(SAMPLE_PATH, "rt", encoding="utf-8") as f:
        assert f.readline().rstrip("\n").split("\t") == FORMAT + ["label"]
    attribution = (SAMPLE_PATH.parent / "ATTRIBUTION.md").read_text(encoding="utf-8")
    for needle in ("Rajpurkar", "Jia", "Liang", "https://rajpurkar.github.io/SQuAD-explorer/", "CC BY-SA 4.0"):
        assert needle in attribution


def test_load_sample_matches_fresh_conversion(squad_sample):
    X, y = load_sample()
    X_fresh, y_fresh = squad_sample
    pd.testing.assert_frame_equal(X, X_fresh)
    np.testing.assert_array_equal(y, y_fresh)
