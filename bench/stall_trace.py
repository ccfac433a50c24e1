"""Where a server's threads stall: ``bench_comfyui --trace-stalls`` copies this file into the
server's ``custom_nodes`` (a package of its own, with no nodes), and it starts a thread that
sleeps in short ticks and, whenever it wakes late, writes what every thread was running.

A thread wakes late when another one holds the GIL through a long C call (a full garbage
collection, a fork, a module's compile, a big unpickle) or when the process gets no CPU: the
server thread that sends a prompt's messages waits alike, and the stacks say who held the
interpreter. One JSON line
per stall in ``$DITTO_STALL_TRACE``: ``at`` (epoch seconds, when it woke), ``late_s``, and each
thread's innermost frames. Nothing runs unless that variable is set.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Optional

NODE_CLASS_MAPPINGS: dict = {}  # a custom-node package ComfyUI imports without complaint

TICK_S = 0.002
LATE_S = 0.02  # a wake-up later than this is written down
FRAMES = 8  # innermost frames kept per thread


def thread_stacks(skip: int) -> dict[str, list[str]]:
    """Each thread's innermost frames (``file:line function``, outermost first), but ``skip``'s."""
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    stacks = {}
    for ident, frame in sys._current_frames().items():
        if ident != skip:
            stacks[names.get(ident, str(ident))] = [f"{Path(f.filename).name}:{f.lineno} {f.name}"
                                                   for f in traceback.extract_stack(frame)[-FRAMES:]]
    return stacks


def watch(path: str, tick: float = TICK_S, late_after: float = LATE_S, stop: Optional[threading.Event] = None) -> None:
    """Tick until ``stop`` is set (forever without one); append a line to ``path`` for every tick
    that woke more than ``late_after`` late."""
    me, stop = threading.get_ident(), stop or threading.Event()
    with open(path, "a") as log:
        while not stop.is_set():
            start = time.perf_counter()
            time.sleep(tick)
            late = time.perf_counter() - start - tick
            if late > late_after:
                log.write(json.dumps({"at": time.time(), "late_s": round(late, 4), "threads": thread_stacks(me)}) + "\n")
                log.flush()


if os.environ.get("DITTO_STALL_TRACE"):
    threading.Thread(target=watch, args=(os.environ["DITTO_STALL_TRACE"],), name="ditto-stall-trace", daemon=True).start()
