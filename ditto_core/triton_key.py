"""Triton's installation key, kept across processes instead of recomputed in each.

Before a process compiles (or finds in its cache) its first kernel, Triton computes a key for
its own installation (``triton.runtime.cache.triton_key``): a SHA-256 of its compiler sources
and of ``libtriton.so``, about 480 MB, every time a process starts. That is 0.33-0.44 s of
a new CLI process (the H200 profile of session 18 had it on the thread that readies the first
render). :func:`keep_triton_key` makes the key come from a small file in the user's cache
instead, valid while no file of the Triton package has changed size or modification time: any
upgrade, reinstall or edit recomputes it. Triton replaces the same function the same way for
its own worker processes.
"""
from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import threading
from pathlib import Path
from typing import Callable, Optional

from .atomic_files import atomic_write_bytes
from .user_cache import user_cache_dir

log = logging.getLogger(__name__)

FORMAT = "ditto-triton-key-1"
_lock = threading.Lock()


def package_fingerprint(root: Path, version: str) -> str:
    """SHA-256 over the version and every file's path, size and modification time under ``root``
    (a superset of what Triton's key reads; a few milliseconds for Triton's 600-odd files)."""
    digest = hashlib.sha256(f"{FORMAT}|{version}".encode())
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = sorted(d for d in subfolders if d != "__pycache__")
        for name in sorted(files):
            path = os.path.join(folder, name)
            stat = os.stat(path)
            digest.update(f"|{os.path.relpath(path, root)}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()


def cached_key(compute: Callable[[], str], fingerprint: Callable[[], str], entry: Path) -> str:
    """``compute()``'s value as stored in ``entry`` for this ``fingerprint()``; computed and
    stored when the entry is missing, unreadable or of another fingerprint."""
    current = fingerprint()
    try:
        stored = json.loads(entry.read_text())
        if stored.get("fingerprint") == current and isinstance(stored.get("key"), str):
            return stored["key"]
    except (OSError, ValueError, AttributeError):
        pass  # no entry yet, or a damaged one: computed again below
    key = compute()
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(entry, json.dumps({"fingerprint": current, "key": key}).encode())
    except OSError as error:  # a read-only or full cache: this process still has its key
        log.info("Ditto: could not keep Triton's key in %s (%s)", entry, error)
    return key


def keep_triton_key(cache_dir: Optional[Path] = None) -> bool:
    """Serve Triton's installation key from the user's cache from now on; returns whether it
    does (False where this Triton has no ``triton.runtime.cache.triton_key`` to replace)."""
    try:
        import triton
        from triton.runtime import cache as triton_cache
    except ImportError:
        return False
    with _lock:
        original = getattr(triton_cache, "triton_key", None)
        if original is None:
            return False
        if getattr(original, "kept_by_ditto", False):
            return True
        entry = (cache_dir or user_cache_dir("triton")) / "triton_key.json"
        root = Path(triton.__file__).resolve().parent

        @functools.lru_cache(maxsize=None)
        def triton_key() -> str:
            return cached_key(original, lambda: package_fingerprint(root, triton.__version__), entry)

        triton_key.kept_by_ditto = True
        triton_cache.triton_key = triton_key
        return True
