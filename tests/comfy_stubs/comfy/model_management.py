"""Stand-in for ``comfy.model_management``: the interrupt flag, the compute device and the
loaded-model list with the calls the pack makes (``load_models_gpu``, ``unload_all_models``,
``free_memory``, ``soft_empty_cache``).

The list follows the real bookkeeping: an entry holds its model (the ModelPatcher-like
object) weakly, loads it with ``partially_load``, unloads it with ``partially_unload`` then
``detach``, and is dropped when the model's ``model`` object dies (the real module's
finalizer). There is no memory accounting: ``free_memory`` unloads every model on the device
except ``keep_loaded``, as the real one does when asked for more than the device has.
"""
from __future__ import annotations

import threading
import weakref

import torch


class InterruptProcessingException(Exception):
    pass


_lock = threading.RLock()
_interrupted = False


def interrupt_current_processing(value: bool = True) -> None:
    global _interrupted
    with _lock:
        _interrupted = value


def throw_exception_if_processing_interrupted() -> None:
    global _interrupted
    with _lock:
        if _interrupted:
            _interrupted = False
            raise InterruptProcessingException()


def get_torch_device() -> torch.device:
    return torch.device("cpu")  # the CPU tests' ComfyUI runs with --cpu


SOFT_EMPTY_CACHE_CALLS = 0
"""How often ``soft_empty_cache`` ran; tests read it."""


def soft_empty_cache(force: bool = False) -> None:
    global SOFT_EMPTY_CACHE_CALLS
    SOFT_EMPTY_CACHE_CALLS += 1


class LoadedModel:
    def __init__(self, model) -> None:
        self._model = weakref.ref(model)
        self.device = model.load_device
        self.finalizer = None

    @property
    def model(self):
        return self._model()

    def model_load(self) -> None:
        self.model.partially_load(self.device, 1e32)
        self.finalizer = weakref.finalize(self.model.model, cleanup_models)

    def model_unload(self, memory_to_free: float) -> None:
        if memory_to_free < self.model.loaded_size():
            if self.model.partially_unload(self.model.offload_device, memory_to_free) >= memory_to_free:
                return
        self.model.detach(True)
        self.finalizer.detach()


current_loaded_models: list[LoadedModel] = []


def cleanup_models() -> None:
    current_loaded_models[:] = [m for m in current_loaded_models if m.finalizer.alive]


def load_models_gpu(models, memory_required: float = 0, force_patch_weights: bool = False,
                    minimum_memory_required=None, force_full_load: bool = False) -> None:
    for model in models:
        for i in reversed(range(len(current_loaded_models))):
            if model.is_clone(current_loaded_models[i].model):
                current_loaded_models.pop(i).finalizer.detach()
                model.detach(False)
        entry = LoadedModel(model)
        entry.model_load()
        current_loaded_models.insert(0, entry)


def free_memory(memory_required: float, device: torch.device, keep_loaded=()) -> list[LoadedModel]:
    unloaded = [m for m in current_loaded_models if m.device == device and m not in keep_loaded]
    for entry in unloaded:
        entry.model_unload(memory_required)
        current_loaded_models.remove(entry)
    if unloaded:
        soft_empty_cache()
    return unloaded


def unload_all_models() -> None:
    free_memory(1e30, get_torch_device())
