"""Atomic writes (as2rank.files): a writer killed at any step leaves the previous complete result or the new
complete one, never a mix; nothing that is not an as2rank model is written into unasked; permissions are those
of a new file."""

import builtins
import io
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline

import as2rank
from as2rank import files
from as2rank.app.cli import main
from as2rank.lexical.baselines import LexicalFeatures, PointwiseRanker
from as2rank.persistence.card import CARD_FILE, render_card

ROOT = Path(__file__).resolve().parents[1]


class Killed(BaseException):
    """The writer's process ending at this step: nothing after it touches the disk."""


class Steps:
    """Counts the file-system steps of a write (creating, writing, renaming, removing) and, with ``kill_at``,
    ends the writer at that step: the step fails and every later one does nothing, as after a SIGKILL."""

    NAMES = [(os, "replace"), (os, "rename"), (os, "mkdir"), (os, "makedirs"), (os, "unlink"), (os, "remove"),
             (os, "rmdir"), (os, "open"), (os, "fsync"), (os, "chmod"), (shutil, "rmtree"), (shutil, "copy2"),
             (shutil, "copytree"), (builtins, "open"), (io, "open"), (files, "_exchange")]

    def __init__(self, monkeypatch, kill_at=None):
        self.count, self.kill_at, self.dead = 0, kill_at, False
        for owner, name in self.NAMES:
            monkeypatch.setattr(owner, name, self._wrap(getattr(owner, name), name))
        try:
            import safetensors.numpy
            import safetensors.torch
        except ImportError:
            return
        for module in (safetensors.numpy, safetensors.torch):
            monkeypatch.setattr(module, "save_file", self._wrap(module.save_file, "save_file"))

    def step(self, before_death=None) -> None:
        """Count one step; at ``kill_at``, run ``before_death`` (what reached the disk) and end the writer."""
        if self.dead:
            raise Killed
        self.count += 1
        if self.count == self.kill_at:
            if before_death is not None:
                before_death()
            self.dead = True
            raise Killed

    def _wrap(self, function, name):
        def wrapped(*args, **kwargs):
            if name == "open" and function in (builtins.open, io.open):
                mode = args[1] if len(args) > 1 else kwargs.get("mode", "r")
                if not any(c in mode for c in "wax+"):
                    return function(*args, **kwargs)  # reading is no step
                self.step()
                return _Writes(function(*args, **kwargs), self)
            if name == "open" and function is os.open and not (args[1] if len(args) > 1 else kwargs["flags"]) & (
                    os.O_WRONLY | os.O_RDWR | os.O_CREAT):
                return function(*args, **kwargs)
            self.step()
            return function(*args, **kwargs)

        return wrapped


class _Writes:
    """A file open for writing whose every ``write`` is a step of :class:`Steps` (a kill mid-file)."""

    def __init__(self, file, steps):
        self._file, self._steps = file, steps

    def write(self, data):
        def half():  # half of it reached the file
            self._file.write(data[: len(data) // 2])
            self._file.flush()

        self._steps.step(half)
        return self._file.write(data)

    def __getattr__(self, name):
        return getattr(self._file, name)

    def __iter__(self):
        return iter(self._file)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self._file.__exit__(*exc)


def interrupted(monkeypatch, write):
    """Run ``write()`` killed at each of its steps in turn, yielding after each kill; the number of steps is that
    of an uninterrupted run."""
    with monkeypatch.context() as patch:
        counter = Steps(patch)
        write()
        total = counter.count
    assert total > 3
    for k in range(1, total + 1):
        with monkeypatch.context() as patch:
            Steps(patch, kill_at=k)
            with pytest.raises(Killed):
                write()
        yield k


@pytest.fixture
def two_models(toy):
    X, y = toy
    pipe = make_pipeline(LexicalFeatures(), PointwiseRanker(LogisticRegression(C=0.1)))
    old = clone(pipe).fit(X, y)
    new = clone(pipe).set_params(pointwiseranker__estimator__C=10.0).fit(X, 1 - y)
    return X, old, new


def test_save_killed_at_any_step_leaves_the_old_model_or_the_new(two_models, tmp_path, monkeypatch):
    """The reported case: a save over a model killed between its renames left the new features with the old
    regression's weights and the old card, which loaded and ranked."""
    X, old, new = two_models
    target = tmp_path / "model"
    expected = {"old": old.predict(X), "new": new.predict(X)}
    cards = {"old": render_card(old), "new": render_card(new)}
    seen = set()
    for _ in interrupted(monkeypatch, lambda: as2rank.save(new, target)):
        loaded = as2rank.load(target)
        which = "old" if np.array_equal(loaded.predict(X), expected["old"]) else "new"
        np.testing.assert_array_equal(loaded.predict(X), expected[which])
        assert (target / CARD_FILE).read_text(encoding="utf-8") == cards[which]
        seen.add(which)
        shutil.rmtree(target)
        as2rank.save(old, target)  # the previous complete model, for the next kill
    assert seen == {"old", "new"}  # before the exchange the old model stands, after it the new one


def test_fit_output_killed_at_any_step(tmp_path, monkeypatch, capsys):
    data = ROOT / "as2rank" / "datasets" / "data"
    table = tmp_path / "pairs.csv"
    from as2rank.datasets import load_sample

    X, y = load_sample()
    X.iloc[:40].assign(label=y[:40])[["qid", "question", "candidate", "label"]].to_csv(table, index=False)
    out = tmp_path / "model"
    args = ["fit", str(table), "--model", "Lexical+LR", "--qid", "qid", "--output", str(out), "--quiet"]
    assert main(args) == 0 and data.is_dir()
    before = as2rank.load(out).predict(X.iloc[:40])
    for _ in interrupted(monkeypatch, lambda: main(args)):
        np.testing.assert_array_equal(as2rank.load(out).predict(X.iloc[:40]), before)
    capsys.readouterr()


def test_rank_output_killed_at_any_step_keeps_the_previous_file(two_models, tmp_path, monkeypatch, capsys):
    """The reported case: rank --output wrote in place, and killed mid-write left a truncated file that pandas read
    without an error."""
    X, old, new = two_models
    table = tmp_path / "pairs.csv"
    X.sort_values("qid", kind="stable").to_csv(table, index=False)
    as2rank.save(old, tmp_path / "old")
    as2rank.save(new, tmp_path / "new")
    out = tmp_path / "ranked.csv"
    common = [str(table), "--output", str(out), "--qid", "qid", "--position", "position"]
    assert main(["rank", str(tmp_path / "new"), *common]) == 0
    complete = {"new": out.read_text()}
    assert main(["rank", str(tmp_path / "old"), *common]) == 0
    complete["old"] = out.read_text()
    seen = set()
    for _ in interrupted(monkeypatch, lambda: main(["rank", str(tmp_path / "new"), *common])):
        which = next((k for k, text in complete.items() if out.read_text() == text), None)
        assert which is not None, "a ranked file that is neither the previous one nor the new one"
        seen.add(which)
        assert main(["rank", str(tmp_path / "old"), *common]) == 0
    assert seen == {"old", "new"}
    capsys.readouterr()


def test_a_directory_that_is_not_a_model_is_never_written_into(two_models, tmp_path, capsys):
    X, old, new = two_models
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "README.md").write_text("my notes\n")
    with pytest.raises(ValueError, match="is not an as2rank model directory and is not empty"):
        as2rank.save(old, folder)
    assert sorted(p.name for p in folder.iterdir()) == ["README.md"]
    table = tmp_path / "pairs.csv"
    X.assign(label=[0, 1, 0, 0, 1, 1, 0, 0]).sort_values("qid", kind="stable").to_csv(table, index=False)
    assert main(["fit", str(table), "--model", "WO+RR", "--qid", "qid", "--output", str(folder)]) == 2
    assert "--overwrite" in capsys.readouterr().err and (folder / "README.md").read_text() == "my notes\n"
    (folder / "keep.txt").write_text("kept")
    # --overwrite adds the model beside the user's files, never over one: their README.md is where the card goes.
    assert main(["fit", str(table), "--model", "WO+RR", "--qid", "qid", "--output", str(folder), "--overwrite"]) == 2
    assert "README.md" in capsys.readouterr().err and (folder / "README.md").read_text() == "my notes\n"
    (folder / "README.md").rename(tmp_path / "notes.md")
    assert main(["fit", str(table), "--model", "WO+RR", "--qid", "qid", "--output", str(folder), "--overwrite"]) == 0
    assert (folder / "keep.txt").read_text() == "kept" and "my notes" not in (folder / "README.md").read_text()
    as2rank.load(folder)


def test_replacing_a_model_keeps_the_users_files_beside_it(two_models, tmp_path):
    X, old, new = two_models
    as2rank.save(old, tmp_path / "m")
    (tmp_path / "m" / "evaluation.csv").write_text("the user's own file\n")
    as2rank.save(new, tmp_path / "m")
    assert (tmp_path / "m" / "evaluation.csv").read_text() == "the user's own file\n"
    np.testing.assert_array_equal(as2rank.load(tmp_path / "m").predict(X), new.predict(X))


@pytest.mark.parametrize("damage", ["seal stripped", "unreadable"])
def test_a_model_whose_own_files_cannot_be_told_is_not_replaced(damage, two_models, tmp_path):
    # The seal lists the model's files; without it (or with an as2rank.json that cannot be read) every entry
    # might be the user's, so saving over the directory refuses instead of deleting them, even with overwrite.
    X, old, new = two_models
    target = tmp_path / "m"
    as2rank.save(old, target)
    (target / "evaluation.csv").write_text("the user's own file\n")
    meta = json.loads((target / "as2rank.json").read_text())
    if damage == "seal stripped":
        del meta["files"], meta["sha256"]
        (target / "as2rank.json").write_text(json.dumps(meta))
    else:
        (target / "as2rank.json").write_bytes(b"\x00{")
    before = {p.relative_to(target): p.read_bytes() for p in target.rglob("*") if p.is_file()}
    for overwrite in (False, True):
        with pytest.raises(ValueError, match="cannot be told from yours") as info:
            as2rank.save(new, target, overwrite=overwrite)
        assert "\n" not in str(info.value)
    assert {p.relative_to(target): p.read_bytes() for p in target.rglob("*") if p.is_file()} == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(files.TEMPORARY_PREFIX)]


def test_files_get_the_permissions_of_a_new_file(two_models, tmp_path):
    """The reported case: arrays.safetensors was written 0600 while the other files were 0644."""
    X, old, _ = two_models
    as2rank.save(old, tmp_path / "m")
    mask = os.umask(0o022)
    os.umask(mask)
    modes = {p.relative_to(tmp_path).as_posix(): p.stat().st_mode & 0o777 for p in (tmp_path / "m").rglob("*")}
    modes["m"] = (tmp_path / "m").stat().st_mode & 0o777
    for name, mode in modes.items():
        expected = 0o777 & ~mask if (tmp_path / name).is_dir() else 0o666 & ~mask
        assert mode == expected, (name, oct(mode))


@pytest.mark.parametrize("case, match", [
    ("missing folder", "does not exist"), ("a directory", "is a directory"),
])
def test_output_paths_are_checked_before_any_work(case, match, two_models, tmp_path, capsys):
    X, old, _ = two_models
    as2rank.save(old, tmp_path / "m")
    table = tmp_path / "pairs.csv"
    X.sort_values("qid", kind="stable").to_csv(table, index=False)
    output = tmp_path / "nowhere" / "ranked.csv" if case == "missing folder" else tmp_path
    assert main(["rank", str(tmp_path / "m"), str(table), "--qid", "qid", "--output", str(output)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and match in err


def test_fit_output_onto_a_file_is_refused_before_the_fit(tmp_path, capsys):
    (tmp_path / "model").write_text("a file")
    table = tmp_path / "pairs.csv"
    pd.DataFrame({"question": ["q", "q"], "candidate": ["a", "b"], "label": [1, 0]}).to_csv(table, index=False)
    assert main(["fit", str(table), "--model", "WO+RR", "--output", str(tmp_path / "model")]) == 2
    assert "is a file, not a directory" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("strace") is None or sys.platform != "linux", reason="needs strace (Linux)")
@pytest.mark.parametrize("when", [1, 2, 3])
def test_a_real_sigkill_at_each_rename(when, two_models, tmp_path):
    """The reported experiment itself: SIGKILL injected at the Nth rename system call of a save over a model."""
    X, old, new = two_models
    as2rank.save(old, tmp_path / "m")
    import joblib

    joblib.dump(new, tmp_path / "new.joblib")
    script = ("import joblib, as2rank, sys; as2rank.save(joblib.load(sys.argv[1]), sys.argv[2])")
    command = ["strace", "-f", "-qq", "-o", os.devnull,
               f"-e", f"inject=rename,renameat,renameat2:signal=KILL:when={when}",
               sys.executable, "-c", script, str(tmp_path / "new.joblib"), str(tmp_path / "m")]
    result = subprocess.run(command, cwd=ROOT, capture_output=True)
    assert result.returncode in (0, -signal.SIGKILL, 128 + signal.SIGKILL), result.stderr
    scores = as2rank.load(tmp_path / "m").predict(X)
    assert np.array_equal(scores, old.predict(X)) or np.array_equal(scores, new.predict(X))


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("strace") is None or sys.platform != "linux", reason="needs strace (Linux)")
def test_a_real_sigkill_in_the_middle_of_writing_the_ranked_file(two_models, tmp_path):
    """The reported experiment: rank --output killed while it writes the ranked file left the previous output
    truncated. SIGKILL is injected at a write system call of the new file's data (pandas writes it in one or a
    few; the file was opened, and truncated, before)."""
    X, old, _ = two_models
    rows = pd.concat([X.assign(qid=X["qid"] + f"-{i}") for i in range(400)]).sort_values("qid", kind="stable")
    table = tmp_path / "pairs.csv"
    rows.to_csv(table, index=False)
    as2rank.save(old, tmp_path / "m")
    out = tmp_path / "ranked.csv"
    command = [sys.executable, "-m", "as2rank", "rank", str(tmp_path / "m"), str(table), "--qid", "qid",
               "--position", "position", "--output", str(out)]
    log = tmp_path / "writes.log"
    subprocess.run(["strace", "-f", "-qq", "-e", "trace=write", "-o", str(log), *command], cwd=ROOT, check=True,
                   capture_output=True)
    writes = [line for line in log.read_text().splitlines() if " write(" in line and "resumed" not in line]
    data = [i for i, line in enumerate(writes, 1) if "qid,question,rank" in line or line.count(",") > 5]
    assert data, "no write of the ranked file's data was seen"
    previous = out.read_bytes()
    when = data[len(data) // 2]
    result = subprocess.run(["strace", "-f", "-qq", "-o", os.devnull, "-e", "trace=write",
                             "-e", f"inject=write:signal=KILL:when={when}", *command], cwd=ROOT, capture_output=True)
    assert result.returncode != 0  # it was killed
    assert out.read_bytes() == previous
