"""Content-addressed on-disk cache of registered avatars.

An entry is a folder ``<key>/`` holding ``tensors.safetensors`` (the tensors) and
``entry.json`` (format, version, key, shapes, dtypes, the SHA-256 of the tensor file and its
SHA-256 tree hash). Both files are written into a temporary folder that is renamed to
``<key>`` once complete (:func:`~ditto_core.atomic_files.atomic_dir`), so several processes
can share one cache (two ComfyUI instances, a ComfyUI and a CLI, batch workers): a reader
sees a whole entry or none, never the tensors of one writer with the metadata of another,
and a writer replacing an entry never disturbs one reading it (readers open both files
through one handle on the folder). Loading verifies the tree hash and every shape; a
damaged entry is reported once with a warning, treated as a miss and overwritten by the
caller.

Hashing is the main cost of a hit (a still's entry is 8 MiB, its frame 6 MiB), so both the
key and the entry check use :func:`tree_sha256`: SHA-256 over 1 MiB leaves hashed on several
threads, then over the leaf digests. It is as tamper-evident as a plain SHA-256 and several
times faster on a multi-core host.

Source frames are not stored: the key hashes them, and the caller already holds them.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Mapping, Optional

import numpy as np
import torch
from torch import Tensor

from ..atomic_files import atomic_dir, discard
from ..models.keypoints import MotionInfo
from .source_info import SourceInfo

CACHE_FORMAT = "ditto-avatar"
CACHE_VERSION = 3  # 2: entries hold the unsmoothed frame-0 keypoints ``sc``; 3: an entry is a folder
TENSOR_FILE, META_FILE = "tensors.safetensors", "entry.json"
_KEY = re.compile(r"^[0-9a-f]{64}$")
_MOTION_PREFIX = "motion."
_LEAF = 1 << 20
_HASH_THREADS = min(8, os.cpu_count() or 1)


def tree_sha256(data) -> str:
    """SHA-256 over the byte length and the SHA-256 digests of consecutive 1 MiB leaves.

    ``hashlib`` releases the GIL on large buffers, so the leaves hash in parallel.
    """
    view = memoryview(data).cast("B")
    leaves = [view[start:start + _LEAF] for start in range(0, len(view), _LEAF)]
    if len(leaves) > 1 and _HASH_THREADS > 1:
        with ThreadPoolExecutor(min(_HASH_THREADS, len(leaves))) as pool:
            digests = list(pool.map(lambda leaf: hashlib.sha256(leaf).digest(), leaves))
    else:
        digests = [hashlib.sha256(leaf).digest() for leaf in leaves]
    root = hashlib.sha256(len(view).to_bytes(8, "little"))
    for digest in digests:
        root.update(digest)
    return root.hexdigest()


def cache_key(frames: np.ndarray, settings: Mapping[str, Any], model_identity: str) -> str:
    """SHA-256 over the frames (tree hash of the bytes, shape, dtype), every result-changing
    setting (JSON values) and the identity of the model files."""
    frames = np.ascontiguousarray(frames)
    header = {
        "format": CACHE_FORMAT,
        "version": CACHE_VERSION,
        "shape": list(frames.shape),
        "dtype": str(frames.dtype),
        "settings": dict(settings),
        "models": model_identity,
        "pixels": tree_sha256(frames),
    }
    return hashlib.sha256(json.dumps(header, sort_keys=True).encode()).hexdigest()


class _Damaged(Exception):
    """An entry exists but cannot be trusted."""


class AvatarCache:
    """Registered avatars under ``root`` (created on first write)."""

    def __init__(self, root: Path | str):
        self.root = Path(root)

    def paths(self, key: str) -> tuple[Path, Path]:
        """``(tensor file, metadata file)`` of entry ``key``."""
        entry = self.entry_dir(key)
        return entry / TENSOR_FILE, entry / META_FILE

    def entry_dir(self, key: str) -> Path:
        if not _KEY.match(key):  # keys become file names: never let one escape the root
            raise ValueError(f"invalid avatar cache key {key!r}; expected 64 hex digits")
        return self.root / key

    def keys(self) -> list[str]:
        """Keys of the entries present (complete, though not yet verified), sorted."""
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if _KEY.match(p.name) and (p / META_FILE).is_file())

    def load(self, key: str, device: torch.device | str = "cpu") -> Optional[tuple[dict[str, Tensor], dict]]:
        """``(tensors on device, metadata)`` of a valid entry; None on a miss or a damaged entry."""
        from safetensors import SafetensorError
        from safetensors.torch import load as load_bytes

        try:
            files = _read_entry(self.entry_dir(key))
        except FileNotFoundError:
            return None  # absent, or replaced by another process while we opened it
        try:
            if files is None:
                raise _Damaged("it is not a folder holding both of its files")
            meta = json.loads(files[META_FILE])
            if not isinstance(meta, dict) or meta.get("format") != CACHE_FORMAT or meta.get("key") != key:
                raise _Damaged("its metadata does not describe this entry")
            if meta.get("version") != CACHE_VERSION:
                return None  # written by another version of the pack: silently replaced
            data = files[TENSOR_FILE]
            if len(data) != meta["size"] or tree_sha256(data) != meta["tree_sha256"]:
                raise _Damaged("the tensor file does not match its recorded hash (truncated or modified)")
            tensors = load_bytes(data)
            shapes = {name: list(t.shape) for name, t in tensors.items()}
            if shapes != meta["shapes"]:
                raise _Damaged("its tensor shapes differ from the recorded ones")
        except (_Damaged, OSError, ValueError, KeyError, TypeError, SafetensorError) as exc:
            warnings.warn(
                f"Avatar cache entry {key} in {self.root} is damaged ({exc}); "
                f"recomputing it and overwriting the entry.",
                RuntimeWarning,
                stacklevel=2,
            )
            return None
        return {name: t.to(device) for name, t in tensors.items()}, meta

    def store(self, key: str, tensors: Mapping[str, Tensor], metadata: Mapping[str, Any]) -> None:
        """Write entry ``key`` atomically, replacing any existing one.

        Raises OSError on I/O failure (:class:`~ditto_core.atomic_files.DiskFullError`, naming
        the folder and the space needed, when the disk is full); nothing is left half-written.
        """
        from safetensors.torch import save as save_bytes

        entry = self.entry_dir(key)
        data = save_bytes({name: t.detach().to("cpu").contiguous() for name, t in tensors.items()})
        meta = {
            **metadata,
            "format": CACHE_FORMAT,
            "version": CACHE_VERSION,
            "key": key,
            "sha256": hashlib.sha256(data).hexdigest(),  # what `sha256sum` prints, for people and tools
            "tree_sha256": tree_sha256(data),  # what loading verifies, faster
            "size": len(data),
            "shapes": {name: list(t.shape) for name, t in tensors.items()},
            "dtypes": {name: str(t.dtype).removeprefix("torch.") for name, t in tensors.items()},
        }
        meta_bytes = json.dumps(meta, indent=1, sort_keys=True).encode()
        with atomic_dir(entry, replace=True, needed=len(data) + len(meta_bytes)) as folder:
            (folder / TENSOR_FILE).write_bytes(data)
            (folder / META_FILE).write_bytes(meta_bytes)
        for legacy in (self.root / f"{key}.safetensors", self.root / f"{key}.json"):  # version 2's layout
            discard(legacy)


def _read_entry(entry: Path) -> Optional[dict[str, bytes]]:
    """Both files of an entry folder, read through one handle on it, so a writer renaming a
    new entry over it meanwhile cannot mix the two; None if ``entry`` is not such a folder.
    Raises FileNotFoundError if the entry is absent or was removed while being read."""
    if os.open not in os.supports_dir_fd:  # Windows: read by path (folders are not replaced there while open)
        if entry.exists() and not entry.is_dir():
            return None
        return {name: (entry / name).read_bytes() for name in (META_FILE, TENSOR_FILE)}
    try:
        folder = os.open(entry, os.O_RDONLY | os.O_DIRECTORY)
    except NotADirectoryError:
        return None
    try:
        files = {}
        for name in (META_FILE, TENSOR_FILE):
            try:
                with open(name, "rb", opener=lambda path, flags: os.open(path, flags, dir_fd=folder)) as f:
                    files[name] = f.read()
            except FileNotFoundError:
                if not _same_file(folder, entry):  # a writer replaced the entry and removed this one
                    raise
                return None
        return files
    finally:
        os.close(folder)


def _same_file(fd: int, path: Path) -> bool:
    """Whether ``path`` still names what ``fd`` has open."""
    try:
        here, there = os.fstat(fd), os.stat(path)
    except FileNotFoundError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def source_to_tensors(source: SourceInfo) -> dict[str, Tensor]:
    """The tensors of a SourceInfo worth caching (everything but the frames)."""
    tensors = {"M_c2o": source.M_c2o, "f_s": source.f_s, "eye_open": source.eye_open, "eye_ball": source.eye_ball,
               "sc": source.source_kp}
    tensors.update({_MOTION_PREFIX + name: value for name, value in source.motion.as_dict().items()})
    return tensors


def source_from_tensors(tensors: Mapping[str, Tensor], frames: Tensor, is_image: bool, key: str) -> SourceInfo:
    """Rebuild a SourceInfo from :func:`source_to_tensors` output and the frames it was made from."""
    motion = {name[len(_MOTION_PREFIX):]: t for name, t in tensors.items() if name.startswith(_MOTION_PREFIX)}
    return SourceInfo(
        frames=frames,
        M_c2o=tensors["M_c2o"],
        f_s=tensors["f_s"],
        motion=MotionInfo(**motion),
        eye_open=tensors["eye_open"],
        eye_ball=tensors["eye_ball"],
        is_image=is_image,
        cache_key=key,
        sc=tensors["sc"],
    )
