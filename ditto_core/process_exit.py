"""Ending a finished command's process without Python's teardown.

A process that rendered on a GPU spends seconds in its teardown after the MP4 is already in
place: destructors of thousands of modules and tensors, the CUDA context and its memory pools,
Triton's and Inductor's caches and worker pools. Nothing of ours needs that teardown (every file
is published, every temporary removed, before the command returns), yet the user waits for it
before the shell prompt or the next pipeline step comes back. The teardown is also where a
thread still ending (a server's worker thread told to stop) can abort the process
(:func:`~ditto_core.compilation.graph_tree_thread`). A command that owns its process (render,
serve, worker) therefore ends with :func:`exit_now` once its work and its messages are out.

Work that a process starts for later processes and need not wait for itself (writing a cache
entry while the clip renders) runs in :func:`in_background`: ``exit_now`` lets it finish first,
so an exit never cuts a cache entry short.
"""
from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import Callable, NoReturn

__all__ = ["exit_now", "in_background", "wait_for_background"]

log = logging.getLogger(__name__)

_background: list[threading.Thread] = []
_background_lock = threading.Lock()


def in_background(work: Callable[[], object], name: str) -> threading.Thread:
    """Run ``work`` on a thread of its own, which :func:`exit_now` and :func:`wait_for_background` wait for.

    Its failures are logged, never raised: it serves later processes, not this one.
    """
    def run() -> None:
        try:
            work()
        except Exception:  # logged: a cache that could not be written costs only the next process
            log.exception("background task %s failed", name)

    thread = threading.Thread(target=run, name=f"ditto-{name}")
    with _background_lock:
        _background[:] = [t for t in _background if t.is_alive()]
        _background.append(thread)
    thread.start()
    return thread


def wait_for_background(timeout: float = 300.0) -> bool:
    """Wait for every :func:`in_background` task (at most ``timeout`` seconds in all); whether all ended."""
    deadline = time.monotonic() + timeout
    with _background_lock:
        threads = list(_background)
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return not any(thread.is_alive() for thread in threads)


def exit_now(status: int) -> NoReturn:
    """Flush what the user reads, then end the process with ``status`` at once.

    Only for the end of a command that owns its process (never in a library call or a test
    runner): ``atexit`` hooks and ``finally`` blocks of other threads do not run. Background
    tasks (:func:`in_background`) finish first.
    """
    if not wait_for_background():
        log.warning("a background task was still running at exit; what it was writing is discarded")
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can reach the user
            pass
    logging.shutdown()
    os._exit(status)
