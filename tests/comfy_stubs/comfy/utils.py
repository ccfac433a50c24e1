"""Stand-in for ``comfy.utils``: a ProgressBar that records its updates for the tests."""
from __future__ import annotations

UPDATES: list[tuple[int, int]] = []
"""Every ``(value, total)`` any bar reported, in order; tests clear and inspect it."""


class ProgressBar:
    def __init__(self, total, node_id=None):
        self.total = total
        self.current = 0
        self.node_id = node_id

    def update_absolute(self, value, total=None, preview=None):
        if total is not None:
            self.total = total
        self.current = min(value, self.total)
        UPDATES.append((self.current, self.total))

    def update(self, value):
        self.update_absolute(self.current + value)
