"""HuBERT weights mapped from the ONNX file once, kept as safetensors for every later process.

Reading Ditto's 1.26 GB ONNX file and matching its graph costs seconds in each new process; the
result (a :class:`~.hubert.HubertConfig` and a state dict) is plain data, so it is stored once
under the user's cache folder (:func:`~ditto_core.user_cache.user_cache_dir`) as one safetensors
file with the configuration and the source file's fingerprint in its metadata, and memory-mapped
from there afterwards, one entry per ONNX file. An entry is used only when that fingerprint (the ONNX file's resolved
path, size, modification time and the hashes of its first and last MiB) and the format version
match; anything else, a damaged entry included, is mapped again from the ONNX file. A cache that
cannot be written (read-only, disk full) only costs the next process the mapping again.

Writing the entry (1.26 GB, seconds) serves later processes only, so the process that mapped the
file may hand it to a background task (``write_in_background``) and go on with its clip; the
writer releases the GIL, and a one-shot process's exit waits for it
(:func:`~ditto_core.process_exit.exit_now`).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Optional, Union

import torch

from ..atomic_files import atomic_write
from ..errors import DittoError
from ..process_exit import in_background
from ..user_cache import user_cache_dir
from .hubert import Hubert, HubertConfig
from .hubert_onnx_weights import build_hubert, read_hubert_onnx

log = logging.getLogger(__name__)

FORMAT = "ditto-hubert-weights-1"
_EDGE = 1 << 20  # bytes hashed at each end of the ONNX file


def fingerprint(onnx_path: Path) -> str:
    """Cheap identity of an ONNX file: a new download, edit or conversion changes it."""
    path = Path(onnx_path).resolve()
    stat = path.stat()
    digest = hashlib.sha256(f"{FORMAT}|{path}|{stat.st_size}|{stat.st_mtime_ns}".encode())
    with open(path, "rb") as f:
        digest.update(f.read(_EDGE))
        if stat.st_size > 2 * _EDGE:
            f.seek(-_EDGE, os.SEEK_END)
            digest.update(f.read())
    return digest.hexdigest()


def load_cached_hubert(
    onnx_path: Union[str, os.PathLike], device: Union[str, torch.device] = "cpu",
    dtype: torch.dtype = torch.float32, cache_dir: Optional[Path] = None, write_in_background: bool = False,
) -> Hubert:
    """:func:`~.hubert_onnx_weights.load_hubert_onnx` through the cache (``None``: the user's)."""
    config, state = cached_hubert_weights(onnx_path, cache_dir, write_in_background)
    return build_hubert(config, state, onnx_path, device, dtype)


def cached_hubert_weights(
    onnx_path: Union[str, os.PathLike], cache_dir: Optional[Path] = None, write_in_background: bool = False,
) -> tuple[HubertConfig, dict[str, torch.Tensor]]:
    """The configuration and state dict of ``onnx_path``, from the cache when it holds them.

    On a miss the entry is written before returning, or with ``write_in_background`` by a
    :func:`~ditto_core.process_exit.in_background` task while the caller goes on.
    """
    from safetensors import safe_open
    from safetensors.torch import load_file

    if cache_dir is None:
        try:
            cache_dir = user_cache_dir("hubert")
        except DittoError as error:  # no cache this user may trust: map the ONNX graph each time
            log.warning("HuBERT weights are not cached: %s", error)
            return read_hubert_onnx(onnx_path)
    cache_dir = Path(cache_dir)
    key = fingerprint(Path(onnx_path))
    # One entry per ONNX file: a new download under the same path replaces its entry, so old
    # 1.26 GB entries never pile up.
    entry = cache_dir / f"{hashlib.sha256(str(Path(onnx_path).resolve()).encode()).hexdigest()[:32]}.safetensors"
    if entry.is_file():
        try:
            with safe_open(str(entry), framework="pt") as f:
                meta = f.metadata() or {}
            if meta.get("format") == FORMAT and meta.get("fingerprint") == key:
                config = _config_from_json(meta["config"])
                return config, load_file(str(entry))
            log.info("HuBERT weight cache %s belongs to another file; mapping the ONNX graph again", entry)
        except Exception as err:  # a damaged entry: safetensors and JSON raise their own errors
            log.warning("HuBERT weight cache %s is unreadable (%s); mapping the ONNX graph again", entry, err)
    config, state = read_hubert_onnx(onnx_path)
    meta = {"format": FORMAT, "fingerprint": key, "config": json.dumps(dataclasses.asdict(config)),
            "source": str(Path(onnx_path).resolve())}
    if write_in_background:
        in_background(lambda: _write_entry(entry, state, meta), "hubert-weight-cache")
    else:
        _write_entry(entry, state, meta)
    return config, state


def _write_entry(entry: Path, state: dict[str, torch.Tensor], meta: dict[str, str]) -> None:
    from safetensors.torch import save_file

    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        tensors = {name: tensor.contiguous() for name, tensor in state.items()}
        atomic_write(entry, lambda tmp: save_file(tensors, str(tmp), metadata=meta))
    except (OSError, RuntimeError) as err:  # read-only or full disk: the mapping still serves this process
        log.warning("could not keep the mapped HuBERT weights in %s (%s); the next start maps them again",
                    entry.parent, err)


def _config_from_json(text: str) -> HubertConfig:
    values = json.loads(text)
    for field in dataclasses.fields(HubertConfig):
        if isinstance(values.get(field.name), list):
            values[field.name] = tuple(values[field.name])
    return HubertConfig(**values)
