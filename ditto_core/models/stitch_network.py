"""Stitching network: nudges driven keypoints so the animated face pastes back seamlessly.

LivePortrait's "shoulder" retargeting head. Given the posed source keypoints and the posed
driving keypoints it predicts a small per-keypoint correction plus a shared x/y shift, which
keeps the region around the crop border (neck, shoulders) aligned with the original frame.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import InputError
from .keypoints import NUM_KP


class StitchingNetwork(nn.Module):
    """MLP from (source, driving) keypoints to corrected driving keypoints.

    The MLP maps the two flattened keypoint sets (``6 * num_kp`` values) to ``3 * num_kp + 2``
    values: a 3-D offset per keypoint followed by one (tx, ty) shift applied to every keypoint.

    Args:
        num_kp: number of implicit keypoints (21 in the released checkpoint).
        hidden_sizes: widths of the ReLU hidden layers.

    Shape:
        - kp_source, kp_driving: (B, num_kp, 3) float, normalised coordinates. ``kp_source``
          may also be (1, num_kp, 3): one still portrait driven by B frames.
        - returns the corrected driving keypoints, (B, num_kp, 3), same dtype.
    """

    def __init__(self, num_kp: int = NUM_KP, hidden_sizes: Sequence[int] = (128, 128, 64)) -> None:
        super().__init__()
        self.num_kp = num_kp
        widths = [6 * num_kp, *hidden_sizes]
        layers: list[nn.Module] = []
        for w_in, w_out in zip(widths[:-1], widths[1:]):
            layers += [nn.Linear(w_in, w_out), nn.ReLU(inplace=True)]
        layers.append(nn.Linear(widths[-1], 3 * num_kp + 2))
        self.mlp = nn.Sequential(*layers)

    def delta(self, kp_source: Tensor, kp_driving: Tensor) -> Tensor:
        """Raw MLP output, (B, 3 * num_kp + 2): per-keypoint offsets, then (tx, ty)."""
        self._check_keypoints(kp_source, kp_driving)
        kp_source = kp_source.expand_as(kp_driving)
        return self.mlp(torch.cat((kp_source.flatten(1), kp_driving.flatten(1)), dim=1))

    def forward(self, kp_source: Tensor, kp_driving: Tensor) -> Tensor:
        d = self.delta(kp_source, kp_driving)
        n = 3 * self.num_kp
        offsets = d[:, :n].reshape(kp_driving.shape)
        # The shift moves x and y only; a zero z component lets one broadcast add apply it,
        # and adding an exact 0 leaves z bit-identical to the reference's sliced update.
        shift = F.pad(d[:, n : n + 2], (0, 1)).unsqueeze(1)
        return kp_driving + offsets + shift

    def _check_keypoints(self, kp_source: Tensor, kp_driving: Tensor) -> None:
        expected = (self.num_kp, 3)
        for name, kp in (("kp_source", kp_source), ("kp_driving", kp_driving)):
            if not isinstance(kp, Tensor) or kp.ndim != 3 or tuple(kp.shape[1:]) != expected:
                shape = tuple(kp.shape) if isinstance(kp, Tensor) else type(kp).__name__
                raise InputError(
                    f"stitching network: {name} has shape {shape}; expected (batch, {self.num_kp}, 3) "
                    f"posed keypoints (reshape flattened (batch, {3 * self.num_kp}) keypoints first)."
                )
        if kp_source.shape[0] not in (1, kp_driving.shape[0]):
            raise InputError(
                f"stitching network: kp_source has {kp_source.shape[0]} rows but kp_driving has "
                f"{kp_driving.shape[0]}; pass one source row, or one per driving frame."
            )

