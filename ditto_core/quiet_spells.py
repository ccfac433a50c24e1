"""Spans of work on any thread, and a wait for a quiet spell after the last of them.

Some background work must not run beside the work it would slow, and runs in the first pause
instead: the warp+decode engine's deferred compile waits for its clips to stop rendering (a
compile's tracing holds the interpreter and its kernels share the GPU), and the host-heap trim
for videos to stop being made (the trim holds the allocator's arenas). Both count the spans in
progress and wait until none has run for a while; a span that starts meanwhile starts the spell
again at its end.
"""
from __future__ import annotations

import contextlib
import threading
import time
from typing import Callable, Iterator


class QuietSpells:
    """Counts the spans in progress and remembers when the last one ended (any thread)."""

    def __init__(self, quiet_s: float) -> None:
        self.quiet_s = quiet_s  # how long no span may run before :meth:`wait_for_quiet` returns
        self._changed = threading.Condition()
        self._active = 0
        self._last_end = time.monotonic()

    def started(self) -> None:
        with self._changed:
            self._active += 1

    def ended(self) -> None:
        with self._changed:
            self._active -= 1
            self._last_end = time.monotonic()
            self._changed.notify_all()

    def active(self) -> int:
        """The spans in progress now."""
        with self._changed:
            return self._active

    @contextlib.contextmanager
    def span(self) -> Iterator[None]:
        """Mark the body as a span in progress."""
        self.started()
        try:
            yield
        finally:
            self.ended()

    def wait_for_quiet(self, then: Callable[[], None] = lambda: None) -> None:
        """Return once no span has run for ``quiet_s`` seconds; ``then`` runs at that moment, before
        any span can start."""
        with self._changed:
            while True:
                if self._active:
                    self._changed.wait()
                    continue
                left = self._last_end + self.quiet_s - time.monotonic()
                if left <= 0:
                    then()
                    return
                self._changed.wait(left)
