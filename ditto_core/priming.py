"""A model's first call in a new process, made ahead on a thread of its own.

A new process pays a network's first CUDA call several times over: libraries load, kernels load
lazily, cuDNN and cuBLAS pick algorithms per shape. A :class:`Priming` runs one call on zeros
while the caller prepares what the real call needs (the avatar, the speech); the real call waits
for it first, so the two never run at once. Priming is an optimisation only: a failure is logged
and shows again, properly reported, at the real call.
"""
from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Callable, Iterator, Optional

import torch

from .compilation import release_graph_tree_thread_locals
from .cuda_graphs import beside_captures
from .gil_turns import short_gil_turns

log = logging.getLogger(__name__)


@contextlib.contextmanager
def background_gpu_work() -> Iterator[None]:
    """How a thread of ours runs GPU work beside a render (a priming run, a compile's warm-up):
    in short GIL turns (the rendering thread's torch ops would wait 5 ms a turn otherwise),
    marked for CUDA-graph recordings (:func:`~ditto_core.cuda_graphs.beside_captures`), and
    leaving no graph-tree thread-locals to the thread's exit, which could abort a process that
    is exiting (:func:`~ditto_core.compilation.graph_tree_thread`)."""
    try:
        with short_gil_turns(), beside_captures():
            yield
    finally:
        release_graph_tree_thread_locals()


class Priming:
    """At most one priming run for an object; :meth:`wait` before its first real call."""

    def __init__(self, what: str) -> None:
        self.what = what  # named in the log and the thread
        self._thread: Optional[threading.Thread] = None

    @property
    def started(self) -> bool:
        return self._thread is not None

    def start(self, work: Callable[[], None], device: torch.device) -> None:
        """Run ``work`` (under inference mode) on a new thread, once; it ends when ``device``'s work has run."""
        if self._thread is not None:
            return

        def run() -> None:
            try:
                with torch.inference_mode(), background_gpu_work():
                    work()
                    if device.type == "cuda":
                        torch.cuda.current_stream(device).synchronize()
            except Exception as error:  # an optimisation only: the first real call reports it properly
                log.info("Ditto %s: priming failed (%s: %s)", self.what, type(error).__name__, error)

        self._thread = threading.Thread(target=run, daemon=True, name=f"ditto-prime-{self.what}")
        self._thread.start()

    def wait(self) -> float:
        """Block until the run has ended; the seconds this call waited (0 when none was started)."""
        if self._thread is None:
            return 0.0
        start = time.perf_counter()
        self._thread.join()
        return time.perf_counter() - start
