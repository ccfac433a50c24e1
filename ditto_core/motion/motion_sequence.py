"""``MotionSequence``: per-frame keypoints ready for warping."""
from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor


@dataclass
class MotionSequence:
    """T output frames of motion, on the compute device.

    Frame i warps source frame ``source_index[i]`` from ``kp_source[i]`` to ``kp_driving[i]``
    (for a video source the index ping-pongs through its frames, as Ditto's mirror loop does).
    """

    kp_source: Tensor  # (T, 21, 3) float32: posed source keypoints (x_s)
    kp_driving: Tensor  # (T, 21, 3) float32: driving keypoints after stitching (x_d)
    source_index: Tensor  # (T,) int64: index into SourceInfo frames
    fps: float = 25.0

    def __len__(self) -> int:
        return self.kp_driving.shape[0]

    def wait_rows(self, stop: int) -> None:
        """Return once rows ``[0, stop)`` hold their values for work queued on the current CUDA
        stream from now on. A finished sequence always does; one still being generated
        (:class:`~ditto_core.motion.motion_ahead.MotionAhead`) blocks until it gets there."""
