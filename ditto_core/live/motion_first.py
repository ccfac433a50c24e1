"""The live runtime's motion rounds ahead of its next render batch on the device.

A round's LMDM window is thousands of small kernels in a chain; beside warp+decode batches each
of them waits for room among the render's long kernels, and the window takes many times what it
takes alone (docs/LIVE.md). With :class:`MotionFirst` on, the render thread starts no batch while
a motion round is on the device: it lets the batch in flight end, waits for the round, then goes
on. The round then shares the device with one batch at most (none, when both threads' work is on
one CUDA stream: ``LiveRuntime(one_stream=True)``).
"""
from __future__ import annotations

import contextlib
import threading
from typing import Callable, Iterator, Optional

import torch


class MotionFirst:
    """Turns between a runtime's motion thread (whole rounds) and its render thread (batch by batch).

    Off (``enabled`` False) both calls return at once, and the render thread may queue a round's
    batches back to back.
    """

    def __init__(self, enabled: bool = False) -> None:
        self.enabled = enabled
        self._turn = threading.Condition()
        self._motion_on_device = False

    @contextlib.contextmanager
    def motion_round(self, stream: Optional[torch.cuda.Stream]) -> Iterator[Callable[[], None]]:
        """One round of the motion thread, whose GPU work runs on ``stream`` (None off CUDA).
        Yields ``on_device``, to be called before the round's first GPU work: from then until
        that work has run the render thread starts no batch. A round that calls it never (no
        stream due) leaves the render thread alone."""
        claimed = False

        def on_device() -> None:
            nonlocal claimed
            if self.enabled and not claimed:
                with self._turn:
                    self._motion_on_device = claimed = True

        try:
            yield on_device
            if claimed and stream is not None:
                stream.synchronize()
        finally:
            if claimed:
                with self._turn:
                    self._motion_on_device = False
                    self._turn.notify_all()

    def before_batch(self, stream: Optional[torch.cuda.Stream]) -> None:
        """Called by the render thread before each batch it queues on ``stream``: waits for the
        batch before it, then for a motion round in progress."""
        if not self.enabled:
            return
        if stream is not None:
            stream.synchronize()
        with self._turn:
            self._turn.wait_for(lambda: not self._motion_on_device)
