"""Loaded Ditto models, shared by every node and released on request.

``DITTO_MODELS`` carries a small :class:`ModelHandle` (folder, device, precision), not the
networks themselves. ComfyUI keeps the last output of every node in its cache; if that output
were the networks, their VRAM could only be freed by deleting the node. With a handle, the
networks live in :data:`REGISTRY` as one ``ditto_core`` :class:`~ditto_core.pipeline.DittoPipeline`
per (folder, device, precision) -- networks, face models, HuBERT, and the DDIM samplers and
warp+decode engines with their CUDA graphs.
``Unload Ditto Models`` releases them; a node that later receives a released handle loads the
set again transparently.
"""
from __future__ import annotations

import gc
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from ditto_core.errors import InputError
from ditto_core.pipeline import DittoPipeline
from ditto_core.precision import network_dtype

def resolve_device(choice: str) -> torch.device:
    """``"auto"`` -> the first CUDA GPU, else the CPU; refuses a CUDA device that is not there."""
    if choice == "auto":
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    device = torch.device(choice)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise InputError(f"device '{choice}' was chosen, but PyTorch sees no CUDA GPU here; choose 'cpu' or 'auto'.")
        index = torch.cuda.current_device() if device.index is None else device.index
        if index >= torch.cuda.device_count():
            raise InputError(f"device '{choice}' does not exist: this machine has {torch.cuda.device_count()} GPU(s).")
        device = torch.device("cuda", index)
    return device


def device_choices() -> list[str]:
    """Dropdown entries: auto, cpu, and every visible GPU."""
    gpus = [f"cuda:{i}" for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
    return ["auto", "cpu", *gpus]


@dataclass(frozen=True)
class ModelHandle:
    """What ``DITTO_MODELS`` carries: which model set, where, in which precision."""

    model_dir: str
    device: str  # resolved, e.g. "cuda:0" or "cpu"
    precision: str  # one of ditto_core.precision.NETWORK_PRECISIONS
    cache_dir: Optional[str] = None  # avatar cache root (None: no cache)

    @property
    def torch_device(self) -> torch.device:
        return torch.device(self.device)

    @property
    def dtype(self) -> torch.dtype:
        return network_dtype(self.precision)


class ModelRegistry:
    """Per-handle store of loaded networks and objects built from them (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._entries: dict[ModelHandle, dict[Any, Any]] = {}

    def pipeline(self, handle: ModelHandle) -> DittoPipeline:
        """The loaded pipeline of ``handle``, built on first use.

        Face-detection models are loaded when present but not required here: the no-detector
        mode needs none, and Register Avatar asks for them when it detects.
        """
        return self.get(handle, "pipeline", lambda: DittoPipeline.from_model_dir(
            handle.model_dir, handle.torch_device, handle.dtype,
            cache_dir=Path(handle.cache_dir) if handle.cache_dir else None, detect_face=False))

    def get(self, handle: ModelHandle, key: Any, build: Callable[[], Any]) -> Any:
        """The object stored under ``key`` for ``handle``, built by ``build()`` on first use.

        Objects built from the networks (engines, samplers) are released together with them.
        """
        with self._lock:
            entry = self._entries.setdefault(handle, {})
            if key not in entry:
                entry[key] = build()
            return entry[key]

    def is_loaded(self, handle: ModelHandle) -> bool:
        with self._lock:
            return "pipeline" in self._entries.get(handle, {})

    def release(self, handle: Optional[ModelHandle] = None) -> int:
        """Drop ``handle``'s entry (every entry if None) and return freed VRAM to the driver.

        Returns the number of model sets released.
        """
        with self._lock:
            handles = list(self._entries) if handle is None else [h for h in (handle,) if h in self._entries]
            for h in handles:
                del self._entries[h]
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        return len(handles)


REGISTRY = ModelRegistry()
"""The process-wide registry every Ditto node uses."""
