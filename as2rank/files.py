"""Atomic files and directories: everything as2rank writes appears whole or not at all.

A writer gets a temporary name beside the target (same folder, so the same file system), writes there, and
the temporary is renamed over the target only once it is complete and flushed to disk. A reader, or a
process that was killed at any point of the write, therefore finds the previous complete file or the new
complete one, never a mix. Temporary names start with ``.as2rank-tmp-`` and end with the target's own name,
so that writers that choose a format or a compression from the suffix (pandas) behave as for the target;
a temporary left by a killed process is never read as a result.

A model directory is written the same way: built complete under a temporary name, then exchanged with the
previous directory in one ``renameat2(RENAME_EXCHANGE)`` call on Linux, so that the path names the old
complete model or the new one at every instant (elsewhere two renames, with an instant in which the path
names nothing, never a mix). :func:`directory_target` says what may be replaced: nothing that is not an
as2rank model, unless the caller says ``overwrite``; and even then only what the writer itself wrote there. An
entry of the user's (a file, a folder) is never deleted or replaced: a new entry of the same name makes the
write refuse, before anything is moved.

Files and directories get the permissions that the process's umask gives a new file (``0644`` under the
usual umask), never the ``0600`` of a temporary file.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import secrets
import shutil
from pathlib import Path

__all__ = ["TEMPORARY_PREFIX", "atomic_directory", "atomic_file", "check_output_file", "directory_target"]

#: Start of every temporary name.
TEMPORARY_PREFIX = ".as2rank-tmp-"


def check_output_file(path) -> Path:
    """An output file's path, checked before any work is done: its folder exists, and it is not a directory.

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    pathlib.Path

    Raises
    ------
    ValueError
        One line naming the path: a directory, or a folder that does not exist.
    """
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{str(path)!r} is a directory; give the path of a file to write.")
    if not path.parent.is_dir():
        raise ValueError(f"Cannot write {str(path)!r}: the folder {str(path.parent)!r} does not exist; create it first.")
    return path


@contextlib.contextmanager
def atomic_file(path):
    """Write a file atomically: yields a temporary path beside ``path``, renamed over it when the block ends
    without an exception (removed when it raises).

    Parameters
    ----------
    path : str or os.PathLike
        The file to write (see :func:`check_output_file`).

    Yields
    ------
    pathlib.Path
        Where to write: an empty file, created with the permissions of a new file.
    """
    path = check_output_file(path)
    temporary = _temporary_name(path)
    os.close(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))  # the umask applies
    try:
        yield temporary
        _fsync(temporary)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise
    _fsync(path.parent)


def directory_target(path, *, is_model, overwrite: bool = False) -> str:
    """What writing a directory at ``path`` would do, or a one-line error when it may not.

    Parameters
    ----------
    path : str or os.PathLike
    is_model : callable
        ``is_model(path)``: whether a directory holds what this writer writes (an as2rank model), so that
        replacing it loses nothing of the user's.
    overwrite : bool, default=False
        Whether a non-empty directory that is not a model may be written into (its other files kept).

    Returns
    -------
    {"new", "replace", "merge"}
        ``"new"``: nothing (or an empty directory) is there; ``"replace"``: a model is there, and the new one
        takes its place whole (the user's entries beside it carried over); ``"merge"``: with ``overwrite``, a
        directory of the user's files, into which the model's files are moved beside them.

    Raises
    ------
    ValueError
        If ``path`` is a file, its folder does not exist, or it is a non-empty directory that is not a model
        and ``overwrite`` is False, or holds a non-empty folder, a link or a device (which a merge could
        neither keep apart from the model nor replace: the model's loader refuses folders and links it did
        not save).
    """
    path = Path(path)
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise ValueError(f"{str(path)!r} is a file, not a directory; give a new or empty directory (or a model's).")
    if not path.parent.is_dir():
        raise ValueError(f"Cannot write {str(path)!r}: the folder {str(path.parent)!r} does not exist; create it first.")
    if not path.exists() or not any(path.iterdir()):
        return "new"
    if is_model(path):
        return "replace"
    if overwrite:
        odd = next((p for p in sorted(path.iterdir()) if p.is_symlink() or not (p.is_file() or _empty_folder(p))),
                   None)
        if odd is not None:
            kind = "link" if odd.is_symlink() else "folder" if odd.is_dir() else "special file"
            raise ValueError(
                f"{str(path)!r} holds the {kind} {odd.name!r} of yours: a model's files are added only beside files "
                "of yours, never beside or over a folder or a link (the loader refuses those it did not save), and "
                "nothing is written. Choose a new or empty directory."
            )
        return "merge"
    names = sorted(p.name for p in path.iterdir())
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    raise ValueError(
        f"{str(path)!r} is not an as2rank model directory and is not empty (it holds {shown}); nothing is written "
        "into it. Choose a new or empty directory, or pass overwrite=True (--overwrite) to add the model's files "
        "beside yours (a file of yours that has the name of a model's file is refused, never replaced)."
    )


@contextlib.contextmanager
def atomic_directory(path, *, is_model, overwrite: bool = False, keep=()):
    """Write a directory atomically: yields an empty temporary directory beside ``path``, which takes the
    place of ``path`` when the block ends without an exception (and is removed when it raises).

    Parameters
    ----------
    path : str or os.PathLike
    is_model, overwrite
        As in :func:`directory_target`, which is checked first.
    keep : callable or sequence of str, default=()
        When a model is replaced: the names of its top-level entries to carry into the new directory (the
        user's own files beside the model), or ``keep(old_path)`` returning them, or None where they cannot be
        told (the directory is then not replaced). Hidden entries (``.git``,
        ``.gitignore``) are carried too, but for as2rank's own temporaries: as2rank writes no other.

    Raises
    ------
    ValueError
        As :func:`directory_target`; or, when the block ends, an entry of the user's (a kept entry, or any entry
        of a merged directory) has the name of an entry of the new directory: nothing is replaced or moved.

    Yields
    ------
    pathlib.Path
    """
    path = Path(path)
    action = directory_target(path, is_model=is_model, overwrite=overwrite)
    temporary = _temporary_name(path)
    os.mkdir(temporary, 0o777)  # the umask applies
    try:
        yield temporary
        _settle_tree(temporary)
        if action == "merge":
            _merge(temporary, path)
        elif action == "replace":
            kept = keep(path) if callable(keep) else keep
            if kept is None:
                raise ValueError(
                    f"{str(path)!r} is a model directory whose own files cannot be told from yours (it has no seal, "
                    "or its as2rank.json cannot be read); it is not replaced and nothing is written. Save to a new "
                    "directory, or move your files out of it and delete it first.")
            kept = set(kept)
            kept |= {p.name for p in path.iterdir()
                     if p.name.startswith(".") and not p.name.startswith(TEMPORARY_PREFIX)}
            _refuse_clash(path, sorted(n for n in kept if os.path.lexists(temporary / n)))
            for name in sorted(kept):
                _copy_entry(path / name, temporary / name)
            _exchange(temporary, path)
            shutil.rmtree(temporary, ignore_errors=True)  # now the previous model
        else:
            if path.exists():
                path.rmdir()  # empty: rename cannot replace it on every platform
            os.rename(temporary, path)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)  # the new, incomplete directory: the target is untouched
        raise
    _fsync(path.parent)


def _temporary_name(path: Path) -> Path:
    return path.parent / f"{TEMPORARY_PREFIX}{secrets.token_hex(4)}-{path.name}"


def _empty_folder(path: Path) -> bool:
    return path.is_dir() and not any(path.iterdir())


def _refuse_clash(target: Path, names) -> None:
    """One line naming the first entry of the user's in ``target`` that a new entry would replace."""
    if names:
        more = f" (and {len(names) - 1} more)" if len(names) > 1 else ""
        raise ValueError(
            f"{str(target)!r} holds {names[0]!r}{more}, which as2rank did not write there and which the new model "
            "writes too; nothing was replaced or written. Move it away, or choose another directory."
        )


def _merge(source: Path, target: Path) -> None:
    """Move every entry of ``source`` into ``target`` (a directory of the user's files), ``as2rank.json`` last (a
    reader looks for it first). Every entry already there is the user's: a name in both is refused before
    anything is moved, so that nothing of the user's is replaced or deleted."""
    entries = sorted(source.iterdir(), key=lambda p: (p.name == "as2rank.json", p.name))
    _refuse_clash(target, [p.name for p in entries if os.path.lexists(target / p.name)])
    for entry in entries:
        os.rename(entry, target / entry.name)
    source.rmdir()


def _copy_entry(source: Path, target: Path) -> None:
    if source.is_symlink():
        target.symlink_to(os.readlink(source))
    elif source.is_dir():
        shutil.copytree(source, target, symlinks=True)
    else:
        shutil.copy2(source, target)


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> None:
    """Swap two directories: atomically with ``renameat2`` on Linux, else with two renames."""
    libc = _libc()
    if libc is not None:
        result = libc.renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
        if result == 0:
            return
        code = ctypes.get_errno()
        if code not in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
            raise OSError(code, f"Cannot replace {str(b)!r}: {os.strerror(code)}")
    # No atomic exchange here (another OS, or a file system without it): the previous directory moves aside
    # first, so that the path names the old model or nothing, then the new one.
    aside = _temporary_name(b)
    os.rename(b, aside)
    try:
        os.rename(a, b)
    except BaseException:
        os.rename(aside, b)
        raise
    os.rename(aside, a)


def _libc():
    if not hasattr(os, "uname") or os.uname().sysname != "Linux":
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.renameat2.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint)
    except (OSError, AttributeError):  # a C library without renameat2 (glibc before 2.28, musl before 1.2.5)
        return None
    return libc


def _fsync(path: Path) -> None:
    """Flush a file (or a directory's entries) to disk, so that a rename after it never names a file whose
    bytes were lost with the machine."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # e.g. a directory on Windows
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _umask() -> int:
    """The process's umask, read without changing it where the system says it (Linux), else by setting it back."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _settle_tree(root: Path) -> None:
    """Give every file and folder of a directory written by several libraries (some of which write 0600 files)
    the permissions of a new file or folder, and flush them to disk."""
    mask = _umask()
    for folder, dirs, names in os.walk(root):
        for name in names:
            os.chmod(Path(folder, name), 0o666 & ~mask)
            _fsync(Path(folder, name))
        for name in dirs:
            os.chmod(Path(folder, name), 0o777 & ~mask)
        _fsync(Path(folder))
    os.chmod(root, 0o777 & ~mask)
