"""Implicit-keypoint math shared by registration, motion and rendering.

Ditto inherits LivePortrait's motion description: 21 canonical 3-D keypoints ``kp``, an
expression offset ``exp``, a head pose given as three 66-bin classifications (pitch, yaw,
roll; 3 degrees per bin starting at -97.5 degrees), a translation ``t`` and a scale. The LMDM
diffuses the same quantities packed into one 265-wide vector.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F
from torch import Tensor

NUM_KP = 21
EYE_KP = (11, 13, 15, 16, 18)
"""Keypoints that move with the eyelids."""
LIP_KP = (6, 12, 14, 17, 19, 20)
"""Keypoints that move with the lips: always driven, whatever the eye settings."""
NUM_BINS = 66
MOTION_DIM = 265
"""Width of the packed motion vector: scale-1 (1), pitch/yaw/roll bins (3x66), t (3), exp (63)."""

_PACK_ORDER = (("scale", 1), ("pitch", NUM_BINS), ("yaw", NUM_BINS), ("roll", NUM_BINS), ("t", 3), ("exp", 3 * NUM_KP))


def _columns() -> dict[str, slice]:
    stops = itertools.accumulate(width for _, width in _PACK_ORDER)
    return {name: slice(stop - width, stop) for (name, width), stop in zip(_PACK_ORDER, stops)}


MOTION_COLUMNS = _columns()
"""Columns of each part in a packed motion vector, in packing order (``scale`` holds scale - 1)."""


@dataclass
class MotionInfo:
    """Motion of N frames, all float tensors on one device.

    ``pitch``/``yaw``/``roll`` are 66-bin *logits* (what the motion extractor and the LMDM
    produce); relative driving mixes them in logit space, exactly as Ditto does, and only
    :func:`bins_to_degrees` turns them into angles.
    """

    scale: Tensor  # (N, 1)
    pitch: Tensor  # (N, 66) bin logits
    yaw: Tensor  # (N, 66) bin logits
    roll: Tensor  # (N, 66) bin logits
    t: Tensor  # (N, 3)
    exp: Tensor  # (N, 63), 21 keypoints x (x, y, z) flattened
    kp: Tensor  # (N, 63), canonical keypoints flattened

    def __len__(self) -> int:
        return self.scale.shape[0]

    def as_dict(self) -> dict[str, Tensor]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def map(self, fn) -> "MotionInfo":
        """A new MotionInfo with ``fn`` applied to every tensor (slicing, device moves...)."""
        return MotionInfo(**{k: fn(v) for k, v in self.as_dict().items()})

    @classmethod
    def cat(cls, infos: "list[MotionInfo]") -> "MotionInfo":
        return cls(**{f.name: torch.cat([getattr(i, f.name) for i in infos]) for f in fields(cls)})


def bins_to_degrees(logits: Tensor) -> Tensor:
    """(N, 66) bin logits -> (N,) degrees: the softmax expectation over bin centres."""
    idx = torch.arange(NUM_BINS, dtype=logits.dtype, device=logits.device)
    return (torch.softmax(logits, dim=-1) * idx).sum(-1) * 3 - 97.5


def rotation_matrix(pitch: Tensor, yaw: Tensor, roll: Tensor) -> Tensor:
    """Angles in degrees, each (N,) -> (N, 3, 3) matrices to right-multiply row keypoints with.

    LivePortrait composes ``Rz(roll) @ Ry(yaw) @ Rx(pitch)`` and applies it to row vectors,
    hence the transpose.
    """
    radians = torch.stack([pitch, yaw, roll], -1) * (math.pi / 180)
    sin = radians.sin()
    # Each function once for all three angles, and the three matrices in one stack: each op is a
    # kernel launch on a GPU, and a live round poses only a few frames.
    (cx, cy, cz), (sx, sy, sz), (nx, ny, nz) = (v.unbind(-1) for v in (radians.cos(), sin, -sin))
    one, zero = torch.ones_like(cx), torch.zeros_like(cx)
    rot_x, rot_y, rot_z = torch.stack([
        one, zero, zero, zero, cx, nx, zero, sx, cx,
        cy, zero, sy, zero, one, zero, ny, zero, cy,
        cz, nz, zero, sz, cz, zero, zero, zero, one,
    ], -1).unflatten(-1, (3, 3, 3)).unbind(-3)
    rot = rot_z @ rot_y @ rot_x
    return rot.transpose(-1, -2)


def transform_keypoint(
    kp: Tensor, exp: Tensor, scale: Tensor, t: Tensor, pitch: Tensor, yaw: Tensor, roll: Tensor
) -> Tensor:
    """Posed keypoints ``scale * (kp @ R + exp) + [tx, ty, 0]``: (N, 21, 3).

    ``kp``/``exp`` are (N, 63); ``scale`` (N, 1); ``t`` (N, 3); angles (N,) in degrees. The
    z translation is dropped, as in LivePortrait.
    """
    n = kp.shape[0]
    rot = rotation_matrix(pitch, yaw, roll)
    out = (kp.reshape(n, NUM_KP, 3) @ rot + exp.reshape(n, NUM_KP, 3)) * scale.reshape(n, 1, 1)
    shift = F.pad(t[:, :2], (0, 1))  # (tx, ty, 0)
    return out + shift[:, None, :]


def posed_keypoints(info: MotionInfo) -> Tensor:
    """(N, 21, 3) keypoints of a MotionInfo whose angles are still bin logits."""
    return transform_keypoint(
        info.kp, info.exp, info.scale, info.t,
        bins_to_degrees(info.pitch), bins_to_degrees(info.yaw), bins_to_degrees(info.roll),
    )


def pack_motion(info: MotionInfo) -> Tensor:
    """MotionInfo -> (N, 265) motion vectors in the layout the LMDM diffuses (``kp`` not included)."""
    parts = [info.scale - 1 if name == "scale" else getattr(info, name) for name, _ in _PACK_ORDER]
    return torch.cat([p.reshape(len(info), -1) for p in parts], dim=-1)


def unpack_motion(vec: Tensor, kp: Tensor) -> MotionInfo:
    """(N, 265) motion vectors + canonical keypoints (N, 63) or (1, 63) -> MotionInfo."""
    if vec.shape[-1] != MOTION_DIM:
        raise ValueError(f"motion vectors must be {MOTION_DIM} wide, got {tuple(vec.shape)}")
    parts = dict(zip((n for n, _ in _PACK_ORDER), vec.split([w for _, w in _PACK_ORDER], dim=-1)))
    parts["scale"] = parts["scale"] + 1
    return MotionInfo(kp=kp.expand(vec.shape[0], -1), **parts)
