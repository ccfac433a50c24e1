"""Ditto's face crop: landmarks -> an upright similarity transform -> a square crop.

The face axis runs from the mid-point of the eyes to the mid-point of the lips; the crop is
the landmarks' bounding square in that rotated frame, scaled and shifted, mapped onto a
``dsize`` x ``dsize`` image. Transforms are 3x3 matrices acting on column vectors of pixel
coordinates ``(x, y, 1)`` with integer coordinates at pixel centres (OpenCV's convention):
``M_o2c`` maps frame -> crop, ``M_c2o`` crop -> frame.

Landmark math runs in float64 NumPy on the host (it steers ONNX models that run there);
the warps of whole frames run batched in torch on the frames' device.
"""
from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor


@dataclass(frozen=True)
class _FaceAxisPoints:
    """Landmark indices of one layout that define the eye-to-lip axis."""

    left_eye: tuple[int, ...]
    right_eye: tuple[int, ...]
    lips: tuple[int, int]


# InsightFace 2d106det and LivePortrait/Ditto's 203-point layouts.
_FACE_AXIS_POINTS = {
    106: _FaceAxisPoints((33, 35, 40, 39), (87, 89, 94, 93), (52, 61)),
    203: _FaceAxisPoints((0, 6, 12, 18), (24, 30, 36, 42), (48, 66)),
}


def face_axes(landmarks: np.ndarray) -> np.ndarray:
    """(N, K, 2) landmarks, K in {106, 203} -> (N, 2, 2) rows ``ux`` (face right), ``uy`` (face down).

    ``uy`` is the unit vector from the eye centre to the lip centre; a degenerate axis (eyes
    on the mouth) falls back to image-down so the crop stays defined.
    """
    points = _FACE_AXIS_POINTS.get(landmarks.shape[-2])
    if points is None:
        raise ValueError(f"no face-axis definition for {landmarks.shape[-2]} landmarks; expected 106 or 203")
    eyes = (landmarks[:, points.left_eye].mean(1) + landmarks[:, points.right_eye].mean(1)) / 2
    lips = landmarks[:, points.lips].mean(1)
    uy = lips - eyes
    length = np.linalg.norm(uy, axis=-1, keepdims=True)
    uy = np.where(length > 1e-3, uy / np.maximum(length, 1e-3), np.array([0.0, 1.0]))
    ux = np.stack([uy[:, 1], -uy[:, 0]], axis=-1)
    return np.stack([ux, uy], axis=1)


def crop_transform(
    landmarks: np.ndarray,
    dsize: int,
    scale: float,
    vx_ratio: float = 0.0,
    vy_ratio: float = 0.0,
    rotate: bool = True,
) -> np.ndarray:
    """Frame -> crop transforms ``M_o2c`` (N, 3, 3) float64 for (N, K, 2) landmarks.

    The crop side is ``scale`` times the larger side of the landmarks' bounding box measured
    along the face axes; its centre is that box's centre moved by ``vx_ratio``/``vy_ratio``
    crop sides along the axes. With ``rotate`` the crop is turned so the face is upright,
    otherwise it stays axis-aligned (same centre and size).
    """
    landmarks = np.asarray(landmarks, dtype=np.float64)
    axes = face_axes(landmarks)  # (N, 2, 2)
    mean = landmarks.mean(1)
    local = np.einsum("nkj,nij->nki", landmarks - mean[:, None], axes)  # coordinates along ux, uy
    lo, hi = local.min(1), local.max(1)
    side = (hi - lo).max(-1) * scale  # (N,)
    offset = (lo + hi) / 2 + np.array([vx_ratio, vy_ratio]) * side[:, None]
    center = mean + np.einsum("ni,nij->nj", offset, axes)
    rotation = axes if rotate else np.broadcast_to(np.eye(2), axes.shape)
    return similarity(center, dsize / side, rotation, dsize / 2)


def similarity(center: np.ndarray, zoom: np.ndarray, rotation: np.ndarray, target: float) -> np.ndarray:
    """(N, 3, 3) maps sending ``center`` (N, 2) to ``(target, target)``, scaling by ``zoom``
    (N,) and rotating by ``rotation`` (N, 2, 2)."""
    linear = rotation * zoom[:, None, None]
    matrix = np.zeros((len(center), 3, 3))
    matrix[:, :2, :2] = linear
    matrix[:, :2, 2] = target - np.einsum("nij,nj->ni", linear, center)
    matrix[:, 2, 2] = 1
    return matrix


def letterbox_transform(height: int, width: int, dsize: int) -> np.ndarray:
    """(3, 3) frame -> crop map that fits the whole frame into a ``dsize`` square, centred."""
    center = np.array([[width / 2, height / 2]])
    return similarity(center, np.array([dsize / max(height, width)]), np.eye(2)[None], dsize / 2)[0]


def transform_points(points: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """Apply an affine ``matrix`` (2x3 or 3x3) to (..., 2) points."""
    return points @ matrix[:2, :2].T + matrix[:2, 2]


def warp_image(image: np.ndarray, m_o2c: np.ndarray, dsize: int) -> np.ndarray:
    """Host crop of one (H, W, 3) uint8 image: bilinear, black outside the frame."""
    return cv2.warpAffine(image, m_o2c[:2].astype(np.float64), (dsize, dsize), flags=cv2.INTER_LINEAR,
                          borderMode=cv2.BORDER_CONSTANT, borderValue=(0, 0, 0))


def warp_frames(frames: Tensor, m_c2o: Tensor, dsize: int) -> Tensor:
    """Batched crops on the frames' device: (B, H, W, 3) uint8 frames, (B, 3, 3) crop -> frame
    maps -> (B, dsize, dsize, 3) uint8.

    Bilinear with zeros outside the frame, pixel centres on integer coordinates: the same
    sampling as ``cv2.warpAffine`` up to its 5-bit fixed-point weights (|diff| <= 1).
    """
    batch, height, width = frames.shape[:3]
    axis = torch.arange(dsize, device=frames.device, dtype=torch.float32)
    ys, xs = torch.meshgrid(axis, axis, indexing="ij")
    crop_xy1 = torch.stack([xs, ys, torch.ones_like(xs)], -1)
    frame_xy = crop_xy1.reshape(1, -1, 3) @ m_c2o[:, :2].float().transpose(1, 2)  # (B, dsize^2, 2)
    # align_corners=True puts -1 / +1 on the centres of the first / last pixel.
    scale = torch.tensor([2 / (width - 1), 2 / (height - 1)], device=frames.device)
    grid = (frame_xy * scale - 1).reshape(batch, dsize, dsize, 2)
    image = frames.permute(0, 3, 1, 2).float()
    crops = F.grid_sample(image, grid, mode="bilinear", padding_mode="zeros", align_corners=True)
    return crops.round_().clamp_(0, 255).to(torch.uint8).permute(0, 2, 3, 1)


def network_input(crops: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """(B, 512, 512, 3) uint8 crops -> (B, 3, 256, 256) RGB in [0, 1], as Ditto feeds its extractors.

    Ditto halves the crop with ``cv2.INTER_AREA`` on uint8, which for an exact factor of two
    is the 2x2 mean rounded half up; reproducing the rounding keeps inputs bit-identical.
    """
    summed = F.avg_pool2d(crops.permute(0, 3, 1, 2).float(), 2, divisor_override=1)
    return (torch.floor((summed + 2) / 4) / 255).to(dtype)
