"""``LiveRuntime(motion_first=True)``: a round's motion on the device holds back the render
thread's next batch, and nothing else (the GPU side is measured by bench/bench_live.py
``--motion-first 0 1``)."""
from __future__ import annotations

import threading

import pytest

from ditto_core.errors import InputError
from ditto_core.live import LiveRuntime
from ditto_core.live.motion_first import MotionFirst
from tests.live_support import RecordingRenderer, light_pipeline


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    return light_pipeline(tmp_path_factory.mktemp("motion_first"))


def _batch_goes_during_the_round(turns: MotionFirst, claim: bool, patience: float) -> bool:
    """Whether a render batch started during a motion round (its GPU work claimed or not) got
    going within ``patience`` seconds, the round still open (the test holds it open: a batch
    that goes at all meanwhile did not wait for it)."""
    going = threading.Event()
    with turns.motion_round(None) as on_device:
        if claim:
            on_device()
        batch = threading.Thread(target=lambda: (turns.before_batch(None), going.set()))
        batch.start()
        went = going.wait(patience)
    batch.join(5)
    assert going.is_set()  # whatever it waited for, the batch goes once the round is over
    return went


def test_a_batch_waits_for_a_round_on_the_device_and_only_then():
    assert not _batch_goes_during_the_round(MotionFirst(enabled=True), claim=True, patience=0.3)
    # A round with nothing due holds nothing; off, nothing waits (generous: a loaded machine's threads start late).
    assert _batch_goes_during_the_round(MotionFirst(enabled=True), claim=False, patience=5)
    assert _batch_goes_during_the_round(MotionFirst(enabled=False), claim=True, patience=5)


def test_a_round_that_fails_still_lets_the_render_go():
    turns = MotionFirst(enabled=True)
    with pytest.raises(RuntimeError):
        with turns.motion_round(None) as on_device:
            on_device()
            raise RuntimeError("a bug in the round")
    done = threading.Event()
    threading.Thread(target=lambda: (turns.before_batch(None), done.set())).start()
    assert done.wait(5)


def test_the_runtime_gives_its_renderer_the_turn_and_can_switch_it(pipeline):
    renderer = RecordingRenderer()
    renderer.before_batch = None  # the hook an EngineRenderer has
    runtime = LiveRuntime(pipeline, renderer=renderer, motion_first=True)
    try:
        for enabled in (True, False):
            runtime.motion_first.enabled = enabled
            ended = threading.Event()
            with runtime.motion_first.motion_round(None) as on_device:
                on_device()
                threading.Thread(target=lambda: (renderer.before_batch(), ended.set())).start()
                assert ended.wait(0.3 if enabled else 5) is not enabled  # held while the round is open
            assert ended.wait(5)
    finally:
        runtime.shutdown()


@pytest.mark.parametrize("value", [1, "yes", None])
def test_motion_first_must_be_true_or_false(pipeline, value):
    with pytest.raises(InputError, match="motion_first must be True or False"):
        LiveRuntime(pipeline, renderer=RecordingRenderer(), motion_first=value)
