"""Ditto's online schedule for one stream: speech chunks -> HuBERT windows -> LMDM windows -> motion.

This is the state of ``StreamSDK`` in Ditto's ``stream_pipeline_online.py`` for one stream,
made step-wise so that a scheduler can run many streams' windows together:

* :class:`OnlineAudio` feeds HuBERT the way Ditto's ``run_chunk`` is fed: the speech gets
  ``past`` frames of zeros in front (1920 samples), window ``k`` covers samples
  ``[3200 k, 3200 k + 6480)`` of that padded stream, and at the end every window that starts
  before the last sample is completed with zeros. (Offline, the lead-in is 2000 samples and the
  frame count is cut to the audio's length; this is the first place where online differs.)
* :class:`OnlineMotion` is the ``audio2motion`` worker: its feature buffer starts with
  ``overlap`` frames of silence features, window conditions start at frame ``-overlap``, the
  first window only primes the state (and gives the stitch its reference frame ``d0``), and
  every later window cross-fades ``min(overlap, hop)`` frames (offline: all ``overlap``) and
  releases the ``hop`` frames before its newest ones. The sliding-window arithmetic itself is
  :func:`~ditto_core.motion.lmdm_sampler.append_window` / ``next_kp_cond``, shared with offline.

With ``overlap = 75`` (Ditto's online configuration uses 70-75) each window releases 5 frames,
one HuBERT window's worth: every 200 ms of speech gives one LMDM window and 5 video frames.
Nothing here touches a network: the caller runs HuBERT and the sampler (batched across
streams) and hands the results back.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch
from torch import Tensor

from ..audio.audio_features import SAMPLES_PER_FRAME
from ..audio.chunking import StreamingWindow
from ..errors import InputError
from ..models.keypoints import MOTION_DIM
from ..models.lmdm import WINDOW
from ..motion.lmdm_sampler import append_window, check_schedule, next_kp_cond

ONLINE_OVERLAP = 75
"""LMDM overlap of the online schedule: 80 - 75 = 5 new frames per window."""


class SampleTimeline:
    """Mono float32 samples addressed by absolute position; the front can be dropped as it is used."""

    def __init__(self) -> None:
        self._data = torch.zeros(0)
        self.start = 0  # absolute position of _data[0]

    @property
    def end(self) -> int:
        """Absolute position one past the last sample received."""
        return self.start + self._data.shape[0]

    def append(self, samples: Tensor) -> None:
        self._data = torch.cat([self._data, samples.to(torch.float32).reshape(-1)])

    def read(self, position: int, count: int) -> Tensor:
        """``count`` samples from ``position``; zeros where nothing was received (or was dropped)."""
        out = torch.zeros(count)
        lo, hi = max(position, self.start), min(position + count, self.end)
        if hi > lo:
            out[lo - position : hi - position] = self._data[lo - self.start : hi - self.start]
        return out

    def discard_before(self, position: int) -> None:
        if position > self.start:
            self._data = self._data[min(position, self.end) - self.start :].clone()
            self.start = max(self.start, min(position, self.end))
            if position > self.start:  # nothing left: jump ahead
                self.start = position

    def truncate(self, position: int) -> None:
        """Forget every sample at or after ``position``."""
        if position < self.end:
            self._data = self._data[: max(0, position - self.start)].clone()


class OnlineAudio:
    """16 kHz speech of one stream -> the sample windows Ditto's online ``run_chunk`` encodes."""

    def __init__(self, window: StreamingWindow = StreamingWindow()) -> None:
        self.window = window
        self.hop = window.valid * SAMPLES_PER_FRAME
        self.lead_in = window.past * SAMPLES_PER_FRAME
        self._samples = SampleTimeline()
        self._samples.append(torch.zeros(self.lead_in))
        self._next = 0  # start of the next window in the padded stream
        self.ended = False
        self.windows_done = 0

    @property
    def received(self) -> int:
        """Speech samples received (the lead-in not counted)."""
        return self._samples.end - self.lead_in

    def push(self, samples_16k: Tensor) -> None:
        if self.ended:
            raise InputError("audio pushed after end(): open a new stream for new speech.")
        self._samples.append(samples_16k)

    def end(self) -> None:
        self.ended = True

    def has_window(self) -> bool:
        if self._next + self.window.num_samples <= self._samples.end:
            return True
        return self.ended and self._next < self._samples.end

    def next_window(self) -> Optional[Tensor]:
        """The next ``(num_samples,)`` window (zero-completed at the end), or None if not there yet."""
        if not self.has_window():
            return None
        samples = self._samples.read(self._next, self.window.num_samples)
        self._next += self.hop
        self.windows_done += 1
        self._samples.discard_before(self._next)
        return samples

    def clear(self) -> int:
        """Drop the speech not yet encoded; returns the speech sample position the stream resumes at.

        The next window keeps its past context (speech already shown); what follows it is gone.
        """
        resume = self._next + self.lead_in  # padded position of the next window's first valid frame
        self._samples.truncate(resume)
        return resume - self.lead_in


@dataclass
class MotionWindow:
    """One LMDM window of a stream, ready to sample."""

    kp_cond: Tensor  # (1, 265) float32 reference frame
    cond: Tensor  # (80, C) float32 per-frame conditions
    valid: int  # Ditto's ``real_valid_len``: frames this window moves the schedule on
    rows_end: int  # speech feature rows (frames, from the stream's first) this window reads: its newest + 1


ConditionBuilder = Callable[[Tensor, int], Tensor]
"""``(features (80, 1024), first_frame) -> (80, C)`` conditions of one window."""


class OnlineMotion:
    """Ditto's online ``audio2motion`` loop for one stream, one window at a time.

    Args:
        silence: ``(overlap, 1024)`` HuBERT features of silence, the buffer's lead-in.
        kp_source: (1, 265) packed source motion, the first window's reference frame.
        build_cond: makes a window's conditions from its features and first frame number.
        overlap, smoothing, fix_kp_cond, fix_kp_cond_dims: as in
            :func:`~ditto_core.motion.lmdm_sampler.generate_motion`.
    """

    def __init__(
        self,
        silence: Tensor,
        kp_source: Tensor,
        build_cond: ConditionBuilder,
        overlap: int = ONLINE_OVERLAP,
        smoothing: int = 3,
        fix_kp_cond: int = 0,
        fix_kp_cond_dims: Optional[tuple[int, int]] = None,
    ) -> None:
        check_schedule(overlap, fix_kp_cond)
        if silence.shape[0] != overlap:
            raise InputError(f"silence features: need {overlap} frames (the overlap), got {silence.shape[0]}")
        self.overlap, self.hop = overlap, WINDOW - overlap
        self.fuse = min(overlap, self.hop)
        self.smoothing, self.fix_kp_cond, self.fix_kp_cond_dims = smoothing, fix_kp_cond, fix_kp_cond_dims
        self._build_cond = build_cond
        self._kp_source = kp_source.reshape(1, MOTION_DIM).to(torch.float32)
        self._kp_cond = self._kp_source
        self._feats = silence.to(torch.float32)  # Ditto's audio_feat, consumed rows dropped
        self._pending: list[Tensor] = []  # Ditto's item_buffer
        self._pending_rows = 0
        self._frame = -overlap  # Ditto's global_idx + cond_idx_start: first frame of the next window
        self._seq = torch.empty(3 * WINDOW, MOTION_DIM, device=silence.device)  # Ditto's res_kp_seq
        self._end = 0
        self._valid_start: Optional[int] = None
        self.windows_done = 0
        self.frames_out = 0
        self.ended = False
        self.reference: Optional[Tensor] = None
        """(265,) the first window's first frame: the stitch's ``d0`` for the whole stream."""

    def push(self, features: Tensor) -> None:
        """Append HuBERT features ``(n, 1024)``; they join the buffer ``hop`` rows at a time, as in Ditto."""
        self._pending.append(features.to(self._feats.device, torch.float32))
        self._pending_rows += features.shape[0]
        if self._pending_rows >= self.hop:
            self._flush_pending()

    def end(self) -> None:
        self.ended = True
        self._flush_pending()

    def _flush_pending(self) -> None:
        if self._pending:
            self._feats = torch.cat([self._feats, *self._pending])
            self._pending, self._pending_rows = [], 0

    @property
    def finished(self) -> bool:
        return self.ended and self._feats.shape[0] == 0

    @property
    def buffered_rows(self) -> int:
        """Feature rows pushed and not yet consumed by a window (the runtime keeps this bounded)."""
        return self._feats.shape[0] + self._pending_rows

    def next_valid(self) -> Optional[int]:
        """The ``valid`` of the next window if its features are all there (or the stream ended),
        else None: what :meth:`next_window` would return, without building its conditions."""
        n = min(WINDOW, self._feats.shape[0])
        if n == 0 or (n < WINDOW and not self.ended):
            return None
        return self.hop if n == WINDOW else n  # the final window: n frames, padded with its last

    def next_window(self) -> Optional[MotionWindow]:
        """The next window if its features are all there (or the stream ended), else None."""
        valid = self.next_valid()
        if valid is None:
            return None
        feats = self._feats[:WINDOW]
        if feats.shape[0] < WINDOW:
            feats = torch.cat([feats, feats[-1:].expand(WINDOW - feats.shape[0], -1)])
        return MotionWindow(kp_cond=self._kp_cond, cond=self._build_cond(feats, self._frame), valid=valid,
                            rows_end=self._frame + WINDOW)

    def accept(self, window: MotionWindow, pred: Tensor) -> Tensor:
        """Join the sampled window ``pred`` (80, 265); returns the motion frames it releases (k, 265)."""
        self._end = append_window(self._seq, self._end, pred.to(torch.float32), self.hop, self.fuse, self.smoothing)
        self.windows_done += 1
        self._kp_cond = next_kp_cond(
            self._seq, self._end, self.overlap, self.windows_done, self._kp_source, self.fix_kp_cond,
            self.fix_kp_cond_dims,
        )
        if self._valid_start is None:  # the first window primes the schedule and releases nothing
            self._valid_start = self._end - self.fuse
            self.reference = self._seq[0].clone()
            out = self._seq[:0].clone()
        else:
            stop = min(self._valid_start + window.valid, self._end)
            out = self._seq[self._valid_start : stop].clone()
            self._valid_start += window.valid
        self._feats = self._feats[window.valid :]
        self._frame += window.valid
        self.frames_out += out.shape[0]
        if self._end > 2 * WINDOW:  # only the newest frames are ever read again
            cut = self._end - 2 * WINDOW
            self._seq[: 2 * WINDOW] = self._seq[cut : self._end].clone()
            self._end, self._valid_start = 2 * WINDOW, self._valid_start - cut
        return out
