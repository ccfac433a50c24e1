"""RGB -> yuv420p (BT.709, limited range) as tensor arithmetic, on whatever device the frames are on.

The writer runs this on the GPU right after put-back, so a frame crosses PCIe as 1.5 bytes a
pixel instead of 3 and the host never runs swscale. The arithmetic is swscale's with the
area (2x2 box) chroma filter: luma per pixel, chroma from the mean of each 2x2 block of RGB,
both rounded to nearest. The result is within one level of
``VideoFrame.reformat(format="yuv420p", dst_colorspace=ITU709, dst_color_range=MPEG,
interpolation=AREA)`` on every sample (tests/test_video_colour.py checks random and natural
images).

Layout: one frame is packed as FFmpeg lays out a yuv420p picture whose line size equals its
width: the Y plane (H rows of W), then U and V (H/2 rows of W/2 each), so a batch is one
``(N, H * 3 // 2, W)`` uint8 tensor, the shape ``av.VideoFrame.from_ndarray(..., "yuv420p")``
takes.
"""
from __future__ import annotations

import functools
from typing import Callable, Optional

import av
import torch
from torch import Tensor

# BT.709 luma weights (ITU-R BT.709-6, item 3.2).
_KR, _KB = 0.2126, 0.0722
_KG = 1.0 - _KR - _KB
# Limited ("TV", "MPEG") range for 8 bits: luma 16..235, chroma 16..240 around 128.
_Y_SCALE, _C_SCALE = 219.0 / 255.0, 224.0 / 255.0

# Rows: Y, Cb, Cr from R, G, B in [0, 255] (offsets added separately).
_RGB_TO_YUV = (
    (_Y_SCALE * _KR, _Y_SCALE * _KG, _Y_SCALE * _KB),
    (-_C_SCALE * _KR / (2 * (1 - _KB)), -_C_SCALE * _KG / (2 * (1 - _KB)), _C_SCALE * 0.5),
    (_C_SCALE * 0.5, -_C_SCALE * _KG / (2 * (1 - _KR)), -_C_SCALE * _KB / (2 * (1 - _KR))),
)
_OFFSETS = (16.0, 128.0, 128.0)

# Frames converted per step: bounds the float32 temporaries (12 bytes a pixel) on the device.
_STEP_FRAMES = 4


def pad_to_even(frames: Tensor) -> Tensor:
    """(N, H, W, 3) -> (N, H + H % 2, W + W % 2, 3): an odd side repeats its last row/column.

    yuv420p needs even sides; repeating the edge keeps the extra pixel invisible in the chroma.
    Returns ``frames`` itself when both sides are even.
    """
    if frames.shape[2] % 2:
        frames = torch.cat([frames, frames[:, :, -1:]], dim=2)
    if frames.shape[1] % 2:
        frames = torch.cat([frames, frames[:, -1:]], dim=1)
    return frames


CONVERSION_BACKENDS = ("auto", "triton", "torch")


def rgb_to_yuv420p(frames: Tensor, out: Tensor | None = None, backend: str = "auto") -> Tensor:
    """(N, H, W, 3) uint8 RGB with even H and W -> (N, H * 3 // 2, W) uint8 packed yuv420p.

    Runs on the frames' device. ``backend``: ``"auto"`` is one Triton kernel
    (:mod:`.colour_triton`) on CUDA where Triton is installed and the PyTorch arithmetic below
    (the kernel's reference) otherwise; ``"triton"`` or ``"torch"`` asks for one. ``out`` (same
    shape, uint8, same device) receives the result when given; otherwise a new tensor is returned.
    """
    if backend not in CONVERSION_BACKENDS:
        raise ValueError(f"rgb_to_yuv420p: backend must be one of {', '.join(CONVERSION_BACKENDS)}, got {backend!r}")
    if frames.dtype != torch.uint8 or frames.dim() != 4 or frames.shape[-1] != 3:
        raise ValueError(f"rgb_to_yuv420p: expected (N, H, W, 3) uint8 RGB, got {tuple(frames.shape)} {frames.dtype}")
    count, height, width = frames.shape[:3]
    if height % 2 or width % 2:
        raise ValueError(f"rgb_to_yuv420p: sides must be even (pad_to_even first), got {height}x{width}")
    if out is None:
        out = torch.empty(count, height * 3 // 2, width, dtype=torch.uint8, device=frames.device)
    kernel = _triton_kernel() if frames.is_cuda and backend != "torch" else None
    if backend == "triton" and kernel is None:
        raise ValueError("rgb_to_yuv420p: backend='triton' needs CUDA frames and the `triton` package")
    if kernel is not None:
        return kernel(frames, out, _RGB_TO_YUV, _OFFSETS)
    luma, chroma = height * width, (height // 2) * (width // 2)
    flat = out.view(count, -1)
    for start in range(0, count, _STEP_FRAMES):
        rgb = frames[start : start + _STEP_FRAMES].float()
        n = rgb.shape[0]
        red, green, blue = rgb.unbind(-1)
        rows = flat[start : start + n]
        rows[:, :luma].copy_(_combine(_RGB_TO_YUV[0], _OFFSETS[0], red, green, blue).view(n, luma))
        # Chroma of the 2x2 block means (the conversion is linear, so this is the mean chroma).
        means = [plane.view(n, height // 2, 2, width // 2, 2).mean(dim=(2, 4)) for plane in (red, green, blue)]
        rows[:, luma : luma + chroma].copy_(_combine(_RGB_TO_YUV[1], _OFFSETS[1], *means).view(n, chroma))
        rows[:, luma + chroma :].copy_(_combine(_RGB_TO_YUV[2], _OFFSETS[2], *means).view(n, chroma))
    return out


@functools.cache
def _triton_kernel() -> Optional[Callable[..., Tensor]]:
    """The Triton conversion's launcher, or None where Triton cannot be imported."""
    try:
        from .colour_triton import rgb_to_yuv420p_triton
    except ImportError:
        return None
    return rgb_to_yuv420p_triton


def _combine(weights: tuple, offset: float, red: Tensor, green: Tensor, blue: Tensor) -> Tensor:
    """``offset + weights . (R, G, B)`` rounded half up and clamped to uint8, as swscale's
    fixed-point output is (the + 0.5 of the rounding folded into the offset)."""
    value = red * weights[0] + (offset + 0.5)
    value.add_(green, alpha=weights[1]).add_(blue, alpha=weights[2])
    return value.floor_().clamp_(0, 255).to(torch.uint8)


def tag_bt709(context: av.video.codeccontext.VideoCodecContext) -> None:
    """Mark a codec context's pictures as BT.709 limited range (x264 writes it into the VUI,
    the MP4 muxer into the ``colr`` box), so players decode with the matrix we encoded with."""
    context.colorspace = av.video.reformatter.Colorspace.ITU709.value
    context.color_primaries = 1  # AVCOL_PRI_BT709
    context.color_trc = av.video.reformatter.ColorTrc.BT709.value
    context.color_range = av.video.reformatter.ColorRange.MPEG.value

