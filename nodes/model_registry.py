"""Loaded Ditto models, shared by every node, managed by ComfyUI's model management.

``DITTO_MODELS`` carries a small :class:`ModelHandle` (folder, device, precision), not the
networks themselves. ComfyUI keeps the last output of every node in its cache; if that output
were the networks, their VRAM could only be freed by deleting the node. With a handle, the
networks live in :data:`REGISTRY` as one ``ditto_core`` :class:`~ditto_core.pipeline.DittoPipeline`
per (folder, device, precision) -- networks, face models, HuBERT, and the DDIM samplers and
warp+decode engines with their CUDA graphs.

Each set is registered with ``comfy.model_management`` like any ComfyUI model (through
:class:`ResidentModels`): loading it first frees other models' VRAM, ComfyUI's "Unload models"
(``POST /free``) and its memory pressure unload it, and a node that later needs it loads it
again. ``Unload Ditto Models`` releases it too.
"""
from __future__ import annotations

import gc
import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import comfy.model_management as mm
import torch

from ditto_core.compilation import uses_cuda_malloc_async
from ditto_core.errors import InputError
from ditto_core.model_files import find_hubert, find_network_file
from ditto_core.models.checkpoints import NETWORKS
from ditto_core.models.ditto_models import ALWAYS_FP32
from ditto_core.pipeline import DittoPipeline
from ditto_core.precision import network_dtype

log = logging.getLogger(__name__)


def resolve_device(choice: str) -> torch.device:
    """``"auto"`` -> ComfyUI's compute device (its GPU, the CPU under ``--cpu``); refuses a
    CUDA device that is not there."""
    if choice == "auto":
        return mm.get_torch_device()
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
    """Dropdown entries: auto (ComfyUI's device), cpu, and every visible GPU."""
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


PipelineBuilder = Callable[[], DittoPipeline]


def _default_builder(handle: ModelHandle) -> PipelineBuilder:
    # Face-detection models are loaded when present but not required here: the no-detector
    # mode needs none, and Register Avatar asks for them when it detects. Under ComfyUI's
    # cudaMallocAsync allocator the compiled step has no CUDA graphs whichever way it is made, so
    # the first prompt of a process renders eagerly and the compile runs after it, once no prompt
    # has rendered for a moment ("deferred"): no prompt of a new ComfyUI waits for a compile or
    # renders beside one that started at its queue's head (on a GPU too small to run the compile
    # beside a render, it runs as the first prompt ends).
    warmup = "deferred" if uses_cuda_malloc_async(handle.torch_device) else "foreground"
    return lambda: DittoPipeline.from_model_dir(
        handle.model_dir, handle.torch_device, handle.dtype,
        cache_dir=Path(handle.cache_dir) if handle.cache_dir else None, detect_face=False, warmup=warmup)


def _module_bytes(pipeline: DittoPipeline) -> int:
    """Bytes of the parameters and buffers of the networks the pipeline holds."""
    modules = [m for m in vars(pipeline.models).values() if isinstance(m, torch.nn.Module)]
    return sum(t.numel() * t.element_size() for m in modules for t in (*m.parameters(), *m.buffers()))


def _estimated_bytes(handle: ModelHandle) -> int:
    """The networks' size before they are loaded: their (fp32) checkpoint files, scaled to the
    precision they load in; what ComfyUI frees room for."""
    itemsize = torch.empty((), dtype=handle.dtype).element_size()
    total = 0
    for name in NETWORKS:
        path = find_network_file(name, Path(handle.model_dir))
        if path is not None:
            total += path.stat().st_size * (1 if name in ALWAYS_FP32 else itemsize / 4)
    hubert = find_hubert(Path(handle.model_dir))  # the PyTorch HuBERT holds its weights in half precision on a GPU
    if hubert is not None:
        total += hubert.stat().st_size * (0.5 if handle.torch_device.type == "cuda" else 1)
    return int(total)


class ResidentModels:
    """One Ditto model set as ``comfy.model_management`` sees a model: the parts of ComfyUI's
    ``ModelPatcher`` interface that its ``load_models_gpu`` / ``free_memory`` use.

    A set is loaded or not, never partly: its compiled engines and CUDA graphs are built for
    weights on one device, so ComfyUI's partial offload asks for nothing and unloading drops
    the whole pipeline (the next node that needs it builds it again).
    """

    parent = None  # a ModelPatcher clone's parent; sets are never cloned

    def __init__(self, handle: ModelHandle, build: PipelineBuilder,
                 on_drop: Callable[[DittoPipeline], None] = lambda pipeline: None) -> None:
        self.handle = handle
        self._on_drop = on_drop  # told of the pipeline before it is dropped (live avatars let go of it)
        self.load_device = handle.torch_device
        self.offload_device = torch.device("cpu")
        self._build = build
        self.pipeline: Optional[DittoPipeline] = None
        self._bytes = 0
        # What ComfyUI holds a weak reference to while the set is loaded (a ModelPatcher's
        # ``model``): alive as long as this object, so ComfyUI forgets the set when it goes.
        self.model = DittoNetworks()

    def model_size(self) -> int:
        return self._bytes if self.pipeline is not None else _estimated_bytes(self.handle)

    def loaded_size(self) -> int:
        return self._bytes if self.pipeline is not None else 0

    def current_loaded_device(self) -> torch.device:
        return self.load_device if self.pipeline is not None else self.offload_device

    def model_dtype(self) -> torch.dtype:
        return self.handle.dtype

    def partially_load(self, device: torch.device, extra_memory: float = 0, force_patch_weights: bool = False) -> int:
        """Build the pipeline if it is not loaded; the bytes this added."""
        if self.pipeline is not None:
            return 0
        self.pipeline = self._build()
        self._bytes = _module_bytes(self.pipeline)
        return self._bytes

    def partially_unload(self, device: torch.device, memory_to_free: float = 0) -> int:
        return 0  # all or nothing: ComfyUI then unloads the whole set

    def detach(self, unpatch_all: bool = True) -> None:
        """ComfyUI unloads the set (``unpatch_all``), or takes it off its list for a moment while
        it loads it again (not ``unpatch_all``: nothing to do)."""
        if unpatch_all and self.pipeline is not None:
            self.drop()
            gc.collect()  # engines and CUDA graphs hold reference cycles: free their VRAM now

    def drop(self) -> bool:
        """Let go of the pipeline (telling ``on_drop`` first); whether one was loaded."""
        pipeline, self.pipeline = self.pipeline, None
        if pipeline is not None:
            self._on_drop(pipeline)
        return pipeline is not None

    def is_clone(self, other: object) -> bool:
        return getattr(other, "model", None) is self.model

    def model_patches_to(self, device_or_dtype: object) -> None:
        pass  # no patches

    def model_patches_models(self) -> list:
        return []

    def lowvram_patch_counter(self) -> int:
        return 0


class DittoNetworks:
    """Stand-in for a ModelPatcher's module (ComfyUI logs its class name when it loads it)."""


class ModelRegistry:
    """The model sets of every handle, loaded through ComfyUI's model management (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._residents: dict[ModelHandle, ResidentModels] = {}
        self._drop_listeners: list[Callable[[DittoPipeline], None]] = []

    def on_drop(self, listener: Callable[[DittoPipeline], None]) -> None:
        """Call ``listener(pipeline)`` whenever a loaded set is dropped (released, or unloaded by
        ComfyUI), before it goes: what holds on to a pipeline beyond a prompt (a live runtime)
        lets go of it, so that its VRAM is really freed."""
        self._drop_listeners.append(listener)

    def _dropped(self, pipeline: DittoPipeline) -> None:
        for listener in list(self._drop_listeners):
            try:
                listener(pipeline)
            except Exception:  # the set is dropped whatever a listener does
                log.exception("Ditto: a listener failed while a model set was dropped")

    def pipeline(self, handle: ModelHandle, build: Optional[PipelineBuilder] = None) -> DittoPipeline:
        """The loaded pipeline of ``handle``, (re)loaded if ComfyUI or a release unloaded it.

        Each call goes through ``comfy.model_management.load_models_gpu``, as a ComfyUI node
        does before it uses a model: other models make room first, and the set becomes the
        most recently used. ``build`` (default: the handle's model folder) is remembered for
        later reloads.
        """
        with self._lock:
            resident = self._residents.get(handle)
            if resident is None:
                resident = self._residents[handle] = ResidentModels(handle, build or _default_builder(handle),
                                                                    self._dropped)
            mm.load_models_gpu([resident])
            return resident.pipeline

    def is_loaded(self, handle: ModelHandle) -> bool:
        with self._lock:
            resident = self._residents.get(handle)
            return resident is not None and resident.pipeline is not None

    def release(self, handle: Optional[ModelHandle] = None) -> int:
        """Drop ``handle``'s set (every set if None) and return freed VRAM to the driver.

        ComfyUI's model management forgets a dropped set by itself (its weak reference dies).
        Returns the number of loaded model sets released.
        """
        with self._lock:
            handles = list(self._residents) if handle is None else [h for h in (handle,) if h in self._residents]
            released = sum(self._residents.pop(h).drop() for h in handles)
        gc.collect()
        mm.soft_empty_cache()  # takes its turn with recordings on other threads (comfy_housekeeping)
        return released


REGISTRY = ModelRegistry()
"""The process-wide registry every Ditto node uses."""
