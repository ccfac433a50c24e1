"""ComfyUI's own cache emptying, made to take turns with Ditto's CUDA-graph recordings.

ComfyUI empties PyTorch's allocator cache (``comfy.model_management.soft_empty_cache``) after a
prompt, before it loads models, and when a node asks for memory. Emptying the cache synchronises
the whole device under either allocator, and a CUDA-graph recording running on another thread
meanwhile (a live avatar's warm-up: ``Publish Live Avatar`` records beside the UI) fails, which
aborts the server process. Ditto's own device-wide calls wait for such recordings
(:func:`ditto_core.cuda_graphs.between_recordings`); ComfyUI offers no hook for its own, so the
pack wraps that one function once, at load: it runs as before, once no recording is under way on
another thread, and no recording starts until it returns. Without a recording under way it only
takes and releases a lock.

Every caller inside ComfyUI reaches the function through the module (``main.py``'s prompt loop,
``free_memory``, the samplers' out-of-memory retries), so they all get the wrapper. A custom node
calling ``torch.cuda.empty_cache`` itself still cannot take the turn (docs/LIVE.md).
"""
from __future__ import annotations

import functools

import comfy.model_management as mm

from ditto_core.cuda_graphs import between_recordings

__all__ = ["empty_cache_takes_turns"]

_MARK = "_ditto_takes_turns_with_recordings"


def empty_cache_takes_turns() -> None:
    """Wrap ``comfy.model_management.soft_empty_cache`` in :func:`between_recordings` (once)."""
    inner = mm.soft_empty_cache
    if getattr(inner, _MARK, False):
        return

    @functools.wraps(inner)
    def soft_empty_cache(*args, **kwargs):
        with between_recordings():
            return inner(*args, **kwargs)

    setattr(soft_empty_cache, _MARK, True)
    mm.soft_empty_cache = soft_empty_cache
