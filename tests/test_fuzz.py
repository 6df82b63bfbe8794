"""Fuzz tests of the table reader and the model loader (Hypothesis): random tables, random damage to a table
file, random mutations of a saved model directory. Each gives a correct result or a one-line error: never a
traceback, never a silently different table or score. A few dozen examples in the default suite (derandomized,
so a run is reproducible); the tests marked slow run the same properties on many more."""

import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline

import as2rank
from as2rank.app.cli import main
from as2rank.datasets import read_pairs
from as2rank.lexical.baselines import LexicalFeatures, PointwiseRanker
from tests.utils import reseal

QUICK = settings(max_examples=30, deadline=None, derandomize=True, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
LONG = settings(QUICK, max_examples=400, derandomize=False)

#: Characters that break careless readers: quotes, separators, line breaks, a BOM, non-ASCII.
_TRICKY = st.sampled_from(['"', "'", "\t", ",", "\n", "\r", "\ufeff", "NA", "null", "é", "中", " ", "0", "1.0"])
TEXT = st.lists(st.one_of(_TRICKY, st.text(alphabet="abc xyz", min_size=1, max_size=4)), min_size=1, max_size=5).map("".join)
SUFFIXES = [".csv", ".tsv", ".jsonl", ".parquet"]


@st.composite
def tables(draw):
    """A user's table: 1-4 questions of 1-4 candidates, ids text or integers, 0/1 labels."""
    integer_ids = draw(st.booleans())
    rows = []
    for q in range(draw(st.integers(1, 4))):
        qid = draw(st.integers(-2**62, 2**62)) if integer_ids else draw(TEXT)
        question = draw(TEXT)
        for _ in range(draw(st.integers(1, 4))):
            rows.append({"id": qid, "query": question, "sentence": draw(TEXT), "relevant": draw(st.integers(0, 1))})
    return pd.DataFrame(rows)


def _write(frame, path):
    if path.suffix == ".csv":
        frame.to_csv(path, index=False)
    elif path.suffix == ".tsv":
        frame.to_csv(path, sep="\t", index=False)
    elif path.suffix == ".jsonl":
        frame.to_json(path, orient="records", lines=True, force_ascii=False)
    else:
        frame.to_parquet(path, index=False)


NAMES = dict(question="query", candidate="sentence", label="relevant", qid="id")


def _read(source):
    """``read_pairs``'s result, or the one-line ValueError it raised (anything else fails the test)."""
    try:
        return read_pairs(source, **NAMES)
    except ValueError as exc:
        assert "\n" not in str(exc), str(exc)
        return exc


def check_round_trip(frame, suffix):
    expected = _read(frame)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"pairs{suffix}"
        _write(frame, path)
        got = _read(path)
    if isinstance(got, ValueError):
        return  # a clear error (the in-memory frame may be valid: a quoted field spanning lines is refused)
    assert not isinstance(expected, ValueError), f"{suffix} read a table that the frame itself refuses: {expected}"
    X, y = got
    pd.testing.assert_frame_equal(X, expected[0], check_dtype=False)
    np.testing.assert_array_equal(y, expected[1])
    assert X["qid"].map(type).eq(str).all()  # ids are read as text, whatever the format


@pytest.mark.parametrize("suffix", SUFFIXES)
@QUICK
@given(frame=tables())
def test_tables_read_back_exactly_or_not_at_all(suffix, frame):
    check_round_trip(frame, suffix)


@pytest.mark.slow
@pytest.mark.parametrize("suffix", SUFFIXES)
@LONG
@given(frame=tables())
def test_tables_read_back_exactly_or_not_at_all_long(suffix, frame):
    check_round_trip(frame, suffix)


@st.composite
def damage(draw, size):
    """A random edit of a file's bytes: insert a tricky byte, delete one, repeat a stretch, or truncate."""
    kind = draw(st.sampled_from(["insert", "delete", "repeat", "truncate"]))
    at = draw(st.integers(0, max(0, size - 1)))
    byte = draw(st.sampled_from([b'"', b"\t", b",", b"\n", b"\r", b"\x00", b"\xff", b"{", b"]"]))
    return kind, at, byte


def check_damaged(frame, suffix, data):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"pairs{suffix}"
        _write(frame, path)
        raw = path.read_bytes()
        kind, at, byte = data.draw(damage(len(raw)))
        raw = {"insert": raw[:at] + byte + raw[at:], "delete": raw[:at] + raw[at + 1:],
               "repeat": raw[:at] + raw[at:at + 20] + raw[at:], "truncate": raw[:at]}[kind]
        path.write_bytes(raw)
        got = _read(path)
    if not isinstance(got, ValueError):
        X, y = got
        as2rank.data.check_X(X)  # whatever was read is a valid table: text in every row, 0/1 labels
        assert y is not None and len(y) == len(X) and set(np.unique(y)) <= {0.0, 1.0}


@pytest.mark.parametrize("suffix", SUFFIXES)
@QUICK
@given(frame=tables(), data=st.data())
def test_a_damaged_table_file_is_read_validly_or_refused(suffix, frame, data):
    check_damaged(frame, suffix, data)


@pytest.mark.slow
@pytest.mark.parametrize("suffix", SUFFIXES)
@LONG
@given(frame=tables(), data=st.data())
def test_a_damaged_table_file_is_read_validly_or_refused_long(suffix, frame, data):
    check_damaged(frame, suffix, data)


# ----------------------------------------------------------------------------------------------- the loader
@pytest.fixture(scope="module")
def model(tmp_path_factory):
    X = pd.DataFrame({
        "qid": ["q1"] * 3 + ["q2"] * 3,
        "question": ["who wrote hamlet"] * 3 + ["what is the capital of france"] * 3,
        "candidate": ["Hamlet is a tragedy .", "Shakespeare wrote Hamlet .", "It is set in Denmark .",
                      "France is in Europe .", "Paris is the capital of France .", "It has museums ."],
        "position": [0, 1, 2, 0, 1, 2],
    })
    y = np.array([0, 1, 0, 0, 1, 0])
    root = tmp_path_factory.mktemp("fuzz")
    fitted = make_pipeline(LexicalFeatures(), PointwiseRanker(LogisticRegression())).fit(X, y)
    as2rank.save(fitted, root / "model")
    table = root / "pairs.csv"
    X.to_csv(table, index=False)
    return root / "model", X, fitted.predict(X), table


_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=False, width=64),
                    st.sampled_from(["", "../elsewhere", "/etc/passwd", "minilm-l6", "os.system", "fitted.coef_",
                                     "gensim:glove-wiki-gigaword-50"]),
                    st.just({"__type__": "ndarray", "key": "fitted.coef_"}), st.just({"__type__": "estimator",
                                                                                     "path": ".."}),
                    st.just([[[]]]), st.just({}))


def _leaves(value, path=()):
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _leaves(v, (*path, i))
    yield path


def mutate(folder: Path, data, outside: Path) -> str:
    """One random mutation of a model directory; returns what it was."""
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    kind = data.draw(st.sampled_from(["json", "swap", "remove", "link", "truncate", "add"]))
    victim = data.draw(st.sampled_from(files))
    if kind == "json":
        victim = data.draw(st.sampled_from([f for f in files if f.suffix == ".json"]))
        meta = json.loads(victim.read_text())
        path = data.draw(st.sampled_from([p for p in _leaves(meta) if p]))
        node = meta
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = data.draw(_VALUES)
        victim.write_text(json.dumps(meta))
    elif kind == "swap":
        from safetensors.numpy import load_file, save_file

        tensors = [f for f in files if f.suffix == ".safetensors"]
        first, second = data.draw(st.sampled_from(tensors)), data.draw(st.sampled_from(tensors))
        a, b = dict(load_file(str(first))), dict(load_file(str(second)))
        ka, kb = data.draw(st.sampled_from(sorted(a))), data.draw(st.sampled_from(sorted(b)))
        a[ka], b[kb] = b[kb], a[ka]
        save_file(a, str(first))
        if second != first:
            save_file(b, str(second))
    elif kind == "remove":
        victim.unlink()
    elif kind == "link":
        copy = outside / victim.name
        shutil.copy(victim, copy)
        victim.unlink()
        victim.symlink_to(copy)
    elif kind == "truncate":
        raw = victim.read_bytes()
        victim.write_bytes(raw[: data.draw(st.integers(0, max(0, len(raw) - 1)))])
    else:
        (victim.parent / "added.json").write_text("{}")
    return f"{kind} {victim.relative_to(folder)}"


def check_mutation(model, data, capsys):
    source, X, expected, table = model
    resealed = data.draw(st.booleans())
    with tempfile.TemporaryDirectory() as work:
        folder, outside = Path(work) / "model", Path(work) / "outside"
        shutil.copytree(source, folder)
        outside.mkdir()
        what = mutate(folder, data, outside)
        if resealed:
            try:
                reseal(folder)  # as an attacker who rewrites the digests
            except (OSError, ValueError):
                resealed = False
        if not resealed:
            # Unsealed damage is refused at load, unless it changed nothing the model reads.
            try:
                loaded = as2rank.load(folder)
            except ValueError as exc:
                assert "\n" not in str(exc), (what, str(exc))
            else:
                np.testing.assert_array_equal(loaded.predict(X), expected, err_msg=what)
        # Sealed again or not, the command line answers in one line, or ranks with finite scores.
        out = Path(work) / "ranked.csv"
        code = main(["rank", str(folder), str(table), "--qid", "qid", "--position", "position", "--output", str(out)])
        err = capsys.readouterr().err
        assert code in (0, 2), what
        if code == 2:
            assert err.count("\n") == 1 and err.startswith("as2rank: error:"), (what, err)
        else:
            assert np.isfinite(pd.read_csv(out)["score"]).all(), what


@QUICK
@given(data=st.data())
def test_a_mutated_model_directory_loads_the_same_or_is_refused(model, data, capsys):
    check_mutation(model, data, capsys)


@pytest.mark.slow
@LONG
@given(data=st.data())
def test_a_mutated_model_directory_loads_the_same_or_is_refused_long(model, data, capsys):
    check_mutation(model, data, capsys)


def test_the_fuzzed_directory_is_sealed(model):
    meta = json.loads((model[0] / "as2rank.json").read_text())
    assert set(meta["files"]) == {p.relative_to(model[0]).as_posix() for p in model[0].rglob("*")
                                  if p.is_file() and p.name not in ("as2rank.json", "README.md") or
                                  (p.is_file() and p.parent != model[0] and p.name == "as2rank.json")}
    assert os.path.isfile(model[0] / "README.md")
