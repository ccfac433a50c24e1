"""A live stream as the runtime's threads see it: its output settings, its state, and the jobs
its motion windows release for rendering."""
from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch
from torch import Tensor

from ..audio.audio_features import SAMPLE_RATE
from ..errors import InputError
from ..models.lmdm import WINDOW
from ..motion.lmdm_sampler import DDIMSampler
from ..motion.motion_options import MotionOptions
from ..motion.motion_sequence import MotionSequence
from ..motion.motion_stitch import StitchSetup
from ..registration.source_info import SourceInfo
from .output_frames import H264Encoder, output_size
from .schedule import ONLINE_OVERLAP, OnlineAudio, OnlineMotion, SampleTimeline


@dataclass(frozen=True)
class StreamConfig:
    """How one stream's frames come out and how much it may buffer."""

    # "jpeg" / "h264" / "fmp4" (encoded bytes: JPEG, H.264 Annex-B, H.264 fragmented MP4) or "rgb"
    # (uint8 tensor on the host)
    output: str = "jpeg"
    max_size: Optional[int] = None  # longest side of output frames (None: the portrait's size)
    quality: int = 85  # JPEG quality
    idle: bool = True  # animate silence while no speech arrives
    overlap: int = ONLINE_OVERLAP  # LMDM overlap: 80 - overlap frames per window
    max_backlog_frames: int = 75  # frames made but not yet taken before the stream is paused
    max_buffered_seconds: float = 30.0  # speech pushed but not yet animated before pushes fail

    def __post_init__(self) -> None:
        if self.output not in OUTPUTS:
            raise InputError(f"output must be one of {', '.join(OUTPUTS)}, got {self.output!r}.")
        if self.max_size is not None and not (isinstance(self.max_size, int) and not isinstance(self.max_size, bool)
                                              and 16 <= self.max_size <= 4096):
            raise InputError(f"max_size must be an integer in [16, 4096] pixels, got {self.max_size!r}.")
        if not (isinstance(self.quality, int) and not isinstance(self.quality, bool) and 1 <= self.quality <= 100):
            raise InputError(f"quality must be an integer in [1, 100], got {self.quality!r}.")
        if not (isinstance(self.overlap, int) and 5 <= self.overlap < WINDOW):
            raise InputError(f"overlap must be an integer in [5, {WINDOW - 1}] frames, got {self.overlap!r}.")


    def frame_size(self, height: int, width: int) -> tuple[int, int]:
        """(H, W) of this stream's frames for a ``height`` x ``width`` portrait (even for H.264's 4:2:0)."""
        h, w = output_size(height, width, self.max_size)
        return (max(2, h // 2 * 2), max(2, w // 2 * 2)) if self.output in H264_OUTPUTS else (h, w)


H264_OUTPUTS = ("h264", "fmp4")
OUTPUTS = ("jpeg", *H264_OUTPUTS, "rgb")


@dataclass
class RenderJob:
    """Frames of one stream released by one motion window, to be rendered."""

    stream: "StreamState"
    epoch: int
    first_frame: int
    motion: Optional[MotionSequence]  # None: no frames (an end marker only), or not stitched yet (in a round)
    audio: Tensor  # (k, 640) float32 16 kHz speech of each frame
    ready_since: float  # when the speech that completed this window arrived
    final: bool = False


@dataclass
class StreamState:
    """A stream as the worker threads see it (the event loop holds its :class:`AvatarStream`)."""

    id: int
    source: SourceInfo
    options: MotionOptions
    config: StreamConfig
    sampler: DDIMSampler
    audio: OnlineAudio
    motion: OnlineMotion
    generator: torch.Generator
    noise: Tensor  # (steps - 1, 1, 80, 265): drawn once per stream, shared by its windows
    stitch: StitchSetup  # what stitching its frames needs from its avatar and options, made once
    deliver: Callable[[object], None]  # called from worker threads with a LiveFrame future, an error or None
    speech: SampleTimeline = field(default_factory=SampleTimeline)  # what each frame's audio slice is cut from
    lock: threading.Lock = field(default_factory=threading.Lock)
    pending: list[tuple[Tensor, float]] = field(default_factory=list)  # (16 kHz speech, push time), not yet taken
    pending_samples: int = 0
    end_requested: bool = False
    clear_requested: bool = False
    epoch: int = 0
    backlog: int = 0  # frames made (or in flight) that the client has not taken
    closed: bool = False
    finished: bool = False  # the end marker was queued for rendering
    # (speech feature rows after each HuBERT window, arrival time of its last sample), until no LMDM
    # window reads that HuBERT window's rows any more
    window_times: deque = field(default_factory=deque)
    push_times: deque = field(default_factory=deque)  # (speech sample position reached, time)
    next_silence: float = 0.0
    stalled_since: Optional[float] = None
    chunk_latency: deque = field(default_factory=lambda: deque(maxlen=2000))
    first_frame_latency: Optional[float] = None
    frames_delivered: int = 0
    silence_windows: int = 0
    video_encoder: Optional[H264Encoder] = None  # H.264 outputs: one encoder per stream, frames in order

    @property
    def frame_size(self) -> tuple[int, int]:
        """(H, W) of this stream's output frames."""
        return self.config.frame_size(*self.source.frames.shape[1:3])

    def buffered_seconds(self) -> float:
        return (self.pending_samples + max(0, self.audio.received - self.audio.windows_done * self.audio.hop)) / SAMPLE_RATE
