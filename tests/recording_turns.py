"""A CUDA-graph recording turn held on another thread, for the CPU tests of what must wait for it
(``ditto_core.cuda_graphs``: only the turn-taking runs, nothing is recorded)."""
from __future__ import annotations

import contextlib
import threading
from typing import Callable, Iterator

import torch

from ditto_core import cuda_graphs


@contextlib.contextmanager
def recording_elsewhere() -> Iterator[None]:
    """Holds a recording turn on another thread for the block, given (not put off) before the
    block starts (the caller picks the allocator by patching ``cuda_graphs.uses_cuda_malloc_async``)."""
    recording, leave, given = threading.Event(), threading.Event(), []

    def record() -> None:
        with cuda_graphs.recording_turn(torch.device("cuda"), wait=True) as allowed:
            given.append(allowed)
            recording.set()
            leave.wait(10)

    recorder = threading.Thread(target=record)
    recorder.start()
    try:
        assert recording.wait(10) and given == [True]
        yield
    finally:
        leave.set()
        recorder.join(10)


def started_and_waiting(*calls: Callable[[], object]) -> list[threading.Thread]:
    """Starts each call on a thread of its own; asserts that all are still running 0.2 s later."""
    threads = [threading.Thread(target=call) for call in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(0.2)
    assert all(thread.is_alive() for thread in threads)
    return threads
