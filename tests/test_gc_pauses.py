"""The interpreter's collections during a clip, timed (CollectorPauses)."""
from __future__ import annotations

import gc
import threading

import pytest

from ditto_core.gc_pauses import CollectorPauses


def _cycles(count: int) -> None:
    """Garbage only the cyclic collector frees, allocated at a rate that triggers it."""
    for _ in range(count):
        a: list = []
        a.append(a)


@pytest.fixture
def collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    (gc.enable if was else gc.disable)()


def test_pauses_count_every_collection_while_open_and_none_after(collector_on):
    gc.collect()  # before: not counted
    with CollectorPauses() as pauses:
        gc.collect()
        gc.collect(0)
    assert pauses.full == 1 and pauses.seconds > 0 and 0 < pauses.longest <= pauses.seconds
    seen = pauses.seconds
    gc.collect()
    assert pauses.seconds == seen and pauses.full == 1
    assert pauses.stages() == {"python_gc": seen, "python_gc_full": 1.0, "python_gc_longest": pauses.longest}


def test_automatic_collections_are_counted_on_any_thread(collector_on):
    with CollectorPauses() as pauses:
        worker = threading.Thread(target=_cycles, args=(50_000,))
        worker.start()
        worker.join()
    assert pauses.seconds > 0  # 50k cycles pass gen 0's threshold (700) many times
