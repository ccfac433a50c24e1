"""Motion extractor: one portrait crop -> canonical keypoints, head pose and expression.

The network is LivePortrait's: a ConvNeXt-V2-tiny trunk whose pooled features feed seven
linear heads. Its raw outputs are what :class:`ditto_core.models.keypoints.MotionInfo`
holds; the pose heads are 66-bin logits and are only turned into degrees downstream.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from ..errors import InputError
from .convnext_v2 import ConvNeXtV2
from .keypoints import NUM_BINS, NUM_KP

INPUT_SIZE = 256
"""Side of the square RGB crop the extractor was trained on."""

MotionOutputs = tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]
"""(pitch, yaw, roll, t, exp, scale, kp), in the order the official module returns them."""


class _KeypointDetector(ConvNeXtV2):
    """ConvNeXt-V2-tiny trunk plus the keypoint/pose/expression heads.

    Heads and trunk share one module because the official checkpoint stores them under one
    prefix (``detector.``).
    """

    def __init__(self, num_kp: int, num_bins: int) -> None:
        super().__init__(depths=(3, 3, 9, 3), dims=(96, 192, 384, 768))
        width = self.num_features
        self.fc_kp = nn.Linear(width, 3 * num_kp)
        self.fc_scale = nn.Linear(width, 1)
        self.fc_pitch = nn.Linear(width, num_bins)
        self.fc_yaw = nn.Linear(width, num_bins)
        self.fc_roll = nn.Linear(width, num_bins)
        self.fc_t = nn.Linear(width, 3)
        self.fc_exp = nn.Linear(width, 3 * num_kp)

    def forward(self, x: Tensor) -> MotionOutputs:
        f = super().forward(x)
        return (
            self.fc_pitch(f),
            self.fc_yaw(f),
            self.fc_roll(f),
            self.fc_t(f),
            self.fc_exp(f),
            self.fc_scale(f),
            self.fc_kp(f),
        )


class MotionExtractor(nn.Module):
    """Predicts the implicit-keypoint motion description of a portrait crop.

    Args:
        num_kp: number of implicit 3-D keypoints (21 in every released checkpoint).
        num_bins: bins of each pose classifier (66 bins of 3 degrees).

    Shape:
        - image: (B, 3, 256, 256) float, RGB in [0, 1].
        - returns ``(pitch, yaw, roll, t, exp, scale, kp)`` in the image's dtype with shapes
          (B, 66), (B, 66), (B, 66), (B, 3), (B, 63), (B, 1), (B, 63). Pose entries are raw
          bin logits (before softmax); ``exp`` and ``kp`` are 21 (x, y, z) triples flattened.
    """

    def __init__(self, num_kp: int = NUM_KP, num_bins: int = NUM_BINS) -> None:
        super().__init__()
        self.detector = _KeypointDetector(num_kp, num_bins)

    def forward(self, image: Tensor) -> MotionOutputs:
        _check_image(image)
        return self.detector(image)


def _check_image(image: Tensor) -> None:
    # Shape and dtype only: checking the value range would need a device sync per call.
    if not isinstance(image, Tensor):
        raise InputError(f"motion extractor: expected the portrait crop as a torch.Tensor, got {type(image).__name__}")
    if image.ndim != 4 or image.shape[1] != 3 or image.shape[-2:] != (INPUT_SIZE, INPUT_SIZE):
        raise InputError(
            f"motion extractor: the portrait crop has shape {tuple(image.shape)}; expected "
            f"(batch, 3, {INPUT_SIZE}, {INPUT_SIZE}) channels-first RGB. Crop and resize the face "
            "with the source registration step before extracting motion."
        )
    if not torch.is_floating_point(image):
        raise InputError(
            f"motion extractor: the portrait crop has dtype {image.dtype}; convert it to a float "
            "tensor with values in [0, 1] (divide 8-bit pixels by 255)."
        )
