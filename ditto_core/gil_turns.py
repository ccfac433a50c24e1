"""Short GIL turns while our background threads (a compile, the video encoders) run beside a render.

PyTorch releases the GIL inside every op, and a thread that wants it back waits up to the
interpreter's switch interval (5 ms by default) while another thread runs Python. A render
thread issuing thousands of small ops beside a thread that runs Python for long stretches
(Dynamo tracing, the encoders' packet handling) then spends most of its time waiting: motion
sampling and eager rendering ran several times slower beside a background compile on an H200.
Handing the GIL over every ``seconds`` instead bounds each wait to that. The interval is
process-wide: it is set while at least one holder is inside and restored after the last.
"""
from __future__ import annotations

import contextlib
import sys
import threading
from typing import Iterator, Optional

SHORT_INTERVAL = 2e-4

_holders: list[float] = []  # [interval before the first holder, one entry per holder inside]
_lock = threading.Lock()


@contextlib.contextmanager
def short_gil_turns(seconds: Optional[float] = None) -> Iterator[None]:
    """Run the block with the switch interval at most ``seconds`` (:data:`SHORT_INTERVAL`), then restore it."""
    seconds = SHORT_INTERVAL if seconds is None else seconds
    with _lock:
        if not _holders:
            _holders.append(sys.getswitchinterval())
            sys.setswitchinterval(min(seconds, _holders[0]))
        _holders.append(seconds)
    try:
        yield
    finally:
        with _lock:
            _holders.pop()
            if len(_holders) == 1:
                sys.setswitchinterval(_holders.pop())
