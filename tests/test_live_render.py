"""End to end: a live stream renders real frames, as the offline path would.

The warp and decoder are the tests' small stand-ins with the networks' interfaces (a CPU takes
seconds a frame through the real ones, whose batch independence their own tests check); what is
under test is the runtime's batching, put-back and scaling against the offline path's."""
from __future__ import annotations

import asyncio
import itertools
from dataclasses import replace
from types import SimpleNamespace

import cv2
import numpy as np
import pytest
import torch

from ditto_core.live import AvatarStream, LiveRuntime, StreamConfig
from ditto_core.live.engine_renderer import EngineRenderer, cheapest_batches
from ditto_core.motion.motion_options import MotionOptions
from ditto_core.pipeline import DittoPipeline
from ditto_core.registration.options import RegistrationOptions
from ditto_core.render.putback import paste_back
from ditto_core.render.warp_decode import WarpDecodeEngine
from ditto_core.video.colour import rgb_to_yuv420p
from tests.test_nodes_execution import TinyDecoder, TinyWarp


class _Keeping(EngineRenderer):
    """The real renderer, keeping each job's motion and frames for the comparison."""

    def __init__(self, models) -> None:
        super().__init__(models, compile=False)
        self.kept = []

    def render(self, jobs):
        out = super().render(jobs)
        self.kept += [(job.motion, frames) for job, frames in zip(jobs, out)]
        return out


@pytest.mark.parametrize("output", ["jpeg", "h264"])
def test_live_frames_are_the_offline_renders_of_the_streamed_motion(tmp_path, output):
    """JPEG streams get the renders as RGB; H.264 streams as yuv420p converted on the device, the
    conversion the offline writer makes (decoding them is tests below and in test_live_server)."""
    pipeline = DittoPipeline.random(tmp_path, device="cpu", compile=False)
    pipeline.models = replace(pipeline.models, warp_network=TinyWarp().eval(), decoder=TinyDecoder().eval())
    portrait = np.zeros((200, 160, 3), np.uint8)
    cv2.circle(portrait, (80, 90), 50, (200, 170, 150), -1)
    source = pipeline.register(portrait, RegistrationOptions(detect_face=False), is_image=True)
    renderer = _Keeping(pipeline.models)
    runtime = LiveRuntime(pipeline, max_streams=1, renderer=renderer)

    async def run():
        config = StreamConfig(output=output, max_size=100, idle=False)
        async with AvatarStream(runtime, source, MotionOptions(steps=2), config) as stream:
            stream.end()  # no speech at all: the schedule's two windows still make 10 frames
            return [f async for f in stream]

    frames = asyncio.run(run())
    runtime.shutdown()
    assert [f.index for f in frames] == list(range(10))
    if output == "jpeg":
        decoded = [cv2.imdecode(np.frombuffer(f.packet, np.uint8), cv2.IMREAD_COLOR) for f in frames]
    else:
        import av

        decoder = av.CodecContext.create("h264", "r")
        pictures = [p for f in frames for p in decoder.decode(av.Packet(f.packet))] + decoder.decode(None)
        decoded = [p.to_ndarray(format="rgb24") for p in pictures]
    assert len(decoded) == 10 and all(d.shape == (100, 80, 3) for d in decoded)
    assert np.std(np.stack(decoded).astype(np.float32)) > 1  # real renders, not a constant

    (motion, live_frames), = renderer.kept
    # Two of them again through the offline path's engine and put-back.
    pick = [0, 9]
    engine = WarpDecodeEngine(pipeline.models.warp_network, pipeline.models.decoder, batch_size=2, compile=False)
    renders = engine.render_batch(source.f_s, motion.kp_source[pick], motion.kp_driving[pick])
    offline = paste_back(source.frames, renders, source.M_c2o, source_index=motion.source_index[pick])
    scaled = torch.nn.functional.interpolate(offline.permute(0, 3, 1, 2).float(), size=(100, 80), mode="bilinear",
                                             antialias=True, align_corners=False)
    expected = scaled.round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1).contiguous()
    if output == "h264":
        expected = rgb_to_yuv420p(expected)
    assert torch.equal(live_frames[pick], expected)


@pytest.mark.parametrize("per_frame", [True, False])
def test_renderer_warm_up_compiles_the_forms_asked_for(tmp_path, per_frame):
    """Every ladder size renders the shared-volume form, the volume-per-frame form only when asked;
    each three times (a compiled graph's CUDA graph is recorded at its second call, and once the
    third has replayed, the engine's later calls take no recording turn)."""
    pipeline = DittoPipeline.random(tmp_path, device="cpu", compile=False)
    source = pipeline.register(np.full((64, 64, 3), 120, np.uint8), RegistrationOptions(detect_face=False),
                               is_image=True)
    renderer = EngineRenderer(pipeline.models, compile=False, batch_ladder=(1, 2))
    forms = []
    for size in renderer.ladder:
        renderer.engine(size).render_batch = lambda volumes, kp_s, kp_d, size=size: forms.append((size, volumes.shape[0]))
    renderer.warm_up(source, per_frame_volumes=per_frame)
    once = [(1, 1), (1, 1), (2, 1), (2, 2)] if per_frame else [(1, 1), (2, 1)]
    assert forms == [call for call in once for _ in range(3)]


# Seconds a batch of each ladder size, as an H200 might take them: a frame costs more in small batches.
COSTS = {5: 0.0140, 10: 0.0260, 20: 0.0500, 40: 0.0980}


@pytest.mark.parametrize("frames, plan", [(5, [5]), (3, [5]), (20, [20]), (25, [20, 5]), (30, [20, 10]),
                                          (35, [20, 10, 5]), (40, [40]), (45, [40, 5]), (80, [40, 40])])
def test_a_round_is_split_among_the_ladder_where_padding_costs_more(frames, plan):
    assert cheapest_batches(frames, COSTS) == plan


def test_padding_is_kept_where_the_larger_batch_is_cheaper():
    # A device whose small batches cost nearly as much as large ones (launch-bound): pad.
    assert cheapest_batches(25, {5: 0.010, 40: 0.012}) == [40]
    # Measured noise can make a 5-frame batch as slow as a 10-frame one: the last batch is padded.
    assert cheapest_batches(25, {5: 0.011, 10: 0.010, 40: 0.050}) == [10, 10, 10]


def test_the_plan_is_the_cheapest_of_every_multiset_of_batches_that_covers_the_round():
    rng = np.random.default_rng(3)
    for _ in range(40):
        sizes = sorted(rng.choice([1, 2, 3, 5, 8, 10, 16, 20, 40], size=rng.integers(1, 5), replace=False).tolist())
        costs = {s: float(rng.uniform(0.2, 1.0) * s ** rng.uniform(0.3, 1.0)) for s in sizes}
        frames = int(rng.integers(1, 30))
        plan = cheapest_batches(frames, costs)
        assert sum(plan) >= frames > sum(plan) - min(plan) and plan == sorted(plan, reverse=True)
        best = min(sum(costs[s] for s in combo) for n in range(1, frames + 1)
                   for combo in itertools.combinations_with_replacement(sizes, n) if sum(combo) >= frames)
        assert sum(costs[s] for s in plan) == pytest.approx(best)


def test_a_plan_needs_frames_and_sizes():
    with pytest.raises(ValueError):
        cheapest_batches(0, COSTS)
    with pytest.raises(ValueError):
        cheapest_batches(5, {})


def test_a_round_renders_in_the_planned_batches_with_the_frames_of_one_batch(tmp_path):
    """Measured costs (as a CUDA warm-up sets them) split a 25-frame round into 20 + 5 frames
    instead of padding it to the 40-frame batch; each job gets the same frames either way."""
    pipeline = DittoPipeline.random(tmp_path, device="cpu", compile=False)
    # The tiny networks' weights set how far apart the jobs' frames land (6 to 12 levels over 12
    # seeds, 9.6 with this one): fixed, or the last check below could fail on an unlucky draw.
    torch.manual_seed(0)
    pipeline.models = replace(pipeline.models, warp_network=TinyWarp().eval(), decoder=TinyDecoder().eval())
    portrait = np.zeros((96, 80, 3), np.uint8)
    cv2.circle(portrait, (40, 48), 30, (200, 170, 150), -1)
    source = pipeline.register(portrait, RegistrationOptions(detect_face=False), is_image=True)
    stream = SimpleNamespace(source=source, frame_size=(96, 80), config=SimpleNamespace(output="rgb"))
    generator = torch.Generator().manual_seed(0)
    jobs = []
    for j in range(5):  # five streams' windows of 5 frames, as a round brings them
        kp = source.motion.kp[:1].reshape(1, -1, 3).float()
        kp_driving = kp + 0.4 * j + 0.05 * torch.randn(5, *kp.shape[1:], generator=generator)  # each job its look
        motion = SimpleNamespace(kp_source=kp.expand(5, -1, -1), kp_driving=kp_driving,
                                 source_index=torch.zeros(5, dtype=torch.int64))
        jobs.append(SimpleNamespace(stream=stream, motion=motion))

    def rendered(costs):
        renderer = EngineRenderer(pipeline.models, compile=False)
        renderer.batch_costs = costs
        sizes = []
        for size in renderer.ladder:
            engine = renderer.engine(size)
            engine.render_batch = lambda *args, engine=engine, size=size: (
                sizes.append((size, args[2].shape[0])), type(engine).render_batch(engine, *args))[1]
        return renderer.render(jobs), sizes

    planned, planned_sizes = rendered(COSTS)
    padded, padded_sizes = rendered(None)
    assert planned_sizes == [(20, 20), (5, 5)] and padded_sizes == [(40, 25)]
    assert [tuple(f.shape) for f in planned] == [(5, 96, 80, 3)] * 5
    # The same frames to the job, whichever batch rendered them (a level of rounding at most) ...
    assert all((a.int() - b.int()).abs().max() <= 1 for a, b in zip(planned, padded))
    # ... and they are that job's: neighbouring jobs' frames differ far more.
    assert all((planned[j].float() - planned[j + 1].float()).abs().mean() > 5 for j in range(4))


def test_a_rounds_frames_reach_the_host_per_job_in_order_whatever_their_sizes():
    from ditto_core.live.output_frames import to_host

    frames = [torch.full((k, h, w, 3), i, dtype=torch.uint8) for i, (k, h, w) in
              enumerate([(5, 8, 6), (3, 4, 4), (2, 8, 6), (1, 4, 4)])]
    host = to_host(frames)
    assert [tuple(t.shape) for t in host] == [tuple(t.shape) for t in frames]
    assert all(torch.equal(got, want) for got, want in zip(host, frames))
    assert to_host([]) == []


def test_jpeg_frames_keep_the_colour_order():
    from ditto_core.live.output_frames import LiveFrame, encode_jpeg

    image = torch.zeros(48, 96, 3, dtype=torch.uint8)
    image[:, :32, 0] = 220  # red | green | blue, side by side
    image[:, 32:64, 1] = 200
    image[:, 64:, 2] = 180
    frame = encode_jpeg(LiveFrame(index=0, pts=0.0, audio=torch.zeros(640, dtype=torch.int16)), image, 95)
    decoded = cv2.cvtColor(cv2.imdecode(np.frombuffer(frame.packet, np.uint8), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
    for part, channel, level in ((slice(4, 28), 0, 220), (slice(36, 60), 1, 200), (slice(68, 92), 2, 180)):
        mean = decoded[8:40, part].reshape(-1, 3).mean(axis=0)
        assert abs(mean[channel] - level) < 6 and np.delete(mean, channel).max() < 6, (channel, mean)


@pytest.mark.parametrize("given", ["rgb", "yuv420p"])
def test_h264_frames_are_tagged_bt709_and_decode_to_their_colours(given):
    """The render thread hands H.264 streams yuv420p made on the device; RGB (a renderer of its
    own) is converted on the encoder's thread with the same arithmetic. Either way the stream says
    BT.709 limited range, and a decoder that reads it gets the colours back."""
    import av
    from av.video.reformatter import ColorRange, Colorspace

    from ditto_core.live.output_frames import H264Encoder, LiveFrame
    from ditto_core.video.colour import rgb_to_yuv420p

    colours = torch.tensor([[230, 40, 30], [40, 200, 60], [30, 60, 220], [240, 200, 40]], dtype=torch.uint8)
    image = colours.repeat_interleave(32, dim=0)[None].expand(64, 128, 3).contiguous()  # four upright colour bars
    pixels = image if given == "rgb" else rgb_to_yuv420p(image[None], backend="torch")[0]
    encoder = H264Encoder(64, 128)
    try:
        packets = [encoder.submit(LiveFrame(index=i, pts=i / 25, audio=torch.zeros(640, dtype=torch.int16)),
                                  pixels, 0).result(30).packet for i in range(3)]
    finally:
        encoder.close()
    decoder = av.CodecContext.create("h264", "r")
    pictures = [p for packet in packets for p in decoder.decode(av.Packet(packet))] + decoder.decode(None)
    picture = pictures[-1]
    assert (picture.colorspace, picture.color_range) == (Colorspace.ITU709.value, ColorRange.MPEG.value)
    errors = {}
    for matrix in (Colorspace.ITU709, Colorspace.ITU601):
        rgb = picture.reformat(format="rgb24", src_colorspace=matrix, src_color_range=ColorRange.MPEG).to_ndarray()
        bars = rgb[8:56].reshape(48, 4, 32, 3)[:, :, 6:26].mean(axis=(0, 2))  # each bar's interior
        errors[matrix] = np.abs(bars - colours.numpy()).max()
    assert errors[Colorspace.ITU709] <= 4 < 10 < errors[Colorspace.ITU601], errors
