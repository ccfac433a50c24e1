"""Streaming MP4 writer: round trip through PyAV, audio length, atomic output, error propagation."""
from __future__ import annotations

import os
import platform
import sys
import threading
import time
from pathlib import Path

import av
import numpy as np
import pytest
import torch

from ditto_core.errors import DittoError, InputError
from ditto_core.host_memory import trim_host_heap
from ditto_core.video import writer as writer_module
from ditto_core.video.encoder import SegmentEncoder
from ditto_core.video.encoder_settings import EncoderSettings
from ditto_core.video.writer import VideoWriter
from tests.waiting import wait_until


def gradient_frames(count: int, height: int, width: int) -> torch.Tensor:
    """Smooth frames (x ramp in red, y ramp in green, frame number in blue): easy to compress
    and to recognise after a lossy round trip."""
    ys = torch.linspace(0, 255, height)[:, None].expand(height, width)
    xs = torch.linspace(0, 255, width)[None, :].expand(height, width)
    frames = []
    for i in range(count):
        blue = torch.full((height, width), float(i * 255 // max(count - 1, 1)))
        frames.append(torch.stack([xs, ys, blue], dim=-1))
    return torch.stack(frames).round().to(torch.uint8)


def probe(path: Path) -> dict:
    """Stream metadata and decoded content of an MP4 file."""
    with av.open(str(path)) as container:
        video = container.streams.video[0]
        info = {
            "fps": video.average_rate,
            "size": (video.height, video.width),
            "video_seconds": float(video.duration * video.time_base),
            "frames": np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)]),
        }
    with av.open(str(path)) as container:
        if container.streams.audio:
            audio = container.streams.audio[0]
            info["audio_rate"] = audio.rate
            info["audio_seconds"] = float(audio.duration * audio.time_base)
            info["audio_decoded_seconds"] = sum(f.samples for f in container.decode(audio=0)) / audio.rate
    return info


def tone(seconds: float, rate: int, channels: int = 1) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return np.stack([0.3 * np.sin(2 * np.pi * 440 * (c + 1) * t) for c in range(channels)]).astype(np.float32)


def test_round_trip_with_audio(tmp_path):
    target = tmp_path / "sub" / "clip.mp4"
    frames = gradient_frames(30, 96, 128)
    with VideoWriter(target, width=128, height=96, fps=25, audio=(tone(2.0, 24000), 24000), queue_frames=8) as writer:
        for start in range(0, 30, 7):  # uneven batches
            writer.write(frames[start : start + 7])
        assert writer._pool_created <= writer._pool_size == 2  # host memory stays bounded
        assert writer.frames_written == 30
    assert sorted(p.name for p in target.parent.iterdir()) == ["clip.mp4"]

    info = probe(target)
    assert info["frames"].shape == (30, 96, 128, 3)
    assert info["fps"] == 25 and info["size"] == (96, 128)
    assert info["video_seconds"] == pytest.approx(30 / 25)
    # 2 s of audio against 1.2 s of video: cut to the video, within one frame.
    assert abs(info["audio_seconds"] - info["video_seconds"]) <= 1 / 25
    assert abs(info["audio_decoded_seconds"] - info["video_seconds"]) <= 1 / 25
    # Lossy but faithful: same frames, same order, RGB not swapped.
    error = np.abs(info["frames"].astype(np.int16) - frames.numpy().astype(np.int16))
    assert error.mean() < 2.0, error.mean()


def test_short_stereo_audio_is_padded_and_odd_rate_resampled(tmp_path):
    target = tmp_path / "clip.mp4"
    stereo = torch.from_numpy(tone(0.3, 22000, channels=2))  # shorter than the video, odd rate
    with VideoWriter(target, width=64, height=64, fps=30000 / 1001, audio=(stereo, 22000)) as writer:
        writer.write(gradient_frames(24, 64, 64))
    info = probe(target)
    assert info["fps"] == pytest.approx(30000 / 1001)
    assert info["audio_rate"] == 48000
    assert abs(info["audio_seconds"] - 24 * 1001 / 30000) <= 1001 / 30000
    assert info["frames"].shape[0] == 24


def test_odd_size_is_padded_by_one_pixel(tmp_path):
    target = tmp_path / "odd.mp4"
    frames = gradient_frames(3, 63, 81)
    with VideoWriter(target, width=81, height=63) as writer:
        writer.write(frames.numpy())
    decoded = probe(target)["frames"]
    assert decoded.shape == (3, 64, 82, 3)
    edge = np.abs(decoded[:, :63, 81].astype(int) - decoded[:, :63, 80].astype(int))
    assert edge.mean() < 3.0, "the pad column repeats the last column"


def test_exception_inside_with_leaves_no_file(tmp_path):
    target = tmp_path / "clip.mp4"
    with pytest.raises(KeyError):
        with VideoWriter(target, width=64, height=64, audio=(tone(1.0, 16000), 16000)) as writer:
            writer.write(gradient_frames(10, 64, 64))
            raise KeyError("producer failed")
    assert list(tmp_path.iterdir()) == []


def test_abort_leaves_no_file_and_close_after_abort_is_a_no_op(tmp_path):
    writer = VideoWriter(tmp_path / "clip.mp4", width=64, height=64)
    writer.write(gradient_frames(5, 64, 64))
    writer.abort()
    writer.close()
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(DittoError, match="closed"):
        writer.write(gradient_frames(1, 64, 64))


def test_encoder_error_reaches_the_producer(tmp_path, monkeypatch):
    def broken(self, encoder, chunk):
        raise OSError("disk full")

    monkeypatch.setattr(VideoWriter, "_encode_chunk", broken)
    # Far more frames than the pool holds: the producer must not deadlock on a dead encoder.
    with pytest.raises(DittoError, match="disk full") as raised:
        with VideoWriter(tmp_path / "clip.mp4", width=64, height=64, queue_frames=4) as writer:
            for _ in range(50):
                writer.write(gradient_frames(4, 64, 64))
    assert isinstance(raised.value.__cause__, OSError)
    assert list(tmp_path.iterdir()) == []


def test_bad_settings_and_inputs(tmp_path):
    with pytest.raises(InputError, match="preset"):
        VideoWriter(tmp_path / "a.mp4", width=64, height=64, preset="warp-speed")
    with pytest.raises(InputError, match="at least one sample"):
        VideoWriter(tmp_path / "a.mp4", width=64, height=64, audio=(np.zeros((2, 0), np.float32), 16000))
    with pytest.raises(InputError, match="fps"):
        VideoWriter(tmp_path / "a.mp4", width=64, height=64, fps=0)
    assert list(tmp_path.iterdir()) == [], "a rejected writer leaves no temp file"
    with VideoWriter(tmp_path / "a.mp4", width=64, height=64) as writer:
        with pytest.raises(InputError, match=r"\(N, 64, 64, 3\) uint8"):
            writer.write(torch.zeros(2, 64, 32, 3, dtype=torch.uint8))
        writer.write(gradient_frames(2, 64, 64))
    assert probe(tmp_path / "a.mp4")["frames"].shape[0] == 2


@pytest.mark.gpu
def test_cuda_frames_are_copied_asynchronously(tmp_path):
    frames = gradient_frames(40, 128, 128)
    target = tmp_path / "gpu.mp4"
    with VideoWriter(target, width=128, height=128, queue_frames=8) as writer:
        for start in range(0, 40, 10):
            writer.write(frames[start : start + 10].cuda())
    decoded = probe(target)["frames"]
    assert decoded.shape[0] == 40
    assert np.abs(decoded.astype(np.int16) - frames.numpy().astype(np.int16)).mean() < 2.0


@pytest.mark.gpu
def test_the_encoders_wait_for_a_busy_gpu_is_measured(tmp_path):
    """Frames queued behind 0.2 s of GPU work: the encoder waits for their copy that long (the
    pipeline's ``render_encoders_waited_for_gpu``), while write() itself returned at once."""
    frames = gradient_frames(8, 128, 128).cuda()
    with VideoWriter(tmp_path / "busy.mp4", width=128, height=128, queue_frames=8) as writer:
        writer.write(frames)  # the pool's two pinned buffers made, then encoded
        time.sleep(0.5)
        before = writer.encoders_waited_for_gpu
        torch.cuda._sleep(400_000_000)  # cycles: at least 0.2 s at the 2 GHz or less these GPUs run
        writer.write(frames[:4])
        assert writer.waited_for_encoders < 0.01  # a free buffer: write() did not wait
    assert writer.encoders_waited_for_gpu - before > 0.1, (before, writer.encoders_waited_for_gpu)


@pytest.mark.gpu
def test_cuda_frames_freed_and_reused_right_after_write_arrive_intact(tmp_path):
    """The host copy runs on a side stream: the converted frames' memory must not be handed out
    again (here to a tensor filled at once on the render's stream) before that copy has read it."""
    frames = gradient_frames(24, 720, 1280)
    target = tmp_path / "reused.mp4"
    with VideoWriter(target, width=1280, height=720, queue_frames=24) as writer:
        for start in range(0, 24, 8):
            batch = frames[start : start + 8].cuda()
            writer.write(batch)
            del batch
            # Blocks the size of one converted chunk, as the allocator would hand them out next,
            # overwritten at once.
            for _ in range(4):
                torch.full((writer_module._CHUNK_FRAMES * 720 * 3 // 2 * 1280,), 255, dtype=torch.uint8,
                           device="cuda").add_(1)
    decoded = probe(target)["frames"]
    assert decoded.shape[0] == 24
    assert np.abs(decoded.astype(np.int16) - frames.numpy().astype(np.int16)).mean() < 2.0


def test_trim_host_heap_reports_whether_it_could_run():
    assert trim_host_heap() == (sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc")


@pytest.fixture
def idle_trims(monkeypatch):
    """The process's idle trim replaced by one that records (thread, time) of each trim, 0.3 s idle."""
    from ditto_core import host_memory

    trims: list[tuple[str, float]] = []
    monkeypatch.setattr(host_memory, "IDLE_SECONDS", 0.3)
    monkeypatch.setattr(host_memory, "_IDLE_TRIM", host_memory._IdleTrim(
        trim=lambda: trims.append((threading.current_thread().name, time.monotonic()))))
    return trims


@pytest.mark.skipif(not trim_host_heap(), reason="glibc's malloc_trim only")
def test_the_heap_is_trimmed_once_no_video_has_been_made_for_a_while(idle_trims):
    from ditto_core.host_memory import video_started

    span = video_started()
    ended = time.monotonic()
    span.end()
    span.end()  # a second end is nothing
    wait_until(lambda: idle_trims, 5.0)
    assert len(idle_trims) == 1 and idle_trims[0][0] == "ditto-heap-trim"
    assert idle_trims[0][1] - ended >= 0.3
    time.sleep(0.5)
    assert len(idle_trims) == 1  # one trim per idle spell


@pytest.mark.skipif(not trim_host_heap(), reason="glibc's malloc_trim only")
def test_no_trim_runs_while_a_video_is_made_nor_before_the_last_has_ended_for_a_while(idle_trims):
    from ditto_core.host_memory import video_started

    first, second = video_started(), video_started()
    first.end()
    time.sleep(0.5)
    assert idle_trims == []  # the second is still being made
    second.end()
    third = video_started()  # the next video begins within the idle time
    time.sleep(0.5)
    assert idle_trims == []
    ended = time.monotonic()
    third.end()
    wait_until(lambda: idle_trims, 5.0)
    assert len(idle_trims) == 1 and idle_trims[0][1] - ended >= 0.3


@pytest.mark.skipif(not trim_host_heap(), reason="glibc's malloc_trim only")
def test_leaving_a_writer_leaves_the_trim_to_the_idle_thread(tmp_path, idle_trims):
    """Each video's encoder thread leaves its frame buffers in a glibc arena: they are handed back
    once no writer is open, whether the video was saved or failed."""
    from ditto_core import host_memory

    with VideoWriter(tmp_path / "ok.mp4", width=64, height=64, fps=25, preset="ultrafast") as writer:
        writer.write(torch.zeros(2, 64, 64, 3, dtype=torch.uint8))
        assert host_memory._IDLE_TRIM._videos.active() == 1
    with pytest.raises(RuntimeError):
        with VideoWriter(tmp_path / "failed.mp4", width=64, height=64, fps=25):
            raise RuntimeError("render failed")
    left = time.monotonic()
    assert host_memory._IDLE_TRIM._videos.active() == 0 and idle_trims == []  # not on the caller's way out
    wait_until(lambda: idle_trims, 5.0)
    assert len(idle_trims) == 1 and idle_trims[0][0] == "ditto-heap-trim" and idle_trims[0][1] - left >= 0.25
    assert (tmp_path / "ok.mp4").exists() and not (tmp_path / "failed.mp4").exists()


def test_one_encoder_leaves_two_cores_to_the_render_on_big_hosts(tmp_path, monkeypatch):
    from ditto_core.video import encoder_settings
    from ditto_core.video.encoder_settings import default_threads

    assert [default_threads("superfast", cores) for cores in (16, 8, 4, 1)] == [14, 6, 0, 0]
    assert default_threads("ultrafast", 16) == 14 and default_threads("medium", 16) == 0  # medium: every core
    for cores, preset, expected in ((16, "ultrafast", 14), (16, "medium", 0), (2, "ultrafast", 0)):
        monkeypatch.setattr(writer_module, "usable_cores", lambda: cores)
        monkeypatch.setattr(encoder_settings, "usable_cores", lambda: cores)
        target = tmp_path / f"c{cores}_{preset}.mp4"
        with VideoWriter(target, width=64, height=64, preset=preset) as writer:
            assert writer.settings.threads == expected
            writer.write(gradient_frames(3, 64, 64))
        assert probe(target)["frames"].shape[0] == 3
    with VideoWriter(tmp_path / "given.mp4", width=64, height=64, preset="ultrafast", threads=3) as writer:
        assert writer.settings.threads == 3
        writer.write(gradient_frames(1, 64, 64))


def _tasks() -> set[int]:
    return {int(name) for name in os.listdir("/proc/self/task")}


def _x264_levels(before: set[int]) -> list[int]:
    """Nice levels of the threads started since ``before`` that are not Python's (so x264's)."""
    python = {thread.native_id for thread in threading.enumerate()}
    return [os.getpriority(os.PRIO_PROCESS, task) for task in _tasks() - before - python]


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="threads are listed from Linux's /proc")
def test_x264_threads_run_below_the_thread_that_opens_them(tmp_path):
    """libx264 starts its threads when the encoder opens: each runs ``nice`` levels below the
    caller, who keeps its own level; ``nice=0`` keeps them level; a bad level is refused."""
    caller = threading.get_native_id()
    level = os.getpriority(os.PRIO_PROCESS, caller)
    frames = gradient_frames(4, 64, 64)
    settings = EncoderSettings(64, 64, 25, preset="ultrafast", threads=3)
    for nice in (7, 0):
        before = _tasks()
        with SegmentEncoder(tmp_path / f"n{nice}.mp4", settings, whole=True, nice=nice) as encoder:
            levels = _x264_levels(before)
            encoder.write(frames)
        assert len(levels) >= 3 and set(levels) == {min(19, level + nice)}, (nice, levels)
        assert os.getpriority(os.PRIO_PROCESS, caller) == level
        assert probe(tmp_path / f"n{nice}.mp4")["frames"].shape[0] == 4
    before = _tasks()
    with VideoWriter(tmp_path / "w.mp4", width=64, height=64, preset="ultrafast", threads=3) as writer:
        wait_until(lambda: len(_x264_levels(before)) >= 3, 10)  # opened by the writer's thread
        assert set(_x264_levels(before)) == {level}, "by default x264 runs level with the caller"
        writer.write(frames)
    for bad, encoders in ((-1, 1), (20, 1), (1.5, 1), (-1, 2), (True, 2)):
        with pytest.raises(InputError, match="nice"):
            VideoWriter(tmp_path / "bad.mp4", width=64, height=64, nice=bad, encoders=encoders)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"{n}.mp4" for n in ("n7", "n0", "w")), \
        "a refused writer leaves nothing"


def test_parallel_segments_open_at_the_writers_nice(tmp_path, monkeypatch):
    from ditto_core.video import encoder as encoder_module

    opened: list[int] = []
    original = encoder_module._open_niced
    monkeypatch.setattr(encoder_module, "_open_niced", lambda context, nice: (opened.append(nice), original(context, nice)))
    with VideoWriter(tmp_path / "p.mp4", width=64, height=64, preset="ultrafast", encoders=2, threads=1,
                     segment_frames=4, nice=5) as writer:
        for _ in range(3):
            writer.write(gradient_frames(4, 64, 64))
    assert opened == [5, 5, 5]
    assert probe(tmp_path / "p.mp4")["frames"].shape[0] == 12


def test_the_writer_opens_its_encoder_while_the_caller_goes_on(tmp_path, monkeypatch):
    """A one-encoder writer returns before x264 has opened (its thread opens it), frames written
    meanwhile wait for it; an open that fails is raised at the next write, leaving no file."""
    from ditto_core.video import encoder as encoder_module

    release, opening = threading.Event(), threading.Event()
    original = encoder_module._open_niced

    def slow_open(context, nice):
        opening.set()
        assert release.wait(10)
        original(context, nice)

    monkeypatch.setattr(encoder_module, "_open_niced", slow_open)
    with VideoWriter(tmp_path / "slow.mp4", width=64, height=64, preset="ultrafast",
                     audio=(tone(0.4, 16000), 16000)) as writer:
        assert opening.wait(10) and not release.is_set()  # the constructor did not wait for the open
        writer.write(gradient_frames(6, 64, 64))
        release.set()
        writer.write(gradient_frames(4, 64, 64))
    assert probe(tmp_path / "slow.mp4")["frames"].shape[0] == 10

    def failing_open(context, nice):
        raise encoder_module.av.FFmpegError(22, "refused by the test")

    monkeypatch.setattr(encoder_module, "_open_niced", failing_open)
    with pytest.raises(InputError, match="libx264 rejected"):
        with VideoWriter(tmp_path / "refused.mp4", width=64, height=64, preset="ultrafast") as writer:
            for _ in range(50):
                writer.write(gradient_frames(4, 64, 64))
                time.sleep(0.01)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["slow.mp4"]


def test_the_mp4_goes_to_the_disk_as_it_grows_and_the_tail_is_timed(tmp_path, monkeypatch):
    """A published MP4's writes start every WRITEBACK_BYTES (so the sync before the rename has
    little left); the file descriptor this needs is closed again; the finish is broken down."""
    from ditto_core import atomic_files
    from ditto_core.video import mp4_file

    calls = []
    monkeypatch.setattr(atomic_files, "_sync_file_range", lambda: lambda fd, *args: calls.append(
        os.fstat(fd).st_ino) or 0)
    monkeypatch.setattr(mp4_file, "WRITEBACK_BYTES", 20_000)
    open_before = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
    noise = torch.randint(0, 256, (40, 96, 128, 3), dtype=torch.uint8)  # incompressible: bytes to write
    target = tmp_path / "clip.mp4"
    with VideoWriter(target, width=128, height=96, fps=25, crf=0, preset="ultrafast", audio=(tone(1.6, 24000), 24000),
                     encoders=1) as writer:
        writer.write(noise)
    size = target.stat().st_size
    assert size > 60_000 and len(calls) >= 2, (size, calls)
    assert len(set(calls)) == 1  # one file: the MP4's temporary, which became the target
    assert calls[0] == target.stat().st_ino
    if open_before is not None:
        assert len(os.listdir("/proc/self/fd")) == open_before
    assert set(writer.finish_seconds) == {"encode_queued", "flush", "publish", "trim"}
    assert all(seconds >= 0 for seconds in writer.finish_seconds.values())
    assert probe(target)["frames"].shape[0] == 40


def test_scratch_segments_are_not_sent_to_the_disk(tmp_path, monkeypatch):
    """Parallel segments are deleted once joined: only the joined MP4 gets early writes."""
    from ditto_core import atomic_files
    from ditto_core.video import mp4_file

    inodes = []
    monkeypatch.setattr(atomic_files, "_sync_file_range", lambda: lambda fd, *args: inodes.append(
        os.fstat(fd).st_ino) or 0)
    monkeypatch.setattr(mp4_file, "WRITEBACK_BYTES", 20_000)
    noise = torch.randint(0, 256, (40, 96, 128, 3), dtype=torch.uint8)
    target = tmp_path / "joined.mp4"
    with VideoWriter(target, width=128, height=96, fps=25, crf=0, preset="ultrafast", encoders=2,
                     segment_frames=10) as writer:
        writer.write(noise)
    # The joined file (opened before any segment, so no segment reuses its inode) and no other.
    assert inodes and set(inodes) == {target.stat().st_ino}
    assert probe(target)["frames"].shape[0] == 40


def test_the_time_the_producer_waits_for_the_encoders_is_measured(tmp_path, monkeypatch):
    """The render's share held back by x264 (the pipeline's ``render_waited_for_encoders``): none
    while the pool has free buffers, the encoder's delay once every buffer is in flight. Host
    frames need no copy from a GPU: the encoders never wait for one."""
    original = VideoWriter._encode_chunk

    def slow(self, encoder, chunk):
        time.sleep(0.1)
        original(self, encoder, chunk)

    with VideoWriter(tmp_path / "fast.mp4", width=64, height=64, queue_frames=8) as writer:
        writer.write(gradient_frames(8, 64, 64))  # two chunks: the pool's two buffers, new
        assert writer.waited_for_encoders == 0.0
    monkeypatch.setattr(VideoWriter, "_encode_chunk", slow)
    with VideoWriter(tmp_path / "slow.mp4", width=64, height=64, queue_frames=8) as writer:
        for _ in range(6):  # six chunks through two buffers, each held 0.1 s by the encoder
            writer.write(gradient_frames(4, 64, 64))
        assert 0.25 < writer.waited_for_encoders < 1.0, writer.waited_for_encoders
    assert writer.encoders_waited_for_gpu == 0.0
    assert probe(tmp_path / "slow.mp4")["frames"].shape[0] == 24
