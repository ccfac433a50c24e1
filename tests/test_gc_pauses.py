"""The interpreter's collections during a clip: timed (CollectorPauses) and put off."""
from __future__ import annotations

import gc
import threading

import pytest

from ditto_core.gc_pauses import CollectorPauses, collections_put_off


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


def test_put_off_stops_automatic_collections_but_not_explicit_ones(collector_on):
    with CollectorPauses() as pauses, collections_put_off():
        assert not gc.isenabled()
        _cycles(50_000)
        assert pauses.seconds == 0
        assert gc.collect() >= 50_000  # explicit collections still run (and free the cycles)
        assert pauses.full == 1
    assert gc.isenabled()


def test_put_off_blocks_share_one_switch_across_threads(collector_on):
    inner_entered, release = threading.Event(), threading.Event()

    def other() -> None:
        with collections_put_off():
            inner_entered.set()
            release.wait(10)

    with collections_put_off():
        worker = threading.Thread(target=other)
        worker.start()
        assert inner_entered.wait(10)
    assert not gc.isenabled()  # the other thread's block is still open
    release.set()
    worker.join()
    assert gc.isenabled()


def test_put_off_leaves_a_disabled_collector_disabled():
    was = gc.isenabled()
    gc.disable()
    try:
        with collections_put_off():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()
