"""The benchmark harness's store of test scores (``benchmarks/_common.fitted_scores``): a fit scored once is
read back instead of trained again, and only for the same fit, inference parameters and test data."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from as2rank import WordOverlapRanker


@pytest.fixture
def common(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import _common

    monkeypatch.setattr(_common, "CACHE", tmp_path / "cache")
    monkeypatch.setattr(_common, "SCORES", tmp_path / "scores")
    return _common


def frame(words):
    return pd.DataFrame({"qid": [0] * len(words), "question": ["where is the cat"] * len(words), "candidate": words})


def test_stored_scores_are_read_back_for_the_same_fit_only(common, monkeypatch):
    X = frame(["the cat is here", "a dog", "cats sleep", "where"])
    y = np.array([1, 0, 0, 0])
    X_test = frame(["where is it", "the cat sat", "nothing"])
    log = []
    scores, model = common.fitted_scores(WordOverlapRanker(), X, y, X_test, log)
    assert model is not None and not log[-1]["cached"]
    np.testing.assert_array_equal(scores, model.predict(X_test))
    assert log[-1]["machine"] == log[-1]["scored_on"] == common.machine()

    # A second call reads the stored scores: no fit (fitting now would fail) and the record of the first.
    monkeypatch.setattr(WordOverlapRanker, "fit", lambda *a, **k: pytest.fail("fitted again"))
    again, model = common.fitted_scores(WordOverlapRanker(), X, y, X_test, log)
    assert model is None and log[-1]["cached"]
    np.testing.assert_array_equal(again, scores)
    assert log[-1]["date"] == log[-2]["date"]
    stored = list((common.SCORES).glob("*.npz"))
    assert len(stored) == 1 and json.loads(str(np.load(stored[0])["record"]))["scored_on"] == common.machine()

    # Other test data: the model (from the fit cache) scores them, a second entry in the store.
    other = frame(["another", "the cat is here"])
    scores, model = common.fitted_scores(WordOverlapRanker(), X, y, other, log)
    assert model is not None and log[-1]["cached"]
    np.testing.assert_array_equal(scores, model.predict(other))
    assert len(list(common.SCORES.glob("*.npz"))) == 2
    # Other training labels: another fit.
    with pytest.raises(pytest.fail.Exception, match="fitted again"):
        common.fitted_scores(WordOverlapRanker(), X, np.array([0, 1, 0, 0]), X_test, log)


def test_library_digest_follows_the_code_not_its_documentation(common, tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    module = package / "mod.py"
    module.write_text('"""A module."""\n\ndef f(x):\n    """Twice x."""\n    return 2 * x  # doubled\n')
    before = common.library_digest(package)
    # Docstrings, comments and blank lines: the same code.
    module.write_text('"""Another text."""\n\n\ndef f(x):\n    """Two times x,\n    reworded."""\n    # why\n    return 2 * x\n')
    assert common.library_digest(package) == before
    # A docstring removed from a function whose body is nothing else: still the same code.
    (package / "empty.py").write_text("def g():\n    pass\n")
    with_pass = common.library_digest(package)
    (package / "empty.py").write_text('def g():\n    """Nothing."""\n')
    assert common.library_digest(package) == with_pass
    # Another constant, another name, another file: other code.
    for text in ('def f(x):\n    return 3 * x\n', 'def h(x):\n    return 2 * x\n'):
        module.write_text(text)
        assert common.library_digest(package) != before
    reference = common.library_digest(package)
    (package / "empty.py").rename(package / "other.py")
    assert common.library_digest(package) != reference


def test_library_digest_leaves_out_the_application_floor(common, tmp_path):
    # The command line (app/, __main__.py) is above every estimator (tests/test_layering.py): a change there
    # cannot change a fit, so it keeps the fit keys; any other module changes them.
    package = tmp_path / "pkg"
    (package / "app").mkdir(parents=True)
    (package / "core.py").write_text("X = 1\n")
    (package / "app" / "cli.py").write_text("Y = 1\n")
    (package / "__main__.py").write_text("Z = 1\n")
    before = common.library_digest(package)
    (package / "app" / "cli.py").write_text("Y = 2\n")
    (package / "__main__.py").write_text("Z = 2\n")
    assert common.library_digest(package) == before
    assert common.library_digest(package, application=True) != common.library_digest(package)
    (package / "core.py").write_text("X = 2\n")
    assert common.library_digest(package) != before


def test_defaults_page_pools_a_variant_over_its_columns(common):
    # The defaults benchmark judges a candidate default (a variant row) against the library default over every
    # column that measured both; a test question scored at several training sizes counts once, its AP
    # difference averaged over them.
    import defaults

    from as2rank.metrics import paired_significance

    def run(data, size, name, ap):
        return {"data": data, "size": size, "seed": 0, "name": name, "test": {"ap": ap}, "library": "x", "date": "d"}

    entries = [run("sample", "100", "library default", [0.5, 1, 0]), run("sample", "100", "listwise", [1, 1, 0]),
               run("sample", "300", "library default", [0.5, 1, 1]), run("sample", "300", "listwise", [0.5, 0.5, 1]),
               run("wikiqa", "100", "library default", [0, 0]), run("wikiqa", "100", "listwise", [1, 1]),
               # Today's default itself (TransformerRanker() has the segment similarity): no candidate.
               run("wikiqa", "100", "segment similarity", [0, 1])]
    res = {"curves": {}, "refs": {str(i): e for i, e in enumerate(entries)}}
    (row,) = defaults.variants_vs_default(res, "transformer", "library default")
    assert row["name"] == "listwise" and row["columns"] == 3 and row["ahead"] == 2
    assert row["delta"] == pytest.approx((1 / 6 - 1 / 6 + 1) / 3)
    variant, default = [0.75, 0.75, 0.5, 1, 1], [0.5, 1, 0.5, 0, 0]
    assert row["p"] == pytest.approx(paired_significance(np.array(variant), np.array(default)))
