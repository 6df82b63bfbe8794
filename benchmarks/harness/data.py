"""The data every benchmark reads, split the same way everywhere: WikiQA (train, dev, test, the pool of its
sentences), the bundled SQuAD sample (split by paragraph or by document), subsets of whole questions, and
questions expanded to ~100 candidates."""

from __future__ import annotations

import numpy as np

from harness.paths import SHARED_DATA


def wikiqa_splits():
    """WikiQA as every benchmark splits it.

    ``train``: the answered questions of WikiQA-train minus a 10% dev split of its questions
    (``GroupShuffleSplit(test_size=0.1, random_state=0)``); ``dev``: that split, all its questions;
    ``full``: all of WikiQA-train; ``test``: WikiQA-test; ``pool``: every distinct train and test sentence
    (for ``expand_candidates``).
    """
    import pandas as pd
    from sklearn.model_selection import GroupShuffleSplit

    from harness.library import keep_answered, load_wikiqa

    folder = SHARED_DATA / "wikiqa"
    if not (folder / "WikiQA-train.tsv").exists():
        raise SystemExit(f"WikiQA not found under {folder}; this benchmark needs the shared data (AS2RANK_SHARED_DATA).")
    X, y = load_wikiqa(folder / "WikiQA-train.tsv")
    X_test, y_test = load_wikiqa(folder / "WikiQA-test.tsv")
    train_idx, dev_idx = next(GroupShuffleSplit(n_splits=1, test_size=0.1, random_state=0).split(X, y, X["qid"]))
    X_train, y_train = keep_answered(X.iloc[train_idx], y[train_idx])
    pool = pd.concat([X["candidate"], X_test["candidate"]], ignore_index=True).drop_duplicates().tolist()
    return {
        "full": (X, y),
        "train": (X_train, y_train),
        "dev": (X.iloc[dev_idx], y[dev_idx]),
        "test": (X_test, y_test),
        "pool": pool,
    }


def subset_questions(X, y, n: int, seed: int = 0):
    """Whole questions of ``(X, y)``: ``n`` of them (all when there are fewer), drawn with ``seed``, rows in
    their original order."""
    qids = X["qid"].unique()
    chosen = np.random.default_rng(seed).choice(qids, size=min(n, len(qids)), replace=False)
    keep = X["qid"].isin(chosen).to_numpy()
    return X[keep].reset_index(drop=True), y[keep]


def sorted_subset(X, y, n, seed):
    """Whole questions of ``(X, y)`` drawn from the sorted question ids (all, reindexed, when ``n`` is None or
    not below their number): the speed benchmark's subsets."""
    if n is None or n >= X["qid"].nunique():
        return X.reset_index(drop=True), y
    qids = np.random.default_rng(seed).choice(np.sort(X["qid"].unique()), size=n, replace=False)
    keep = X["qid"].isin(qids).to_numpy()
    return X[keep].reset_index(drop=True), y[keep]


def first_questions(X, y, n: int):
    """The rows of the first ``n`` questions of ``(X, y)``: the training data of the CPU benchmarks' model."""
    keep = X["qid"].isin(X["qid"].unique()[:n]).to_numpy()
    return X[keep], y[keep]


def expanded(X, y, pool, k=100):
    """The answered questions of ``(X, y)`` expanded to ``k`` candidates each (BM25 negatives from ``pool``)."""
    from harness.library import expand_candidates, keep_answered

    X, y = keep_answered(X, y)
    return expand_candidates(X, y, pool, k=k)


# ----------------------------------------------------------------------------------------------- the sample
def load_answered(data, sample_random_state=0):
    """``(X_train, y_train, X_test, y_test)`` of ``"sample"`` (the bundled SQuAD sample, split by paragraph as
    ``as2rank bench`` splits it) or ``"wikiqa"`` (all of WikiQA-train; WikiQA-test), answered questions only."""
    from harness.library import keep_answered, load_benchmark_data

    if data == "sample":
        X, y, X_test, y_test = load_benchmark_data("sample", random_state=sample_random_state)
    else:
        if not (SHARED_DATA / "wikiqa" / "WikiQA-train.tsv").exists():
            raise SystemExit(f"WikiQA not found under {SHARED_DATA / 'wikiqa'}: run with --data sample, or set AS2RANK_SHARED_DATA.")
        splits = wikiqa_splits()
        (X, y), (X_test, y_test) = splits["full"], splits["test"]
    # Scores are per question, so dropping unanswered test questions leaves the clean-protocol metrics as they are.
    return (*keep_answered(X, y), *keep_answered(X_test, y_test))


def pick_docs(X, n_questions, rng) -> np.ndarray:
    """Rows of the first whole documents, in a seeded order, holding at least ``n_questions`` questions."""
    docs = X.groupby("doc_id", sort=True)["qid"].nunique()
    docs = docs.iloc[rng.permutation(len(docs))]
    chosen = docs.index[: int(np.searchsorted(docs.cumsum().to_numpy(), n_questions) + 1)]
    return X["doc_id"].isin(chosen).to_numpy()


def training_subset(X, y, size, seed, val_fraction=0.1, val_min=10):
    """A training subset of ``size`` questions (whole documents, nested across sizes for one seed; ``"all"``),
    split into train and validation (``val_fraction`` of its questions, at least ``val_min``, whole documents)."""
    n_all = X["qid"].nunique()
    sub = pick_docs(X, n_all if size == "all" else int(size), np.random.default_rng(seed))
    Xs, ys = X[sub], y[sub]
    n = Xs["qid"].nunique()
    val = pick_docs(Xs, max(val_min, round(val_fraction * n)), np.random.default_rng([seed, 1]))
    return (Xs[~val], ys[~val]), (Xs[val], ys[val])


def paragraph_splits(X, y, test_size=0.3, dev_size=None, random_state=0):
    """The SQuAD sample split by paragraph (``doc_id``): ``{"train", "test"}`` (and ``"dev"``, ``dev_size`` of
    the training paragraphs) of answered questions, as ``as2rank bench`` splits it."""
    from sklearn.model_selection import GroupShuffleSplit

    from harness.library import keep_answered

    train, test = next(GroupShuffleSplit(n_splits=1, test_size=test_size, random_state=random_state).split(X, y, X["doc_id"]))
    Xtr, ytr = X.iloc[train], y[train]
    out = {}
    if dev_size:
        fit, dev = next(GroupShuffleSplit(n_splits=1, test_size=dev_size, random_state=random_state).split(Xtr, ytr, groups=Xtr["doc_id"]))
        out = {"train": keep_answered(Xtr.iloc[fit], ytr[fit]), "dev": keep_answered(Xtr.iloc[dev], ytr[dev])}
    else:
        out = {"train": keep_answered(Xtr, ytr)}
    out["test"] = keep_answered(X.iloc[test], y[test])
    return out


def squad_sample():
    """The SQuAD 2.0 sample of the shared data folder (all four articles), else the bundled one."""
    from harness.library import load_sample, load_squad_sent

    path = SHARED_DATA / "squad" / "squad-v2.0-dev-sample.json"
    return load_squad_sent(path) if path.exists() else load_sample()
