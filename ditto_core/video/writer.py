"""Streaming MP4 writer: H.264 (libx264, yuv420p, BT.709) plus optional AAC audio, through PyAV.

Frames arrive as RGB in batches. CUDA frames are converted to yuv420p on the GPU
(:mod:`~ditto_core.video.colour`), so only 1.5 bytes a pixel cross PCIe, into a fixed pool
of pinned host buffers (asynchronously, on a copy stream of their own, so the transfers overlap
the render); host frames are copied into the pool as RGB and
converted by swscale in the encoder threads. Host memory therefore stays bounded by the pool
whatever the clip length.

With one encoder, one libx264 instance encodes the whole clip into the MP4 with the audio.
With several, the clip is cut into GOP-aligned segments of ``segment_frames`` frames; segment
k goes to whichever encoder thread is free (PyAV releases the GIL inside libx264, so the
instances run concurrently), each into a scratch file beside the target, and a joiner thread
remuxes the finished segments in order into the MP4, with the audio, without re-encoding
(:class:`~ditto_core.video.joiner.Mp4Joiner`), deleting each once joined.

The MP4 is written under a temporary name in the target folder and renamed over the target
only once it is complete: a failure in any thread, or an interruption, leaves nothing behind.
"""
from __future__ import annotations

import functools
import os
import queue
import threading
import time
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path
from types import TracebackType
from typing import Callable, Dict, List, Mapping, NoReturn, Optional, Tuple, Type, Union

import numpy as np
import torch
from torch import Tensor

from ..atomic_files import DiskFullError, discard, disk_full_error
from ..cuda_streams import owned_stream
from ..errors import DittoError, InputError
from ..gil_turns import short_gil_turns
from ..host_memory import trim_host_heap, video_started
from .colour import pad_to_even, rgb_to_yuv420p
from .audio_track import Waveform, prepare_audio
from .encoder import SegmentEncoder, check_frames
from .encoder_settings import (
    DEFAULT_ENCODERS, EncoderSettings, Segment, check_encoder_options, check_nice, default_preset, default_threads,
    usable_cores,
)
from .joiner import Mp4Joiner
from .x264_presets import X264_PRESETS

__all__ = ["VideoWriter", "X264_PRESETS", "check_encoder_options", "DEFAULT_ENCODERS", "default_preset",
           "default_segment_frames"]

# Frames per host-copy chunk: big enough to amortise a transfer, small enough that the encoder
# starts on the first frames while the rest of a batch is still being copied.
_CHUNK_FRAMES = 4

# How often a thread blocked on a queue checks that the others are still alive.
_POLL_SECONDS = 0.5

# Seconds of video per segment when encoding in parallel: each segment starts with an IDR
# frame (a little size at the same quality), and the pool must hold about one segment per
# encoder for all of them to stay busy. A clip of known length gets shorter segments (down to
# the minimum), about _SEGMENTS_PER_ENCODER each, so the last round of segments does not leave
# most encoders idle.
_SEGMENT_SECONDS = 2.0
_MIN_SEGMENT_SECONDS = 1.0
_SEGMENTS_PER_ENCODER = 3

# The default pool never takes more host memory than this (whatever the frame size).
_DEFAULT_POOL_BYTES = 1 << 30

# Whether an encoder thread waiting for a chunk's copy from the GPU sleeps (a blocking-sync
# event) rather than spins: a spinning wait holds a core at 100 % for as long as the render
# runs ahead of it, and the core is one that x264, the bottleneck, needs. Benchmarks switch it.
HOST_WAIT_BLOCKS = True

# Whether the host heap is trimmed once no video has been made for a while (host_memory: the
# caller, and whatever runs after it, go on at once) rather than on the caller's thread as it
# leaves the writer. Benchmarks switch it.
TRIM_IN_BACKGROUND = True


def default_segment_frames(fps: Fraction, encoders: int, expected_frames: Optional[int] = None) -> int:
    """Frames per segment (and GOP) when none are given: two seconds, less for a short clip."""
    longest = max(1, round(_SEGMENT_SECONDS * fps))
    if not expected_frames:
        return longest
    balanced = -(-expected_frames // (_SEGMENTS_PER_ENCODER * encoders))
    return max(min(balanced, longest), max(1, round(_MIN_SEGMENT_SECONDS * fps)))


@dataclass
class _Chunk:
    buffer: Tensor  # flat uint8 host buffer from the pool
    count: int  # frames in it
    yuv: bool  # packed yuv420p (from the GPU) or padded RGB
    ready: Optional[torch.cuda.Event]  # set once the device-to-host copy has landed


@dataclass
class _Job:
    """One segment: its frames arrive on ``chunks``, a None ends them."""

    index: int
    first_frame: int
    chunks: "queue.Queue[Optional[_Chunk]]"


class VideoWriter:
    """Encode uint8 RGB frames to an MP4 file as they are produced.

    Use as a context manager: leaving the block normally finalises the file, leaving it with
    an exception deletes everything written so far::

        with VideoWriter("out.mp4", width=512, height=512, fps=25, audio=(wave, 16000)) as writer:
            for batch in batches:
                writer.write(batch)  # (N, H, W, 3) uint8, any device

    Args:
        path: target file; its folder is created if needed.
        width, height: frame size. H.264 in yuv420p needs even sides: an odd side is padded by
            repeating the last column/row, so the video is then one pixel wider/taller.
        fps: frame rate (fractional rates such as 29.97 are stored as 30000/1001).
        crf: x264 constant rate factor, 0 (lossless) to 51; 18 is visually lossless.
        preset: x264 preset, ``"ultrafast"`` ... ``"veryslow"``; None: :func:`default_preset`
            for this host's CPU count.
        audio: ``(waveform, sample_rate)`` with a float waveform of shape (C, T) or (T,) in
            [-1, 1]; muxed as AAC, cut or padded with silence to the video length. More than two
            channels are mixed down to mono (the mix the lip motion was computed from).
        encoders: concurrent libx264 instances; None: :data:`DEFAULT_ENCODERS`.
        threads: frame threads of each libx264 instance; None: :func:`default_threads` (all cores
            but two on 8 or more at the fastest presets) with one encoder, ``cores // encoders`` with
            several.
        segment_frames: frames per segment (and GOP) when ``encoders > 1``; None:
            :func:`default_segment_frames` (two seconds, down to one for a short clip).
        queue_frames: frames buffered on the host between producer and encoders; bounds host
            memory at about ``queue_frames * width * height * 3`` bytes (half that for CUDA
            frames, which arrive as yuv420p). None: 32 for one encoder, otherwise enough for
            one segment per encoder, at most 1 GiB.
        expected_frames: the clip's length where the caller knows it: a disk-full error then
            names the space the whole MP4 needs, not only what was written before it struck.
        metadata: container tags (name -> text), stored as MP4 metadata tags; ComfyUI keeps a
            render's ``prompt`` and ``workflow`` (JSON) there.
        nice: how many priority levels below the thread that makes the writer libx264's threads
            run (0: level; see :class:`~.encoder.SegmentEncoder`).
    """

    def __init__(
        self,
        path: Union[str, os.PathLike],
        *,
        width: int,
        height: int,
        fps: float = 25.0,
        crf: int = 18,
        preset: Optional[str] = None,
        audio: Optional[Tuple[Waveform, int]] = None,
        encoders: Optional[int] = None,
        threads: Optional[int] = None,
        segment_frames: Optional[int] = None,
        queue_frames: Optional[int] = None,
        expected_frames: Optional[int] = None,
        metadata: Optional[Mapping[str, str]] = None,
        nice: int = 0,
    ) -> None:
        cores = usable_cores()
        encoders = DEFAULT_ENCODERS if encoders is None else encoders
        for name, value in (("encoders", encoders), ("threads", threads), ("segment_frames", segment_frames),
                            ("queue_frames", queue_frames), ("expected_frames", expected_frames)):
            if value is not None and not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
                raise InputError(f"VideoWriter: {name} must be a positive integer, got {value!r}")
        check_nice(nice)  # here, not only in the encoders: parallel segments open theirs later, in threads
        settings = EncoderSettings(width, height, fps, crf, default_preset(cores) if preset is None else preset)
        parallel = encoders > 1
        if parallel:
            segment_frames = segment_frames or default_segment_frames(settings.fps, encoders, expected_frames)
            settings = replace(settings, gop_frames=segment_frames, threads=threads or max(1, cores // encoders))
        else:
            settings = replace(settings, threads=threads or default_threads(settings.preset, cores))
        self.settings = settings
        self.path = Path(path)
        self.width, self.height = width, height
        self.expected_frames = expected_frames
        self.encoders = encoders
        self.nice = nice
        self.segment_frames = segment_frames if parallel else None
        self._padded = self.settings.padded
        frame_bytes = self._padded[0] * self._padded[1] * 3
        if queue_frames is None:
            wanted = encoders * segment_frames if parallel else 32
            queue_frames = max(2 * _CHUNK_FRAMES, min(wanted, _DEFAULT_POOL_BYTES // frame_bytes))
        self._pool_size = max(2, -(-queue_frames // _CHUNK_FRAMES))
        self._pool_created = 0
        self._free: "queue.Queue[Tensor]" = queue.Queue()

        self._lock = threading.Lock()
        self._error: Optional[BaseException] = None
        self._aborting = False
        self._closed = False
        self._frames_queued = 0
        self._frames_encoded = 0
        self._jobs: "queue.Queue[Optional[_Job]]" = queue.Queue()
        self._open_job: Optional[_Job] = None
        self._job_count = 0
        self._done: Dict[int, Segment] = {}  # finished segments waiting for the joiner
        self._scratch: List[Path] = []  # every scratch file a thread may still hold
        self._segment_done = threading.Condition(self._lock)
        self._packets = self._packet_bytes = 0  # out of every encoder so far
        self._joined = 0  # segments in the MP4 so far
        self._input_ended = False
        # Where the wait after the last frame goes, seconds (the benchmark's breakdown of the
        # tail): the encoders finishing what was queued, then with one encoder x264's flush and
        # the file's publishing, and on leaving the ``with`` block the caller's part of the heap
        # trim (nothing but marking the video done, unless TRIM_IN_BACKGROUND is off).
        self.finish_seconds: dict[str, float] = {}
        # Where a render's time goes, seconds: write() waiting for a free buffer, all of them in
        # flight (the producer ahead of the encoders), and the encoder threads waiting for a
        # chunk's copy from the GPU (the device behind them; summed over the threads). Producer
        # waits with encoders that rarely wait for the GPU: x264 is the limit; both: the GPU is.
        self.waited_for_encoders = 0.0
        self.encoders_waited_for_gpu = 0.0

        # One encoder writes the whole file, opened by its thread as it starts: the caller renders
        # its first frames meanwhile instead of waiting for x264 to set up its threads.
        self._final: Optional[SegmentEncoder] = None
        self._whole: Optional[dict] = None
        if parallel:
            self._joiner: Optional[Mp4Joiner] = Mp4Joiner(self.path, audio, metadata=metadata)
        else:
            self._joiner = None
            self._whole = {"audio": prepare_audio(audio) if audio is not None else None, "metadata": metadata}
        self._threads = [
            threading.Thread(target=_in_short_gil_turns, args=(self._encode_loop,), name=f"ditto-video-encoder-{i}",
                             daemon=True)
            for i in range(encoders)
        ]
        if parallel:
            self._threads.append(threading.Thread(target=_in_short_gil_turns, args=(self._join_loop,),
                                                  name="ditto-video-joiner", daemon=True))
        for thread in self._threads:
            thread.start()

    # ------------------------------------------------------------------ producer side

    @property
    def frames_written(self) -> int:
        """Frames accepted by :meth:`write` so far (encoded or still queued)."""
        return self._frames_queued

    def write(self, frames: Union[Tensor, np.ndarray]) -> None:
        """Queue (N, H, W, 3) uint8 RGB frames for encoding; blocks only while the pool is full.

        CUDA frames are converted on the current stream and copied to the host on a side stream,
        without waiting for either: the caller may reuse or free them afterwards as long as it
        stays on its stream.
        """
        self._ensure_usable()
        if isinstance(frames, np.ndarray):
            frames = torch.from_numpy(frames)
        check_frames(frames, self.settings, "VideoWriter.write")
        start = 0
        while start < frames.shape[0]:
            job = self._current_job()
            room = _CHUNK_FRAMES
            if self.segment_frames is not None:
                room = min(room, job.first_frame + self.segment_frames - self._frames_queued)
            chunk = frames[start : start + room]
            job.chunks.put(self._stage(chunk))
            self._frames_queued += chunk.shape[0]
            start += chunk.shape[0]

    def _current_job(self) -> _Job:
        """The segment the next frame belongs to (a new one once the open one is full)."""
        job = self._open_job
        if job is not None and (self.segment_frames is None
                                or self._frames_queued < job.first_frame + self.segment_frames):
            return job
        if job is not None:
            job.chunks.put(None)
            self._wait_for_the_joiner()
        job = _Job(self._job_count, self._frames_queued, queue.Queue())
        self._job_count += 1
        self._open_job = job
        self._jobs.put(job)
        return job

    def _wait_for_the_joiner(self) -> None:
        """Before a new segment: wait while ``encoders + pool size`` segments are not joined yet.

        Each such segment is a scratch file (being encoded, or finished and waiting for the
        joiner); the buffer pool bounds the segments being encoded but not the finished ones, so
        a joiner that falls behind (a machine short of CPU) would otherwise let them pile up on
        disk for as long as the clip lasts.
        """
        limit = self.encoders + self._pool_size
        start = time.perf_counter()
        while True:
            with self._lock:
                if self._job_count - self._joined < limit or self._stopping():
                    break
                self._segment_done.wait(_POLL_SECONDS)
            self._check_threads()
        self.waited_for_encoders += time.perf_counter() - start
        self._ensure_usable()

    def _check_threads(self) -> None:
        """Raise if a worker thread is gone while the producer waits for it: the error it
        recorded on its way out when it failed (checked after seeing it gone, since a thread can
        fail between the producer's two checks), else a plain one."""
        if not all(thread.is_alive() for thread in self._threads):
            self._ensure_usable()
            raise DittoError(f"an encoder thread for {self.path} stopped unexpectedly")

    def _stage(self, chunk: Tensor) -> _Chunk:
        """Copy a chunk of frames into a pool buffer: yuv420p converted on the GPU for CUDA
        frames, padded RGB for host frames."""
        count, (height, width) = chunk.shape[0], self._padded
        if chunk.is_cuda:
            packed = rgb_to_yuv420p(pad_to_even(chunk))
            buffer = self._take_buffer(yuv=True)
            copier = _copy_stream(chunk.device)
            copier.wait_stream(torch.cuda.current_stream(chunk.device))
            with torch.cuda.stream(copier):
                buffer[: packed.numel()].view(packed.shape).copy_(packed, non_blocking=True)
                ready = torch.cuda.Event(blocking=HOST_WAIT_BLOCKS)
                ready.record(copier)
            packed.record_stream(copier)  # its memory is not handed out again before the copy has read it
            return _Chunk(buffer, count, True, ready)
        buffer = self._take_buffer(yuv=False)
        frames = buffer[: count * height * width * 3].view(count, height, width, 3)
        frames[:, : self.height, : self.width].copy_(chunk)
        if width != self.width:
            frames[:, : self.height, self.width] = frames[:, : self.height, self.width - 1]
        if height != self.height:
            frames[:, self.height] = frames[:, self.height - 1]
        return _Chunk(buffer, count, False, None)

    def _take_buffer(self, yuv: bool) -> Tensor:
        """A free host buffer for one chunk; waits while all are in flight.

        A buffer holds _CHUNK_FRAMES frames of its kind: packed yuv420p, pinned (for CUDA
        frames), or padded RGB (host frames). One of the other kind is replaced, so the count
        never grows.
        """
        pinned = yuv and torch.cuda.is_available()
        size = _CHUNK_FRAMES * self._padded[0] * self._padded[1] * 3 // (2 if yuv else 1)
        if self._pool_created < self._pool_size:
            self._pool_created += 1
            return torch.empty(size, dtype=torch.uint8, pin_memory=pinned)
        start = time.perf_counter()
        while True:
            try:
                buffer = self._free.get(timeout=_POLL_SECONDS)
                self.waited_for_encoders += time.perf_counter() - start
            except queue.Empty:
                self._ensure_usable()
                self._check_threads()
                continue
            if buffer.numel() != size or buffer.is_pinned() != pinned:
                buffer = torch.empty(size, dtype=torch.uint8, pin_memory=pinned)  # replaces it: count unchanged
            return buffer

    def close(self) -> None:
        """Encode what is queued, flush the encoders, join the segments and move the file into place."""
        if self._closed:
            return
        try:
            if self._frames_queued == 0:
                raise InputError(f"VideoWriter: no frames were written to {self.path}; nothing to save")
            start = time.perf_counter()
            self._end_input()
            for thread in self._threads:
                thread.join()
            self._ensure_usable()
            self.finish_seconds["encode_queued"] = time.perf_counter() - start
            if self._joiner is not None:
                self._joiner.close()
            else:
                self._final.close()
                self.finish_seconds.update(self._final.close_seconds)
        except BaseException as error:  # an interruption too (while waiting for the encoders)
            self.abort()
            self._raise(error)
        self._closed = True

    def abort(self) -> None:
        """Stop encoding and delete every partial file; no target file is created."""
        if self._closed:
            return
        self._closed = True
        with self._lock:
            self._aborting = True
            self._segment_done.notify_all()
        self._end_input()
        for thread in self._threads:
            thread.join()
        if self._final is not None:
            self._final.abort()
        if self._joiner is not None:
            self._joiner.abort()
        for path in self._scratch:
            discard(path)

    def _end_input(self) -> None:
        """No more frames: end the open segment and tell each encoder thread to stop when idle."""
        if self._open_job is not None:
            self._open_job.chunks.put(None)
            self._open_job = None
        for _ in range(self.encoders):
            self._jobs.put(None)
        with self._lock:
            self._input_ended = True
            self._segment_done.notify_all()

    def __enter__(self) -> "VideoWriter":
        self._making = video_started()
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        try:
            if exc_type is None:
                self.close()
            else:
                self.abort()
        finally:
            # The encoder threads' frame buffers, kept by their heap arenas, handed back: once the
            # process is idle (host_memory), or here.
            start = time.perf_counter()
            self._making.end()
            if not TRIM_IN_BACKGROUND:
                trim_host_heap()
            self.finish_seconds["trim"] = time.perf_counter() - start

    def _ensure_usable(self) -> None:
        """Raise if the writer is closed or a worker thread has failed (cleaning up first)."""
        if self._error is not None:
            self.abort()
            self._raise(self._error)
        if self._closed:
            raise DittoError(f"VideoWriter for {self.path} is already closed; open a new one")

    def _raise(self, error: BaseException) -> NoReturn:
        """Raise what the caller sees for ``error``: a disk-full error naming the folder and the
        space the whole file needs; DittoErrors and interruptions as they are; anything else as
        a DittoError naming the file."""
        if isinstance(error, OSError):
            # Re-estimated for the whole file when a segment's encoder already translated it.
            cause = error.__cause__ if isinstance(error, DiskFullError) and error.__cause__ else error
            full = disk_full_error(cause, self.path, self._estimated_bytes())
            if full is not None and full is not cause:
                raise full from cause
        if isinstance(error, DittoError) or not isinstance(error, Exception):
            raise error
        raise DittoError(f"encoding {self.path} failed: {error}") from error

    def _estimated_bytes(self) -> Optional[int]:
        """The finished MP4's size for every frame received, extrapolated from the packets x264
        returned so far (or from the raw size before any)."""
        with self._lock:
            packets, packet_bytes = self._packets, self._packet_bytes
        frames = max(self._frames_queued, self.expected_frames or 0)
        if packets:
            return packet_bytes * max(frames, packets) // packets
        height, width = self._padded
        return frames * height * width * 3 // 20 or None

    def _fail(self, error: BaseException) -> None:
        with self._lock:
            if self._error is None:
                self._error = error
            self._segment_done.notify_all()

    # ------------------------------------------------------------------ encoder threads

    def _encode_loop(self) -> None:
        """Take segments until the end marker; after a failure, only recycle buffers."""
        if self._whole is not None:
            try:
                self._final = SegmentEncoder(self.path, self.settings, whole=True, nice=self.nice, **self._whole)
            except BaseException as error:  # handed to the producer by _ensure_usable
                self._fail(error)
        while (job := self._jobs.get()) is not None:
            encoder, ended = self._final, False
            try:
                if encoder is None and self._whole is None and not self._stopping():
                    encoder = self._open_segment(job)
                while (chunk := job.chunks.get()) is not None:
                    try:
                        if not self._stopping():
                            if chunk.ready is not None:
                                start = time.perf_counter()
                                chunk.ready.synchronize()
                                with self._lock:
                                    self.encoders_waited_for_gpu += time.perf_counter() - start
                            self._encode_chunk(encoder, chunk)
                    finally:
                        self._free.put(chunk.buffer)
                ended = True
                if encoder is not None and encoder is not self._final:
                    if self._stopping():
                        encoder.abort()
                    else:
                        self._segment_finished(job, encoder.close())
            except BaseException as error:  # handed to the producer by _ensure_usable
                self._fail(error)
                if encoder is not None and encoder is not self._final:
                    encoder.abort()
                if not ended:
                    self._drain(job)

    def _open_segment(self, job: _Job) -> SegmentEncoder:
        encoder = SegmentEncoder(self.path, self.settings, job.first_frame, scratch=True, nice=self.nice)
        with self._lock:
            self._scratch.append(encoder._file.temp)
        return encoder

    def _encode_chunk(self, encoder: SegmentEncoder, chunk: _Chunk) -> None:
        """Encode one chunk of padded frames (the unit a benchmark may time)."""
        height, width = self._padded
        before = encoder.packets, encoder.packet_bytes
        if chunk.yuv:
            frames = chunk.buffer[: chunk.count * height * width * 3 // 2].view(chunk.count, height * 3 // 2, width)
            encoder.write_yuv(frames.numpy())
        else:
            encoder.write_rgb(chunk.buffer[: chunk.count * height * width * 3].view(chunk.count, height, width, 3)
                              .numpy())
        with self._lock:
            self._frames_encoded += chunk.count
            self._packets += encoder.packets - before[0]
            self._packet_bytes += encoder.packet_bytes - before[1]

    def _drain(self, job: _Job) -> None:
        """Recycle the rest of a failed segment's buffers so the producer never waits on them."""
        while (chunk := job.chunks.get()) is not None:
            self._free.put(chunk.buffer)

    def _stopping(self) -> bool:
        return self._aborting or self._error is not None

    def _segment_finished(self, job: _Job, segment: Segment) -> None:
        with self._lock:
            self._done[job.index] = segment
            self._segment_done.notify_all()

    # ------------------------------------------------------------------ joiner thread

    def _join_loop(self) -> None:
        """Remux finished segments into the MP4 in clip order, deleting each once joined."""
        index = 0
        try:
            while True:
                with self._lock:
                    while index not in self._done and not self._stopping() and not self._all_joined(index):
                        self._segment_done.wait(_POLL_SECONDS)
                    if self._stopping() or self._all_joined(index):
                        return
                    segment = self._done.pop(index)
                self._joiner.add(segment)
                with self._lock:
                    self._joined += 1
                    self._scratch.remove(segment.path)
                    self._segment_done.notify_all()  # a producer may wait for the join (_wait_for_the_joiner)
                discard(segment.path)
                index += 1
        except BaseException as error:
            self._fail(error)

    def _all_joined(self, index: int) -> bool:
        """True once input has ended and every segment before ``index`` is joined (lock held)."""
        return self._input_ended and index >= self._job_count


@functools.cache
def _copy_stream(device: torch.device) -> torch.cuda.Stream:
    """The side stream of a device's frame copies to the host: on the render's own stream each
    copy (3 MiB a 1080x1920 frame) would hold back the next batch's kernels until it landed; here
    it overlaps them. One per device, kept: the count of streams stays fixed however many videos
    are written."""
    return owned_stream(None, device)


def _in_short_gil_turns(loop: Callable[[], None]) -> None:
    """An encoder or joiner thread's loop: its Python between packets must not hold the GIL for
    the switch interval while the render thread waits to issue its next op (:mod:`..gil_turns`)."""
    with short_gil_turns():
        loop()
