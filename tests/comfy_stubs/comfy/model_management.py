"""Stand-in for ``comfy.model_management``: the interrupt flag and its check."""
from __future__ import annotations

import threading


class InterruptProcessingException(Exception):
    pass


_lock = threading.RLock()
_interrupted = False


def interrupt_current_processing(value: bool = True) -> None:
    global _interrupted
    with _lock:
        _interrupted = value


def throw_exception_if_processing_interrupted() -> None:
    global _interrupted
    with _lock:
        if _interrupted:
            _interrupted = False
            raise InterruptProcessingException()
