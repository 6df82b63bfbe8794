"""Content digests of files and directories: what a cache key or a resume check reads instead of names
and modification times, which can stay the same while the bytes change."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

__all__ = ["content_digest"]

_CHUNK = 1 << 20


def content_digest(path) -> str:
    """Digest of a file's bytes, or of every file under a directory (relative names, sizes and bytes, in
    sorted order, links followed).

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    str
        Hex BLAKE2b digest; equal for files or directories with the same contents.
    """
    root = Path(path)
    digest = hashlib.blake2b(digest_size=20)
    if root.is_file():
        files = [root]
    else:
        files = sorted(Path(d, f) for d, _, names in os.walk(root, followlinks=True) for f in names)
    for file in files:
        name = file.relative_to(root).as_posix().encode() if file != root else b""
        digest.update(len(name).to_bytes(8, "little") + name + file.stat().st_size.to_bytes(8, "little"))
        with open(file, "rb") as f:
            while chunk := f.read(_CHUNK):
                digest.update(chunk)
    return digest.hexdigest()
