"""The interpreter's garbage collections while a clip is made, timed, and kept short after it.

CPython's cyclic collector runs when enough container objects were allocated, on whichever
thread allocated last, and holds the GIL for the whole collection. A full (oldest-generation)
collection walks every tracked object of the process: after the engine's compile (Inductor's
graphs, sympy's caches) or inside ComfyUI that is millions of objects and a pause of a few
hundred milliseconds, during which no thread queues GPU work or feeds the encoders.

:class:`CollectorPauses` measures those pauses over a block (any thread's collections): every Ditto
node's timer holds one, and a node that reports its stages (the all-in-one) adds them, so a slow
prompt shows whether the collector was in it.

:func:`freeze_live_objects` keeps one such pause out of what a user waits for. ComfyUI runs a
full collection on its executor thread right after a prompt (when its last one is 10 s old or
more), before its server thread, which needs the GIL, has sent the prompt's last messages: the
client learns that the video is done only after the collection. Frozen objects are skipped by
every collection, so a node that finished its work freezes what is alive and thaws it a few
seconds later: nothing stays out of the collector longer than that. If a full collection ran
meanwhile, the thaw runs it again over everything, unless a node is at work or a video is being
made then (it would stall them); after :data:`MAX_SKIPPED` such skipped collections in a row no
freeze is made until a full collection (the host's next) has seen everything.

:func:`freeze_for_the_process` is the same for a process whose start-up lives until its end (the
CLI's ``render``, the standalone live server once warmed up): what its start-up made is frozen for
good.

An earlier ``gc.freeze()`` of someone else's does not stop ours: its objects are thawed with ours,
announced once (only a process that forks after freezing would care; ComfyUI does not). The GPU
machine's interpreter holds objects frozen by someone else, and while such a freeze made ours step
aside, ComfyUI's collection after a prompt walked everything there (docs/TIME_TO_VIDEO_LOG.md, sessions 30-33).
"""
from __future__ import annotations

import gc
import logging
import threading
import time
from typing import Any, Callable, Optional

from .host_memory import video_in_making

log = logging.getLogger(__name__)

__all__ = ["CollectorPauses", "FROZEN_SECONDS", "MAX_SKIPPED", "freeze_for_the_process", "freeze_live_objects",
           "thaw_live_objects"]

FROZEN_SECONDS = 5.0
"""How long :func:`freeze_live_objects` keeps the objects out of collections (a prompt's end
and the host's collection after it lie well within)."""

MAX_SKIPPED = 5
"""Full collections that may skip frozen objects in a row without one that saw them; then no
freeze is made until one has. A process rendering back to back, whose thaws always find a node
at work, thus keeps garbage no longer than that many of ComfyUI's collections (one per 10 s at most)."""


class CollectorPauses:
    """Context manager: the collections of any thread while it is open.

    ``seconds``: their total time; ``passes``: how many; ``full``: how many were full
    collections (generation 2), ``full_seconds`` their time; ``longest``: the longest one, in
    seconds. Collections never overlap (each holds the GIL), so one start time at a time is
    enough. :meth:`any_open`: whether some block is being timed (a node at work).
    """

    _open = 0
    _open_lock = threading.Lock()

    @classmethod
    def any_open(cls) -> bool:
        return cls._open > 0

    def __init__(self) -> None:
        self.seconds = 0.0
        self.passes = 0
        self.full = 0
        self.full_seconds = 0.0
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
        self.passes += 1
        self.longest = max(self.longest, pause)
        if info["generation"] == 2:
            self.full += 1
            self.full_seconds += pause

    def stages(self) -> dict[str, float]:
        """For a node's stage record: ``python_gc`` (seconds), ``python_gc_full`` (count),
        ``python_gc_longest`` (seconds)."""
        return {"python_gc": self.seconds, "python_gc_full": float(self.full), "python_gc_longest": self.longest}

    def __enter__(self) -> "CollectorPauses":
        with CollectorPauses._open_lock:
            CollectorPauses._open += 1
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)
        with CollectorPauses._open_lock:
            CollectorPauses._open -= 1


class _Freeze:
    """Our freeze of the collector's objects, if one is on, and the timer that ends it.

    ``busy``: whether a collection at the thaw would stall work under way (a node at work, a
    video being made).
    """

    def __init__(self, busy: Callable[[], bool]) -> None:
        self._busy = busy
        self._lock = threading.Lock()
        self._timer: Optional[threading.Timer] = None
        self._skipped = 0  # full collections that ran while we had objects frozen, since one that saw all
        self._noting = False
        self._adopted = False  # an earlier freeze of someone else's was found (and announced)

    def _note(self, phase: str, info: dict[str, Any]) -> None:
        # Runs inside collections, which any allocation may start, our own under the lock
        # included: it reads the timer without the lock (the GIL orders it) and never takes it.
        if phase == "stop" and info["generation"] == 2:
            self._skipped = self._skipped + 1 if self._timer is not None else 0

    def freeze(self, seconds: float) -> bool:
        with self._lock:
            if self._timer is not None:  # ours: the objects made since join, the thaw keeps its time
                gc.freeze()  # (so nothing stays frozen long however busy the process)
                return True
            if self._skipped >= MAX_SKIPPED:  # until a full collection has seen everything
                return False
            earlier = gc.get_freeze_count()
            if earlier and not self._adopted:  # someone else's: thawed with ours (module docstring)
                self._adopted = True
                log.info("Ditto: %d objects were frozen (gc.freeze) before Ditto froze the live objects "
                         "after its node; they are thawed with them", earlier)
            if not self._noting:
                gc.callbacks.append(self._note)
                self._noting = True
            gc.freeze()
            self._timer = threading.Timer(seconds, self.thaw)
            self._timer.daemon = True
            self._timer.name = "ditto-gc-thaw"
            self._timer.start()
            return True

    def thaw(self) -> None:
        with self._lock:
            if self._timer is None:
                return
            self._timer.cancel()
            self._timer = None
            gc.unfreeze()
            collect = self._skipped > 0 and not self._busy()
        # The host's collection skipped what was frozen, cyclic garbage (and the VRAM it may hold)
        # included: collected now, where that stalls nothing; otherwise by a later collection.
        if collect:
            gc.collect()


_FREEZE = _Freeze(busy=lambda: CollectorPauses.any_open() or video_in_making())


def freeze_live_objects(seconds: float = FROZEN_SECONDS) -> bool:
    """Move every object the collector tracks out of its reach for ``seconds`` (see the module
    docstring). Called again before the thaw, it freezes the objects made since and leaves the
    thaw when it was; returns False (and freezes nothing) after :data:`MAX_SKIPPED` skipped
    collections in a row."""
    return _FREEZE.freeze(seconds)


def thaw_live_objects() -> None:
    """End our freeze now, if one is on (and collect, if a full collection ran meanwhile and no
    node is at work nor a video being made)."""
    _FREEZE.thaw()


def freeze_for_the_process(collect_first: bool = False) -> int:
    """Take every object alive now out of all later collections, for good; how many are frozen.

    For a process whose start-up objects live until its end: one that makes one clip and then
    ends without Python's teardown (the CLI's ``render``, :mod:`.process_exit`), or the standalone
    live server once its warm-up is done (its models, compiled engines and recorded graphs serve
    until it stops). A full collection would walk every one of them while holding the GIL that
    the render thread and the encoders' feeding need. Objects made afterwards are collected as
    usual. ``collect_first``: collect before freezing, so that the garbage made so far (a
    compile's) is freed rather than kept. Not for a process whose models come and go (ComfyUI, a
    worker): cyclic garbage among frozen objects is never collected, and a node's
    :func:`freeze_live_objects` thaws everything.
    """
    if collect_first:
        gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
