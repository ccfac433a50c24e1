"""``AudioFeatures``: speech encoded for the motion diffusion."""
from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

FPS = 25
SAMPLE_RATE = 16000
SAMPLES_PER_FRAME = SAMPLE_RATE // FPS  # 640


@dataclass
class AudioFeatures:
    """HuBERT features at the video frame rate: one row per output video frame."""

    features: Tensor  # (T, 1024) float32, 25 rows per second of speech
    duration_s: float  # length of the speech the features were computed from

    @property
    def num_frames(self) -> int:
        return self.features.shape[0]
