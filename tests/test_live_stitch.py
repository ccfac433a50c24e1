"""A live round's stitching: every stream's chunk in one batched call.

:func:`stitch_chunks` against one :func:`stitch_motion` call per stream (the form the float64
per-frame reference of the motion-stitch tests checks), over streams whose sources and options
all differ in one round; padding rows; the ops of a round against the number of streams; the
runtime's :class:`RoundStitcher` (one call per round, its table of streams, and on a GPU its
CUDA graphs).
"""
from __future__ import annotations

import asyncio
import copy
from collections import Counter

import numpy as np
import pytest
import torch

from ditto_core.errors import InputError
from ditto_core.live import AvatarStream, LiveRuntime, StreamConfig
from ditto_core.models.stitch_network import StitchingNetwork
from ditto_core.motion.motion_options import MotionOptions
from ditto_core.motion.motion_stitch import (
    STREAM_BLINK_FRAMES,
    StitchChunk,
    StitchTable,
    stitch_chunks,
    stitch_motion,
    stitch_setup,
)
from ditto_core.motion.stitch_graphs import RoundStitcher
from tests.live_support import ProjectionSampler, RecordingRenderer, light_pipeline
from tests.test_conditions import random_source


def _table(rows: int, seed: int) -> torch.Tensor:
    return 0.01 * torch.randn(rows, 63, generator=torch.Generator().manual_seed(seed))


# (source frames, is_image, options): every option the stitch reads, one stream each.
_STREAMS = [
    (1, True, MotionOptions(delta_eye_arr=_table(15, 1), seed=3)),  # random blink gaps
    (1, True, MotionOptions(delta_eye_arr=_table(6, 2), delta_eye_open_n=(3, 7, 5), delta_yaw=4.0,
                            alpha_pitch=0.7)),
    (4, False, MotionOptions()),  # a video: ping-pong source frames, only the expression driven
    (3, False, MotionOptions(drive_eye=True, delta_eye_arr=_table(6, 3), delta_eye_open_n=4,
                             use_d_keys={"exp": 0.7, "pitch": 1.3, "t": 0.8})),
    (1, True, MotionOptions(relative_d=False, drive_eye=False, flag_stitching=False, delta_roll=-6.0)),
    (1, True, MotionOptions(yaw_offsets=torch.linspace(-8, 8, 3000), pitch_offsets=[2.0] * 40, alpha_yaw=1.2,
                            use_d_keys=("exp", "yaw", "scale", "t"))),
    (2, False, MotionOptions(drive_eye=True, delta_eye_open_n=-1, delta_eye_arr=_table(6, 4), delta_pitch=2.5)),
]


@pytest.fixture(scope="module")
def net():
    torch.manual_seed(0)
    return StitchingNetwork().eval()


def _sources():
    return [random_source(n, is_image=image, seed=10 + k) for k, (n, image, _) in enumerate(_STREAMS)]


def _setups(sources, net):
    return [stitch_setup(s, options, net, STREAM_BLINK_FRAMES) for s, (_, _, options) in zip(sources, _STREAMS)]


def _vectors(k: int, seed: int) -> torch.Tensor:
    # scale, pose logits, t, expression: each part's spread in sampled motion
    scale = torch.cat([torch.full((1,), 0.05), torch.full((198,), 2.0), torch.full((3,), 0.05),
                       torch.full((63,), 0.02)])
    return torch.randn(k, 265, generator=torch.Generator().manual_seed(seed)) * scale


def _per_stream(net, sources, chunks):
    """What each chunk gets from a ``stitch_motion`` call of its own (how the runtime stitched before rounds)."""
    out = []
    for chunk in chunks:
        _, _, options = _STREAMS[chunk.slot]
        frames = torch.arange(chunk.first_frame, chunk.first_frame + chunk.vectors.shape[0])
        out.append(stitch_motion(chunk.vectors, sources[chunk.slot], net, options, frames=frames,
                                 reference=chunk.reference))
    return out


def _assert_same(got, expected):
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert torch.equal(g.source_index, e.source_index)
        assert torch.equal(g.kp_source, e.kp_source)
        # The same per-element arithmetic; only a matrix product over more rows may round differently.
        torch.testing.assert_close(g.kp_driving, e.kp_driving, rtol=1e-6, atol=1e-6 * e.kp_driving.abs().max().item())


def _round(first_frames, sizes, seed):
    return [StitchChunk(slot, first, _vectors(size, seed + slot), _vectors(1, 100 + slot)[0])
            for slot, (first, size) in enumerate(zip(first_frames, sizes)) if size]


@pytest.mark.parametrize("first", [0, 5, 2995, 6003])  # the last two cross and repeat the blink schedule
def test_one_round_of_every_stream_equals_a_call_per_stream(net, first):
    sources = _sources()
    table = StitchTable.of(_setups(sources, net))
    # Streams at different points of their timelines; one releases a short final window.
    firsts = [first + 5 * k for k in range(len(_STREAMS))]
    sizes = [5, 5, 3, 5, 5, 5, 5]
    chunks = _round(firsts, sizes, seed=first)
    _assert_same(stitch_chunks(table, chunks, net), _per_stream(net, sources, chunks))


def test_a_round_of_some_streams_in_any_order(net):
    sources = _sources()
    table = StitchTable.of(_setups(sources, net))
    chunks = [c for c in _round([40, 45, 50, 55, 60, 65, 70], [5] * 7, seed=3) if c.slot in (5, 2, 0)]
    chunks = [chunks[2], chunks[0], chunks[1]]
    _assert_same(stitch_chunks(table, chunks, net), _per_stream(net, sources, chunks))
    assert stitch_chunks(table, [], net) == []


def test_chunks_of_a_stream_join_into_its_whole_run(net):
    """Round after round, a stream's chunks are the rows of one call over all its frames."""
    sources = _sources()
    table = StitchTable.of(_setups(sources, net))
    vectors = [_vectors(40, 7 + k) for k in range(len(_STREAMS))]
    references = [_vectors(1, 50 + k)[0] for k in range(len(_STREAMS))]
    rounds = [stitch_chunks(table, [StitchChunk(k, first, v[first : first + 5], r)
                                    for k, (v, r) in enumerate(zip(vectors, references))], net)
              for first in range(0, 40, 5)]
    for k, (_, _, options) in enumerate(_STREAMS):
        whole = stitch_motion(vectors[k], sources[k], net, options, frames=torch.arange(40), reference=references[k])
        joined = torch.cat([r[k].kp_driving for r in rounds])
        torch.testing.assert_close(joined, whole.kp_driving, rtol=1e-6, atol=1e-6 * whole.kp_driving.abs().max().item())


def _round_ops(table, chunks, net) -> Counter:
    """Top-level ATen ops of one :func:`stitch_chunks` call (each about one kernel on a GPU)."""
    from torch.profiler import ProfilerActivity, profile

    with torch.inference_mode(), profile(activities=[ProfilerActivity.CPU]) as prof:
        stitch_chunks(table, chunks, net)
    events = [e for e in prof.events() if e.name.startswith("aten::")]
    return Counter(e.name for e in events if e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::"))


def test_a_round_costs_the_same_ops_for_one_stream_or_twelve(net):
    streams = [(random_source(1 if k % 3 else 4, is_image=bool(k % 3), seed=k),
                MotionOptions(delta_eye_arr=_table(15, 1), seed=k, delta_yaw=3.0 * (k % 2))) for k in range(12)]
    table = StitchTable.of([stitch_setup(s, o, net, STREAM_BLINK_FRAMES) for s, o in streams])
    chunks = [StitchChunk(k, 100, _vectors(5, k), _vectors(1, 50 + k)[0]) for k in range(12)]
    one, twelve = _round_ops(table, chunks[:1], net), _round_ops(table, chunks, net)
    assert one == twelve
    assert not {"aten::item", "aten::_local_scalar_dense", "aten::nonzero", "aten::is_nonzero"} & set(one)


def test_setup_refuses_stitching_without_a_network():
    with pytest.raises(InputError, match="flag_stitching"):
        stitch_setup(random_source(1, is_image=True), MotionOptions(), None, STREAM_BLINK_FRAMES)
    options = MotionOptions(flag_stitching=False)
    setup = stitch_setup(random_source(1, is_image=True), options, None, STREAM_BLINK_FRAMES)
    assert setup.stitching is False


def test_the_runtime_stitches_a_round_of_two_streams_in_one_call(tmp_path):
    pipeline = light_pipeline(tmp_path, _table(6, 5))
    runtime = LiveRuntime(pipeline, max_streams=2, renderer=RecordingRenderer())
    calls, stitch = [], runtime.stitcher.stitch

    def counting(setups, chunks):
        calls.append([chunk.vectors.shape[0] for chunk in chunks])
        return stitch(setups, chunks)

    runtime.stitcher.stitch = counting
    sampler = ProjectionSampler()
    runtime.sampler = lambda options: sampler
    speech = (0.1 * np.random.default_rng(2).standard_normal(16000)).astype(np.float32)
    sources = [random_source(1, is_image=True, seed=1), random_source(3, is_image=False, seed=2)]

    async def frames(stream):
        async with stream:
            return [f async for f in stream]

    async def both():
        # No motion round starts until both streams hold their speech (opened one after the other,
        # a busy machine's first round could take the first stream's alone, and every round after).
        with runtime._wake:
            streams = [AvatarStream(runtime, s, MotionOptions(), StreamConfig(output="rgb", idle=False)) for s in sources]
            for stream in streams:
                stream.push_audio(speech, 16000)
                stream.end()
        return await asyncio.gather(*map(frames, streams))

    results = asyncio.run(both())
    runtime.shutdown()
    assert all(len(frames) == len(results[0]) > 0 for frames in results)
    assert max(map(len, calls)) == 2  # both streams' frames in one call
    assert sum(map(sum, calls)) == sum(map(len, results))  # every frame stitched once


def test_padding_rows_change_no_chunk(net):
    """A graph replays a padded row count: the padding rows are stitched and dropped."""
    sources = _sources()
    table = StitchTable.of(_setups(sources, net))
    chunks = _round([10 * k for k in range(len(_STREAMS))], [5, 3, 5, 5, 0, 5, 2], seed=8)
    _assert_same(stitch_chunks(table, chunks, net, rows=64), stitch_chunks(table, chunks, net))


def test_the_stitcher_stacks_its_streams_again_only_when_they_change(net):
    sources = _sources()
    setups = _setups(sources, net)
    stitcher = RoundStitcher(net, torch.device("cpu"))
    chunks = _round([20] * len(_STREAMS), [5] * len(_STREAMS), seed=9)
    _assert_same(stitcher.stitch(setups, chunks), _per_stream(net, sources, chunks))
    table = stitcher._table
    stitcher.stitch(list(setups), chunks[:2])
    assert stitcher._table is table  # the same streams: the same table
    # Stream 0 closed: the others move up a slot.
    moved = [StitchChunk(c.slot - 1, c.first_frame, c.vectors, c.reference) for c in chunks[1:]]
    got = stitcher.stitch(setups[1:], moved)
    assert stitcher._table is not table
    _assert_same(got, _per_stream(net, sources, chunks[1:]))
    assert stitcher.stitch(setups[1:], []) == []


@pytest.mark.gpu
def test_cuda_rounds_from_graphs_match_cpu_without_host_syncs(net):
    sources = _sources()
    setups = _setups(sources, net)
    cuda_net = copy.deepcopy(net).cuda()
    cuda_setups = _setups([s.to("cuda") for s in sources], cuda_net)
    stitcher, eager = RoundStitcher(cuda_net, torch.device("cuda")), RoundStitcher(net, torch.device("cpu"))
    assert stitcher.graphed
    # 35, 35, 33 rows (one graph of 64 rows: recorded, then replayed), then 10 (a graph of 16).
    plan = ((0, [5] * 7), (5, [5] * 7), (2995, [5, 5, 3, 5, 5, 5, 5]), (40, [5, 0, 5, 0, 0, 0, 0]))
    rounds = [_round([first + 5 * k for k in range(len(_STREAMS))], sizes, seed=first) for first, sizes in plan]
    results = []
    for n, chunks in enumerate(rounds):
        cuda_chunks = [StitchChunk(c.slot, c.first_frame, c.vectors.cuda(), c.reference.cuda()) for c in chunks]
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error" if n == 2 else 0)  # a replay
        try:
            got = stitcher.stitch(cuda_setups, cuda_chunks)
        finally:
            torch.cuda.set_sync_debug_mode(0)
        results.append((got, eager.stitch(setups, chunks)))
    assert sorted(stitcher._graphs) == [16, 64]
    # Checked after every round ran: a later replay must not have overwritten an earlier round's motion.
    for got, expected in results:
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert g.kp_driving.is_cuda and g.source_index.is_cuda
            assert torch.equal(g.source_index.cpu(), e.source_index)
            torch.testing.assert_close(g.kp_driving.cpu(), e.kp_driving, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(g.kp_source.cpu(), e.kp_source, rtol=1e-6, atol=1e-6)
