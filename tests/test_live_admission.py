"""Admission of live streams by the device's measured load (``ditto_core/live/admission.py``).

A runtime refuses a stream when the open ones and it would need more of the device's time than
``max_load`` in real time, at the cost per frame its last rounds measured; the streams already
open keep going. The warp+decode stand-in sleeps a fixed time per frame, so what a frame costs
is known: 40 ms a frame is a whole device for one stream at 25 frames a second.
"""
from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest

from ditto_core.__main__ import build_parser
from ditto_core.live import AvatarStream, CapacityError, LiveRuntime, StreamConfig
from ditto_core.live.admission import LOAD_WINDOW_S, MAX_LOAD, check_admission, measure_load
from ditto_core.live.runtime import RuntimeStopped
from ditto_core.motion.motion_options import MotionOptions
from tests.live_support import ProjectionSampler, RecordingRenderer, light_pipeline
from tests.test_conditions import random_source

FPS = 25


class PerFrameRenderer(RecordingRenderer):
    """Noise frames that take ``seconds`` each to "render"."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def render(self, jobs):
        time.sleep(self.seconds * sum(job.motion.kp_driving.shape[0] for job in jobs))
        return super().render(jobs)


def _round(frames: int, render_s: float, ended: float, motion_s: float = 0.0):
    return SimpleNamespace(frames=frames, render_s=render_s, motion_s=motion_s, ended=ended)


def test_the_load_is_the_busier_threads_time_per_frame_over_the_last_rounds():
    now = 100.0
    rounds = [_round(40, 9.0, now - LOAD_WINDOW_S - 0.1),  # before the window: not counted
              _round(10, 0.2, now - 1.5, motion_s=0.1), _round(20, 0.4, now - 0.5, motion_s=0.7)]
    load = measure_load(rounds, now, FPS)
    assert load.seconds_per_frame == pytest.approx(0.8 / 30)  # motion's 0.8 s beats render's 0.6 s
    assert load.busy == pytest.approx(0.8 / LOAD_WINDOW_S)
    assert load.per_stream(FPS) == pytest.approx(FPS * 0.8 / 30)
    # Less than a second of one stream's video says nothing yet.
    assert measure_load([_round(FPS - 1, 5.0, now - 0.1)], now, FPS) is None
    assert measure_load([], now, FPS) is None


def test_admission_counts_the_open_streams_and_the_new_one_against_the_limit():
    each_10 = SimpleNamespace(per_stream=lambda fps: 0.1)
    check_admission(6, 8, each_10, 0.75, FPS)  # 7 streams: 70 %
    with pytest.raises(CapacityError, match=r"about 10% of its time .* the 7 open and one more would need 80% "
                                            r"\(the limit is 75%"):
        check_admission(7, 8, each_10, 0.75, FPS)
    check_admission(7, 8, each_10, None, FPS)  # no load limit
    check_admission(7, 8, None, 0.75, FPS)  # nothing measured yet
    check_admission(0, 8, SimpleNamespace(per_stream=lambda fps: 3.0), 0.75, FPS)  # one slow stream beats none
    with pytest.raises(CapacityError, match="at capacity: 8 of 8 live streams"):
        check_admission(8, 8, None, None, FPS)


def _open_and_measure(runtime, streams_after):
    """Open one idle stream, take its frames until the runtime has measured a load, then try to
    open another; returns (the second stream's error or None, frames the first gave afterwards)."""

    async def run():
        source = random_source(1, is_image=True, seed=2)
        config = StreamConfig(output="rgb", idle=True)
        first = AvatarStream(runtime, source, MotionOptions(), config)
        deadline = time.monotonic() + 60
        while runtime.load() is None and time.monotonic() < deadline:
            await first.__anext__()
        assert runtime.load() is not None, "no load measured within a minute"
        refused, second = None, None
        try:
            second = AvatarStream(runtime, source, MotionOptions(), config)
        except CapacityError as error:
            refused = error
        later = [await first.__anext__() for _ in range(streams_after)]
        stats = first.stats()
        for stream in (first, second):
            if stream is not None:
                stream.close()
        return refused, later, stats

    try:
        return asyncio.run(run())
    finally:
        runtime.shutdown()


def _runtime(pipeline, seconds_per_frame, **options):
    runtime = LiveRuntime(pipeline, max_streams=4, renderer=PerFrameRenderer(seconds_per_frame), **options)
    runtime.sampler = lambda options: ProjectionSampler()
    return runtime


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    return light_pipeline(tmp_path_factory.mktemp("admission"))


@pytest.mark.reliability(area="Live streams", case="a stream opening on a runtime that stops meanwhile (its models "
                                                   "unloaded between the avatar lookup and the open)",
                         behaviour="refused with the stop's reason ('gone' over WebSocket), never admitted to "
                                   "wait for frames that no worker renders")
def test_a_stopped_runtime_admits_no_stream(pipeline):
    runtime = _runtime(pipeline, 0.0)
    runtime.shutdown("the models were unloaded")

    async def open_stream():
        AvatarStream(runtime, random_source(1, is_image=True, seed=2), MotionOptions(), StreamConfig(idle=False))

    with pytest.raises(RuntimeStopped, match="the models were unloaded"):
        asyncio.run(open_stream())
    assert runtime.active_streams == 0


@pytest.mark.reliability(area="Live streams", case="a stream more than the device keeps in real time (below --max-streams)",
                         behaviour="refused with 4429 and the measured cost per stream; the open stream keeps going")
def test_a_device_that_one_stream_fills_refuses_the_second_and_keeps_the_first(pipeline):
    refused, later, stats = _open_and_measure(_runtime(pipeline, 0.04), streams_after=10)
    assert isinstance(refused, CapacityError) and "the device is busy" in str(refused)
    assert [f.index for f in later] == list(range(later[0].index, later[0].index + 10))  # still in order
    assert stats["device_load"] > 0.5 and stats["active_streams"] == 1


def test_a_light_load_admits_the_next_stream(pipeline):
    refused, _, stats = _open_and_measure(_runtime(pipeline, 0.001), streams_after=2)
    assert refused is None
    assert stats["device_load"] < MAX_LOAD / 2 and stats["active_streams"] == 2


def test_without_a_load_limit_only_max_streams_counts(pipeline):
    refused, _, stats = _open_and_measure(_runtime(pipeline, 0.04, max_load=None), streams_after=2)
    assert refused is None and stats["active_streams"] == 2


@pytest.mark.parametrize("value", ["1.5", "-0.1", "nan", "most"])
def test_serve_refuses_a_load_limit_that_is_not_a_share(value, capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--max-load", value])
    assert "--max-load" in capsys.readouterr().err


def test_serve_takes_a_share_or_zero_for_no_limit():
    assert build_parser().parse_args(["serve", "--max-load", "0.5"]).max_load == 0.5
    assert build_parser().parse_args(["serve", "--max-load", "0"]).max_load == 0
    assert build_parser().parse_args(["serve"]).max_load == MAX_LOAD


def test_runtime_refuses_a_load_limit_outside_a_share(pipeline):
    with pytest.raises(ValueError, match="max_load must be a share"):
        LiveRuntime(pipeline, renderer=RecordingRenderer(), max_load=1.5)


@pytest.mark.reliability(area="Live streams", case="clients asking for ever new step counts",
                         behaviour="a runtime keeps at most 4 samplers: one no open stream uses makes room; with all "
                                   "in use the stream is refused naming the step counts it can use")
def test_a_runtime_keeps_a_bounded_set_of_samplers(pipeline, monkeypatch):
    from ditto_core.errors import InputError
    from ditto_core.live import runtime as live_runtime
    from ditto_core.live.runtime import MAX_SAMPLERS

    class StepsSampler(ProjectionSampler):  # the light pipeline's LMDM has no noise schedule to sample with
        def __init__(self, lmdm, steps, **settings):
            super().__init__()
            self.steps = steps

    monkeypatch.setattr(live_runtime, "DDIMSampler", StepsSampler)
    runtime = LiveRuntime(pipeline, max_streams=8, renderer=RecordingRenderer(), max_load=None)
    source = random_source(1, is_image=True, seed=2)
    try:
        def open_with(steps):
            return runtime.open_state(source, MotionOptions(steps=steps), StreamConfig(), deliver=lambda item: None)

        states = [open_with(steps) for steps in range(1, MAX_SAMPLERS + 1)]
        assert open_with(2).sampler is states[1].sampler  # the same settings share one sampler
        with pytest.raises(InputError, match=r"steps=9: .* \(steps 1, 2, 3, 4\); use one of those steps"):
            open_with(9)
        runtime.close_state(states[0])
        assert open_with(9).sampler.steps == 9
        assert sorted(key[0] for key in runtime._samplers) == [2, 3, 4, 9]
    finally:
        runtime.shutdown()
