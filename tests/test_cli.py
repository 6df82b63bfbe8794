import json

import pytest

from as2rank.app.cli import main
from as2rank.app.suite import load_benchmark_data, select

from .utils import SHARED_DATA


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
    assert main(["evaluate", "--model", str(saved), "--ties", "all"]) == 2  # a pickle loads only when allowed
    assert "--allow-pickle" in capsys.readouterr().err
    assert main(["evaluate", "--model", str(saved), "--ties", "all", "--allow-pickle"]) == 0
    assert capsys.readouterr().out == first


def test_cli_errors(capsys):
    assert main(["bench", "--models", "nope"]) == 2
    assert "Unknown model" in capsys.readouterr().err
    assert main(["bench", "--data", "wikiqa"]) == 2
    assert "needs --path" in capsys.readouterr().err
    with pytest.raises(ValueError, match="Unknown suite"):
        select(("heavy",))


def test_bench_wikiqa_path():
    if not (SHARED_DATA / "wikiqa" / "WikiQA-test.tsv").exists():
        pytest.skip("WikiQA not available")
    X_train, y_train, X_test, y_test = load_benchmark_data("wikiqa", SHARED_DATA / "wikiqa")
    assert X_test["qid"].nunique() == 633 and X_train["qid"].nunique() == 2118


def _bad_paths(tmp_path):
    """(argv data options, the path, a phrase of what was expected) for paths of the wrong kind."""
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "WikiQA-train.tsv").write_text("QuestionID\tQuestion\n")  # no WikiQA-test.tsv beside it
    not_json = tmp_path / "dev-v2.0.json"
    not_json.write_text("QuestionID\tQuestion\tLabel\nQ1\twho?\t1\n")
    binary = tmp_path / "squad.json"
    binary.write_bytes(b"\xff\xfe\x00\x01 not text")
    tsv = tmp_path / "WikiQA-test.tsv"
    tsv.write_text("QuestionID\tQuestion\n")
    squad, wikiqa = "a SQuAD v1.1/v2.0 JSON file", "the folder holding WikiQA-train.tsv and WikiQA-test.tsv"
    return [
        ("squad", tmp_path, squad),  # a folder
        ("squad", tmp_path / "missing.json", squad),
        ("squad", not_json, "not a SQuAD v1.1/v2.0 JSON file"),
        ("squad", binary, "not a SQuAD v1.1/v2.0 JSON file"),
        ("wikiqa", tsv, wikiqa),  # a file
        ("wikiqa", tmp_path / "missing", wikiqa),
        ("wikiqa", folder, "has no WikiQA-test.tsv"),
    ]


@pytest.mark.parametrize("command", ["evaluate", "bench"])
def test_bad_data_path_is_one_line_naming_it(tmp_path, capsys, command):
    for data, path, expected in _bad_paths(tmp_path):
        model = ["--model", "RR"] if command == "evaluate" else ["--models", "RR", "--quiet"]
        assert main([command, "--data", data, "--path", str(path), *model]) == 2, (data, path)
        captured = capsys.readouterr()
        err = captured.err.strip()
        assert captured.out == "" and "\n" not in err, err
        assert err.startswith("as2rank: error: ") and repr(str(path)) in err and expected in err, err


def test_loaders_refuse_a_folder_naming_it(tmp_path):
    from as2rank.datasets import load_asnq, load_squad_sent, load_wikiqa

    with pytest.raises(ValueError, match="is a directory: expected an ASNQ TSV file"):
        load_asnq(tmp_path, chunksize=10)

    with pytest.raises(ValueError, match="is a directory: expected a SQuAD v1.1/v2.0 JSON file"):
        load_squad_sent(tmp_path)
    with pytest.raises(ValueError, match="is a directory: expected an official WikiQA TSV file"):
        load_wikiqa(tmp_path)
    bad = tmp_path / "WikiQA-dev.tsv"
    bad.write_bytes(b"\xff\xfe\x00\x01")
    with pytest.raises(ValueError, match="is not a WikiQA TSV"):
        load_wikiqa(bad)


def test_sample_refuses_a_path(capsys):
    # --path with --data sample used to be ignored: the user got the sample's figures for their file.
    assert main(["bench", "--models", "RR", "--quiet", "--path", "my_squad.json"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--data sample" in err and "my_squad.json" in err


# ----------------------------------------------------------------------------------------------- path cases
@pytest.fixture
def saved_model(tmp_path):
    """A saved WO+RR model and a small table."""
    import pandas as pd

    from as2rank import OverlapRankRanker, save

    save(OverlapRankRanker(), tmp_path / "model")
    table = tmp_path / "pairs.csv"
    pd.DataFrame({"question": ["who?"] * 3, "candidate": ["a", "b", "c"], "label": [1, 0, 0]}).to_csv(table, index=False)
    return tmp_path / "model", table


def _one_line_error(capsys, *expected):
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("as2rank: error:"), err
    assert all(e in err for e in expected), err
    return err


def test_a_directory_given_as_a_table_is_one_line(saved_model, tmp_path, capsys):
    """The reported case: a directory named x.csv as data was an IsADirectoryError traceback."""
    model, _ = saved_model
    folder = tmp_path / "x.csv"
    folder.mkdir()
    for command in (["rank", str(model), str(folder), "--output", str(tmp_path / "r.csv")],
                    ["fit", str(folder), "--model", "WO+RR", "--output", str(tmp_path / "m2")],
                    ["evaluate", "--model", str(model), "--data", str(folder)],
                    ["predict", "--model", str(model), "--input", str(folder), "--output", str(tmp_path / "o"), "--quiet"]):
        assert main(command) == 2, command[0]
        _one_line_error(capsys, "is a directory")


@pytest.mark.parametrize("flag, value", [("--chunksize", "0"), ("--chunksize", "-5"), ("--window", "-1")])
def test_predict_sizes_out_of_range_are_refused(flag, value, saved_model, tmp_path, capsys):
    """The reported case: --chunksize 0 or -5 was accepted (a divide-by-zero warning, 31 parts)."""
    model, table = saved_model
    assert main(["predict", "--model", str(model), "--input", str(table), "--output", str(tmp_path / "o"),
                 "--quiet", flag, value]) == 2
    _one_line_error(capsys, f"{flag} must be", f"got {value}")
    assert not (tmp_path / "o").exists()


def test_rank_top_k_out_of_range_is_refused(saved_model, tmp_path, capsys):
    model, table = saved_model
    assert main(["rank", str(model), str(table), "--output", str(tmp_path / "r.csv"), "--top-k", "0"]) == 2
    _one_line_error(capsys, "--top-k must be")


def test_select_plot_without_matplotlib_fails_before_the_selection(saved_model, monkeypatch, tmp_path, capsys):
    """The reported case: --plot failed with "No module named 'matplotlib'" after the whole selection."""
    import importlib.util

    from as2rank.model_selection import selector

    _, table = saved_model
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    monkeypatch.setattr(selector.RankerSelector, "fit", lambda *a, **k: pytest.fail("selected before failing"))
    assert main(["select", str(table), "--plot", str(tmp_path / "sel.png")]) == 2
    _one_line_error(capsys, "--plot needs matplotlib", "as2rank[bench]")
