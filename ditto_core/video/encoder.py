"""H.264 segments: the encoding half of the writer, usable on its own (their join: :mod:`.joiner`).

A clip can be encoded as consecutive *segments*, each by its own libx264 instance, in any
thread or process (or on another machine), and joined afterwards into one MP4 with the audio,
without re-encoding::

    from ditto_core.video.encoder import SegmentEncoder
    from ditto_core.video.encoder_settings import EncoderSettings
    from ditto_core.video.joiner import join_segments

    settings = EncoderSettings(width=1920, height=1080, fps=25, crf=18, preset="veryfast")
    # anywhere, for each part [a, b) of the clip:
    with SegmentEncoder(folder / f"part_{a:08d}.mp4", settings, first_frame=a) as segment:
        for batch in frames_between(a, b):
            segment.write(batch)            # (N, H, W, 3) uint8 RGB, any device
    # once all parts exist, in one process:
    join_segments(sorted(folder.glob("part_*.mp4")), "clip.mp4", audio=(waveform, rate))

Every segment starts with an IDR frame (a new encoder always does), so segments join at any
frame; segments of equal settings have identical SPS/PPS (the join checks). The join shifts
each segment's timestamps to its first frame and renumbers decode timestamps continuously
across segments, so B-frame reordering delays line up. A segment file is an ordinary MP4 (a
player shows it) that names its first frame and settings in its ``comment`` tag.

Files appear whole or not at all: each is written under a temporary name beside its target and
renamed when complete; a failure or an interruption deletes the temporary.
"""
from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Iterable, Mapping, Optional, Sequence, Tuple, Type, Union

import av
import numpy as np
import torch
from torch import Tensor

from ..errors import DittoError, InputError
from .audio_track import AudioTrack, Waveform, prepare_audio
from .colour import pad_to_even, rgb_to_yuv420p, tag_bt709
from .encoder_settings import SEGMENT_FORMAT_VERSION, EncoderSettings, Segment, check_nice
from .mp4_file import Mp4File, PathLike


def _video_stream(container: av.container.OutputContainer, settings: EncoderSettings, nice: int) -> av.VideoStream:
    """A libx264 stream of ``settings`` on ``container``, opened now so a bad option fails here;
    x264's threads run ``nice`` levels below the caller (:func:`_open_niced`)."""
    stream = container.add_stream("libx264", rate=settings.fps)
    stream.height, stream.width = settings.padded
    stream.pix_fmt = "yuv420p"
    stream.time_base = 1 / settings.fps
    stream.options = {"crf": str(settings.crf), "preset": settings.preset}
    context = stream.codec_context
    if settings.gop_frames:
        context.gop_size = settings.gop_frames
    # Frame threads (ffmpeg's default) encode faster than PyAV's default slice threads.
    context.thread_type = "FRAME"
    context.thread_count = settings.threads
    tag_bt709(context)
    try:
        _open_niced(context, nice)
    except av.FFmpegError as error:
        raise InputError(
            f"VideoWriter: libx264 rejected crf={settings.crf}, preset={settings.preset!r}: {error}"
        ) from error
    return stream


def _open_niced(context: av.codec.context.CodecContext, nice: int) -> None:
    """Open ``context`` on a short-lived thread ``nice`` levels below the caller.

    libx264 starts its frame and lookahead threads inside the open, and on Linux a new thread
    inherits its creator's nice level, so they all run at the lower priority while the thread
    that feeds them frames (and the caller) stay where they are. Where priorities are per
    process or unknown (not Linux) the context is opened as it is.
    """
    if not nice or not hasattr(os, "setpriority") or not os.path.isdir("/proc/self/task"):
        context.open()
        return
    failure: list[BaseException] = []

    def open_lowered() -> None:
        try:
            task = threading.get_native_id()
            os.setpriority(os.PRIO_PROCESS, task, min(19, os.getpriority(os.PRIO_PROCESS, task) + nice))
            context.open()
        except BaseException as error:  # re-raised in the caller's thread
            failure.append(error)

    opener = threading.Thread(target=open_lowered, name="ditto-x264-open")
    opener.start()
    opener.join()
    if failure:
        raise failure[0]


class SegmentEncoder:
    """Encode frames ``[first_frame, first_frame + n)`` of a clip into one MP4 file.

    A segment (``audio=None``) is joined with the clip's other segments by
    :func:`join_segments`; with ``audio`` (and ``first_frame=0``) the file is a whole video
    with its AAC track, ready to play. Use as a context manager: leaving the block normally
    finishes and publishes the file (``close`` returns the :class:`Segment`), leaving it with an
    exception deletes everything written. Not thread-safe: one thread writes one segment.

    Frames go in as (N, H, W, 3) uint8 RGB on any device (:meth:`write`; CUDA frames are
    converted to yuv420p on the GPU), or already converted: packed yuv420p from
    :func:`~ditto_core.video.colour.rgb_to_yuv420p` (:meth:`write_yuv`) or padded RGB on the
    host (:meth:`write_rgb`, converted by swscale with the same BT.709 arithmetic).

    ``scratch=True`` leaves the finished file under its temporary (pid-tagged) name beside
    ``path`` instead of renaming it: for segments that are joined and deleted right away.
    ``whole=True`` (implied by ``audio``) writes a whole video rather than a segment: no
    segment tag, so :func:`join_segments` refuses it. ``nice``: how many levels below the
    calling thread x264's threads run (Linux nice levels; 0: level with it). Measured on the
    H200 hosts (docs/ENCODING.md), a lower x264 paid only where x264 had cores to spare, and
    cost frames where it was the bottleneck, so 0 is the default.
    """

    def __init__(
        self, path: PathLike, settings: EncoderSettings, first_frame: int = 0,
        audio: Optional[Tuple[Waveform, int]] = None, scratch: bool = False, whole: bool = False,
        metadata: Optional[Mapping[str, str]] = None, nice: int = 0,
    ) -> None:
        if not (isinstance(first_frame, int) and first_frame >= 0):
            raise InputError(f"SegmentEncoder: first_frame must be a non-negative integer, got {first_frame!r}")
        check_nice(nice)
        if audio is not None and first_frame:
            raise InputError("SegmentEncoder: only a file starting at frame 0 can carry the audio; join segments "
                             "with join_segments(..., audio=...) instead")
        self.settings = settings
        self.first_frame = first_frame
        self.frames = 0
        self.segment: Optional[Segment] = None  # set by close()
        # Set by close(): seconds draining x264 and the audio ("flush"), then writing the
        # trailer, syncing and renaming ("publish"): the wait after the last frame.
        self.close_seconds: dict[str, float] = {}
        self.packets = 0  # video packets out of x264 so far, and their bytes
        self.packet_bytes = 0
        self._delay: Optional[int] = None
        prepared = prepare_audio(audio) if audio is not None else None
        self._file = Mp4File(path, ".part.mp4", scratch, metadata)
        self._closed = False
        try:
            if prepared is None and not whole:
                self._file.container.metadata["comment"] = json.dumps(
                    {"ditto_segment": SEGMENT_FORMAT_VERSION, "first_frame": first_frame,
                     "settings": settings.to_json()})
            self._stream = _video_stream(self._file.container, settings, nice)
            self._audio = AudioTrack(self._file.container, prepared, settings.fps) if prepared else None
        except BaseException:
            self._file.discard()
            raise
        self._reformatter = av.video.reformatter.VideoReformatter()

    @property
    def path(self) -> Path:
        return self._file.target

    # -- frames in

    def write(self, frames: Union[Tensor, np.ndarray]) -> None:
        """Encode (N, H, W, 3) uint8 RGB frames (any device) as the segment's next frames."""
        frames = torch.from_numpy(frames) if isinstance(frames, np.ndarray) else frames
        check_frames(frames, self.settings, "SegmentEncoder.write")
        frames = pad_to_even(frames)
        if frames.is_cuda:
            self.write_yuv(rgb_to_yuv420p(frames).cpu().numpy())
        else:
            self.write_rgb(frames.contiguous().numpy())

    def write_yuv(self, packed: np.ndarray) -> None:
        """Encode (n, H' * 3 // 2, W') uint8 packed yuv420p frames (H', W' the padded size).

        The caller may overwrite ``packed`` once this returns (x264 has copied every picture).
        """
        self._encode(yuv420p_picture(image) for image in packed)

    def write_rgb(self, frames: np.ndarray) -> None:
        """Encode (n, H', W', 3) uint8 RGB frames of the padded size, converted by swscale."""
        self._encode(rgb_picture(self._reformatter, image) for image in frames)

    def _encode(self, frames: Iterable[av.VideoFrame]) -> None:
        if self._closed:
            raise DittoError(f"SegmentEncoder for {self.path} is already closed; open a new one")
        try:
            for frame in frames:
                frame.pts = self.frames
                self._mux_video(self._stream.encode(frame))
                self.frames += 1
            if self._audio is not None:
                self._audio.until(self.frames)
        except OSError as error:
            self._file.raise_if_disk_full(error, self.estimated_bytes())
            raise

    # -- finishing

    def close(self) -> Segment:
        """Flush the encoder, finish the file and move it into place; returns what it holds."""
        if self._closed:
            raise DittoError(f"SegmentEncoder for {self.path} is already closed; open a new one")
        try:
            start = time.perf_counter()
            self._mux_video(self._stream.encode(None))
            if self._audio is not None:
                self._audio.finish(self.frames)
            self._closed = True
            flushed = time.perf_counter()
            where = self._file.publish()
            self.close_seconds = {"flush": flushed - start, "publish": time.perf_counter() - flushed}
        except BaseException as error:
            self.abort()
            self._file.raise_if_disk_full(error, self.estimated_bytes())
            raise
        self.segment = Segment(where, self.first_frame, self.frames, self.settings, self._delay or 0)
        return self.segment

    def _mux_video(self, packets: Sequence[av.Packet]) -> None:
        for packet in packets:
            if self._delay is None:
                self._delay = max(0, -int(packet.dts * packet.time_base * self.settings.fps))
            self._file.mux(packet)
            self.packets += 1
            self.packet_bytes += packet.size

    def estimated_bytes(self, frames: Optional[int] = None) -> Optional[int]:
        """The file's size for ``frames`` frames (default: those written), extrapolated from the
        packets so far; before x264 has returned any, a tenth of the raw picture size."""
        frames = self.frames if frames is None else frames
        if self.packets:
            return self.packet_bytes * max(frames, self.packets) // self.packets
        height, width = self.settings.padded
        return frames * height * width * 3 // 20 or None

    def abort(self) -> None:
        """Stop and delete the partial file; nothing is published."""
        self._closed = True
        self._file.discard()

    def __enter__(self) -> "SegmentEncoder":
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 traceback: Optional[TracebackType]) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def _wrapped_frame(image: np.ndarray, pixel_format: str) -> av.VideoFrame:
    """A VideoFrame over ``image``'s own memory, made without copying it.

    ``VideoFrame.from_ndarray`` copies a picture twice while holding the GIL (through a bytes
    object), which made the encoder thread, not x264, the writer's limit and stalled the render
    thread beside it. A wrapped frame is safe to hand to ``encode``: libx264 copies the picture
    into its own frame buffers inside ``avcodec_send_frame`` (it never keeps the caller's), and
    swscale writes a new frame.
    """
    return av.VideoFrame.from_numpy_buffer(image, format=pixel_format)


def rgb_picture(reformatter: av.video.reformatter.VideoReformatter, image: np.ndarray) -> av.VideoFrame:
    """One (H, W, 3) uint8 RGB picture with even sides as a yuv420p frame, converted by swscale
    with :func:`~.colour.rgb_to_yuv420p`'s arithmetic (BT.709, limited range, 2x2 area chroma)."""
    height, width = image.shape[:2]
    return reformatter.reformat(
        _wrapped_frame(np.ascontiguousarray(image), "rgb24"), width, height, "yuv420p",
        dst_colorspace=av.video.reformatter.Colorspace.ITU709,
        dst_color_range=av.video.reformatter.ColorRange.MPEG,
        interpolation=av.video.reformatter.Interpolation.AREA,  # swscale's filter matching rgb_to_yuv420p
    )


def yuv420p_picture(image: np.ndarray) -> av.VideoFrame:
    """A frame for one packed (H * 3 // 2, W) yuv420p picture; wrapped where PyAV can."""
    # PyAV derives the luma height of a wrapped yuv420p buffer as rows // 6 * 4, exact only
    # when H is a multiple of 4; other heights take the copying constructor.
    if image.shape[0] % 6 == 0:
        return _wrapped_frame(image, "yuv420p")
    return av.VideoFrame.from_ndarray(image, format="yuv420p")


def check_frames(frames: Tensor, settings: EncoderSettings, where: str) -> None:
    """Raise InputError unless ``frames`` is (N, height, width, 3) uint8 as ``settings`` say."""
    expected = (settings.height, settings.width, 3)
    if frames.dtype != torch.uint8 or frames.dim() != 4 or tuple(frames.shape[1:]) != expected:
        raise InputError(
            f"{where}: frames must be (N, {settings.height}, {settings.width}, 3) uint8 RGB, "
            f"got {tuple(frames.shape)} {frames.dtype}"
        )


def encode_segment(
    path: PathLike, frames: Iterable[Union[Tensor, np.ndarray]], settings: EncoderSettings, first_frame: int,
) -> Segment:
    """Encode the batches of ``frames`` ((N, H, W, 3) uint8 RGB, any device) as the segment
    starting at ``first_frame`` of its clip; returns the published :class:`Segment`."""
    encoder = SegmentEncoder(path, settings, first_frame)
    try:
        for batch in frames:
            encoder.write(batch)
    except BaseException:
        encoder.abort()
        raise
    return encoder.close()
