"""Ending a finished one-shot process without Python's teardown.

A process that rendered on a GPU spends seconds in its teardown after the MP4 is already in
place: destructors of thousands of modules and tensors, the CUDA context and its memory pools,
Triton's and Inductor's caches and worker pools. Nothing of ours needs that teardown (every file
is published, every temporary removed, before the command returns), yet the user waits for it
before the shell prompt or the next pipeline step comes back. A one-shot command therefore ends
with :func:`exit_now` once its work and its messages are out.
"""
from __future__ import annotations

import logging
import os
import sys
from typing import NoReturn

__all__ = ["exit_now"]


def exit_now(status: int) -> NoReturn:
    """Flush what the user reads, then end the process with ``status`` at once.

    Only for the end of a command that owns its process (never in a library call or a test
    runner): ``atexit`` hooks and ``finally`` blocks of other threads do not run.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can reach the user
            pass
    logging.shutdown()
    os._exit(status)
