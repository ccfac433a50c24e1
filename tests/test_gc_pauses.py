"""The interpreter's collections during a clip, timed (CollectorPauses)."""
from __future__ import annotations

import gc
import threading

import pytest

from ditto_core.gc_pauses import CollectorPauses
from tests.waiting import wait_until


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
    assert pauses.passes == 2 and 0 < pauses.full_seconds <= pauses.seconds
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


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def _frozen_garbage():
    import weakref

    cycle = _Cycle()
    return weakref.ref(cycle)  # the cycle is garbage once this returns; only the collector frees it


def test_frozen_objects_are_skipped_by_full_collections_until_the_thaw(thawed, collector_on):
    from ditto_core.gc_pauses import freeze_live_objects

    garbage = _frozen_garbage()
    assert freeze_live_objects(seconds=0.3)
    assert gc.get_freeze_count() > 0
    gc.collect()
    assert garbage() is not None  # frozen: not even looked at
    wait_until(lambda: gc.get_freeze_count() == 0, 10)
    assert gc.get_freeze_count() == 0  # thawed on its own
    gc.collect()
    assert garbage() is None


def test_a_second_freeze_takes_in_new_objects_and_keeps_the_first_thaw_time(thawed, collector_on):
    import time

    from ditto_core.gc_pauses import freeze_live_objects, thaw_live_objects

    assert freeze_live_objects(seconds=60)
    later = _frozen_garbage()
    assert freeze_live_objects(seconds=0.01)  # not a thaw 0.01 s from now
    gc.collect()
    assert later() is not None  # frozen by the second call
    time.sleep(0.5)
    assert gc.get_freeze_count() > 0
    thaw_live_objects()
    gc.collect()
    assert later() is None

    assert freeze_live_objects(seconds=0.2)
    assert freeze_live_objects(seconds=60)  # nor a thaw put off to 60 s from now
    wait_until(lambda: gc.get_freeze_count() == 0, 10)
    assert gc.get_freeze_count() == 0


def test_an_earlier_freeze_of_someone_elses_does_not_stop_ours(thawed, collector_on, caplog, monkeypatch):
    """The device's Python holds objects frozen by someone else, and refusing to freeze beside
    them left ComfyUI's full collection after each prompt walking every object."""
    import logging

    from ditto_core import gc_pauses
    from ditto_core.gc_pauses import freeze_live_objects, thaw_live_objects

    monkeypatch.setattr(gc_pauses._FREEZE, "_adopted", False)
    earlier = _frozen_garbage()
    gc.freeze()  # someone else's freeze, made before ours
    garbage = _frozen_garbage()
    with caplog.at_level(logging.INFO, logger=gc_pauses.__name__):
        assert freeze_live_objects(seconds=60)
        assert freeze_live_objects(seconds=60)  # announced once
    assert sum("were frozen (gc.freeze) before Ditto" in r.getMessage() for r in caplog.records) == 1
    gc.collect()  # the host's collection: ours and theirs skipped
    assert garbage() is not None and earlier() is not None
    thaw_live_objects()  # thaws both, and collects what the host's collection skipped
    assert gc.get_freeze_count() == 0 and garbage() is None and earlier() is None


@pytest.mark.parametrize("busy", [None, "video", "node"])
def test_the_thaw_collects_what_a_full_collection_skipped_unless_work_is_under_way(thawed, collector_on, busy):
    from ditto_core.gc_pauses import freeze_live_objects, thaw_live_objects
    from ditto_core.host_memory import video_started

    garbage = _frozen_garbage()
    assert freeze_live_objects(seconds=60)
    gc.collect()  # the host's collection after a prompt: the frozen cycle is skipped
    assert garbage() is not None
    span = video_started() if busy == "video" else None
    node = CollectorPauses() if busy == "node" else None  # as a node's timer holds one
    if node is not None:
        node.__enter__()
    try:
        thaw_live_objects()
        assert (garbage() is not None) == (busy is not None)  # a render, a node's work: never stalled for it
    finally:
        if span is not None:
            span.end()
        if node is not None:
            node.__exit__(None, None, None)
    assert not CollectorPauses.any_open()
    gc.collect()
    assert garbage() is None


def test_the_thaw_collects_nothing_when_no_full_collection_ran(thawed, collector_on):
    from ditto_core.gc_pauses import freeze_live_objects, thaw_live_objects

    garbage = _frozen_garbage()
    assert freeze_live_objects(seconds=60)
    gc.collect(0)  # a young-generation collection skips nothing that was old
    thaw_live_objects()
    assert garbage() is not None  # left to the collector's own schedule, as without the freeze
    gc.collect()
    assert garbage() is None


def test_after_enough_skipped_collections_in_a_row_one_sees_everything(thawed, collector_on):
    from ditto_core.gc_pauses import MAX_SKIPPED, freeze_live_objects, thaw_live_objects
    from ditto_core.host_memory import video_started

    span = video_started()  # back to back: every thaw finds a video being made
    try:
        for _ in range(MAX_SKIPPED):
            assert freeze_live_objects(seconds=60)
            gc.collect()  # the host's, skipping the frozen objects
            thaw_live_objects()  # no collection: a render is under way
        garbage = _frozen_garbage()
        for _ in range(2):  # left out until a collection has seen everything
            assert not freeze_live_objects(seconds=60)
            assert gc.get_freeze_count() == 0
        gc.collect()  # the host's next: sees everything
        assert garbage() is None
        assert freeze_live_objects(seconds=60)  # and freezing resumes
    finally:
        span.end()


def test_a_process_freeze_keeps_what_lived_before_it_and_collects_what_comes_after(thawed, collector_on):
    """The CLI's render freezes its start-up for good: no thaw comes, later garbage is collected."""
    import time

    from ditto_core.gc_pauses import freeze_for_the_process

    before = _frozen_garbage()
    assert freeze_for_the_process() > 0  # (frozen objects freed since are no longer counted)
    after = _frozen_garbage()
    with CollectorPauses() as pauses:
        gc.collect()
    assert pauses.full == 1
    assert before() is not None, "a full collection walked the frozen start-up"
    assert after() is None, "garbage made after the freeze must be collected"
    time.sleep(0.2)
    assert gc.get_freeze_count() > 0  # no timer thaws it


def test_a_process_freeze_that_collects_first_frees_the_garbage_made_before_it(thawed, collector_on):
    """The standalone live server collects its warm-up's garbage before freezing what serves."""
    from ditto_core.gc_pauses import freeze_for_the_process

    garbage = _frozen_garbage()
    assert freeze_for_the_process(collect_first=True) > 0
    assert garbage() is None, "the warm-up's garbage must be freed, not frozen"
