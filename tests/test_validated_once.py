"""Every public call validates its table once: from ``read_pairs`` through ``RankerSelector.fit`` to
``as2rank.rank``, and for a transformer's ``fit``, each public function or method that checks a frame checks it
one time (a public call inside it, such as a candidate's ``fit``, checks its own; the training shell's
``check_training_data`` hook checks the table of the ``fit`` that calls it)."""

import sys
from collections import Counter

import pytest

import as2rank
import as2rank.data as data_module
from as2rank import RankerSelector
from as2rank.datasets import load_sample, read_pairs

#: Frames that are part of the validation itself, not the call that asked for it.
_VALIDATION_FILES = (data_module.__file__, as2rank.params.__file__)


@pytest.fixture
def checks(monkeypatch):
    """Count, per public as2rank call (its frame), the frames it checked (``data._check_frame``)."""
    counts, frames = Counter(), []
    original = data_module._check_frame

    def counted(*args, **kwargs):
        frame = sys._getframe(1)
        while frame is not None:
            code = frame.f_code
            public = not code.co_name.startswith(("_", "<"))
            if code.co_filename.startswith(ROOT) and code.co_filename not in _VALIDATION_FILES and public:
                frames.append(frame)  # kept alive, so that no later frame reuses its identity
                owner = frame.f_locals.get("self")  # co_qualname would need Python 3.11
                name = code.co_name if owner is None else f"{type(owner).__name__}.{code.co_name}"
                counts[(id(frame), name, code.co_filename.rsplit("/as2rank/", 1)[-1])] += 1
                break
            frame = frame.f_back
        return original(*args, **kwargs)

    monkeypatch.setattr(data_module, "_check_frame", counted)
    return counts


ROOT = as2rank.__file__.rsplit("/", 1)[0]

#: Where a neural estimator's ``fit`` checks its table: in ``fit``, or in the shell's data hook it calls.
FIT_GATES = {cls: (f"{cls}.fit", f"{cls}.check_training_data") for cls in ("TransformerRanker", "ContextConcat")}


def test_read_pairs_select_and_rank_check_each_table_once_per_call(checks, tmp_path):
    X, y = load_sample()
    keep = X["qid"].isin(X["qid"].unique()[:120]).to_numpy()
    table = X[keep].assign(label=y[keep])[["qid", "question", "candidate", "label"]]
    table.to_csv(tmp_path / "pairs.csv", index=False)
    X, y = read_pairs(tmp_path / "pairs.csv", qid="qid")
    selector = RankerSelector(candidates=["WO+RR", "Lexical+LR"], cv=2, verbose=False).fit(X, y)
    ranked = as2rank.rank(selector, X, top_k=1)
    assert len(ranked) == X["qid"].nunique()
    calls = {name for _, name, _ in checks}
    assert {"read_pairs", "RankerSelector.fit", "rank"} <= calls
    twice = {key[1:]: n for key, n in checks.items() if n > 1}
    assert not twice, twice


def test_a_transformer_fit_checks_its_table_once(checks):
    pytest.importorskip("transformers")
    from as2rank.transformer.ranker import TransformerRanker
    from tests.test_transformer import SPECIAL, WORDS, small, synthetic
    import transformers

    tokenizer = transformers.BertTokenizerFast(vocab={w: i for i, w in enumerate(SPECIAL + WORDS)})
    X, y = synthetic()
    small(TransformerRanker, "bert", tokenizer, reuse_fit=False).fit(X, y)
    fits = [n for (_, name, _), n in checks.items() if name in FIT_GATES["TransformerRanker"]]
    assert fits == [1], checks
    assert all(n == 1 for n in checks.values()), checks


def test_a_context_ranker_fit_checks_its_table_once(checks):
    """The context columns are checked where they are read; the table itself once, by the scaffold's data gate."""
    pytest.importorskip("transformers")
    from as2rank.transformer.context.rankers import ContextConcat, ContextExtractor
    from tests.test_context import small, synthetic
    from tests.test_transformer import SPECIAL, WORDS
    import transformers

    tokenizer = transformers.BertTokenizerFast(vocab={w: i for i, w in enumerate(SPECIAL + WORDS)})
    X, y = synthetic()
    X = ContextExtractor(max_global_sentences=2, max_global_tokens=12).fit_transform(X)
    checks.clear()
    small(ContextConcat, tokenizer, reuse_fit=False).fit(X, y)
    fits = [n for (_, name, _), n in checks.items() if name in FIT_GATES["ContextConcat"]]
    assert fits == [1], checks
    assert all(n == 1 for n in checks.values()), checks
