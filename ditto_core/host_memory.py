"""Hand freed host memory back to the operating system once videos stop being made.

glibc serves each thread from its own heap arena and keeps what the thread frees for reuse.
Every video gets a new encoder thread, so with many cores the first renders of a session
each leave tens of MiB of freed-but-kept frame buffers in a fresh arena (the growth on a
16-core H200 host is in docs/PERFORMANCE.md); a process that loaded models or compiled the
engine holds gigabytes more. ``malloc_trim`` releases the free pages of every arena at once.
Elsewhere (musl, macOS, Windows) there is nothing to do.

A trim walks every arena, holding each one's lock while it returns its pages: with gigabytes
free that takes a few hundred milliseconds, and any thread allocating from an arena being
trimmed waits (in ComfyUI, the executor finishing the prompt whose video just ended). So the
trim waits for the process to be idle: :func:`video_started` marks a video in the making, and
:data:`IDLE_SECONDS` after the last one ends, with none begun since, a thread of ours trims. A
process that makes videos back to back keeps its heap for the next one, which reuses it.
"""
from __future__ import annotations

import ctypes
import sys
import threading
from functools import lru_cache
from typing import Callable, Optional

from .quiet_spells import QuietSpells

__all__ = ["IDLE_SECONDS", "VideoSpan", "trim_host_heap", "video_in_making", "video_started"]

IDLE_SECONDS = 2.0
"""How long no video may have been in the making before the heap is trimmed."""


@lru_cache(maxsize=1)
def _malloc_trim() -> Optional[Callable[[int], int]]:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None


def trim_host_heap() -> bool:
    """Release free heap pages to the OS now; returns whether anything could be asked for."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


class _IdleTrim:
    """The process's videos in the making (:class:`~ditto_core.quiet_spells.QuietSpells`) and its
    one pending trim, whose thread lives only while it is pending."""

    def __init__(self, trim: Callable[[], object] = trim_host_heap) -> None:
        self._trim = trim
        self._videos = QuietSpells(IDLE_SECONDS)
        self._lock = threading.Lock()
        self._pending = False  # a thread waits for the quiet spell to trim

    def started(self) -> None:
        self._videos.started()

    def making(self) -> bool:
        return self._videos.active() > 0

    def ended(self) -> None:
        self._videos.ended()
        if self._videos.active() or _malloc_trim() is None:
            return
        with self._lock:
            if self._pending:  # its wait now counts from this end
                return
            self._pending = True
        threading.Thread(target=self._wait_then_trim, name="ditto-heap-trim", daemon=True).start()

    def _wait_then_trim(self) -> None:
        self._videos.wait_for_quiet(then=self._no_longer_pending)  # a later end starts a thread of its own
        self._trim()

    def _no_longer_pending(self) -> None:
        with self._lock:
            self._pending = False


_IDLE_TRIM = _IdleTrim()


class VideoSpan:
    """A video in the making (see :func:`video_started`); :meth:`end` it once, more calls are no-ops."""

    def __init__(self) -> None:
        self._open = True
        _IDLE_TRIM.started()

    def end(self) -> None:
        if self._open:
            self._open = False
            _IDLE_TRIM.ended()


def video_started() -> VideoSpan:
    """Mark a video in the making until the returned span's :meth:`~VideoSpan.end`: no trim runs
    meanwhile, and one runs :data:`IDLE_SECONDS` after the last span ends unless another begins."""
    return VideoSpan()


def video_in_making() -> bool:
    """Whether a video is being made now (a :func:`video_started` span not yet ended)."""
    return _IDLE_TRIM.making()
