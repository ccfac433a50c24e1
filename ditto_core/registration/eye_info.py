"""Eye openness and gaze from MediaPipe's 478 face-mesh landmarks, as Ditto conditions on them.

Indices follow MediaPipe's face mesh: the subject's left eye is ``L`` (image right side of a
frontal face), iris centres are points 468 and 473. All measurements are ratios of
distances in the landmarker's normalised (x, y, z) space, so the crop size does not matter.
"""
from __future__ import annotations

import torch
from torch import Tensor

_EPS = 1e-8  # Ditto's guard against a zero eye width

# Per eye: outer and inner corner, three upper/lower lid pairs, iris centre.
_CORNERS = torch.tensor([[33, 133], [263, 362]])
_LIDS = torch.tensor([[[145, 159], [144, 160], [153, 158]], [[374, 386], [373, 387], [380, 385]]])
_IRIS = torch.tensor([468, 473])

NUM_MESH_POINTS = 478

DEFAULT_EYE_OPEN = 0.85
"""Used when no landmarks are available: three lid gaps of a relaxed open eye, each about
0.28 eye widths (the usual open-eye aspect ratio)."""
DEFAULT_EYE_BALL = 0.0
"""Used when no landmarks are available: iris centred, looking straight ahead."""


def eye_measurements(landmarks: Tensor) -> tuple[Tensor, Tensor]:
    """(N, 478, 3) normalised landmarks -> ``eye_open`` (N, 2), ``eye_ball`` (N, 6).

    ``eye_open``: per eye (left, right), the summed gaps of three upper/lower lid pairs over
    the corner-to-corner width. ``eye_ball``: per eye, the iris offset from the eye centre
    with the eye's own inner->outer direction removed from its unit direction, scaled by
    the offset length; laid out ``[xL, xR, yL, yR, zL, zR]`` as Ditto flattens it.
    """
    index = lambda idx: landmarks[:, idx.to(landmarks.device)]  # noqa: E731
    corners = index(_CORNERS)  # (N, 2 eyes, 2 corners, 3)
    lids = index(_LIDS)  # (N, 2, 3 pairs, 2, 3)
    iris = index(_IRIS)  # (N, 2, 3)

    width = (corners[:, :, 0] - corners[:, :, 1]).norm(dim=-1)  # (N, 2)
    gaps = (lids[..., 0, :] - lids[..., 1, :]).norm(dim=-1).sum(-1)
    eye_open = gaps / (width + _EPS)

    center = corners.mean(2)
    eye_dir = _unit(corners[:, :, 0] - corners[:, :, 1])  # inner -> outer corner
    offset = iris - center
    distance = offset.norm(dim=-1, keepdim=True)
    ball = (_unit(offset) - eye_dir) * distance  # (N, 2 eyes, 3)
    return eye_open, ball.transpose(1, 2).reshape(-1, 6)


def _unit(v: Tensor) -> Tensor:
    return v / (v.norm(dim=-1, keepdim=True) + _EPS)


def default_eye_measurements(count: int, device: torch.device | str = "cpu") -> tuple[Tensor, Tensor]:
    """Neutral measurements for ``count`` frames without landmarks: (count, 2), (count, 6)."""
    return (torch.full((count, 2), DEFAULT_EYE_OPEN, device=device),
            torch.full((count, 6), DEFAULT_EYE_BALL, device=device))
