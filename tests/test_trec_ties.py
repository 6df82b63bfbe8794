"""ties="trec_eval": equal to pytrec_eval (trec_eval's own code) on runs with many ties."""

import numpy as np
import pandas as pd
import pytest

from as2rank.metrics import (
    get_scorer,
    mean_average_precision,
    mean_reciprocal_rank,
    ndcg_at_k,
    precision_at_k,
    ranking_report,
)

# Candidate ids that trip naive orderings: prefixes of each other, numeric-looking strings ("10" < "9" as
# text), case (upper case sorts before lower case), punctuation, and non-ASCII (UTF-8 byte order).
_TRICKY = ["9", "10", "100", "1", "01", "0", "a", "ab", "abc", "b", "B", "Z", "_", "a-1", "a_1", "a 1",
           "doc9", "doc10", "doc", "é", "e", "z", "ä", "ß", "日本", "\u00ff", "\u0100"]
_MEASURES = ("map", "recip_rank", "P_1", "P_3", "P_5", "ndcg_cut_10")


def _random_run(rng, n_questions, labels, int_docnos=False):
    """A run with few distinct scores, rows of a question scattered, and unique docnos inside a question."""
    sizes = rng.integers(1, 26, size=n_questions)
    qid = np.repeat([f"q{i}" for i in range(n_questions)], sizes)
    pool = _TRICKY + ["".join(rng.choice(list("abc019"), size=rng.integers(1, 4))) for _ in range(40)]
    pool = list(dict.fromkeys(pool))  # unique, order kept
    if int_docnos:
        docno = np.concatenate([rng.choice(120, size=s, replace=False) for s in sizes])
    else:
        docno = np.concatenate([rng.choice(np.array(pool, dtype=object), size=s, replace=False) for s in sizes])
    n = len(qid)
    y = rng.choice(labels, size=n)
    scores = rng.choice([0.0, 0.5, 1.0, 2.0, -0.0], size=n)  # many ties, -0.0 == 0.0 included
    perm = rng.permutation(n)
    return qid[perm], docno[perm], y[perm], scores[perm]


def _pytrec(qid, docno, y, scores):
    pytrec_eval = pytest.importorskip("pytrec_eval")
    qrels, run = {}, {}
    for q, d, label, s in zip(qid, docno, y, scores):
        qrels.setdefault(str(q), {})[str(d)] = int(label)
        run.setdefault(str(q), {})[str(d)] = float(s)
    return pytrec_eval.RelevanceEvaluator(qrels, set(_MEASURES)).evaluate(run)


def _ours(qid, docno, y, scores, no_positive="zero"):
    kw = {"ties": "trec_eval", "docno": docno, "no_positive": no_positive, "per_group": True}
    return {
        "map": mean_average_precision(y, scores, qid, **kw),
        "recip_rank": mean_reciprocal_rank(y, scores, qid, **kw),
        "P_1": precision_at_k(y, scores, qid, k=1, **kw),
        "P_3": precision_at_k(y, scores, qid, k=3, **kw),
        "P_5": precision_at_k(y, scores, qid, k=5, **kw),
        "ndcg_cut_10": ndcg_at_k(y, scores, qid, k=10, **kw),
    }


@pytest.mark.parametrize(
    "labels, int_docnos",
    [([0, 0, 0, 1], False), ([0, 0, 0, 1, 2, 3], False), ([0, 0, 1, 2], True)],
    ids=["binary", "graded", "integer-docnos"],
)
def test_trec_eval_ties_equal_pytrec_eval_per_question(labels, int_docnos):
    rng = np.random.default_rng(len(labels) + int_docnos)
    qid, docno, y, scores = _random_run(rng, 150, labels, int_docnos)
    ref = _pytrec(qid, docno, y, scores)
    ours = _ours(qid, docno, y, scores)
    assert set(ref) == set(ours["map"].index)
    for name, series in ours.items():
        for q, value in series.items():
            assert value == pytest.approx(ref[q][name], abs=1e-12, rel=0), (name, q)
    unanswered = sum(y[qid == q].max() == 0 for q in ref)
    assert 0 < unanswered < len(ref)  # both kinds of question were compared


def test_trec_eval_means_and_no_positive():
    rng = np.random.default_rng(7)
    qid, docno, y, scores = _random_run(rng, 200, [0, 0, 0, 1, 2])
    ref = pd.DataFrame(_pytrec(qid, docno, y, scores)).T
    answered = pd.Series({q: y[qid == q].max() > 0 for q in ref.index})
    report = ranking_report(y, scores, qid, ties="trec_eval", docno=docno, no_positive="zero", k=(1, 3, 5))
    names = {"map": "map", "mrr": "recip_rank", "p@1": "P_1", "p@3": "P_3", "p@5": "P_5", "ndcg@10": "ndcg_cut_10"}
    for ours, theirs in names.items():
        # no_positive="zero": the mean over every question, as trec_eval/pytrec_eval average.
        assert report[ours] == pytest.approx(ref[theirs].mean(), abs=1e-12)
    clean = ranking_report(y, scores, qid, ties="trec_eval", docno=docno, k=(1, 3, 5))
    for ours, theirs in names.items():
        # no_positive="skip": trec_eval run on the qrels of the answered questions only.
        assert clean[ours] == pytest.approx(ref.loc[answered, theirs].mean(), abs=1e-12)


def test_trec_eval_order_is_descending_strcmp():
    # One question, all scores equal: trec_eval ranks by docno, larger first: "9" > "10" > "1" as text.
    y = np.array([1, 0, 0])
    docno = ["10", "9", "1"]
    ap = mean_average_precision(y, np.zeros(3), ["q"] * 3, ties="trec_eval", docno=docno)
    assert ap == pytest.approx(1 / 2)  # order 9, 10, 1: the relevant "10" is second
    # Integers are compared as the text a run file would hold, so 10 sorts before 9 too.
    assert mean_average_precision(y, np.zeros(3), ["q"] * 3, ties="trec_eval", docno=[10, 9, 1]) == ap
    # A prefix sorts before its extensions: "ab" > "a", so "ab" comes first.
    assert mean_reciprocal_rank([1, 0], [0, 0], ["q", "q"], ties="trec_eval", docno=["a", "ab"]) == 0.5


def test_trec_eval_needs_docno_and_checks_it():
    y, s, q = [1, 0, 0], [1.0, 1.0, 0.0], ["q", "q", "r"]
    with pytest.raises(ValueError, match="docno="):
        mean_average_precision(y, s, q, ties="trec_eval")
    with pytest.raises(ValueError, match="only used by ties='trec_eval'"):
        mean_average_precision(y, s, q, ties="stable", docno=["a", "b", "c"])
    with pytest.raises(ValueError, match="'a' appears more than once in question 'q'"):
        mean_average_precision(y, s, q, ties="trec_eval", docno=["a", "a", "c"])
    # The same id in two questions is fine.
    assert mean_average_precision(y, s, q, ties="trec_eval", docno=["a", "b", "a"]) == 0.5
    with pytest.raises(ValueError, match="docno has missing values"):
        mean_average_precision(y, s, q, ties="trec_eval", docno=["a", None, "c"])
    with pytest.raises(ValueError, match="docno mixes key types"):
        mean_average_precision(y, s, q, ties="trec_eval", docno=["a", 1, "c"])
    with pytest.raises(ValueError, match="docno must hold strings"):
        mean_average_precision(y, s, q, ties="trec_eval", docno=[1.5, 2.5, 3.5])
    with pytest.raises(ValueError, match="docno has 2 entries"):
        mean_average_precision(y, s, q, ties="trec_eval", docno=["a", "b"])


class _ColumnScorer:
    """Stands in for a fitted estimator: its scores are a column of X."""

    def predict(self, X):
        return X["s"].to_numpy()


def test_scorer_reads_docno_column():
    rng = np.random.default_rng(3)
    qid, docno, y, scores = _random_run(rng, 40, [0, 0, 1])
    X = pd.DataFrame({"qid": qid, "cid": docno, "s": scores})
    scorer = get_scorer("map", ties="trec_eval", docno="cid")
    assert repr(scorer) == "get_scorer('map', ties='trec_eval', no_positive='skip', docno='cid')"
    expected = mean_average_precision(y, scores, qid, ties="trec_eval", docno=docno)
    assert scorer(_ColumnScorer(), X, y) == pytest.approx(expected, abs=1e-15)
    with pytest.raises(ValueError, match="needs docno="):
        get_scorer("map", ties="trec_eval")
    with pytest.raises(ValueError, match="only accepted with that policy"):
        get_scorer("map", docno="cid")
    with pytest.raises(ValueError, match="'cid', which X does not have"):
        scorer(_ColumnScorer(), X.drop(columns="cid"), y)
