"""Waiting in a test for what another thread does (one home for the poll the tests share)."""
from __future__ import annotations

import time
from typing import Callable


def wait_until(condition: Callable[[], object], seconds: float) -> bool:
    """Poll ``condition`` every 10 ms until it holds or ``seconds`` have passed; whether it holds."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True
