"""H.264 segments and their join into one MP4: the encoding half of the writer, usable on its own.

A clip can be encoded as consecutive *segments*, each by its own libx264 instance, in any
thread or process (or on another machine), and joined afterwards into one MP4 with the audio,
without re-encoding::

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
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from pathlib import Path
from types import TracebackType
from typing import BinaryIO, Iterable, Mapping, Optional, Sequence, Tuple, Type, Union

import av
import numpy as np
import torch
from torch import Tensor

from ..atomic_files import Writeback, discard, disk_full_error, publish, temp_sibling
from ..errors import DittoError, InputError
from .colour import pad_to_even, rgb_to_yuv420p, tag_bt709
from .x264_presets import X264_PRESETS

Waveform = Union[np.ndarray, Tensor]
PathLike = Union[str, os.PathLike]


SEGMENT_FORMAT_VERSION = 1

# Rates the AAC encoder takes as they are; anything else is resampled to 48 kHz first.
_AAC_RATES = frozenset({7350, 8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000, 64000, 88200, 96000})
_AAC_FALLBACK_RATE = 48000
_LAYOUTS = {1: "mono", 2: "stereo"}


# ----------------------------------------------------------------------------------- settings


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask, e.g. a container's cpuset)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def default_preset(cpu_count: Optional[int] = None) -> str:
    """The x264 preset used when none is given, from the host's CPU count.

    On many cores ``superfast`` keeps nearly ``ultrafast``'s delivered frames/s in clearly
    smaller files, while ``veryfast`` and slower fall behind the render; a host with fewer
    cores keeps ``ultrafast`` (the measurements are in docs/ENCODING.md).
    """
    return "superfast" if (cpu_count or usable_cores()) >= 12 else "ultrafast"


DEFAULT_ENCODERS = 1
"""x264 instances used when none is given. On the H200 host one instance with its own frame
threads delivered more than two to four segment encoders at every preset measured
(docs/ENCODING.md); more encoders stay an option (``encoders=``, ``--encoders``) for hosts
where they pay."""


RENDER_RESERVED_CORES = 2
"""Cores a single x264 instance leaves to the rest of the process (the render thread issuing
the GPU's work, the host copies) at the presets where x264 outpaces the render: x264's own
choice on a host of 16 cores is 24 frame threads, and with every core busy the render thread
waited for one. Leaving two delivered 3-6 % more frames/s at ``ultrafast`` and ``superfast`` on
the H200 host, and 14 % less at ``medium``, where the encoder is the bottleneck and needs every
core (docs/ENCODING.md)."""

RENDER_BOUND_PRESETS = frozenset({"ultrafast", "superfast"})
"""Presets at which one x264 instance encodes faster than an H200 renders 1080x1920."""


def default_threads(preset: str, cpu_count: Optional[int] = None) -> int:
    """Frame threads of one x264 instance when none are given: at :data:`RENDER_BOUND_PRESETS`
    on hosts of 8 cores or more, all cores but :data:`RENDER_RESERVED_CORES`; otherwise 0
    (x264's own choice)."""
    cores = cpu_count or usable_cores()
    return cores - RENDER_RESERVED_CORES if preset in RENDER_BOUND_PRESETS and cores >= 8 else 0


def check_encoder_options(crf: int, preset: str) -> None:
    """Raise :class:`InputError` for a ``crf`` or ``preset`` libx264 would refuse.

    Cheap: callers that render before encoding check their settings first, so a typo fails in
    a second rather than after the whole render.
    """
    if not (isinstance(crf, int) and not isinstance(crf, bool) and 0 <= crf <= 51):
        raise InputError(f"VideoWriter: crf must be an integer in [0, 51] (18 is visually lossless), got {crf!r}")
    if preset not in X264_PRESETS:
        raise InputError(f"VideoWriter: preset must be one of {', '.join(X264_PRESETS)}; got {preset!r}")


def check_nice(nice: int) -> None:
    """Raise :class:`InputError` unless ``nice`` is a priority drop x264's threads can take (0 to 19)."""
    if not (isinstance(nice, int) and not isinstance(nice, bool) and 0 <= nice <= 19):
        raise InputError(f"VideoWriter: nice must be an integer in [0, 19] (levels below the caller), got {nice!r}")


@dataclass(frozen=True)
class EncoderSettings:
    """What every x264 instance of one clip must agree on (segments of a clip share these).

    ``width`` x ``height`` is the frame size given to ``write``; an odd side is encoded one
    pixel larger, repeating the last column/row (yuv420p needs even sides).
    ``gop_frames`` is the longest distance between IDR frames (0: x264's default, 250);
    ``threads`` the frame threads of each instance (0: x264's choice for the whole host).
    """

    width: int
    height: int
    fps: Fraction
    crf: int = 18
    preset: str = field(default_factory=default_preset)
    gop_frames: int = 0
    threads: int = 0

    def __post_init__(self) -> None:
        if not (isinstance(self.width, int) and isinstance(self.height, int) and self.width >= 2 and self.height >= 2):
            raise InputError(f"VideoWriter: width and height must be integers >= 2, got {self.width}x{self.height}")
        fps = self.fps
        if not (np.isfinite(float(fps)) and 0 < fps <= 1000):
            raise InputError(f"VideoWriter: fps must be in (0, 1000], got {fps}")
        object.__setattr__(self, "fps", Fraction(fps).limit_denominator(1001))
        check_encoder_options(self.crf, self.preset)
        for name in ("gop_frames", "threads"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 0):
                raise InputError(f"VideoWriter: {name} must be a non-negative integer, got {value!r}")

    @property
    def padded(self) -> Tuple[int, int]:
        """(height, width) as encoded: both even."""
        return self.height + self.height % 2, self.width + self.width % 2

    def to_json(self) -> dict:
        return {**asdict(self), "fps": str(self.fps)}

    @classmethod
    def from_json(cls, data: dict) -> "EncoderSettings":
        return cls(**{**data, "fps": Fraction(data["fps"])})


@dataclass(frozen=True)
class Segment:
    """A finished segment file: frames ``[first_frame, first_frame + frames)`` of its clip."""

    path: Path
    first_frame: int
    frames: int
    settings: EncoderSettings
    delay: int  # frames x264 put the first decode timestamp before the first frame (B-frames)


# ----------------------------------------------------------------------------------- audio


def prepare_audio(audio: Tuple[Waveform, int]) -> Tuple[np.ndarray, int]:
    """Validate ``(waveform, rate)``; return a (C, T) float32 array (C = 1 or 2) at an AAC rate.

    More than two channels are mixed down to mono (the mix the lip motion was computed from);
    an odd rate is resampled to 48 kHz.
    """
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


class _AudioTrack:
    """The AAC stream of an output file, encoded just ahead of the video it plays along with.

    Muxing audio as the video advances keeps the muxer's interleaving buffer small; the track
    is cut or padded with silence to the video's length.
    """

    def __init__(self, container: av.container.OutputContainer, audio: Tuple[np.ndarray, int], fps: Fraction):
        self._container = container
        self._waveform, self._rate = audio
        self._fps = fps
        self._samples = 0
        self.stream = container.add_stream("aac", rate=self._rate)
        self.stream.layout = _LAYOUTS[self._waveform.shape[0]]
        self.stream.format = "fltp"
        self.stream.time_base = Fraction(1, self._rate)

    def until(self, frame_count: int) -> None:
        """Encode audio up to the end of video frame ``frame_count``, padding with silence."""
        end = round(frame_count * self._rate / self._fps)
        if end <= self._samples:
            return
        samples = self._waveform[:, self._samples : end]
        missing = end - self._samples - samples.shape[1]
        if missing:
            samples = np.pad(samples, ((0, 0), (0, missing)))
        frame = av.AudioFrame.from_ndarray(
            np.ascontiguousarray(samples), format="fltp", layout=_LAYOUTS[self._waveform.shape[0]]
        )
        frame.sample_rate = self._rate
        frame.pts = self._samples
        self._container.mux(self.stream.encode(frame))
        self._samples = end

    def finish(self, frame_count: int) -> None:
        self.until(frame_count)
        self._container.mux(self.stream.encode(None))


# ----------------------------------------------------------------------------------- files


MUX_BUFFER_BYTES = 256 << 10
"""The muxer's write buffer: each fill is one call into Python and one write."""

WRITEBACK_BYTES = 8 << 20
"""A published MP4's bytes are sent to the disk each time this many more have been written
(:class:`~ditto_core.atomic_files.Writeback`); 0: only by the sync before its rename.
Benchmarks switch it."""


class _OutputFile:
    """An MP4 being written under a temporary name beside ``target``; published or discarded.

    A ``scratch`` file is never renamed: it stays under its temporary name (so a later run
    reaps it if this process dies) and its owner deletes it once used.

    The file is opened here and handed to the muxer as a Python file object, so closing it is
    ours: FFmpeg, given a name, opens the file itself and never closes it when writing the
    header fails (a full disk), leaving a deleted temporary holding its space for the life of
    the process.
    """

    def __init__(self, target: PathLike, suffix: str, scratch: bool = False,
                 metadata: Optional[Mapping[str, str]] = None) -> None:
        self.target = Path(target)
        self.target.parent.mkdir(parents=True, exist_ok=True)
        self.temp = temp_sibling(self.target, suffix=suffix)
        self.scratch = scratch
        self._handle: Optional[BinaryIO] = None
        try:
            # A buffered file: its write() never returns short (the muxer would drop the rest).
            self._handle = open(self.temp, "wb")
            # use_metadata_tags: keep tags under their own names (by default the muxer drops
            # every key outside its fixed iTunes set).
            self.container = av.open(self._handle, mode="w", format="mp4", buffer_size=MUX_BUFFER_BYTES,
                                     options={"movflags": "use_metadata_tags"} if metadata else None)
            self.container.metadata.update(metadata or {})
        except BaseException:
            self._close_handle(quiet=True)
            discard(self.temp)
            raise
        self._open = True
        # A file to publish has its bytes sent to the disk as it grows, so the sync before the
        # rename (after the last frame, while the user waits) is short; a scratch file is
        # deleted once joined and never needs to reach the disk.
        self._writeback = None if scratch or not WRITEBACK_BYTES else Writeback(self.temp, WRITEBACK_BYTES)
        self._muxed = 0

    def mux(self, packet: av.Packet) -> None:
        """Write one video packet (its bytes counted towards the writeback)."""
        self.container.mux(packet)
        self._muxed += packet.size
        if self._writeback is not None:
            self._writeback.grown(self._muxed)

    def bytes_written(self) -> int:
        try:
            return self.temp.stat().st_size
        except OSError:
            return 0

    def publish(self) -> Path:
        """Write the trailer and rename the file over its target (a scratch file: no rename);
        returns where the file now is."""
        self.container.close()
        self._open = False
        self._close_handle(quiet=False)  # its last bytes reach the file here: a full disk raises
        if self.scratch:
            return self.temp
        if self._writeback is not None:
            self._writeback.close()
        publish(self.temp, self.target)
        return self.target

    def discard(self) -> None:
        if self._writeback is not None:
            self._writeback.close()
        if self._open:
            self._open = False
            try:
                self.container.close()
            except (av.FFmpegError, OSError):
                pass  # the file is being thrown away; a failed trailer write changes nothing
        self._close_handle(quiet=True)
        discard(self.temp)

    def _close_handle(self, quiet: bool) -> None:
        handle, self._handle = self._handle, None
        if handle is None:
            return
        try:
            handle.close()  # closes the descriptor even when flushing its last bytes fails
        except OSError:
            if not quiet:
                raise

    def raise_if_disk_full(self, error: BaseException, needed: Optional[int]) -> None:
        """Raise ``error`` as a DiskFullError naming this file's folder and ``needed`` bytes if
        it is one (ENOSPC, EDQUOT); return otherwise, for the caller to re-raise it."""
        full = disk_full_error(error, self.target, needed)
        if full is not None and full is not error:
            raise full from error


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
        self._file = _OutputFile(path, ".part.mp4", scratch, metadata)
        self._closed = False
        try:
            if prepared is None and not whole:
                self._file.container.metadata["comment"] = json.dumps(
                    {"ditto_segment": SEGMENT_FORMAT_VERSION, "first_frame": first_frame,
                     "settings": settings.to_json()})
            self._stream = _video_stream(self._file.container, settings, nice)
            self._audio = _AudioTrack(self._file.container, prepared, settings.fps) if prepared else None
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
        self._encode(_yuv420p_frame(image) for image in packed)

    def write_rgb(self, frames: np.ndarray) -> None:
        """Encode (n, H', W', 3) uint8 RGB frames of the padded size, converted by swscale."""
        height, width = self.settings.padded
        interpolation = av.video.reformatter.Interpolation.AREA  # swscale's filter matching rgb_to_yuv420p
        self._encode(
            self._reformatter.reformat(
                _wrapped_frame(np.ascontiguousarray(image), "rgb24"), width, height, "yuv420p",
                dst_colorspace=av.video.reformatter.Colorspace.ITU709,
                dst_color_range=av.video.reformatter.ColorRange.MPEG, interpolation=interpolation,
            )
            for image in frames
        )

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


def _yuv420p_frame(image: np.ndarray) -> av.VideoFrame:
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


# ----------------------------------------------------------------------------------- join


def read_segment(path: PathLike) -> Segment:
    """The :class:`Segment` a segment file holds (first frame, frame count, settings, delay)."""
    path = Path(path)
    try:
        with av.open(str(path)) as container:
            first, settings = _segment_tag(path, container)
            stream = container.streams.video[0]
            packets = [packet for packet in container.demux(stream) if packet.size]
            # Read while the file is open: PyAV 19 refuses a closed container's stream fields.
            delay = max(0, -int(packets[0].dts * stream.time_base * settings.fps)) if packets else 0
    except (av.FFmpegError, OSError) as error:
        raise InputError(f"cannot read the segment file {path}: {error}") from error
    return Segment(path, first, len(packets), settings, delay)


def _segment_tag(path: Path, container: av.container.InputContainer) -> Tuple[int, EncoderSettings]:
    """(first frame, settings) from a segment file's tag; InputError for any other file."""
    try:
        tag = json.loads(container.metadata.get("comment") or "null")
        if isinstance(tag, dict) and tag.get("ditto_segment") == SEGMENT_FORMAT_VERSION:
            return int(tag["first_frame"]), EncoderSettings.from_json(tag["settings"])
    except (ValueError, KeyError, TypeError):
        pass
    raise InputError(f"{path} is not a segment file written by SegmentEncoder (its segment tag is missing or "
                     f"damaged); encode it again")


class Mp4Joiner:
    """Join segment files, in clip order, into one MP4 with the clip's audio, without re-encoding.

    :meth:`add` remuxes one segment as soon as it exists (so a writer can join while later
    segments are still being encoded, and delete each segment once joined); :meth:`close`
    finishes the audio and publishes the MP4. ``delay`` is the clip's B-frame reordering delay
    in frames (x264 puts the first decode timestamp that many frames before the first frame);
    None takes it from the first segment, which must then be the clip's longest.
    """

    def __init__(self, path: PathLike, audio: Optional[Tuple[Waveform, int]] = None,
                 delay: Optional[int] = None, expected_bytes: Optional[int] = None,
                 metadata: Optional[Mapping[str, str]] = None) -> None:
        self._prepared = prepare_audio(audio) if audio is not None else None
        self._expected_bytes = expected_bytes  # named in a disk-full error
        self._file = _OutputFile(path, ".part.mp4", metadata=metadata)
        self._delay = delay
        self._video: Optional[av.VideoStream] = None
        self._audio: Optional[_AudioTrack] = None
        self._extradata: Optional[bytes] = None
        self._settings: Optional[EncoderSettings] = None
        self.frames = 0

    @property
    def path(self) -> Path:
        return self._file.target

    def add(self, segment: Union[Segment, PathLike]) -> None:
        """Append one segment, which must start where the previous one ended."""
        path = segment.path if isinstance(segment, Segment) else Path(segment)
        try:
            with av.open(str(path)) as source:
                self._append(path, source)
        except OSError as error:
            self._file.raise_if_disk_full(error, self._needed())
            raise
        except av.FFmpegError as error:
            raise DittoError(f"joining {path} into {self.path} failed: {error}") from error

    def _append(self, path: Path, source: av.container.InputContainer) -> None:
        first, settings = _segment_tag(path, source)
        if first != self.frames:
            raise InputError(f"segment {path} starts at frame {first}, but the clip so far ends at frame "
                             f"{self.frames}: pass the segments in order, none missing")
        stream = source.streams.video[0]
        extradata = bytes(stream.codec_context.extradata or b"")
        if self._video is None:
            self._settings, self._extradata = settings, extradata
            self._video = self._file.container.add_stream_from_template(stream)
            self._video.time_base = 1 / settings.fps
            if self._prepared is not None:
                self._audio = _AudioTrack(self._file.container, self._prepared, settings.fps)
        elif settings != self._settings or extradata != self._extradata:
            raise InputError(f"segment {path} was encoded with other settings than the first segment "
                             f"({settings} vs {self._settings}); encode every segment with the same settings")
        frame_time = 1 / settings.fps
        to_frames = stream.time_base / frame_time
        decoded = 0
        for packet in source.demux(stream):
            if not packet.size:
                continue
            pts, dts = packet.pts * to_frames, packet.dts * to_frames
            if pts.denominator != 1 or dts.denominator != 1:
                raise DittoError(f"segment {path} has timestamps between frames (pts {packet.pts}, dts "
                                 f"{packet.dts} in {stream.time_base})")
            if self._delay is None:
                self._delay = -int(dts)
            # Decode order renumbered across segments: continuous, and never after the frame shown.
            new_dts = first + decoded - self._delay
            new_pts = first + int(pts)
            if new_dts > new_pts:
                raise DittoError(f"segment {path} reorders frames further ahead than the first segment "
                                 f"(delay > {self._delay}); give join_segments the clip's delay")
            packet.stream = self._video
            packet.time_base = frame_time  # relabels, does not rescale: every field is set in frames
            packet.pts, packet.dts, packet.duration = new_pts, new_dts, 1
            self._file.mux(packet)
            decoded += 1
            if self._audio is not None:
                self._audio.until(first + decoded)
        self.frames += decoded

    def close(self) -> Path:
        """Finish the audio, write the trailer and move the MP4 into place."""
        if self._video is None:
            self.abort()
            raise InputError(f"no segments were joined into {self.path}; there is nothing to write")
        try:
            if self._audio is not None:
                self._audio.finish(self.frames)
            return self._file.publish()
        except BaseException as error:
            self.abort()
            self._file.raise_if_disk_full(error, self._needed())
            raise

    def abort(self) -> None:
        self._file.discard()

    def _needed(self) -> Optional[int]:
        """Bytes the MP4 needs, as far as known: the segments' sizes, or what is written so far."""
        return max(self._file.bytes_written(), self._expected_bytes or 0) or None


def join_segments(segments: Sequence[Union[Segment, PathLike]], path: PathLike,
                  audio: Optional[Tuple[Waveform, int]] = None) -> Path:
    """Join complete segment files of one clip, in clip order, into the MP4 ``path`` with ``audio``.

    The segments must cover frames 0..n without gaps and share their settings; the MP4 appears
    only once complete. The segment files are left in place (delete them when done).
    """
    if not segments:
        raise InputError(f"join_segments: no segments given for {path}")
    found = [s if isinstance(s, Segment) else read_segment(s) for s in segments]
    joiner = Mp4Joiner(path, audio, delay=max(s.delay for s in found),
                       expected_bytes=sum(s.path.stat().st_size for s in found))
    try:
        for segment in found:
            joiner.add(segment)
    except BaseException:
        joiner.abort()
        raise
    return joiner.close()
