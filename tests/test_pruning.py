"""as2rank.pruning.sequential: the drop rule, cascade simulation, α tuning and SequentialRanker, all without torch."""

import json
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest
from sklearn.base import BaseEstimator

import as2rank
from as2rank.lexical.baselines import OverlapRankRanker, ReciprocalRankRanker, WordOverlapRanker
from as2rank.data import GroupIndex
from as2rank.pruning.rules import EXIT_GAP, drop_lowest, simulate_cascade, tune_alpha
from as2rank.pruning.sequential import SequentialRanker
from tests.contract import check_ranker_contract, check_sklearn_api
from tests.utils import one_question


class FixedExits(BaseEstimator):
    """A stand-in for a CascadeTransformer: fixed exit logits, whatever X."""

    def __init__(self, logits=None, exits=None):
        self.logits = logits
        self.exits = exits

    def fit(self, X=None, y=None):
        self.exits_ = tuple(self.exits)
        return self

    def predict_exits(self, X):
        return self.logits


#: Subprocess code: ``importer()``, called from a meta-path finder's ``find_spec``, names the module whose
#: import statement is being run (the first frame outside importlib's machinery).
IMPORTER = textwrap.dedent(
    """
    import sys


    def importer():
        frame = sys._getframe(2)
        while frame.f_code.co_filename.startswith("<frozen importlib"):
            frame = frame.f_back
        return frame.f_globals.get("__name__")
    """
)


@pytest.mark.slow  # a process that loads spaCy
def test_torch_free_with_torch_blocked():
    """With ``import torch`` failing, spaCy (through thinc, which guards its torch import) still tokenises,
    and a SequentialRanker of lexical rankers, simulate_cascade and tune_alpha run; no as2rank module tries
    to import torch.

    torch is blocked by an import hook rather than ``sys.modules["torch"] = None``: scipy's array-API helpers
    (imported by scikit-learn) take any ``"torch"`` entry of ``sys.modules`` for the module and fail on None.
    """
    code = IMPORTER + textwrap.dedent(
        """
        import importlib.abc

        tried = []  # modules that tried to import torch


        class BlockTorch(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "torch":
                    tried.append(importer())
                    raise ImportError(f"{name} is blocked")
                return None


        sys.meta_path.insert(0, BlockTorch())
        import numpy as np
        import pandas as pd
        import thinc.compat
        from sklearn.base import BaseEstimator
        from as2rank import SequentialRanker, tune_alpha
        from as2rank.lexical.baselines import OverlapRankRanker, WordOverlapRanker
        import as2rank.transformer.cascade  # the cascade's module imports without torch too
        from as2rank.pruning.rules import simulate_cascade
        from as2rank.text import tokenize

        assert not thinc.compat.has_torch
        assert tokenize(["Who wrote Hamlet?"], lower=True) == [["who", "wrote", "hamlet", "?"]]
        X = pd.DataFrame({"qid": [0, 0, 0, 1, 1], "question": ["who wrote hamlet"] * 3 + ["where is paris"] * 2,
                          "candidate": ["hamlet is a play", "shakespeare wrote hamlet", "a b", "paris is in france",
                                        "rome"], "position": [0, 1, 2, 0, 1]})
        y = np.array([0, 1, 0, 1, 0])
        sr = SequentialRanker([WordOverlapRanker(), OverlapRankRanker()]).fit(X, y)
        scores, cost = sr.predict(X, return_cost=True)
        assert np.isfinite(scores).all() and cost["survivors"].tolist() == [5, 3]
        logits = np.random.default_rng(0).normal(size=(5, 3))
        scores, report = simulate_cascade(logits, X["qid"], 0.5, (1, 2, 3), X["position"])
        assert report["survivors"].tolist() == [5, 3, 2]


        class FixedExits(BaseEstimator):
            def fit(self, X=None, y=None):
                self.exits_ = (1, 2, 3)
                return self

            def predict_exits(self, X):
                return logits


        best, table = tune_alpha(FixedExits().fit(), X, y, grid=(0.0, 0.5))
        assert len(best) == 2 and len(table) == 4
        # The training shell that the estimator classes are built on imports without torch; nothing else of the
        # neural machinery loads.
        light = {"as2rank.neural", "as2rank.neural.shell", "as2rank.neural.callbacks", "as2rank.neural.early_stopping"}
        loaded = [m for m in sys.modules if m.split(".")[0] == "torch" or (m.startswith("as2rank.neural") and m not in light)]
        print(loaded, sorted({m for m in tried if m.split(".")[0] == "as2rank"}))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[] []"


@pytest.mark.slow  # a process that loads spaCy, and torch through it
def test_with_torch_installed_only_spacy_imports_it_on_the_lexical_path():
    """Where torch is installed, a lexical SequentialRanker's fit and predict leave it out of ``sys.modules``
    but for one importer outside as2rank: spaCy's thinc, which imports torch when it can (``thinc.compat``)
    as soon as the tokenizer loads spaCy."""
    pytest.importorskip("torch")
    code = IMPORTER + textwrap.dedent(
        """
        import importlib.abc

        importers = []  # the modules whose import statement first loaded torch


        class WatchTorch(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name == "torch" and "torch" not in sys.modules:
                    importers.append(importer())
                return None


        sys.meta_path.insert(0, WatchTorch())
        import numpy as np
        import pandas as pd
        from as2rank import SequentialRanker
        from as2rank.lexical.baselines import OverlapRankRanker, WordOverlapRanker

        X = pd.DataFrame({"qid": [0, 0, 1, 1], "question": ["who wrote hamlet"] * 2 + ["where is paris"] * 2,
                          "candidate": ["shakespeare wrote hamlet", "a b", "paris is in france", "rome"]})
        y = np.array([1, 0, 1, 0])
        SequentialRanker([WordOverlapRanker(), OverlapRankRanker()]).fit(X, y).predict(X)
        print(importers)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() in ("[]", "['thinc.compat']"), out.stdout


def test_drop_lowest_floor_rule_and_ties():
    # Group 0: floor(1.5) = 1 drop, the later of the tied rows; group 1: floor(1) = 1 drop, the lowest.
    keep = drop_lowest(np.array([0, 0, 0, 1, 1]), np.array([1.0, 1.0, 1.0, 3.0, 2.0]), 0.5)
    assert keep.tolist() == [True, True, False, True, False]
    # 0.29 * 100 = 28.999999999999996 still drops 29.
    assert (~drop_lowest(np.zeros(100, dtype=np.int64), np.arange(100.0), 0.29)).sum() == 29
    assert drop_lowest(np.zeros(0, dtype=np.int64), np.zeros(0), 0.5).tolist() == []


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.5, 0.9])
def test_drop_lowest_matches_a_loop(alpha):
    rng = np.random.default_rng(1)
    codes = np.sort(rng.integers(0, 12, 200))  # each group's rows in original order
    scores = rng.integers(0, 5, 200).astype(float)  # many ties
    expected = np.ones(200, dtype=bool)
    for g in np.unique(codes):
        rows = np.flatnonzero(codes == g)
        worst_first = sorted(rows, key=lambda r: (scores[r], -r))
        expected[worst_first[: int(np.floor(alpha * len(rows) + 1e-9))]] = False
    np.testing.assert_array_equal(drop_lowest(codes, scores, alpha), expected)


def test_simulate_cascade_scores_and_cost():
    # Question a (4 rows), question b (3 rows, interleaved with a); three exits after layers 1, 3 and 4.
    qid = np.array(["a", "b", "a", "b", "a", "b", "a"])
    logits = np.array([[4.0, 1.0, 1.0], [3.0, 9.0, 2.0], [1.0, 8.0, 3.0], [2.0, 2.0, 4.0], [3.0, 3.0, 5.0],
                       [1.0, 0.0, 6.0], [2.0, 7.0, 7.0]])
    scores, report = simulate_cascade(logits, qid, [0.5, 0.5], (1, 3, 4))
    # a: exit 0 drops rows 2 and 6 (1 and 2 below 4 and 3), exit 1 drops row 0 (1 < 3); b: exit 0 drops row 5,
    # exit 1 drops row 3.
    reached = np.array([1, 2, 0, 1, 2, 0, 0])
    assert report["survivors"].tolist() == [7, 4, 2]
    assert report["rows_per_layer"].tolist() == [7, 4, 4, 2]
    assert report["relative_cost"] == pytest.approx(17 / 28)
    assert report["n_rows"] == 7 and report["n_questions"] == 2
    np.testing.assert_array_equal(scores, logits[np.arange(7), reached] - (2 - reached) * EXIT_GAP)
    # alpha=0 keeps the last exit's logits; a GroupIndex gives the same as qid and position.
    np.testing.assert_array_equal(simulate_cascade(logits, qid, 0.0, (1, 3, 4))[0], logits[:, 2])
    index = GroupIndex(qid, np.arange(7))
    np.testing.assert_array_equal(simulate_cascade(logits, index, [0.5, 0.5], (1, 3, 4))[0], scores)
    with pytest.raises(ValueError, match="alpha"):
        simulate_cascade(logits, qid, [0.5], (1, 3, 4))


def test_tune_alpha_without_a_model():
    rng = np.random.default_rng(3)
    X = pd.concat([one_question(20, seed=s).assign(qid=f"q{s}") for s in range(4)], ignore_index=True)
    y = (rng.random(len(X)) < 0.2).astype(int)
    model = FixedExits(rng.normal(size=(len(X), 3)), (2, 4, 6)).fit()
    best, table = tune_alpha(model, X, y, grid=(0.0, 0.3, 0.6), max_relative_cost=0.8)
    assert len(best) == 2 and len(table) == 9
    row = table[table["alpha"] == best].iloc[0]
    feasible = table[table["relative_cost"] <= 0.8]
    assert row["relative_cost"] <= 0.8 and row["p@1"] == feasible["p@1"].max()
    assert table["p@1"].is_monotonic_decreasing
    index = GroupIndex.from_frame(X)
    for alpha, cost in zip(table["alpha"], table["relative_cost"]):
        assert simulate_cascade(model.logits, index, alpha, model.exits_)[1]["relative_cost"] == cost
    with pytest.raises(ValueError, match="budget"):
        tune_alpha(model, X, y, grid=(0.0,), max_relative_cost=0.5)


def test_sklearn_api():
    check_sklearn_api(SequentialRanker([OverlapRankRanker(), WordOverlapRanker()]))


def test_sequential_ranker_with_baselines(toy):
    X, y = toy
    sr = SequentialRanker([OverlapRankRanker(), WordOverlapRanker()], keep=0.5)
    fitted = check_ranker_contract(sr, X, y)
    cost = fitted.predict(X, return_cost=True)[1]
    # q1: 3 -> 2, q2: 3 -> 2, q3: 2 -> 1.
    assert cost["survivors"].tolist() == [8, 5]
    assert cost["relative_cost"] == pytest.approx(13 / 8)  # each step re-scores its survivors


def test_sequential_ranker_floor_rule_and_order():
    X = one_question()
    y = np.zeros(len(X))
    sr = SequentialRanker([ReciprocalRankRanker()] * 5, keep=0.7).fit(X, y)
    scores, cost = sr.predict(X, return_cost=True)
    assert cost["survivors"].tolist() == [128, 90, 63, 45, 32]
    assert cost["rows_per_layer"].tolist() == [128, 90, 63, 45, 32]  # one layer per step
    two_layer = SequentialRanker([ReciprocalRankRanker()] * 2, keep=0.5, costs=[2, 3]).fit(X, y)
    cost = two_layer.predict(X, return_cost=True)[1]
    assert cost["rows_per_layer"].tolist() == [128, 128, 64, 64, 64]
    assert cost["relative_cost"] == pytest.approx((2 * 128 + 3 * 64) / (3 * 128))
    half = SequentialRanker([ReciprocalRankRanker()] * 2, costs=[0.5, 1]).fit(X, y)
    assert half.predict(X, return_cost=True)[1]["rows_per_layer"] is None
    # Reciprocal rank keeps the earliest candidates, so the ranking is the original order.
    assert GroupIndex.from_frame(X).rank(scores).tolist() == list(range(1, 129))
    with pytest.raises(ValueError, match="keep"):
        SequentialRanker([ReciprocalRankRanker()] * 2, keep=0).fit(X, y)


def test_a_sequential_ranker_directory_names_its_class_only(toy, tmp_path):
    X, y = toy
    sr = SequentialRanker([OverlapRankRanker(), WordOverlapRanker()], keep=0.5).fit(X, y)
    # A model directory names the class only, so directories load wherever the class lives.
    sr.save_pretrained(tmp_path / "sr")
    assert json.loads((tmp_path / "sr" / "as2rank.json").read_text())["class"] == "SequentialRanker"
    np.testing.assert_array_equal(as2rank.load(tmp_path / "sr").predict(X), sr.predict(X))
