"""One callback type for long work: progress reporting and cancellation in one place.

The CLI maps it to a terminal bar, the ComfyUI nodes to ``comfy.utils.ProgressBar`` plus
ComfyUI's interrupt check. A callback signals cancellation by raising (ComfyUI raises its
own ``InterruptProcessingException``; headless code raises :class:`~ditto_core.errors.Interrupted`).
"""
from __future__ import annotations

from typing import Callable, Optional

ProgressCallback = Callable[[int, int], None]
"""``callback(done, total)``; may raise to cancel the work in progress."""


def report(callback: Optional[ProgressCallback], done: int, total: int) -> None:
    if callback is not None:
        callback(done, total)
