"""Segment files joined, in clip order, into one MP4 with the clip's audio, without re-encoding."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping, Optional, Sequence, Tuple, Union

import av

from ..errors import DittoError, InputError
from .audio_track import AudioTrack, Waveform, prepare_audio
from .encoder_settings import SEGMENT_FORMAT_VERSION, EncoderSettings, Segment
from .mp4_file import Mp4File, PathLike


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
        self._file = Mp4File(path, ".part.mp4", metadata=metadata)
        self._delay = delay
        self._video: Optional[av.VideoStream] = None
        self._audio: Optional[AudioTrack] = None
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
                self._audio = AudioTrack(self._file.container, self._prepared, settings.fps)
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
