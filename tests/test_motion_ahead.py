"""Motion generated ahead of the render: the same motion and frames as the whole-clip path,
rows waited for, worker failures raised in the render, a cancelled render stops the worker.

Random networks on the CPU (the real LMDM at 2 steps); warp+decode is the tiny stand-in of
``tests/test_nodes_execution.py`` so frames cost milliseconds. ``motion_ahead=True`` forces the
worker on a CPU, where the pipeline's default is the serial path.
"""
from __future__ import annotations

import threading
import time
from dataclasses import replace

import av
import pytest
import torch

from ditto_core.audio.audio_features import AudioFeatures
from ditto_core.errors import Interrupted
from ditto_core.motion.motion_ahead import MotionAhead, start_motion_ahead
from ditto_core.motion.motion_options import MotionOptions
from ditto_core.motion.motion_sequence import MotionSequence
from ditto_core.pipeline import DittoPipeline
from ditto_core.registration.options import RegistrationOptions
from tests.test_nodes_execution import TinyDecoder, TinyWarp

FRAMES = 230  # four windows at the default overlap
NO_DETECTOR = RegistrationOptions(detect_face=False)


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    pipe = DittoPipeline.random(tmp_path_factory.mktemp("ahead"), device="cpu", compile=False, batch_size=8,
                                motion_ahead=True)
    pipe.models = replace(pipe.models, warp_network=TinyWarp().eval(), decoder=TinyDecoder().eval())
    return pipe


def _frames(seed: int, count: int, size: int = 128) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    coarse = torch.rand(count, 3, 6, 6, generator=g)
    image = torch.nn.functional.interpolate(coarse, size=(size, size), mode="bicubic", align_corners=False)
    return (image.clamp(0, 1) * 255).round().to(torch.uint8).permute(0, 2, 3, 1).contiguous()


@pytest.fixture(scope="module")
def image_source(pipeline):
    return pipeline.register(_frames(1, 1), NO_DETECTOR, is_image=True)


@pytest.fixture(scope="module")
def video_source(pipeline):
    return pipeline.register(_frames(2, 7), NO_DETECTOR, is_image=False)


def _features(frames: int = FRAMES, seed: int = 0) -> AudioFeatures:
    g = torch.Generator().manual_seed(seed)
    return AudioFeatures(features=torch.randn(frames, 1024, generator=g), duration_s=frames / 25)


def _same_motion(got: MotionSequence, expected: MotionSequence) -> None:
    assert len(got) == len(expected)
    assert torch.equal(got.source_index, expected.source_index)
    torch.testing.assert_close(got.kp_source, expected.kp_source, rtol=0, atol=1e-6)
    torch.testing.assert_close(got.kp_driving, expected.kp_driving, rtol=0, atol=1e-6)


@pytest.mark.parametrize("kind, options", [
    ("image", MotionOptions(steps=2, seed=3, delta_eye_open_n=0)),  # random blinks over the whole clip
    ("video", MotionOptions(steps=2, seed=4)),  # the source frames ping-pong
    ("image", MotionOptions(steps=2, seed=5, overlap_v2=30, smo_k_d=5, fix_kp_cond=2, delta_yaw=4.0)),
])
def test_motion_ahead_equals_the_whole_clip_motion(pipeline, image_source, video_source, kind, options):
    source = image_source if kind == "image" else video_source
    expected = pipeline.motion(source, _features(), options)
    with pipeline.motion_for_render(source, _features(), options) as motion:
        assert isinstance(motion, MotionAhead)
        motion.wait_rows(len(motion))
        _same_motion(motion, expected)
    assert motion.ready == FRAMES and motion.seconds is not None
    assert pipeline.times.seconds["motion"] == motion.seconds


def test_fades_and_the_serial_setting_take_the_whole_clip_path(pipeline, image_source):
    faded = MotionOptions(steps=2, fade_type="s", fade_in=5, fade_out=5)
    with pipeline.motion_for_render(image_source, _features(), faded) as motion:
        assert not isinstance(motion, MotionAhead)
        _same_motion(motion, pipeline.motion(image_source, _features(), faded))
    serial = DittoPipeline(pipeline.models, pipeline.aux, pipeline.hubert, compile=False)  # CPU default: serial
    with serial.motion_for_render(image_source, _features(), MotionOptions(steps=2)) as motion:
        assert not isinstance(motion, MotionAhead)


def _slow_rows(frames: int, pause: float, fail_after: int = -1):
    """A window chain of ``frames`` rows that settles 60 rows at a time, ``pause`` seconds apart
    (the rows are zero vectors, no sampled motion: only the waiting is under test)."""
    def rows():
        vectors = torch.zeros(frames, 265)
        for k, ready in enumerate([*range(60, frames, 60), frames]):
            time.sleep(pause)
            if k == fail_after:
                raise RuntimeError("the sampler broke")
            yield ready, vectors
    return rows


@pytest.mark.reliability(
    area="Soak and faults",
    case="the motion generated ahead of the render (motion_ahead=True) under ComfyUI's cudaMallocAsync allocator",
    behaviour="the render is marked as work beside CUDA-graph recordings: the worker's LMDM windows stay eager "
              "while it runs, so no recording counts the render's allocations as its own ('uncaptured free' warnings)")
def test_under_cuda_malloc_async_the_motion_worker_never_records_while_the_render_runs(pipeline, image_source,
                                                                                        monkeypatch):
    """ComfyUI's allocator counts every thread's allocations during a recording as the recording's:
    a window graph recorded on the worker would take the render's (session 35: 20 warnings in a
    real ComfyUI's first prompt). The render is marked as background work, so the worker's windows
    stay eager until it ends; the native allocator records as before."""
    from ditto_core import cuda_graphs
    from ditto_core.cuda_graphs import recording_turn

    def turn_elsewhere() -> bool:
        allowed = []

        def ask():
            with recording_turn(torch.device("cuda")) as yes:
                allowed.append(yes)
        thread = threading.Thread(target=ask)
        thread.start()
        thread.join()
        return allowed[0]

    monkeypatch.setattr(cuda_graphs, "uses_cuda_malloc_async", lambda device: True)
    with pipeline.motion_for_render(image_source, _features(), MotionOptions(steps=2, seed=6)) as motion:
        assert isinstance(motion, MotionAhead)
        assert not turn_elsewhere()
        next(iter(pipeline.iter_frames(image_source, motion)))
        assert not turn_elsewhere()
    assert turn_elsewhere()


def test_the_render_waits_for_rows_and_matches_the_whole_clip_render(pipeline, image_source):
    options = MotionOptions(steps=2, seed=6)
    expected = pipeline.motion(image_source, _features(), options)
    whole = torch.cat(list(pipeline.iter_frames(image_source, expected)))
    with pipeline.motion_for_render(image_source, _features(), options) as motion:
        streamed = torch.cat(list(pipeline.iter_frames(image_source, motion)))
    assert torch.equal(streamed, whole)

    # A worker slower than the render: every batch waits for its rows, none reads unset ones.
    plain = replace(options, delta_eye_open_n=-1)
    seen = []
    with start_motion_ahead(_slow_rows(FRAMES, 0.02), FRAMES, image_source, pipeline.models.stitch_network,
                            pipeline.with_blink_table(plain)) as motion:
        original = motion.wait_rows

        def spy(stop):
            original(stop)
            seen.append((stop, motion.ready))

        motion.wait_rows = spy
        frames = sum(batch.shape[0] for batch in pipeline.iter_frames(image_source, motion))
    assert frames == FRAMES
    assert all(ready >= stop for stop, ready in seen) and seen[0][1] < FRAMES  # the render started early
    assert motion.waited_seconds > 0


def test_a_worker_failure_is_raised_in_the_render_and_leaves_no_file(pipeline, image_source, tmp_path):
    options = MotionOptions(steps=2)
    out = tmp_path / "clip.mp4"
    from ditto_core.video.writer import VideoWriter

    with pytest.raises(RuntimeError, match="the sampler broke"):
        with start_motion_ahead(_slow_rows(FRAMES, 0.0, fail_after=2), FRAMES, image_source,
                                pipeline.models.stitch_network, pipeline.with_blink_table(options)) as motion:
            with VideoWriter(out, width=128, height=128, fps=25) as writer:
                for frames in pipeline.iter_frames(image_source, motion):
                    writer.write(frames)
    assert list(tmp_path.iterdir()) == []


def test_an_interrupted_render_stops_the_worker(pipeline, image_source, tmp_path, example_dir):
    before = {t for t in threading.enumerate() if t.name == "ditto-motion-ahead"}

    def cancel(done, total):
        if done >= 16:
            raise Interrupted("stopped by the user")

    with pytest.raises(Interrupted):
        pipeline.run(example_dir / "portrait.jpg", example_dir / "speech_24k_mono.wav", tmp_path / "clip.mp4",
                     registration=NO_DETECTOR, motion_options=MotionOptions(steps=2), max_seconds=6.0,
                     progress=cancel)
    assert list(tmp_path.iterdir()) == []
    assert {t for t in threading.enumerate() if t.name == "ditto-motion-ahead"} <= before


def test_run_with_motion_ahead_writes_the_serial_runs_video(pipeline, tmp_path, example_dir):
    serial = DittoPipeline(pipeline.models, pipeline.aux, pipeline.hubert, compile=False, batch_size=8,
                           motion_ahead=False)
    videos = []
    for name, pipe in (("ahead", pipeline), ("serial", serial)):
        out = pipe.run(example_dir / "portrait.jpg", example_dir / "speech_24k_mono.wav", tmp_path / f"{name}.mp4",
                       registration=NO_DETECTOR, motion_options=MotionOptions(steps=2, seed=8), max_seconds=1.0,
                       preset="ultrafast")
        with av.open(str(out)) as container:
            videos.append([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])
    assert len(videos[0]) == len(videos[1]) == 25
    assert all((a == b).all() for a, b in zip(*videos))
