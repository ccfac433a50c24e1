"""What the x264 instances of one clip agree on, the defaults chosen for the host, and a
finished segment's description."""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Optional, Tuple

import numpy as np

from ..errors import InputError
from .x264_presets import X264_PRESETS

SEGMENT_FORMAT_VERSION = 1
"""The version of the tag a segment file carries (its first frame and settings)."""


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
