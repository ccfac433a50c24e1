"""Segments and their join: the parallel writer and the segment API give one MP4 with every
frame once, in order, timestamps continuous and the audio in sync."""
from __future__ import annotations

import av
import numpy as np
import pytest

from ditto_core.errors import InputError
from ditto_core.video.encoder import EncoderSettings, encode_segment, join_segments, read_segment
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
