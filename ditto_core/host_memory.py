"""Hand freed host memory back to the operating system after a render.

glibc serves each thread from its own heap arena and keeps what the thread frees for reuse.
Every video gets a new encoder thread, so with many cores the first renders of a session
each leave tens of MiB of freed-but-kept frame buffers in a fresh arena (the growth on a
16-core H200 host is in docs/PERFORMANCE.md). ``malloc_trim`` releases the free pages of every arena at once. Elsewhere (musl,
macOS, Windows) there is nothing to do.

A trim walks every arena (tens of milliseconds on a host that has run many encoder threads),
so a finished video asks for it on a thread of its own (:func:`trim_host_heap_soon`) rather than
make its caller, who is waiting for the MP4, wait for that too.
"""
from __future__ import annotations

import ctypes
import sys
import threading
from functools import lru_cache
from typing import Callable, Optional

__all__ = ["trim_host_heap", "trim_host_heap_soon"]

_trimming = threading.Lock()  # held while a background trim runs


@lru_cache(maxsize=1)
def _malloc_trim() -> Optional[Callable[[int], int]]:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None


def trim_host_heap() -> bool:
    """Release free heap pages to the OS; returns whether anything could be asked for."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


def trim_host_heap_soon() -> None:
    """:func:`trim_host_heap` on a background thread. A call while one is still running adds
    nothing (that one releases what is free by then; the next video's trim gets the rest)."""
    if _malloc_trim() is None or not _trimming.acquire(blocking=False):
        return

    def trim() -> None:
        try:
            trim_host_heap()
        finally:
            _trimming.release()

    threading.Thread(target=trim, name="ditto-heap-trim", daemon=True).start()
