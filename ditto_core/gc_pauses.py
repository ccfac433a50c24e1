"""The interpreter's garbage collections while a clip is made, timed.

CPython's cyclic collector runs when enough container objects were allocated, on whichever
thread allocated last, and holds the GIL for the whole collection. A full (oldest-generation)
collection walks every tracked object of the process: after the engine's compile (Inductor's
graphs, sympy's caches) or inside ComfyUI that is millions of objects and a pause of a few
hundred milliseconds, during which no thread queues GPU work or feeds the encoders.

:class:`CollectorPauses` measures those pauses over a block (any thread's collections): every Ditto
node's timer holds one, and a node that reports its stages (the all-in-one) adds them, so a slow
prompt shows whether the collector was in it.
"""
from __future__ import annotations

import gc
import time
from typing import Any, Optional

__all__ = ["CollectorPauses"]


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
