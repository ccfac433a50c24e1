"""The writer under faults: interruptions and encoder errors anywhere in a clip, a full disk,
the umask, and host memory over a long clip. Nothing half-written is ever left behind."""
from __future__ import annotations

import errno
import itertools
import os
import stat
import time

import numpy as np
import pytest
import torch

from ditto_core.atomic_files import DiskFullError
from ditto_core.errors import DittoError
from ditto_core.video import writer as writer_module
from ditto_core.video.encoder import SegmentEncoder
from ditto_core.video.joiner import Mp4Joiner
from ditto_core.video.writer import VideoWriter
from tests.test_atomic_files import small_filesystem, umask
from tests.video_support import decoded_indices, tone, watermarked
from tests.waiting import wait_until

FIXTURES = (small_filesystem, umask)  # shared with the atomic-files tests; used as parameters below

FILES = "Files and processes"
FAULTS = "Soak and faults"
SEGMENT = 4


def write_clip(target, frames=12, encoders=2, batch=3, **options):
    """A watermarked clip with audio through a writer; returns the writer."""
    clip = watermarked(0, frames)
    with VideoWriter(target, width=128, height=64, fps=25, preset="ultrafast", encoders=encoders,
                     segment_frames=SEGMENT, audio=(tone(1.0), 48000), **options) as writer:
        for start in range(0, frames, batch):
            writer.write(clip[start : start + batch])
    return writer


def assert_clean_then_rerun(folder, target, encoders) -> None:
    """Nothing of the failed run is left; the next run writes the whole clip."""
    assert list(folder.iterdir()) == []
    write_clip(target, encoders=encoders)
    assert decoded_indices(target) == list(range(12))
    assert [p.name for p in folder.iterdir()] == [target.name]


@pytest.mark.reliability(area=FILES, case="finished MP4 under any umask (0o022, 0o002, 0o077), one encoder or several",
                         behaviour="the MP4 gets the mode a plain new file would (0o666 less the umask), not "
                                   "the temporary's 0o600")
@pytest.mark.parametrize("mask", [0o022, 0o002, 0o077])
def test_mp4_gets_the_umask_mode(tmp_path, umask, mask):
    umask(mask)
    for encoders in (1, 2):
        target = tmp_path / f"clip{encoders}.mp4"
        write_clip(target, frames=5, encoders=encoders)
        assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~mask


@pytest.mark.reliability(area=FAULTS, case="interrupt (Ctrl-C) while the MP4 is being encoded: mid-clip with "
                                            "segments already joined, or during the final join",
                         behaviour="no MP4, no segment or partial file; the next run writes the whole clip")
@pytest.mark.parametrize("encoders", [1, 2])
@pytest.mark.parametrize("when", ["mid-clip", "final join"])
def test_interrupt_while_encoding_leaves_nothing(tmp_path, monkeypatch, encoders, when):
    target = tmp_path / "clip.mp4"
    if when == "final join":
        finish = Mp4Joiner.close if encoders > 1 else SegmentEncoder.close

        def interrupted(self):
            raise KeyboardInterrupt
        monkeypatch.setattr(Mp4Joiner if encoders > 1 else SegmentEncoder, "close", interrupted)
        with pytest.raises(KeyboardInterrupt):
            write_clip(target, encoders=encoders)
        monkeypatch.setattr(Mp4Joiner if encoders > 1 else SegmentEncoder, "close", finish)
    else:
        clip = watermarked(0, 40)
        with pytest.raises(KeyboardInterrupt):
            with VideoWriter(target, width=128, height=64, preset="ultrafast", encoders=encoders,
                             segment_frames=SEGMENT, audio=(tone(2.0), 48000)) as writer:
                for start in range(0, 40, 4):
                    writer.write(clip[start : start + 4])
                    if start == 24:
                        wait_for_encoders(lambda: writer._joined > 0 or (encoders == 1 and writer._frames_encoded >= 16))
                        assert any(tmp_path.iterdir()), "partial files exist while encoding"
                        raise KeyboardInterrupt
    assert_clean_then_rerun(tmp_path, target, encoders)


def inject(monkeypatch, owner, name: str, error: BaseException, fails) -> None:
    """Patch ``owner.name`` to raise ``error`` on the calls where ``fails(self, args, call_number)``."""
    original, calls = getattr(owner, name), itertools.count(1)

    def patched(self, *args):
        if fails(self, args, next(calls)):
            raise error
        return original(self, *args)
    monkeypatch.setattr(owner, name, patched)


def wait_for_encoders(condition, seconds: float = 20.0) -> None:
    assert wait_until(condition, seconds), "the encoder threads made no progress"


@pytest.mark.reliability(area=FAULTS, case="libx264 or the join fails in the middle of a clip (a middle segment; "
                                            "mid-clip with one encoder)",
                         behaviour="a DittoError naming the file and the cause reaches the caller without "
                                   "deadlock; no MP4, no segment or partial file; the next run succeeds")
@pytest.mark.parametrize("encoders, where", [(1, "encode"), (3, "encode"), (3, "join")])
def test_encoder_error_in_a_middle_segment_leaves_nothing(tmp_path, monkeypatch, encoders, where):
    target = tmp_path / "clip.mp4"
    if where == "encode":  # segment 1's encoder; with one encoder, its third chunk
        inject(monkeypatch, SegmentEncoder, "write_rgb", RuntimeError("x264 exploded"),
               lambda self, args, call: self.first_frame == SEGMENT or (encoders == 1 and call > 2))
    else:
        inject(monkeypatch, Mp4Joiner, "add", RuntimeError("x264 exploded"),
               lambda self, args, call: args[0].first_frame == SEGMENT)
    with pytest.raises(DittoError, match=f"{target.name}.*x264 exploded") as raised:
        write_clip(target, encoders=encoders, queue_frames=8)  # a small pool: a dead encoder must not block
    assert isinstance(raised.value.__cause__, RuntimeError)
    monkeypatch.undo()
    assert_clean_then_rerun(tmp_path, target, encoders)


@pytest.mark.reliability(area=FILES, case="disk full (ENOSPC injected) while writing the MP4: in a segment, in "
                                          "the join, with one encoder",
                         behaviour="DiskFullError naming the folder and the space the MP4 needs; nothing "
                                   "half-written; the next run succeeds")
@pytest.mark.parametrize("encoders, where", [(1, "encode"), (2, "encode"), (2, "join")])
def test_injected_disk_full_names_folder_and_space(tmp_path, monkeypatch, encoders, where):
    target = tmp_path / "clip.mp4"
    owner, name = (SegmentEncoder, "_mux_video") if where == "encode" else (Mp4Joiner, "_append")
    inject(monkeypatch, owner, name, OSError(errno.ENOSPC, "No space left on device"), lambda self, args, call: call > 3)
    with pytest.raises(DiskFullError) as raised:
        write_clip(target, frames=40, encoders=encoders)
    message = str(raised.value)
    assert str(tmp_path.resolve()) in message and "clip.mp4 needs" in message, message
    assert raised.value.needed and raised.value.needed > 0
    monkeypatch.undo()
    assert_clean_then_rerun(tmp_path, target, encoders)


@pytest.mark.reliability(area=FILES, case="the joiner fails (disk full) and exits while the producer waits for it",
                         behaviour="the producer raises the joiner's DiskFullError, not a bare 'thread stopped'; "
                                   "nothing is left behind")
def test_a_thread_gone_after_a_failure_hands_over_its_error(tmp_path, monkeypatch):
    # The producer's wait loop checks "stopping?" then, after its poll, "threads alive?": a
    # thread failing in between is found dead first. Here it is dead before the check runs.
    target = tmp_path / "clip.mp4"
    inject(monkeypatch, Mp4Joiner, "_append", OSError(errno.ENOSPC, "No space left on device"), lambda *_: True)
    writer = VideoWriter(target, width=128, height=64, fps=25, preset="ultrafast", encoders=2,
                         segment_frames=SEGMENT, audio=(tone(1.0), 48000))
    writer.write(watermarked(0, SEGMENT + 1))  # segment 0 ends, so the joiner takes it and fails
    joiner = next(thread for thread in writer._threads if thread.name == "ditto-video-joiner")
    wait_for_encoders(lambda: not joiner.is_alive())
    with pytest.raises(DiskFullError, match="clip.mp4 needs"):
        writer._check_threads()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.reliability(area=FILES, case="disk full while writing the MP4, on a real 1 MiB filesystem",
                         behaviour="DiskFullError naming the folder and the space needed; the filesystem is "
                                   "left empty")
@pytest.mark.parametrize("encoders", [1, 2])
def test_real_disk_full_while_writing_the_mp4(small_filesystem, encoders):
    noise = torch.from_numpy(np.random.default_rng(0).integers(0, 256, (40, 128, 128, 3), dtype=np.uint8))
    with pytest.raises(DiskFullError, match=str(small_filesystem.resolve())) as raised:
        with VideoWriter(small_filesystem / "clip.mp4", width=128, height=128, crf=0, preset="ultrafast",
                         encoders=encoders, segment_frames=8, expected_frames=40) as writer:
            for start in range(0, 40, 4):
                writer.write(noise[start : start + 4])
    assert raised.value.needed > 1 << 20, "the estimate is the size of the whole clip"
    assert list(small_filesystem.iterdir()) == []
    assert not open_files_below(small_filesystem), "a deleted temporary still holds space"


@pytest.mark.reliability(area=FILES, case="disk already full when the MP4 is opened (its header cannot be "
                                          "written), on a real 1 MiB filesystem",
                         behaviour="DiskFullError naming the folder; no file left, none held open (a "
                                   "deleted temporary would keep its space until the process exits)")
@pytest.mark.parametrize("encoders", [1, 2])
def test_full_disk_before_the_header_leaves_no_open_file(small_filesystem, encoders):
    filler = small_filesystem / "filler"
    with pytest.raises(OSError) as full, open(filler, "wb") as f:
        while True:
            f.write(b"x" * 4096)
            f.flush()
    assert full.value.errno == errno.ENOSPC
    frames = torch.zeros(8, 64, 64, 3, dtype=torch.uint8)
    with pytest.raises(DiskFullError, match=str(small_filesystem.resolve())):
        with VideoWriter(small_filesystem / "clip.mp4", width=64, height=64, preset="ultrafast",
                         encoders=encoders, segment_frames=4, expected_frames=8) as writer:
            writer.write(frames)
    filler.unlink()
    assert list(small_filesystem.iterdir()) == []
    assert not open_files_below(small_filesystem), "a deleted temporary still holds space"


def open_files_below(folder) -> list[str]:
    """Paths this process holds open below ``folder`` (Linux /proc)."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(folder)):
            found.append(target)
    return found


def _most_scratch_files(monkeypatch) -> dict:
    """``{"scratch": n}``: the most scratch segments the writer held as it opened each one."""
    most = {"scratch": 0}
    opened = VideoWriter._open_segment

    def counting(self, job):
        encoder = opened(self, job)
        most["scratch"] = max(most["scratch"], len(self._scratch))
        return encoder
    monkeypatch.setattr(VideoWriter, "_open_segment", counting)
    return most


@pytest.mark.reliability(area=FAULTS, case="the joiner falls behind the encoders over a long clip (a machine short "
                                            "of CPU)",
                         behaviour="write() waits for it: scratch segments on disk stay at most the encoders plus "
                                   "the buffer pool, whatever the clip length; the MP4 has every frame in order")
def test_scratch_segments_stay_bounded_when_the_joiner_falls_behind(tmp_path, monkeypatch):
    """Session 35 saw 8 scratch segments against this bound of 6 with the test below run beside
    other heavy work: finished segments waited for a joiner starved of CPU, and nothing held the
    producer back (the pool bounds only the segments being encoded)."""
    most = _most_scratch_files(monkeypatch)
    join = Mp4Joiner.add

    def slow_join(self, segment):
        time.sleep(0.05)
        return join(self, segment)
    monkeypatch.setattr(Mp4Joiner, "add", slow_join)
    frames = 240
    with VideoWriter(tmp_path / "long.mp4", width=128, height=64, preset="ultrafast", encoders=2,
                     segment_frames=10, queue_frames=16) as writer:
        for start in range(0, frames, 6):
            writer.write(watermarked(start, 6))
        limit = writer.encoders + writer._pool_size
    assert 0 < most["scratch"] <= limit
    assert writer.waited_for_encoders > 0  # the producer did wait for the joiner
    assert decoded_indices(tmp_path / "long.mp4") == list(range(frames))
    assert [p.name for p in tmp_path.iterdir()] == ["long.mp4"]


def test_host_buffers_and_scratch_files_stay_bounded_over_a_long_clip(tmp_path, monkeypatch):
    """Buffers are counted, not RSS: the pool never grows past its size, at most one scratch
    segment per encoder plus those waiting to be joined exist, whatever the clip length."""
    most = _most_scratch_files(monkeypatch)
    frames = 360
    with VideoWriter(tmp_path / "long.mp4", width=128, height=64, preset="ultrafast", encoders=2,
                     segment_frames=10, queue_frames=16) as writer:
        for start in range(0, frames, 6):
            writer.write(watermarked(start, 6))
        assert writer._pool_created <= writer._pool_size == 4
    assert most["scratch"] <= 2 + writer._pool_size  # encoding + finished ones, each holding pool frames
    assert decoded_indices(tmp_path / "long.mp4") == list(range(frames))
    assert [p.name for p in tmp_path.iterdir()] == ["long.mp4"]
    assert not open_files_below(tmp_path), "the writer keeps a file open after the clip"


def test_writer_rejects_bad_parallel_options(tmp_path):
    for options in ({"encoders": 0}, {"segment_frames": -1}, {"encoders": 2.5}, {"queue_frames": True}):
        with pytest.raises(DittoError, match=next(iter(options))):
            VideoWriter(tmp_path / "x.mp4", width=64, height=64, **options)
    with pytest.raises(DittoError, match="no frames"):
        with VideoWriter(tmp_path / "x.mp4", width=64, height=64, encoders=2):
            pass
    assert list(tmp_path.iterdir()) == []
    assert writer_module.DEFAULT_ENCODERS == 1


def test_default_segments_balance_a_short_clip_and_stay_two_seconds_for_long_ones():
    from fractions import Fraction

    from ditto_core.video.writer import default_segment_frames

    assert default_segment_frames(Fraction(25), 4) == 50
    assert default_segment_frames(Fraction(25), 4, expected_frames=15000) == 50
    assert default_segment_frames(Fraction(25), 4, expected_frames=250) == 25  # 10 segments for 4 encoders
    assert default_segment_frames(Fraction(25), 2, expected_frames=180) == 30
