"""Streaming MP4 writer: H.264 (libx264, yuv420p) plus optional AAC audio, through PyAV.

Frames are copied off the GPU in chunks into a fixed pool of host buffers (pinned when they
come from CUDA, so the copy runs asynchronously) and handed to an encoder thread. Encoding
therefore overlaps the producer, and host memory stays bounded by the pool whatever the clip
length. The file is written under a temporary name in the target folder and renamed over the
target only once it is complete: a failed or cancelled run leaves nothing behind.
"""
from __future__ import annotations

import os
import queue
import tempfile
import threading
from fractions import Fraction
from pathlib import Path
from types import TracebackType
from typing import Mapping, Optional, Sequence, Tuple, Type, Union

import av
import numpy as np
import torch
from torch import Tensor

from ..errors import DittoError, InputError
from ..host_memory import trim_host_heap

Waveform = Union[np.ndarray, Tensor]

X264_PRESETS = ("ultrafast", "superfast", "veryfast", "faster", "fast", "medium", "slow", "slower", "veryslow")
"""libx264's speed/size presets, fastest first."""

# Rates the AAC encoder takes as they are; anything else is resampled to 48 kHz first.
_AAC_RATES = frozenset({7350, 8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000, 64000, 88200, 96000})
_AAC_FALLBACK_RATE = 48000
_LAYOUTS = {1: "mono", 2: "stereo"}

# Frames per host-copy chunk: big enough to amortise a transfer, small enough that the encoder
# starts on the first frames while the rest of a batch is still being copied.
_CHUNK_FRAMES = 4

# How often a producer blocked on the buffer pool checks that the encoder thread is alive.
_POLL_SECONDS = 0.5


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
        preset: x264 preset, ``"ultrafast"`` ... ``"veryslow"``.
        audio: ``(waveform, sample_rate)`` with a float waveform of shape (C, T) or (T,) in
            [-1, 1]; muxed as AAC, cut or padded with silence to the video length. More than two
            channels are mixed down to mono (the mix the lip motion was computed from).
        queue_frames: frames buffered on the host between producer and encoder; bounds host
            memory at about ``queue_frames * width * height * 3`` bytes.
        metadata: container tags (name -> text), stored as MP4 metadata tags; ComfyUI keeps a
            render's ``prompt`` and ``workflow`` (JSON) there.
    """

    def __init__(
        self,
        path: Union[str, os.PathLike],
        *,
        width: int,
        height: int,
        fps: float = 25.0,
        crf: int = 18,
        preset: str = "medium",
        audio: Optional[Tuple[Waveform, int]] = None,
        queue_frames: int = 32,
        metadata: Optional[Mapping[str, str]] = None,
    ) -> None:
        _check_settings(width, height, fps, crf, queue_frames)
        check_encoder_options(crf, preset)
        self.path = Path(path)
        self.width, self.height = width, height
        self._fps = Fraction(fps).limit_denominator(1001)
        self._padded = (height + height % 2, width + width % 2)
        self._audio = _prepare_audio(audio) if audio is not None else None

        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle, temp_name = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.stem}.", suffix=".part.mp4")
        os.close(handle)
        self._temp_path = Path(temp_name)
        try:
            # use_metadata_tags: keep tags under their own names (by default the muxer drops
            # every key outside its fixed iTunes set).
            self._container = av.open(str(self._temp_path), mode="w", format="mp4",
                                      options={"movflags": "use_metadata_tags"} if metadata else None)
            self._container.metadata.update(metadata or {})
            self._video = self._add_video_stream(crf, preset)
            self._audio_stream = self._add_audio_stream() if self._audio is not None else None
        except BaseException:
            self._discard_file()
            raise

        self._pool_size = max(2, -(-queue_frames // _CHUNK_FRAMES))
        self._pool_created = 0
        self._free: "queue.Queue[Tensor]" = queue.Queue()
        self._work: "queue.Queue[Optional[tuple]]" = queue.Queue()  # bounded by the pool
        self._frames_queued = 0
        self._frames_encoded = 0
        self._audio_samples = 0
        self._error: Optional[BaseException] = None
        self._aborting = False
        self._closed = False
        self._thread = threading.Thread(target=self._encode_loop, name="ditto-video-writer", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ producer side

    @property
    def frames_written(self) -> int:
        """Frames accepted by :meth:`write` so far (encoded or still queued)."""
        return self._frames_queued

    def write(self, frames: Union[Tensor, np.ndarray]) -> None:
        """Queue (N, H, W, 3) uint8 RGB frames for encoding; blocks only while the pool is full.

        CUDA frames are copied on the current stream without waiting for it: the caller may
        reuse or free them afterwards as long as it stays on that stream.
        """
        self._ensure_usable()
        if isinstance(frames, np.ndarray):
            frames = torch.from_numpy(frames)
        expected = (self.height, self.width, 3)
        if frames.dtype != torch.uint8 or frames.dim() != 4 or tuple(frames.shape[1:]) != expected:
            raise InputError(
                f"VideoWriter.write: frames must be (N, {self.height}, {self.width}, 3) uint8 RGB, "
                f"got {tuple(frames.shape)} {frames.dtype}"
            )
        for start in range(0, frames.shape[0], _CHUNK_FRAMES):
            chunk = frames[start : start + _CHUNK_FRAMES]
            buffer = self._take_buffer(pinned=chunk.is_cuda)
            buffer[: chunk.shape[0], : self.height, : self.width].copy_(chunk, non_blocking=chunk.is_cuda)
            ready = None
            if chunk.is_cuda:
                ready = torch.cuda.Event()
                ready.record(torch.cuda.current_stream(chunk.device))
            self._work.put((buffer, chunk.shape[0], ready))
            self._frames_queued += chunk.shape[0]

    def close(self) -> None:
        """Encode what is queued, flush both encoders and move the finished file into place."""
        if self._closed:
            return
        self._work.put(None)
        self._thread.join()
        self._ensure_usable()
        try:
            self._mux(self._video.encode(None))
            if self._audio_stream is not None:
                self._mux(self._audio_stream.encode(None))
            self._container.close()
            os.replace(self._temp_path, self.path)
        except BaseException:
            self.abort()
            raise
        self._closed = True

    def abort(self) -> None:
        """Stop encoding and delete the partial file; no target file is created."""
        if self._closed:
            return
        self._closed = True
        self._aborting = True
        self._work.put(None)
        self._thread.join()
        try:
            self._container.close()
        except (av.FFmpegError, OSError):
            pass  # the container is being thrown away; a failed trailer write changes nothing
        self._discard_file()

    def __enter__(self) -> "VideoWriter":
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
            trim_host_heap()  # the encoder thread's frame buffers, kept by its heap arena

    def _ensure_usable(self) -> None:
        """Raise if the writer is closed or the encoder thread has failed (cleaning up first)."""
        if self._error is not None:
            error = self._error
            self.abort()
            raise DittoError(f"encoding {self.path} failed: {error}") from error
        if self._closed:
            raise DittoError(f"VideoWriter for {self.path} is already closed; open a new one")

    def _take_buffer(self, pinned: bool) -> Tensor:
        """A free host buffer of _CHUNK_FRAMES padded frames; waits while all are in flight."""
        if self._pool_created < self._pool_size:
            self._pool_created += 1
            shape = (_CHUNK_FRAMES, *self._padded, 3)
            return torch.empty(shape, dtype=torch.uint8, pin_memory=pinned and torch.cuda.is_available())
        while True:
            try:
                return self._free.get(timeout=_POLL_SECONDS)
            except queue.Empty:
                if not self._thread.is_alive():
                    self._ensure_usable()
                    raise DittoError(f"the encoder thread for {self.path} stopped unexpectedly")

    def _discard_file(self) -> None:
        self._temp_path.unlink(missing_ok=True)

    # ------------------------------------------------------------------ encoder thread

    def _encode_loop(self) -> None:
        """Encode chunks until the end marker; after a failure, only recycle buffers."""
        while (item := self._work.get()) is not None:
            buffer, count, ready = item
            try:
                if self._error is None and not self._aborting:
                    if ready is not None:
                        ready.synchronize()
                    self._encode_chunk(buffer[:count].numpy())
            except Exception as error:  # handed to the producer by _ensure_usable
                self._error = error
            finally:
                self._free.put(buffer)

    def _encode_chunk(self, frames: np.ndarray) -> None:
        """Encode (n, H', W', 3) padded frames, then the audio that plays along with them."""
        if self._padded[1] != self.width:
            frames[:, : self.height, self.width] = frames[:, : self.height, self.width - 1]
        if self._padded[0] != self.height:
            frames[:, self.height] = frames[:, self.height - 1]
        for image in frames:
            frame = av.VideoFrame.from_ndarray(image, format="rgb24")
            frame.pts = self._frames_encoded
            self._mux(self._video.encode(frame))
            self._frames_encoded += 1
        if self._audio is not None:
            self._encode_audio_until(self._frames_encoded)

    def _encode_audio_until(self, frame_count: int) -> None:
        """Encode audio up to the end of video frame ``frame_count``, padding with silence."""
        waveform, rate = self._audio
        end = round(frame_count * rate / self._fps)
        if end <= self._audio_samples:
            return
        samples = waveform[:, self._audio_samples : end]
        missing = end - self._audio_samples - samples.shape[1]
        if missing:
            samples = np.pad(samples, ((0, 0), (0, missing)))
        frame = av.AudioFrame.from_ndarray(
            np.ascontiguousarray(samples), format="fltp", layout=_LAYOUTS[waveform.shape[0]]
        )
        frame.sample_rate = rate
        frame.pts = self._audio_samples
        self._mux(self._audio_stream.encode(frame))
        self._audio_samples = end

    # ------------------------------------------------------------------ setup

    def _mux(self, packets: Sequence[av.Packet]) -> None:
        for packet in packets:
            self._container.mux(packet)

    def _add_video_stream(self, crf: int, preset: str) -> av.VideoStream:
        stream = self._container.add_stream("libx264", rate=self._fps)
        stream.height, stream.width = self._padded
        stream.pix_fmt = "yuv420p"
        stream.time_base = 1 / self._fps
        stream.options = {"crf": str(crf), "preset": preset}
        # Frame threads (ffmpeg's default) encode faster than PyAV's default slice threads.
        stream.codec_context.thread_type = "FRAME"
        try:
            stream.codec_context.open()  # now, so a bad preset fails here and not mid-run
        except av.FFmpegError as error:
            raise InputError(f"VideoWriter: libx264 rejected crf={crf}, preset={preset!r}: {error}") from error
        return stream

    def _add_audio_stream(self) -> av.AudioStream:
        waveform, rate = self._audio
        stream = self._container.add_stream("aac", rate=rate)
        stream.layout = _LAYOUTS[waveform.shape[0]]
        stream.format = "fltp"
        stream.time_base = Fraction(1, rate)
        return stream


def check_encoder_options(crf: int, preset: str) -> None:
    """Raise :class:`InputError` for a ``crf`` or ``preset`` libx264 would refuse.

    Cheap: callers that render before encoding check their settings first, so a typo fails in
    a second rather than after the whole render.
    """
    if not (isinstance(crf, int) and not isinstance(crf, bool) and 0 <= crf <= 51):
        raise InputError(f"VideoWriter: crf must be an integer in [0, 51] (18 is visually lossless), got {crf!r}")
    if preset not in X264_PRESETS:
        raise InputError(f"VideoWriter: preset must be one of {', '.join(X264_PRESETS)}; got {preset!r}")


def _check_settings(width: int, height: int, fps: float, crf: int, queue_frames: int) -> None:
    if not (isinstance(width, int) and isinstance(height, int) and width >= 2 and height >= 2):
        raise InputError(f"VideoWriter: width and height must be integers >= 2, got {width}x{height}")
    if not (np.isfinite(fps) and 0 < fps <= 1000):
        raise InputError(f"VideoWriter: fps must be in (0, 1000], got {fps}")
    if not (isinstance(queue_frames, int) and queue_frames >= 1):
        raise InputError(f"VideoWriter: queue_frames must be a positive integer, got {queue_frames}")


def _prepare_audio(audio: Tuple[Waveform, int]) -> Tuple[np.ndarray, int]:
    """Validate ``(waveform, rate)``; return a (C, T) float32 array at an AAC-supported rate."""
    try:
        waveform, rate = audio
    except (TypeError, ValueError):
        raise InputError("VideoWriter: audio must be a (waveform, sample_rate) pair") from None
    if isinstance(waveform, Tensor):
        waveform = waveform.detach().cpu().numpy()
    waveform = np.asarray(waveform, dtype=np.float32)
    if waveform.ndim == 1:
        waveform = waveform[None]
    if waveform.ndim != 2 or waveform.shape[0] == 0 or waveform.shape[1] == 0:
        raise InputError(
            f"VideoWriter: audio waveform must be (channels, samples) with at least one sample, got "
            f"{waveform.shape}"
        )
    if waveform.shape[0] not in _LAYOUTS:  # e.g. 5.1: AAC is muxed as mono or stereo here
        waveform = waveform.mean(axis=0, keepdims=True)
    if not np.isfinite(waveform).all():
        raise InputError("VideoWriter: audio waveform contains NaN or infinity")
    if not (isinstance(rate, (int, np.integer)) and rate > 0):
        raise InputError(f"VideoWriter: audio sample_rate must be a positive integer, got {rate!r}")
    if rate not in _AAC_RATES:
        waveform, rate = _resample(waveform, int(rate), _AAC_FALLBACK_RATE), _AAC_FALLBACK_RATE
    return np.ascontiguousarray(waveform), int(rate)


def _resample(waveform: np.ndarray, rate: int, target: int) -> np.ndarray:
    """(C, T) float32 at ``rate`` -> (C, T') float32 at ``target``, with FFmpeg's resampler."""
    layout = _LAYOUTS[waveform.shape[0]]
    resampler = av.AudioResampler(format="fltp", layout=layout, rate=target)
    frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(waveform), format="fltp", layout=layout)
    frame.sample_rate = rate
    frame.pts = 0
    frames = resampler.resample(frame) + resampler.resample(None)
    return np.concatenate([f.to_ndarray() for f in frames], axis=1)
