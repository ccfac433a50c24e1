"""Termination signals that unwind like Ctrl-C.

By default SIGTERM (``kill``, a container or job scheduler stopping us) and SIGHUP (the
terminal closing) end the process on the spot: no ``finally`` block, ``with`` exit or
``atexit`` hook runs, so a render in progress leaves its partial MP4 and its temporary
folder behind. Inside :func:`terminate_as_interrupt` they instead raise :class:`Terminated`,
a :class:`KeyboardInterrupt`, so every clean-up written for Ctrl-C runs for them too, and
:func:`exit_status` gives the shell's usual status (128 + the signal's number: 143 for
SIGTERM, 129 for SIGHUP, 130 for Ctrl-C).
"""
from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator

__all__ = ["Terminated", "exit_status", "terminate_as_interrupt"]

TERMINATION_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))
"""The signals turned into :class:`Terminated` (Windows has no SIGHUP)."""


class Terminated(KeyboardInterrupt):
    """A termination signal arrived; raised in the main thread wherever it was running."""

    def __init__(self, signum: int):
        super().__init__(f"terminated by {signal.Signals(signum).name}")
        self.signum = signum


def exit_status(interrupt: KeyboardInterrupt) -> int:
    """The process exit status for an interrupt: 128 + the number of the signal behind it."""
    return 128 + getattr(interrupt, "signum", signal.SIGINT)


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Within the block, a termination signal raises :class:`Terminated` in the main thread.

    Only the first one does: a second signal arriving while the first one's clean-up runs is
    ignored, so the clean-up is not cut short (SIGKILL remains for the impatient). Outside
    the main thread, where Python cannot install handlers, the block runs unchanged. The
    previous handlers are restored on leaving.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    raised = []

    def handle(signum, frame):
        if not raised:
            raised.append(signum)
            raise Terminated(signum)

    previous = {signum: signal.signal(signum, handle) for signum in TERMINATION_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)  # None: set outside Python
