"""The streamed motion against a float64 transcription of Ditto's online schedule.

``_reference_online`` follows ``stream_pipeline_online.py`` line by line in numpy: ``run_chunk``
feeding (1920 zeros in front, 6480-sample windows every 3200 samples, zero-completed at the
end), ``Wav2FeatHubert.__call__`` (rows [-14, -4) averaged in pairs), the silence lead-in of
the feature buffer (offline ``wav2feat`` of zeros), the ``audio2motion`` worker with its item
buffer, first-window priming, ``_fuse`` over ``min(overlap, valid)`` frames, ``_smo`` and
``_update_kp_cond``, the ``ConditionHandler`` at negative frame indices, and ``MotionStitch`` with
its ``d0`` set from the first window and its 3000-frame blink schedule (the per-frame stitch
loop of the motion-stitch tests). The LMDM is the deterministic :class:`ProjectionSampler` on
both sides; HuBERT is the stub ONNX model, replayed from its weights.
"""
from __future__ import annotations

import asyncio
import math
import time

import numpy as np
import pytest
import torch

from bench.bench_live import _frames_released
from ditto_core.audio.hubert import HUBERT_ONNX_NAME
from ditto_core.errors import InputError
from ditto_core.live import AvatarStream, LiveRuntime, OnlineAudio, StreamConfig
from ditto_core.live.runtime import lmdm_batch
from ditto_core.motion.motion_options import MotionOptions
from tests.live_support import ProjectionSampler, RecordingRenderer, light_pipeline, projection
from tests.test_audio_hubert import _oracle, _stub_rows
from tests.test_conditions import random_source
from tests.test_lmdm_sampler import reference_join
from tests.test_motion_stitch import _reference_stitch, _sequential_fixed_schedule

W = 80


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("live")


@pytest.fixture(scope="module")
def blink_table():
    return 0.01 * torch.randn(6, 63, generator=torch.Generator().manual_seed(6))


@pytest.fixture(scope="module")
def pipeline(workdir, blink_table):
    return light_pipeline(workdir, blink_table)


@pytest.fixture(scope="module")
def stub_weights(workdir, pipeline):
    import onnx
    from onnx import numpy_helper

    tensors = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(workdir / HUBERT_ONNX_NAME)).graph.initializer}
    return tensors["weight"][:, 0, :].astype(np.float64), tensors["bias"].astype(np.float64)


def _soft_emotion(labels) -> np.ndarray:
    logits = np.zeros(8)
    logits[list(labels)] = 8
    e = np.exp(logits - logits.max())
    return e / e.sum()


def _mirror(i: int, n: int) -> int:
    lap, pos = divmod(i, n)
    return pos if lap % 2 == 0 else n - pos - 1


def _reference_online(audio, weights, src, emo_sets, overlap, smooth_k=3):
    """Ditto's online audio -> motion vectors (and the stitch's d0), float64."""
    # -- Wav2Feat for run_chunk, fed as inference.py feeds it --
    padded = np.concatenate([np.zeros(3 * 640), audio.astype(np.float64)])
    chunks = []
    for i in range(0, len(padded), 5 * 640):
        chunk = padded[i : i + 6480]
        chunk = np.pad(chunk, (0, 6480 - len(chunk)))
        chunks.append(_stub_rows(chunk, weights)[-14:-4].reshape(5, 2, 1024).mean(axis=1))

    # -- ConditionHandler --
    emo = np.stack([_soft_emotion(e) for e in emo_sets])
    eye_open = src.eye_open.double().numpy()
    eye_ball = src.eye_ball.double().numpy()
    sc = src.source_kp.double().numpy().reshape(-1)

    def condition(feat, idx):
        frames = range(idx, idx + len(feat))
        parts = [feat, emo[[max(i, 0) % len(emo) for i in frames]]]
        for table in (eye_open, eye_ball):
            parts.append(np.repeat(table[:1], len(feat), 0) if len(table) == 1
                         else table[[_mirror(max(i, 0), len(table)) for i in frames]])
        parts.append(np.repeat(sc[None], len(feat), 0))
        return np.concatenate(parts, axis=1)

    # -- Audio2Motion (online) --
    m = src.motion
    kp_source = np.concatenate([m.scale[0].double().numpy() - 1, *(getattr(m, k)[0].double().numpy()
                                for k in ("pitch", "yaw", "roll", "t", "exp"))])
    P = projection()
    valid = W - overlap
    fuse = min(overlap, valid)  # online: only the frames right before the new ones (offline: overlap)

    audio_feat = _oracle(np.zeros(overlap * 640), weights)
    assert len(audio_feat) == overlap
    cond_idx_start = -len(audio_feat)
    item_buffer = np.zeros((0, 1024))
    res, valid_start, kp, d0 = None, None, kp_source.copy(), None
    global_idx = local_idx = 0
    out = []
    for item in [*chunks, None]:
        is_end = item is None
        if not is_end:
            item_buffer = np.concatenate([item_buffer, item])
        if not is_end and len(item_buffer) < valid:
            continue
        audio_feat = np.concatenate([audio_feat, item_buffer])
        item_buffer = np.zeros((0, 1024))
        while True:
            aud = audio_feat[local_idx : local_idx + W]
            real_valid = valid
            if len(aud) == 0:
                break
            if len(aud) < W:
                if not is_end:
                    break
                real_valid = len(aud)
                aud = np.concatenate([aud, np.repeat(aud[-1:], W - len(aud), 0)])
            pred = condition(aud, global_idx + cond_idx_start) @ P + 0.5 * kp[None]
            res = reference_join(res, pred, valid, fuse, smooth_k)
            kp = res[len(res) - overlap - 1].copy()
            if valid_start is None:
                valid_start = len(res) - fuse
                d0 = res[0].copy()
                local_idx += real_valid
                global_idx += real_valid
                continue
            out.append(res[valid_start : valid_start + real_valid])
            valid_start += real_valid
            local_idx += real_valid
            global_idx += real_valid
            if len(res) > 2 * W:
                cut = len(res) - 2 * W
                res, valid_start = res[cut:], valid_start - cut
            if local_idx >= len(audio_feat):
                break
        if len(audio_feat) > 2 * W:
            cut = len(audio_feat) - 2 * W
            audio_feat, local_idx = audio_feat[cut:], local_idx - cut
        if is_end:
            break
    return np.concatenate(out), d0


def _split(samples: np.ndarray, sizes) -> list[np.ndarray]:
    out, i, k = [], 0, 0
    while i < len(samples):
        n = sizes[k % len(sizes)]
        out.append(samples[i : i + n])
        i, k = i + n, k + 1
    return out


async def _stream_all(runtime, jobs, overlap=75):
    """Run streams concurrently: ``jobs`` = [(source, options, chunks)]; returns each one's frames."""

    async def one(source, options, chunks):
        config = StreamConfig(output="rgb", idle=False, overlap=overlap)
        async with AvatarStream(runtime, source, options, config) as stream:
            for chunk in chunks:
                stream.push_audio(chunk, 16000)
                await asyncio.sleep(0)
            stream.end()
            return stream.id, [f async for f in stream]

    return await asyncio.gather(*(one(*job) for job in jobs))


@pytest.mark.slow  # the per-frame float64 stitch loop: about 5 s on 2 cores
@pytest.mark.parametrize("overlap", [75, 70, 78])
def test_streamed_motion_equals_the_online_reference(pipeline, stub_weights, blink_table, overlap):
    """Two streams at once (batched windows), irregular chunk sizes, every frame against the
    reference; at Ditto's online overlap (75: 5 frames a window) and at 10 and 2 frames a window."""
    runtime = LiveRuntime(pipeline, max_streams=2, renderer=RecordingRenderer())
    sampler = ProjectionSampler()
    runtime.sampler = lambda options: sampler
    g = np.random.default_rng(1)
    cases = [
        # a still portrait: eyes driven, blinks from the table every 7 open frames
        (random_source(1, is_image=True, seed=2), MotionOptions(emo=(3, 4), delta_eye_open_n=7, delta_yaw=4.0),
         0.1 * g.standard_normal(16000 + 1234), [1000, 7001, 333, 4000]),
        # a video source: its frames ping-pong, per-frame emotions loop from negative frame numbers
        (random_source(4, is_image=False, seed=3), MotionOptions(emo=((3,), (4,), (1, 2))),
         0.1 * g.standard_normal(11111), [6480, 3200, 17]),
    ]
    jobs = [(s, o, _split(a.astype(np.float32), sz)) for s, o, a, sz in cases]
    results = asyncio.run(_stream_all(runtime, jobs, overlap))
    runtime.shutdown()
    assert max(sampler.batches) == 2  # the two streams' windows went through one call

    net64 = pipeline.models.stitch_network.double()
    try:
        for (stream_id, frames), (src, opts, audio, _) in zip(results, cases):
            vectors, d0 = _reference_online(audio.astype(np.float32), stub_weights, src,
                                            opts.emo if isinstance(opts.emo[0], tuple) else (opts.emo,), overlap)
            n = len(vectors)
            if overlap == 75:  # 5 frames per 3200 samples (the 1920-sample lead-in counted) + the final window's 5
                assert n == 5 * math.ceil((len(audio) + 1920) / 3200) + 5
            assert n == _frames_released(len(audio), overlap)  # what bench_live expects of every stream
            assert [f.index for f in frames] == list(range(n))
            assert [f.pts for f in frames] == pytest.approx([i / 25 for i in range(n)])
            recorded = sorted(runtime.renderer.motions[stream_id], key=lambda r: r[0])
            got_d = torch.cat([m.kp_driving for _, m in recorded]).double().numpy()
            got_index = torch.cat([m.source_index for _, m in recorded]).tolist()
            schedule = _sequential_fixed_schedule(3000, 6, opts.delta_eye_open_n) if opts.delta_eye_open_n > 0 else [0] * 3000
            rows = [schedule[i % 3000] for i in range(n)]
            opts64 = runtime.pipeline.with_blink_table(opts)
            ref_s, ref_d, ref_index = _reference_stitch(vectors, src, net64, opts64, rows, d0_vector=d0)
            assert got_index == ref_index
            assert got_d.shape == ref_d.shape
            # frame for frame: the largest error of any frame, relative to the keypoints' scale
            per_frame = np.abs(got_d - ref_d).reshape(n, -1).max(axis=1) / np.abs(ref_d).max()
            assert per_frame.max() < 2e-5, per_frame.argmax()
            # each frame carries its own 40 ms of the speech, as 16 kHz PCM16
            speech = np.concatenate([audio, np.zeros(640 * n)])
            for f in frames[:: max(1, n // 7)]:
                expected = np.round(np.clip(speech[640 * f.index : 640 * f.index + 640], -1, 1) * 32767)
                np.testing.assert_allclose(f.audio.numpy(), expected, atol=1)
    finally:
        pipeline.models.stitch_network.float()


def test_online_windows_differ_from_offline_only_by_the_lead_in(pipeline, stub_weights):
    """Online HuBERT windows are the offline ones of the speech without its first 80 samples (the
    1920- instead of 2000-sample lead-in), from the second window on; the first window sees those 80."""
    audio = (0.1 * np.random.default_rng(4).standard_normal(3 * 16000)).astype(np.float32)
    online = OnlineAudio()
    online.push(torch.from_numpy(audio))
    online.end()
    features = []
    while online.has_window():
        features.append(pipeline.hubert.encode_window(online.next_window()))
    features = torch.cat(features).double().numpy()
    offline_shifted = _oracle(audio[80:].astype(np.float64), stub_weights)
    frames = min(len(offline_shifted), len(features)) - 5
    np.testing.assert_allclose(features[5:frames], offline_shifted[5:frames], rtol=1e-4, atol=1e-4)
    offline = _oracle(audio.astype(np.float64), stub_weights)
    assert np.abs(features[:frames] - offline[:frames]).max() > 1e-2  # the 80-sample shift is real
    assert np.abs(features[:5] - offline_shifted[:5]).max() > 1e-6  # and the first window differs


def test_idle_animates_silence_and_clear_drops_queued_speech(pipeline):
    runtime = LiveRuntime(pipeline, max_streams=1, renderer=RecordingRenderer())
    runtime.sampler = lambda options: ProjectionSampler()
    source = random_source(1, is_image=True, seed=2)

    async def run():
        stream = AvatarStream(runtime, source, MotionOptions(), StreamConfig(output="rgb", idle=True))
        idle = [await stream.__anext__() for _ in range(6)]  # no speech at all: the face keeps moving
        assert stream.stats()["silence_windows"] >= 3
        assert all(not f.audio.any() for f in idle)
        stream.push_audio(0.3 * torch.ones(16000 * 20), 16000)  # 20 s queued at once
        await asyncio.sleep(0.3)
        stream.clear()
        assert stream.stats()["buffered_speech_s"] < 20
        after = [await stream.__anext__() for _ in range(25)]
        stream.close()
        return idle, after, stream.stats()

    idle, after, stats = asyncio.run(run())
    runtime.shutdown()
    indices = [f.index for f in idle + after]
    assert indices == sorted(indices) and len(set(indices)) == len(indices)  # pts only move forward
    # speech stops with the clear: the last frames shown are silent again
    assert not any(f.audio.any() for f in after[-5:])
    assert runtime.active_streams == 0


def test_sampler_batches_are_padded_to_powers_of_two():
    assert [lmdm_batch(n) for n in (1, 2, 3, 4, 5, 8, 9, 12, 17)] == [1, 2, 4, 4, 8, 8, 16, 16, 32]


def _five_streams_in_step(pipeline, render_delay: float = 0.0, **settings):
    """Five streams whose speech arrives at once through a runtime with ``settings``: each
    stream's motion (its frames checked in order), the sampler's batches, the round stats and
    the frames of each render call."""
    runtime = LiveRuntime(pipeline, max_streams=5, renderer=RecordingRenderer(delay=render_delay), **settings)
    sampler = ProjectionSampler()
    runtime.sampler = lambda options: sampler
    speech = [(0.1 * np.random.default_rng(20 + i).standard_normal(9000)).astype(np.float32) for i in range(5)]
    sources = [random_source(1, is_image=True, seed=30 + i) for i in range(5)]
    results = asyncio.run(_stream_all(runtime, [(src, MotionOptions(), [audio]) for src, audio in zip(sources, speech)]))
    rounds = runtime.round_stats()
    runtime.shutdown()
    motions = {}
    for position, (stream_id, frames) in enumerate(results):
        assert [f.index for f in frames] == list(range(len(frames)))
        recorded = sorted(runtime.renderer.motions[stream_id], key=lambda r: r[0])
        motions[position] = torch.cat([m.kp_driving for _, m in recorded])
    return motions, sampler.batches, rounds, runtime.renderer.calls


def test_a_round_samples_at_most_round_frames_and_the_rest_follow_in_turn(pipeline):
    """Five streams whose speech arrives in step, rounds of at most two windows (10 frames): every
    sampler call and every render round holds at most two streams, the streams left out of a round
    lead the next, and each stream's motion is the one the uncapped runtime makes."""
    capped, batches, rounds, _ = _five_streams_in_step(pipeline, round_frames=10)
    assert max(batches) <= 2 and rounds["frames"]["max"] <= 10 and rounds["windows"]["max"] <= 2
    whole, whole_batches, _, _ = _five_streams_in_step(pipeline, round_frames=None)
    assert max(whole_batches) > 2  # in step, the uncapped runtime samples more windows at once
    assert capped.keys() == whole.keys()
    for position in whole:
        torch.testing.assert_close(capped[position], whole[position])


def test_rounds_queued_behind_a_slow_render_are_rendered_together(pipeline):
    """Rounds of 10 frames behind a render slower than the motion: with ``render_frames`` 20 a
    round waiting in the queue joins the next pass (render calls of up to 20 frames, never more),
    every stream's frames still in order and its motion the one rendered round by round."""
    joined, _, rounds, calls = _five_streams_in_step(pipeline, render_delay=0.2, round_frames=10, render_frames=20)
    assert 10 < max(calls) <= 20 and rounds["joined"]["max"] == 2 and rounds["frames"]["max"] <= 20
    alone, _, alone_rounds, alone_calls = _five_streams_in_step(pipeline, render_delay=0.2, round_frames=10)
    assert max(alone_calls) <= 10 and alone_rounds["joined"]["max"] == 1
    assert len(calls) < len(alone_calls)
    for position in alone:
        torch.testing.assert_close(joined[position], alone[position])


def test_rounds_start_no_sooner_than_round_interval_apart(pipeline, monkeypatch):
    """``round_interval``: the motion thread starts a round at most once per interval (windows
    due meanwhile wait for the next one); each stream's motion is the one made without it."""
    starts = []
    queue_render = LiveRuntime._queue_render

    def recording(self, jobs, began):
        starts.append(began)
        queue_render(self, jobs, began)

    monkeypatch.setattr(LiveRuntime, "_queue_render", recording)
    paced, _, _, _ = _five_streams_in_step(pipeline, round_frames=10, round_interval=0.05)
    assert len(starts) > 5 and min(b - a for a, b in zip(starts, starts[1:])) >= 0.05
    starts.clear()
    free, _, _, _ = _five_streams_in_step(pipeline, round_frames=10)
    assert min(b - a for a, b in zip(starts, starts[1:])) < 0.05  # without it, capped rounds follow at once
    assert paced.keys() == free.keys()
    for position in free:
        torch.testing.assert_close(paced[position], free[position])


@pytest.mark.parametrize("value", [-0.1, 1.5, True, "0.1"])
def test_round_interval_must_be_seconds_up_to_one(pipeline, value):
    with pytest.raises(InputError, match="round_interval must be seconds"):
        LiveRuntime(pipeline, renderer=RecordingRenderer(), round_interval=value)


def test_the_round_after_a_capped_one_starts_with_the_streams_it_left_out():
    runtime = LiveRuntime.__new__(LiveRuntime)  # only the rotation's state is needed
    runtime._last_sampled = 0
    states = [type("S", (), {"id": i})() for i in (1, 2, 3, 4)]
    assert [s.id for s in runtime._from_last_sampled(states)] == [1, 2, 3, 4]
    runtime._last_sampled = 2
    assert [s.id for s in runtime._from_last_sampled(states)] == [3, 4, 1, 2]
    runtime._last_sampled = 4
    assert [s.id for s in runtime._from_last_sampled(states)] == [1, 2, 3, 4]


def test_speech_pushed_at_once_waits_as_samples_not_as_features(pipeline, monkeypatch):
    """A TTS engine pushes speech much faster than it is animated: HuBERT then stays at most two
    LMDM windows ahead (the features of 30 minutes pushed at once once grew a buffer each round
    copied whole, and CUDA's reserved memory with it), and every frame still comes, in order."""
    from ditto_core.live.schedule import OnlineMotion

    held = []
    push = OnlineMotion.push

    def recording_push(self, features):
        push(self, features)
        held.append(self.buffered_rows)

    monkeypatch.setattr(OnlineMotion, "push", recording_push)
    runtime = LiveRuntime(pipeline, max_streams=1, renderer=RecordingRenderer())
    runtime.sampler = lambda options: ProjectionSampler()
    speech = (0.1 * np.random.default_rng(9).standard_normal(12 * 16000)).astype(np.float32)
    [(_, frames)] = asyncio.run(_stream_all(runtime, [(random_source(1, is_image=True, seed=4), MotionOptions(),
                                                        [speech])]))
    runtime.shutdown()
    assert len(held) == math.ceil((len(speech) + 1920) / 3200)  # every HuBERT window went in
    assert max(held) <= W + 5  # the next two windows' rows (overlap 75: 5 new rows a window)
    assert [f.index for f in frames] == list(range(5 * math.ceil((len(speech) + 1920) / 3200) + 5))


class _ReadyTimes(RecordingRenderer):
    """Keeps each job's ``ready_since`` (what its chunk latency counts from) by first frame."""

    def __init__(self) -> None:
        super().__init__()
        self.ready: dict[int, float] = {}

    def render(self, jobs):
        for job in jobs:
            self.ready[job.first_frame] = job.ready_since
        return super().render(jobs)


@pytest.mark.parametrize("overlap", [75, 70, 78])
def test_each_chunk_is_timed_from_the_speech_its_window_read(pipeline, overlap):
    """A chunk's latency counts from the arrival of the speech behind the newest feature row its
    LMDM window read, whatever the overlap: a window moves on 80 - overlap rows, so at 70 it reads
    two HuBERT windows' new rows and at 78 it shares one with the next. (One arrival time a HuBERT
    window, taken one an LMDM window, once timed 70's chunks from ever older speech and kept a
    time for every other HuBERT window for the stream's life.)"""
    renderer = _ReadyTimes()
    runtime = LiveRuntime(pipeline, max_streams=1, renderer=renderer)
    runtime.sampler = lambda options: ProjectionSampler()
    speech = (0.1 * np.random.default_rng(5).standard_normal(20 * 3200)).astype(np.float32)
    pushed = []  # (time before, time after) each 3200-sample push

    async def run():
        config = StreamConfig(output="rgb", idle=False, overlap=overlap)
        async with AvatarStream(runtime, random_source(1, is_image=True, seed=6), MotionOptions(), config) as stream:
            async def push():
                for k in range(0, len(speech), 3200):
                    before = time.monotonic()
                    stream.push_audio(speech[k : k + 3200], 16000)
                    pushed.append((before, time.monotonic()))
                    await asyncio.sleep(0.02)
                pushed.append((time.monotonic(), None))
                stream.end()

            pushing = asyncio.create_task(push())
            frames = [f async for f in stream]
            await pushing
            return frames, stream._state

    frames, state = asyncio.run(run())
    runtime.shutdown()
    assert [f.index for f in frames] == list(range(len(frames))) and len(frames) > 60
    assert not state.window_times  # nothing kept past the stream's last window
    hop = W - overlap
    checked = 0
    for first, ready in renderer.ready.items():
        rows_end = first + 2 * hop  # the window releasing frames from ``first`` reads rows up to here
        hubert = math.ceil(rows_end / 5) - 1  # the HuBERT window giving that row (5 rows each)
        needed = hubert * 3200 + 6480 - 1920  # its last sample, the 1920-sample lead-in left out
        if needed > len(speech):  # completed with the end's zeros: timed when they were taken
            assert ready >= pushed[-1][0]
            continue
        before, after = pushed[(needed - 1) // 3200]
        assert before <= ready <= after, (first, needed)
        checked += 1
    assert checked >= 5
