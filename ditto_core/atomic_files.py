"""Files that appear whole or not at all, and their digests.

Every file the pack writes for later runs to trust (converted weights, avatar cache entries,
downloads) goes through here: written beside its target under a unique temporary name, synced,
then renamed over the target, so an interrupted run never leaves a half-written file under the
real name.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Callable


def atomic_write(target: Path, write: Callable[[Path], object]) -> None:
    """Call ``write(tmp)`` on a temporary path beside ``target``, then rename it over ``target``.

    On any failure (including cancellation) the temporary file is removed and ``target`` is
    left as it was.
    """
    target = Path(target)
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(name)
    try:
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())  # the rename must not land before the bytes do
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_bytes(target: Path, data: bytes) -> None:
    atomic_write(target, lambda tmp: tmp.write_bytes(data))


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file, read in 4 MiB blocks (what ``sha256sum`` prints)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()
