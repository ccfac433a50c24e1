"""The interpreter's garbage collections while a clip is made: timed, and put off.

CPython's cyclic collector runs when enough container objects were allocated, on whichever
thread allocated last, and holds the GIL for the whole collection. A full (oldest-generation)
collection walks every tracked object of the process: after the engine's compile (Inductor's
graphs, sympy's caches) or inside ComfyUI that is millions of objects and a pause of a few
hundred milliseconds, during which no thread queues GPU work or feeds the encoders.

:class:`CollectorPauses` measures those pauses over a block (any thread's collections).
:func:`collections_put_off` switches automatic collection off while a clip is made: a render
allocates no reference cycles worth collecting mid-clip (tensors are freed by reference
count), and the collections skipped are not owed afterwards (the collector's counters restart
from the next allocation), so the pause is avoided, not moved to the clip's end. Explicit
``gc.collect()`` calls still run (ComfyUI's after a prompt, for one).
"""
from __future__ import annotations

import gc
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator, Optional

__all__ = ["CollectorPauses", "collections_put_off"]


class CollectorPauses:
    """Context manager: the collections of any thread while it is open.

    ``seconds``: their total time; ``full``: how many were full collections (generation 2);
    ``longest``: the longest one, in seconds. Collections never overlap (each holds the GIL),
    so one start time at a time is enough.
    """

    def __init__(self) -> None:
        self.seconds = 0.0
        self.full = 0
        self.longest = 0.0
        self._started: Optional[float] = None

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        if self._started is None:  # opened during a collection: its start was not seen
            return
        pause = time.perf_counter() - self._started
        self._started = None
        self.seconds += pause
        self.longest = max(self.longest, pause)
        self.full += info["generation"] == 2

    def stages(self) -> dict[str, float]:
        """For a node's stage record: ``python_gc`` (seconds), ``python_gc_full`` (count),
        ``python_gc_longest`` (seconds)."""
        return {"python_gc": self.seconds, "python_gc_full": float(self.full), "python_gc_longest": self.longest}

    def __enter__(self) -> "CollectorPauses":
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)


_lock = threading.Lock()
_holders = 0
_enable_after = False


@contextmanager
def collections_put_off() -> Iterator[None]:
    """No automatic collection while the block runs (on any thread); nested and concurrent
    blocks share one switch, and the collector comes back on when the last one ends if it was
    on when the first began."""
    global _holders, _enable_after
    with _lock:
        if _holders == 0:
            _enable_after = gc.isenabled()
            gc.disable()
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0 and _enable_after:
                gc.enable()
