"""``SourceInfo``: everything the later stages need to know about the avatar."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

import torch
from torch import Tensor

from ..models.keypoints import MotionInfo


@dataclass
class SourceInfo:
    """A registered avatar: N source frames (1 for a still image), tensors on one device.

    Produced by registration (or loaded from its cache), consumed by the condition builder
    (eye measurements, source keypoints), the warp stage (``f_s``, source motion) and put-back
    (``frames``, ``M_c2o``).
    """

    frames: Tensor  # (N, H, W, 3) uint8 RGB: the source frames after the max-size resize
    M_c2o: Tensor  # (N, 3, 3) float32: affine from the 512x512 crop to frame pixels
    f_s: Tensor  # (N, 32, 16, 64, 64) float: appearance feature volumes
    motion: MotionInfo  # N frames of x_s_info (smoothed over time for a video source)
    eye_open: Tensor  # (N, 2) float32: left/right eye-open ratios
    eye_ball: Tensor  # (N, 6) float32: left/right iris direction
    is_image: bool  # True for a still portrait (drives eyes by default), False for a video
    cache_key: Optional[str] = None  # content address of the cache entry it came from / went to
    sc: Optional[Tensor] = None  # (1, 63) float32: frame-0 canonical keypoints *before* the video
    # smoothing; Ditto conditions the LMDM on these (None: same as the smoothed ``motion.kp[:1]``)

    def __len__(self) -> int:
        return self.frames.shape[0]

    @property
    def device(self) -> torch.device:
        return self.f_s.device

    @property
    def source_kp(self) -> Tensor:
        """(1, 63) canonical keypoints of frame 0 as registered: the LMDM's condition ``sc``.

        For a video source Ditto takes them before smoothing the motion over time.
        """
        return self.sc if self.sc is not None else self.motion.kp[:1]

    def tensors(self) -> list[Tensor]:
        """Every tensor the avatar holds."""
        held = [self.frames, self.M_c2o, self.f_s, self.eye_open, self.eye_ball, *self.motion.as_dict().values()]
        return held if self.sc is None else [*held, self.sc]

    def to(self, device: torch.device | str, non_blocking: bool = False) -> "SourceInfo":
        move = lambda t: t.to(device, non_blocking=non_blocking)  # noqa: E731
        return replace(
            self,
            frames=move(self.frames),
            M_c2o=move(self.M_c2o),
            f_s=move(self.f_s),
            motion=self.motion.map(move),
            eye_open=move(self.eye_open),
            eye_ball=move(self.eye_ball),
            sc=None if self.sc is None else move(self.sc),
        )
