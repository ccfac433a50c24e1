"""CUDA streams that no two of this package's owners share.

``torch.cuda.Stream()`` does not create a stream: it hands out one of PyTorch's 32 pool streams
per device and priority, round-robin (c10/cuda/CUDAStream.h, "Stream pool note"), so the 33rd
request returns the first stream again. This package keeps streams for an owner's life (a
sampler's capture stream, HuBERT's window graphs, the live runtime's worker threads) and relies on
each being its own: graphs recorded on one stream share cuBLAS's workspace for it, so two owners'
graphs replayed at once would overwrite each other's, and a recording takes in whatever another
thread queues on the stream being recorded. Every request made anywhere moves the pool on, so in a
long-lived process (ComfyUI, ``serve``) two owners made far apart can be handed one stream.

:func:`owned_stream` returns a pool stream that no other live owner holds, for as long as its
owner lives; :func:`side_stream` one for passing use (a recording's warm-up) that no owner holds.
Streams that other code takes from the pool are not seen here.
"""
from __future__ import annotations

import logging
import threading
import weakref
from collections import Counter
from typing import Optional

import torch

__all__ = ["owned_stream", "side_stream", "POOL_SIZE"]

log = logging.getLogger(__name__)

POOL_SIZE = 32  # PyTorch's streams per device and priority (kStreamsPerPool)

_held: Counter = Counter()  # (device index, stream handle) -> live owners holding it
# Reentrant: a collection set off by an allocation inside the lock may run an owner's finalizer
# (_release) on this very thread.
_lock = threading.RLock()


def owned_stream(owner: Optional[object], device: torch.device | str, priority: int = 0) -> torch.cuda.Stream:
    """A pool stream (``priority`` as for :class:`torch.cuda.Stream`) that no other live owner
    holds; it is ``owner``'s until ``owner`` is garbage-collected (None: for the process's life)."""
    with _lock:
        stream = _unheld(device, priority)
        key = _key(stream)
        _held[key] += 1
    if owner is not None:
        weakref.finalize(owner, _release, key)
    return stream


def side_stream(device: torch.device | str, priority: int = 0) -> torch.cuda.Stream:
    """A pool stream that no live owner holds, for work that ends with the caller's block."""
    with _lock:
        return _unheld(device, priority)


def _unheld(device: torch.device | str, priority: int) -> torch.cuda.Stream:
    first = torch.cuda.Stream(device, priority=priority)
    stream = first
    for _ in range(POOL_SIZE):  # round-robin: within one turn of the pool every stream comes up
        if _key(stream) not in _held:
            return stream
        stream = torch.cuda.Stream(device, priority=priority)
    log.warning("every CUDA stream of PyTorch's pool (%d at priority %d) is held by an owner; two now share one",
                POOL_SIZE, priority)
    return first


def _release(key: tuple[int, int]) -> None:
    with _lock:
        _held[key] -= 1
        if _held[key] <= 0:
            del _held[key]


def _key(stream: torch.cuda.Stream) -> tuple[int, int]:
    return stream.device.index, stream.cuda_stream
