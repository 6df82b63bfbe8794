"""The command line and the user's files ("Trust, second pass"): a model path is a directory, or a pickle only with
--allow-pickle, refused before a byte of it is read; no command writes over, into or around its own input; --overwrite
replaces only what as2rank wrote; every failure is one line and status 2, a warning one line; the question id is
said, and texts that differ only in what a reader cannot see are reported. All in process, on models that need no
torch fit."""

import json
import os
import pickle
import shutil
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import as2rank
from as2rank import OverlapRankRanker, WordOverlapRanker
from as2rank.app.cli import main
from as2rank.app.guards import PICKLE_SUFFIXES, similar_questions
from tests.utils import Payload, no_code_runs

#: Where a payload that runs writes, proving it ran.
MARKER = Path(__file__).with_name(".as2rank-cli-trust-marker")




@pytest.fixture(autouse=True)
def no_marker():
    with no_code_runs(MARKER, "a pickle"):
        yield


@pytest.fixture
def work(tmp_path):
    """A saved WO+RR model directory and a small table of two questions, in ``tmp_path``."""
    as2rank.save(OverlapRankRanker(), tmp_path / "model")
    table = tmp_path / "pairs.csv"
    pd.DataFrame({"question": ["who wrote hamlet?"] * 3 + ["where is paris?"] * 2,
                  "candidate": ["shakespeare wrote hamlet", "a play", "the globe", "paris is in france", "a city"],
                  "label": [1, 0, 0, 1, 0]}).to_csv(table, index=False)
    return tmp_path / "model", table


def snapshot(*paths):
    """The bytes of every file at or under ``paths``, to compare before and after a command."""
    files = {}
    for path in map(Path, paths):
        for file in [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file()):
            files[str(file)] = file.read_bytes()
    return files


def last_line_error(capsys, *expected):
    """A failure after the work began (a fit, then its save): the lines that said what the command does, then the
    error, one line, last."""
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert lines and lines[-1].startswith("as2rank: error: ") and "Traceback" not in err, err
    assert all(line.startswith("as2rank: ") and "error" not in line for line in lines[:-1]), err
    assert all(e in lines[-1] for e in expected), err


def one_line_error(capsys, *expected):
    captured = capsys.readouterr()
    err = captured.err
    assert err.count("\n") == 1 and err.startswith("as2rank: error: "), err
    assert "Traceback" not in err and all(e in err for e in expected), err
    return err


# ----------------------------------------------------------------------------------------------- model paths
@pytest.mark.parametrize("name", ["model.safetensors", "model.json", "model.zip", "model", "model.txt",
                                  "model.joblib.gz"])
@pytest.mark.parametrize("command", ["rank", "predict", "evaluate"])
def test_a_pickle_under_another_name_is_never_unpickled(name, command, work, tmp_path, capsys):
    """The reported case: rank and predict handed any file to joblib.load, whose code ran before the error."""
    _, table = work
    (tmp_path / "given").mkdir()
    path = tmp_path / "given" / name
    path.write_bytes(pickle.dumps(Payload(MARKER)))
    argv = {"rank": ["rank", str(path), str(table), "--output", str(tmp_path / "r.csv")],
            "predict": ["predict", "--model", str(path), "--input", str(table), "--output", str(tmp_path / "o"),
                        "--quiet"],
            "evaluate": ["evaluate", "--model", str(path), "--data", str(table)]}[command]
    for allow in ([], ["--allow-pickle"]):  # not even when pickles are allowed: a pickle is named as one
        assert main(argv + allow) == 2
        one_line_error(capsys, str(path))
    assert not (tmp_path / "o").exists() and not (tmp_path / "r.csv").exists()


@pytest.mark.parametrize("suffix", PICKLE_SUFFIXES)
@pytest.mark.parametrize("command", ["rank", "predict", "evaluate"])
def test_a_pickle_loads_only_with_allow_pickle(suffix, command, work, tmp_path, capsys):
    _, table = work
    hostile, good = tmp_path / f"hostile{suffix}", tmp_path / f"good{suffix}"
    hostile.write_bytes(pickle.dumps(Payload(MARKER)))
    good.write_bytes(pickle.dumps(WordOverlapRanker()))

    def argv(path, out):
        return {"rank": ["rank", str(path), str(table), "--output", str(tmp_path / f"{out}.csv")],
                "predict": ["predict", "--model", str(path), "--input", str(table), "--output", str(tmp_path / out),
                            "--quiet"],
                "evaluate": ["evaluate", "--model", str(path), "--data", str(table)]}[command]

    assert main(argv(hostile, "h")) == 2
    one_line_error(capsys, str(hostile), "--allow-pickle")
    assert main(argv(good, "g")) == 2
    one_line_error(capsys, "--allow-pickle")
    assert main(argv(good, "g") + ["--allow-pickle"]) == 0  # the user's explicit choice


def test_the_cli_and_the_loader_agree_on_pickle_names():
    from as2rank.persistence.trust import PICKLE_FILE_SUFFIXES

    assert set(PICKLE_SUFFIXES) == set(PICKLE_FILE_SUFFIXES)


def test_a_model_is_not_loaded_through_a_link(work, tmp_path, capsys):
    model, table = work
    (tmp_path / "link").symlink_to(model, target_is_directory=True)
    assert main(["rank", str(tmp_path / "link"), str(table), "--output", str(tmp_path / "r.csv")]) == 2
    one_line_error(capsys, "link")


def test_evaluate_tells_a_suite_name_from_a_path(work, tmp_path, capsys):
    _, table = work
    assert main(["evaluate", "--model", "WO+R"]) == 2  # a typo of a suite name
    one_line_error(capsys, "Unknown model")
    assert main(["evaluate", "--model", str(tmp_path / "missing" / "m"), "--data", str(table)]) == 2
    one_line_error(capsys, "No model")


# ----------------------------------------------------------------------------------------------- own inputs
def _links(table, tmp_path):
    """The table itself, a symbolic link to it and a hard link to it: three names of one file."""
    (tmp_path / "sym.csv").symlink_to(table)
    os.link(table, tmp_path / "hard.csv")
    return [table, tmp_path / "sym.csv", tmp_path / "hard.csv"]


def test_rank_never_writes_over_its_table(work, tmp_path, capsys):
    """The reported case: rank --output IN replaced the table with the ranked rows, exit 0."""
    model, table = work
    before = snapshot(table, model)
    for output in _links(table, tmp_path):
        for extra in ([], ["--top-k", "1"]):
            assert main(["rank", str(model), str(table), "--output", str(output), *extra]) == 2
            one_line_error(capsys, "never writes over")
    assert snapshot(table, model) == before


def test_select_never_writes_over_its_table(work, tmp_path, capsys):
    """The reported case: select --output IN overwrote the input CSV with JSON, exit 0."""
    _, table = work
    before = snapshot(table)
    for output in _links(table, tmp_path):
        assert main(["select", str(table), "--output", str(output), "--quiet", "--candidates", "WO+RR"]) == 2
        one_line_error(capsys, "never writes over")
    assert main(["select", str(table), "--output", str(tmp_path / "s.json"), "--plot", str(tmp_path / "s.json"),
                 "--quiet"]) == 2
    capsys.readouterr()
    assert snapshot(table) == before


@pytest.mark.parametrize("where", ["model", "inside the model", "the folder of the table"])
def test_outputs_in_or_around_an_input_are_refused(where, work, tmp_path, capsys):
    model, table = work
    before = snapshot(table, model)
    out = {"model": model, "inside the model": model / "ranked", "the folder of the table": tmp_path}[where]
    for argv in (["predict", "--model", str(model), "--input", str(table), "--output", str(out), "--quiet"],
                 ["predict", "--model", str(model), "--input", str(table), "--output", str(out), "--quiet",
                  "--overwrite"],
                 ["rank", str(model), str(table), "--output", str(out / "ranked.csv")]):
        if argv[0] == "rank" and where == "the folder of the table":
            continue  # a file beside the table is no input
        assert main(argv) == 2, argv
        one_line_error(capsys)
    assert snapshot(table, model) == before
    as2rank.load(model)


def test_an_output_that_is_a_hard_link_into_the_model_is_refused(work, tmp_path, capsys):
    model, table = work
    os.link(model / "README.md", tmp_path / "card.csv")
    before = snapshot(table, model)
    assert main(["rank", str(model), str(table), "--output", str(tmp_path / "card.csv")]) == 2
    one_line_error(capsys, "hard link")
    assert snapshot(table, model) == before


def test_fit_never_writes_around_its_table(work, tmp_path, capsys):
    _, table = work
    before = snapshot(table)
    for extra in ([], ["--overwrite"]):
        assert main(["fit", str(table), "--model", "WO+RR", "--output", str(tmp_path), *extra]) == 2
        one_line_error(capsys, "never writes over")
    assert snapshot(table) == before and not (tmp_path / "as2rank.json").exists()


def test_predict_into_its_own_parquet_input_is_refused(work, tmp_path, capsys):
    """The reported case: predict --input DIR --output DIR --overwrite (as the first error advised) deleted the input's
    parquet parts."""
    model, _ = work
    parts = tmp_path / "parts"
    parts.mkdir()
    frame = pd.DataFrame({"qid": ["q1", "q1", "q2"], "question": ["a b", "a b", "c d"], "candidate": ["b", "x", "d"]})
    frame.iloc[:2].to_parquet(parts / "part-00000.parquet")
    frame.iloc[2:].to_parquet(parts / "part-00001.parquet")
    before = snapshot(parts)
    for out in (parts, parts / "scores", tmp_path / "elsewhere"):
        (tmp_path / "elsewhere").mkdir(exist_ok=True)
        if out.name == "elsewhere":
            (out / "in.parquet").symlink_to(parts, target_is_directory=True)
            inputs = out / "in.parquet"  # the input through a link inside the output
        else:
            inputs = parts
        for extra in ([], ["--overwrite"]):
            assert main(["predict", "--model", str(model), "--input", str(inputs), "--output", str(out), "--quiet",
                         *extra]) == 2
            one_line_error(capsys)
    assert snapshot(parts) == before


def test_evaluate_and_bench_outputs_are_checked_too(work, tmp_path, capsys):
    model, table = work
    before = snapshot(table, model)
    assert main(["evaluate", "--model", str(model), "--data", str(table), "--test", str(table), "--save",
                 str(table)]) == 2
    one_line_error(capsys)
    squad = tmp_path / "squad.json"
    squad.write_text("{}")
    assert main(["bench", "--data", "squad", "--path", str(squad), "--output", str(squad), "--quiet"]) == 2
    one_line_error(capsys, "never writes over")
    assert snapshot(table, model) == before and squad.read_text() == "{}"


# ----------------------------------------------------------------------------------------------- --overwrite
def _fit(table, out, *extra, model="Lexical+LR"):
    return main(["fit", str(table), "--model", model, "--output", str(out), "--quiet", *extra])


def test_fit_overwrite_keeps_the_users_folders(work, tmp_path, capsys):
    """The reported case: fit --output DIR --overwrite deleted a same-named folder whole, said it succeeded, and the
    saved model then failed to load."""
    _, table = work
    mine = tmp_path / "mine"
    (mine / "params.steps.0.1").mkdir(parents=True)  # a folder of the user's, named as the model names one
    (mine / "params.steps.0.1" / "notes.txt").write_text("mine")
    (mine / "results.csv").write_text("mine too")
    before = snapshot(mine)
    assert _fit(table, mine, "--overwrite") == 2
    one_line_error(capsys, "params.steps.0.1")
    assert snapshot(mine) == before and sorted(p.name for p in mine.iterdir()) == ["params.steps.0.1", "results.csv"]


def test_fit_overwrite_refuses_a_users_file_of_a_models_name(work, tmp_path, capsys):
    _, table = work
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "params.steps.0.1").mkdir()  # empty: it may stay beside a model, but not be replaced by the model's
    (mine / "keep.txt").write_text("kept")
    before = snapshot(mine)
    assert _fit(table, mine, "--overwrite") == 2
    last_line_error(capsys, "params.steps.0.1", "nothing was replaced")
    assert snapshot(mine) == before and sorted(p.name for p in mine.iterdir()) == ["keep.txt", "params.steps.0.1"]
    for name in ("README.md", "weights.pkl"):
        (mine / "params.steps.0.1").rmdir() if (mine / "params.steps.0.1").exists() else None
        (mine / name).write_text("mine")
        assert _fit(table, mine, "--overwrite") == 2
        one_line_error(capsys, name)
        assert (mine / name).read_text() == "mine" and not (mine / "as2rank.json").exists()
        (mine / name).unlink()
    assert _fit(table, mine, "--overwrite") == 0  # beside the user's files, which stay
    capsys.readouterr()
    assert (mine / "keep.txt").read_text() == "kept"
    as2rank.load(mine)


def test_replacing_a_model_keeps_the_users_entries_and_refuses_a_clash(work, tmp_path, capsys):
    model, table = work  # WO+RR: as2rank.json and README.md only
    (model / "evaluation.csv").write_text("mine")
    (model / ".gitignore").write_text("*.csv\n")
    assert _fit(table, model) == 0  # Lexical+LR replaces WO+RR
    capsys.readouterr()
    assert (model / "evaluation.csv").read_text() == "mine" and (model / ".gitignore").read_text() == "*.csv\n"
    as2rank.save(OverlapRankRanker(), model)
    (model / "params.steps.0.1").mkdir()  # the user's, beside a model that has no such entry
    (model / "params.steps.0.1" / "x.txt").write_text("mine")
    before = snapshot(model)
    assert _fit(table, model) == 2
    last_line_error(capsys, "params.steps.0.1")
    assert snapshot(model) == before


def test_an_unsealed_model_directory_is_not_replaced(work, tmp_path, capsys):
    model, table = work
    meta = json.loads((model / "as2rank.json").read_text())
    del meta["files"], meta["sha256"]
    (model / "as2rank.json").write_text(json.dumps(meta))
    (model / "notes.txt").write_text("mine")
    before = snapshot(model)
    assert _fit(table, model, model="WO+RR") == 2
    one_line_error(capsys, "seal")
    (model / "as2rank.json").write_bytes(b"\x00{")
    assert _fit(table, model, model="WO+RR") == 2
    one_line_error(capsys)
    before[str(model / "as2rank.json")] = b"\x00{"
    assert snapshot(model) == before


def test_predict_overwrite_deletes_only_its_own_parts(work, tmp_path, capsys):
    model, table = work
    out = tmp_path / "scores"
    out.mkdir()
    pd.DataFrame({"x": [1]}).to_parquet(out / "part-00000.parquet")  # a part of the user's, without a manifest
    before = snapshot(out)
    argv = ["predict", "--model", str(model), "--input", str(table), "--output", str(out), "--quiet"]
    for extra in ([], ["--overwrite"]):
        assert main(argv + extra) == 2
        one_line_error(capsys, "part-00000.parquet")
    assert snapshot(out) == before
    (out / "part-00000.parquet").rename(tmp_path / "mine.parquet")
    (out / "notes.txt").write_text("mine")
    assert main(argv + ["--chunksize", "1"]) == 0
    capsys.readouterr()
    manifest = json.loads((out / "_as2rank_predict.json").read_text())
    assert manifest["parts_written"] == ["part-00000.parquet", "part-00001.parquet"]
    assert main(argv + ["--chunksize", "2", "--overwrite"]) == 0  # another run: the earlier parts go, not notes.txt
    capsys.readouterr()
    assert (out / "notes.txt").read_text() == "mine"
    assert len(pd.read_parquet(out / "part-00000.parquet")) + len(pd.read_parquet(out / "part-00001.parquet")) == 5
    pd.DataFrame({"x": [1]}).to_parquet(out / "part-00007.parquet")  # the user's, among ours
    assert main(argv + ["--chunksize", "2", "--overwrite"]) == 2
    one_line_error(capsys, "part-00007.parquet")
    assert (out / "part-00007.parquet").exists()


# ----------------------------------------------------------------------------------------------- one line
def test_a_usage_error_is_one_line(work, tmp_path, capsys):
    model, table = work
    for argv in (["rank", str(model), str(table), "--output", str(tmp_path / "r.csv"), "--top-k", "x"],
                 ["rank", str(model)], ["predict", "--nope"], ["nope"], [],
                 ["rank", str(model), str(table), "--output", "r.csv", "--qid", "q", "--no-qid"]):
        assert main(argv) == 2, argv
        one_line_error(capsys)


def test_a_full_disk_while_saving_tensors_is_one_line(work, tmp_path, monkeypatch, capsys):
    """The reported case: safetensors' SafetensorError (not an OSError) was a traceback."""
    import safetensors.numpy
    from safetensors import SafetensorError

    def full(*args, **kwargs):
        raise SafetensorError("Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: \"No "
                              "space left on device\" })")

    monkeypatch.setattr(safetensors.numpy, "save_file", full)
    _, table = work
    assert _fit(table, tmp_path / "m") == 2
    last_line_error(capsys, "SafetensorError", "No space left on device")
    assert not (tmp_path / "m").exists() and not list(tmp_path.glob(".as2rank-tmp-*"))


class PanicException(BaseException):
    """What pyo3 raises when a Rust extension (tokenizers) panics: a BaseException."""


@pytest.mark.parametrize("where", ["load", "score"])
def test_a_rust_panic_is_one_line(where, work, tmp_path, monkeypatch, capsys):
    """The reported case: a tokenizer whose pattern made the Rust tokenizer panic escaped as a traceback."""
    import as2rank.base
    import as2rank.persistence

    def panic(*args, **kwargs):
        raise PanicException("called `Result::unwrap()` on an `Err` value: regex parse error")

    monkeypatch.setattr(as2rank.persistence if where == "load" else as2rank.base, where if where == "load" else "rank",
                        panic)
    model, table = work
    assert main(["rank", str(model), str(table), "--output", str(tmp_path / "r.csv")]) == 2
    one_line_error(capsys, "PanicException", "regex parse error")


@pytest.mark.parametrize("error", [RuntimeError("pyarrow said no\non two lines"), KeyError("col"), MemoryError()])
def test_any_library_error_is_one_line_and_debug_shows_where(error, work, tmp_path, monkeypatch, capsys):
    def fail(*args, **kwargs):
        raise error

    monkeypatch.setattr(pd.DataFrame, "to_csv", fail)
    model, table = work
    argv = ["rank", str(model), str(table), "--output", str(tmp_path / "r.csv")]
    assert main(argv) == 2
    one_line_error(capsys, type(error).__name__)
    monkeypatch.setenv("AS2RANK_DEBUG", "1")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and err.splitlines()[-1].startswith("as2rank: error: ")


def test_ctrl_c_keeps_its_usual_behaviour(work, tmp_path, monkeypatch):
    import as2rank.base

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(as2rank.base, "rank", interrupt)
    model, table = work
    with pytest.raises(KeyboardInterrupt):
        main(["rank", str(model), str(table), "--output", str(tmp_path / "r.csv")])


def test_a_library_warning_is_one_line_without_its_path(work, tmp_path, monkeypatch, capsys):
    """The reported case: a warning reached the user as .../as2rank/params.py:435: UserWarning: ..."""
    import as2rank.base

    rank = as2rank.base.rank

    def warn_then_rank(*args, **kwargs):
        warnings.warn_explicit("a setting\nis ignored", UserWarning, "/site-packages/as2rank/params.py", 435)
        warnings.warn_explicit("old spelling", FutureWarning, "/site-packages/pandas/core.py", 7)
        return rank(*args, **kwargs)

    monkeypatch.setattr(as2rank.base, "rank", warn_then_rank)
    model, table = work
    assert main(["rank", str(model), str(table), "--output", str(tmp_path / "r.csv")]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert "as2rank: warning: a setting is ignored" in lines
    assert "as2rank: warning: FutureWarning: old spelling" in lines
    assert not any(".py" in line for line in lines), lines


# ----------------------------------------------------------------------------------------------- question ids
def test_a_qid_column_is_used_and_said(tmp_path, capsys):
    """The reported case: with no --qid the question text was the id even where the table had a qid column."""
    as2rank.save(WordOverlapRanker(), tmp_path / "m")
    table = tmp_path / "t.csv"
    pd.DataFrame({"qid": ["a", "a", "b", "b"], "question": ["who?"] * 4, "candidate": ["x y", "who", "z", "who z"]}
                 ).to_csv(table, index=False)
    out = tmp_path / "r.csv"
    assert main(["rank", str(tmp_path / "m"), str(table), "--output", str(out)]) == 0
    assert "as2rank: grouping questions by column 'qid'" in capsys.readouterr().err
    ranked = pd.read_csv(out, dtype={"qid": str})
    assert sorted(ranked["qid"].unique()) == ["a", "b"] and (ranked["rank"] == 1).sum() == 2
    assert main(["rank", str(tmp_path / "m"), str(table), "--output", str(out), "--no-qid"]) == 0
    assert "by the question text" in capsys.readouterr().err
    assert (pd.read_csv(out)["rank"] == 1).sum() == 1  # one question: "who?"
    assert main(["rank", str(tmp_path / "m"), str(table), "--output", str(out), "--qid", "qid"]) == 0
    assert "grouping" not in capsys.readouterr().err  # the user named it


@pytest.mark.parametrize("fmt", ["csv", "tsv", "jsonl", "parquet"])
def test_the_qid_column_is_found_in_every_format(fmt, tmp_path, capsys):
    from as2rank.datasets.table import table_columns

    frame = pd.DataFrame({"question": ["q"] * 2, "qid": ["1", "1"], "candidate": ["a", "b"]})
    path = tmp_path / f"t.{fmt}"
    {"csv": lambda: frame.to_csv(path, index=False), "tsv": lambda: frame.to_csv(path, sep="\t", index=False),
     "jsonl": lambda: frame.to_json(path, orient="records", lines=True),
     "parquet": lambda: frame.to_parquet(path)}[fmt]()
    assert table_columns(path) == ["question", "qid", "candidate"]
    assert table_columns(tmp_path / "missing.csv") == [] and table_columns(tmp_path / "t.xlsx") == []


@pytest.mark.parametrize("twin, named", [
    ("who wrote hamlet?\u200b", "ZERO WIDTH SPACE"),
    ("who wrote\u00a0hamlet?", "NO-BREAK SPACE"),
    ("who wrote hamlet? ", "SPACE"),
    ("Who wrote Hamlet?", "LATIN CAPITAL LETTER W"),
    ("who wrote hamlet\uff1f", "FULLWIDTH QUESTION MARK"),
])
def test_texts_that_differ_only_invisibly_are_reported(twin, named, work, tmp_path, capsys):
    """The reported case: two rows of one question whose texts differed by an invisible character became two
    questions, each with its own rank 1, exit 0 without a word."""
    model, _ = work
    table = tmp_path / "t.csv"
    pd.DataFrame({"question": ["who wrote hamlet?", "who wrote hamlet?", twin],
                  "candidate": ["shakespeare wrote hamlet", "a play", "the globe"]}).to_csv(table, index=False)
    assert main(["rank", str(model), str(table), "--output", str(tmp_path / "r.csv")]) == 0
    lines = capsys.readouterr().err.splitlines()
    warning = [line for line in lines if line.startswith("as2rank: warning: ")]
    assert len(warning) == 1 and named in warning[0] and "data row 0" in warning[0] and "data row 2" in warning[0]
    assert "by the question text" in lines[0]


def test_unicode_forms_are_one_question_for_the_warning():
    composed, decomposed = "caf\u00e9 au lait?", "cafe\u0301 au lait?"
    message = similar_questions(pd.Series([composed, composed, decomposed, "another one"]))
    assert message.startswith("2 question texts (1 group(s))") and "LATIN SMALL LETTER E WITH ACUTE" in message
    assert similar_questions(pd.Series(["a", "b", "a b", "ab"])) is None
    many = pd.Series([f"question {i}" for i in range(20_000)] + ["question 7\u200b"])
    assert similar_questions(many).startswith("2 question texts")


def test_errors_are_not_preceded_by_the_grouping_line(work, tmp_path, capsys):
    model, table = work
    assert main(["rank", str(model), str(table), "--output", str(tmp_path / "r.csv"), "--target-precision", "0.5"]) == 2
    one_line_error(capsys, "--target-precision")


# ----------------------------------------------------------------------------------------------- properties
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

NAMES = ["question", "candidate", "qid", "label", "position", "Question", "qid ", " ", "naïve", "\u200bqid", "1"]
ODD_TEXT = st.text(alphabet=st.sampled_from("ab ?\u200b\u00a0\u0301é\t\"',\n\r"), max_size=6)
CELLS = st.one_of(
    ODD_TEXT, st.sampled_from(["", "NA", "null", "who?", "who?\u200b", "Who?", "0", "1", "-1"]),
    st.integers(-2**70, 2**70), st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.none(),
)
QUESTIONS = st.sampled_from(["who?", "who?\u200b", "Who? ", "who\u00a0?", "why?", "cafe\u0301?", "café?"])


@st.composite
def tables(draw):
    """A table and its format: half of them readable (questions contiguous, candidates distinct, odd but valid
    text, odd extra columns), so that the commands get past reading; the others anything."""
    if draw(st.booleans()):
        rows = draw(st.integers(1, 7))
        data = {"question": sorted(draw(QUESTIONS) for _ in range(rows)),
                "candidate": [f"c{i} {draw(ODD_TEXT)}" for i in range(rows)]}
        for name in draw(st.lists(st.sampled_from(NAMES[2:]), max_size=3, unique=True)):
            data[name] = [draw(CELLS) for _ in range(rows)]
        if "qid" in data and draw(st.booleans()):
            data["qid"] = [str(len(q)) for q in data["question"]]  # ids that group the texts otherwise
    else:
        rows = draw(st.integers(0, 7))
        columns = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=5, unique=True))
        data = {c: [draw(CELLS) for _ in range(rows)] for c in columns}
        if rows and draw(st.booleans()):  # a duplicated row
            data = {c: v + v[-1:] for c, v in data.items()}
    return pd.DataFrame(data), draw(st.sampled_from(["csv", "tsv", "jsonl", "parquet"]))


def _write(frame, path, fmt):
    if fmt == "parquet":
        frame.astype(str).to_parquet(path)  # mixed types do not make a Parquet column
    elif fmt == "jsonl":
        frame.to_json(path, orient="records", lines=True)
    else:
        frame.to_csv(path, sep="\t" if fmt == "tsv" else ",", index=False)


OPTIONS = st.lists(st.one_of(
    st.tuples(st.sampled_from(["--question", "--candidate", "--qid", "--position", "--label"]), st.sampled_from(NAMES)),
    st.tuples(st.just("--top-k"), st.sampled_from(["1", "2", "0", "-3", "99999999999999999999", "x"])),
    st.tuples(st.just("--chunksize"), st.sampled_from(["1", "2", "0"])),
    st.tuples(st.just("--window"), st.sampled_from(["0", "1", "-1"])),
    st.tuples(st.sampled_from(["--no-qid", "--overwrite", "--allow-pickle", "--quiet"])),
    st.tuples(st.just("--target-precision"), st.sampled_from(["0.5", "2", "nan"])),
), max_size=2)
OUTPUTS = st.sampled_from(["new"] * 4 + ["the table", "a link to the table", "the model", "into the model"])


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(table=tables(), options=OPTIONS, command=st.sampled_from(["rank", "predict"]),
       output=OUTPUTS)
def test_odd_tables_and_options_exit_0_or_2_in_one_line_and_leave_inputs_alone(table, options, command, output,
                                                                               capsys):
    frame, fmt = table
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        path = work / f"in.{fmt}"
        try:
            _write(frame, path, fmt)
        except (ValueError, OverflowError, TypeError):  # a table pandas itself cannot write
            hypothesis.assume(False)
        as2rank.save(OverlapRankRanker(), work / "model")
        (work / "link").symlink_to(path)
        suffix = ".parquet" if command == "rank" else ""  # (a ranked CSV does not quote a lone \r: see the report)
        out = {"new": work / f"out{suffix}", "the table": path, "a link to the table": work / "link",
               "the model": work / "model", "into the model": work / "model" / f"out{suffix}"}[output]
        other = ("--chunksize", "--window", "--overwrite", "--quiet") if command == "rank" else ("--top-k",
                                                                                                "--target-precision")
        flags = [part for option in options if option[0] not in other for part in option]
        if command == "rank":
            argv = ["rank", str(work / "model"), str(path), "--output", str(out), *flags]
        else:
            argv = ["predict", "--model", str(work / "model"), "--input", str(path), "--output", str(out), "--quiet",
                    *flags]
        before = snapshot(path, work / "model")
        capsys.readouterr()
        code = main(argv)
        err = capsys.readouterr().err
        assert code in (0, 2), (argv, err)
        if code == 2:
            assert err.count("\n") == 1 and err.startswith("as2rank: error: "), (argv, err)
        assert snapshot(path, work / "model") == before, argv
        if code == 0 and command == "rank":
            assert np.isfinite(pd.read_parquet(out)["score"]).all()
        shutil.rmtree(work / "model")
