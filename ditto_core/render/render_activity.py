"""Whether an engine is rendering, and since when it has not: a deferred compile waits for a quiet spell.

A compile beside a clip slows that clip several times over (the compile's tracing holds the
interpreter, its kernels share the GPU, and under ``cudaMallocAsync`` no CUDA graph may be recorded
beside it), so ``warmup="deferred"`` compiles only once the process has stopped rendering for a
while: between ComfyUI's prompts, not while a queue of them runs back to back.
"""
from __future__ import annotations

import contextlib
import threading
import time
from typing import Iterator


class RenderActivity:
    """Counts the renders in progress and remembers when the last one ended (any thread)."""

    def __init__(self, quiet_s: float) -> None:
        self.quiet_s = quiet_s  # how long no render may run before :meth:`wait_for_quiet` returns
        self._changed = threading.Condition()
        self._active = 0
        self._last_end = time.monotonic()

    @contextlib.contextmanager
    def rendering(self) -> Iterator[None]:
        """Mark the body as a render in progress."""
        with self._changed:
            self._active += 1
        try:
            yield
        finally:
            with self._changed:
                self._active -= 1
                self._last_end = time.monotonic()
                self._changed.notify_all()

    def wait_for_quiet(self) -> None:
        """Return once no render has run for ``quiet_s`` seconds; a render that starts meanwhile
        starts the spell again at its end."""
        with self._changed:
            while True:
                if self._active:
                    self._changed.wait()
                    continue
                left = self._last_end + self.quiet_s - time.monotonic()
                if left <= 0:
                    return
                self._changed.wait(left)
