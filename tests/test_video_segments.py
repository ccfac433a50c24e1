"""Segments and their join: the parallel writer and the segment API give one MP4 with every
frame once, in order, timestamps continuous and the audio in sync."""
from __future__ import annotations

import av
import numpy as np
import pytest

from ditto_core.errors import InputError
from ditto_core.video.encoder import SegmentEncoder, encode_segment
from ditto_core.video.encoder_settings import EncoderSettings
from ditto_core.video.joiner import join_segments, read_segment
from ditto_core.video.writer import VideoWriter
from tests.video_support import decoded_indices, durations, tone, watermarked

FPS = 25


def check_clip(path, frames: int) -> None:
    assert decoded_indices(path) == list(range(frames))
    seconds = durations(path)
    assert seconds["video"] == pytest.approx(frames / FPS)
    assert abs(seconds["audio"] - seconds["video"]) <= 1 / FPS
    with av.open(str(path)) as container:
        packets = [p for p in container.demux(video=0) if p.size]
        dts = [p.dts for p in packets]
        step = packets[0].duration
        assert dts == list(range(dts[0], dts[0] + step * len(dts), step)), "decode times continuous"
        assert all(p.dts <= p.pts for p in packets)


# Frames against a 4-frame segment (and GOP): one frame, one less than a segment, exactly one,
# exact multiples, one more, and a clip shorter than a segment of 8.
@pytest.mark.parametrize("frames, segment", [(1, 4), (3, 4), (4, 4), (8, 4), (12, 4), (9, 4), (5, 8)])
def test_parallel_writer_segment_edges(tmp_path, frames, segment):
    target = tmp_path / "clip.mp4"
    clip = watermarked(0, frames)
    with VideoWriter(target, width=128, height=64, fps=FPS, preset="medium", encoders=3, segment_frames=segment,
                     audio=(tone(frames / FPS + 0.5), 48000)) as writer:
        for start in range(0, frames, 3):  # batches that straddle segment boundaries
            writer.write(clip[start : start + 3])
    check_clip(target, frames)
    assert [p.name for p in tmp_path.iterdir()] == ["clip.mp4"]


def test_segments_encoded_apart_join_into_one_clip(tmp_path):
    """The API a multi-GPU render uses: each part encoded on its own, joined afterwards."""
    settings = EncoderSettings(width=128, height=64, fps=FPS, preset="medium", gop_frames=6)
    bounds = [(0, 6), (6, 12), (12, 13)]
    segments = [encode_segment(tmp_path / f"part{a}.mp4", [watermarked(a, b - a)], settings, a) for a, b in bounds]
    assert [(s.first_frame, s.frames) for s in segments] == [(0, 6), (6, 6), (12, 1)]
    assert read_segment(segments[1].path) == segments[1]
    target = join_segments([s.path for s in segments], tmp_path / "out" / "clip.mp4", audio=(tone(1.0), 48000))
    check_clip(target, 13)


def test_join_refuses_gaps_disorder_and_mixed_settings(tmp_path):
    settings = EncoderSettings(width=128, height=64, fps=FPS, preset="ultrafast")
    first = encode_segment(tmp_path / "a.mp4", [watermarked(0, 3)], settings, 0)
    third = encode_segment(tmp_path / "c.mp4", [watermarked(6, 3)], settings, 6)
    other = encode_segment(tmp_path / "b.mp4", [watermarked(3, 3)], EncoderSettings(128, 64, FPS, crf=30), 3)
    for segments, message in (([third, first], "starts at frame 6"), ([first, third], "starts at frame 6"),
                              ([first, other], "other settings")):
        with pytest.raises(InputError, match=message):
            join_segments(segments, tmp_path / "out.mp4")
        assert not (tmp_path / "out.mp4").exists()
    not_a_segment = tmp_path / "plain.mp4"
    with VideoWriter(not_a_segment, width=128, height=64, encoders=1, preset="ultrafast") as writer:
        writer.write(watermarked(0, 2))
    with pytest.raises(InputError, match="not a segment"):
        join_segments([not_a_segment], tmp_path / "out.mp4")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.mp4", "b.mp4", "c.mp4", "plain.mp4"]


def test_yuv_input_and_host_rgb_input_encode_the_same_video(tmp_path):
    """The CUDA path hands x264 planes converted by rgb_to_yuv420p, the host path RGB that
    swscale converts: the two videos agree (here on the CPU, at a height not divisible by 4)."""
    from ditto_core.video.colour import rgb_to_yuv420p
    from tests.video_support import decoded_frames

    frames = watermarked(0, 6, height=70, width=128)
    settings = EncoderSettings(width=128, height=70, fps=FPS, crf=0, preset="ultrafast")
    with SegmentEncoder(tmp_path / "yuv.mp4", settings, whole=True) as encoder:
        encoder.write_yuv(rgb_to_yuv420p(frames).numpy())
    with SegmentEncoder(tmp_path / "rgb.mp4", settings, whole=True) as encoder:
        encoder.write_rgb(frames.numpy())
    yuv, rgb = decoded_frames(tmp_path / "yuv.mp4"), decoded_frames(tmp_path / "rgb.mp4")
    assert yuv.shape == rgb.shape == (6, 70, 128, 3)
    assert np.abs(yuv.astype(int) - rgb.astype(int)).max() <= 3  # one level in yuv, lossless x264
    assert decoded_indices(tmp_path / "yuv.mp4") == list(range(6))


@pytest.mark.parametrize("height", [64, 66])  # wrapped without a copy, and copied (height % 4 == 2)
def test_yuv_buffer_reused_after_each_write_keeps_every_picture(tmp_path, height):
    """write_yuv hands x264 frames over the caller's memory (no copy): the writer refills its
    pinned buffers as soon as write_yuv returns, so each picture must already be x264's own."""
    from ditto_core.video.colour import rgb_to_yuv420p

    frames = rgb_to_yuv420p(watermarked(0, 12, height=height, width=128)).numpy()
    settings = EncoderSettings(width=128, height=height, fps=FPS, crf=0, preset="ultrafast")
    buffer = np.empty_like(frames[:2])
    with SegmentEncoder(tmp_path / "reused.mp4", settings, whole=True) as encoder:
        for first in range(0, len(frames), 2):
            buffer[:] = frames[first : first + 2]
            encoder.write_yuv(buffer)
        buffer[:] = 0  # what a recycled buffer holds next; frames still in x264's lookahead must not see it
    assert decoded_indices(tmp_path / "reused.mp4") == list(range(12))


@pytest.mark.gpu
def test_cuda_frames_through_parallel_segments_keep_order_and_size(tmp_path):
    """The GPU path end to end: CUDA frames (odd size) converted on the device, several
    encoders, one MP4 with every frame once, in order."""
    frames = watermarked(0, 30, height=65, width=129).cuda()
    target = tmp_path / "gpu.mp4"
    with VideoWriter(target, width=129, height=65, fps=FPS, preset="medium", encoders=3, segment_frames=4,
                     audio=(tone(1.5), 48000)) as writer:
        for start in range(0, 30, 7):
            writer.write(frames[start : start + 7])
    check_clip(target, 30)
    with av.open(str(target)) as container:
        assert (container.streams.video[0].height, container.streams.video[0].width) == (66, 130)
