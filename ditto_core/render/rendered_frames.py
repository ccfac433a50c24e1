"""What the render stages hand on: 512x512 face renders, then full frames."""
from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor


@dataclass
class RenderedFrames:
    """Decoder output for T frames, still in crop space."""

    images: Tensor  # (T, 3, 512, 512) float in [0, 1], RGB, model dtype, on the GPU when there is one
    source_index: Tensor  # (T,) int64: the source frame each render belongs to
    fps: float = 25.0

    def __len__(self) -> int:
        return self.images.shape[0]


@dataclass
class VideoFrames:
    """Finished frames at the source resolution, ready to encode or to hand to other packs."""

    frames: Tensor  # (T, H, W, 3) uint8 RGB
    fps: float = 25.0

    def __len__(self) -> int:
        return self.frames.shape[0]
