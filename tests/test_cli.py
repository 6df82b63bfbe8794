import json
import subprocess
import sys

import pytest

from as2rank.cli import main
from as2rank.suite import ENTRIES, load_benchmark_data, select

from .utils import SHARED_DATA


def test_import_is_light():
    # torch/transformers load only when a neural estimator is used.
    code = "import sys, as2rank, as2rank.metrics, as2rank.baselines; print('torch' in sys.modules, 'transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_bench_on_sample(tmp_path, capsys):
    out = tmp_path / "board.json"
    assert main(["bench", "--models", "RR,WO+RR", "--quiet", "--output", str(out)]) == 0
    table = capsys.readouterr().out
    assert "| WO+RR |" in table and "| RR |" in table
    rows = json.loads(out.read_text())["rows"]
    assert {r["model"] for r in rows} == {"RR", "WO+RR"}
    assert all(0 < r["map"] <= 1 for r in rows)


def test_bench_split_has_no_shared_paragraph():
    X_train, _, X_test, _ = load_benchmark_data("sample")
    assert not set(X_train["doc_id"]) & set(X_test["doc_id"])


def test_evaluate_and_save(tmp_path, capsys):
    saved = tmp_path / "m.joblib"
    assert main(["evaluate", "--model", "wo+rr", "--save", str(saved), "--ties", "all"]) == 0
    first = capsys.readouterr().out
    assert first.count("\n| ") == 3  # one row per tie policy
    assert main(["evaluate", "--model", str(saved), "--ties", "all"]) == 0
    assert capsys.readouterr().out == first


def test_cli_errors(capsys):
    assert main(["bench", "--models", "nope"]) == 2
    assert "Unknown model" in capsys.readouterr().err
    assert main(["bench", "--data", "wikiqa"]) == 2
    assert "needs --path" in capsys.readouterr().err
    with pytest.raises(ValueError, match="Unknown suite"):
        select(("heavy",))


def test_suite_entries_build_estimators():
    from sklearn.base import clone

    names = [e.name.lower() for e in ENTRIES]
    assert len(names) == len(set(names))
    for entry in select(("all",)):
        if not entry.missing():
            est = entry.make(0)
            assert hasattr(est, "fit") and hasattr(est, "predict")
            clone(est)


def test_bench_wikiqa_path():
    if not (SHARED_DATA / "wikiqa" / "WikiQA-test.tsv").exists():
        pytest.skip("WikiQA not available")
    X_train, y_train, X_test, y_test = load_benchmark_data("wikiqa", SHARED_DATA / "wikiqa")
    assert X_test["qid"].nunique() == 633 and X_train["qid"].nunique() == 2118
