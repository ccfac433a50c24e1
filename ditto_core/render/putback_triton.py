"""Fused CUDA put-back in one Triton kernel. Imported lazily: needs ``triton``.

One program owns a BLOCK_H x BLOCK_W tile of one output frame. It reads its source frame's
pixels (through ``source_index``, so a shared still frame is never copied N times) and, when
the tile meets the box the render can reach, inverse-maps every pixel into the render,
bilinearly samples render and mask (zero outside) and blends; tiles outside the box are a
plain copy. The box comes from a (S, 4) device tensor, so launching needs no host sync.
"""
from __future__ import annotations

from typing import Optional

import triton
import triton.language as tl
from torch import Tensor

from ..triton_launch import launch_device
from .putback_geometry import inverse_affine, paste_bounds

# Flat 2 x 256 tiles (768 contiguous bytes a row) measured fastest on an H200 at 1080p:
# 21.5 us/frame against 55 for 8 x 128 and 9.7 for a bare frame copy. Short tiles keep
# register use low, and so occupancy high, for the latency-bound gathers.
_BLOCK_H = 2
_BLOCK_W = 256
_NUM_WARPS = 4


@triton.jit
def _bilinear_tap(plane_ptr, u, v, weight, size):
    """``weight * plane[v, u]``, zero where (u, v) falls outside the size x size plane."""
    valid = (u >= 0) & (u < size) & (v >= 0) & (v < size)
    value = tl.load(plane_ptr + v * size + u, mask=valid, other=0.0).to(tl.float32)
    return weight * value


@triton.jit
def _bilinear(plane_ptr, u0, v0, w_nw, w_ne, w_sw, w_se, size):
    """Bilinear sample of one size x size plane at the taps (u0 | u0+1, v0 | v0+1)."""
    value = _bilinear_tap(plane_ptr, u0, v0, w_nw, size)
    value += _bilinear_tap(plane_ptr, u0 + 1, v0, w_ne, size)
    value += _bilinear_tap(plane_ptr, u0, v0 + 1, w_sw, size)
    value += _bilinear_tap(plane_ptr, u0 + 1, v0 + 1, w_se, size)
    return value


@triton.jit
def _blend(alpha, sample, background):
    """The reference's float32 blend, clipped and truncated to uint8."""
    mixed = alpha * (sample * 255.0) + (1.0 - alpha) * background.to(tl.float32)
    return tl.minimum(tl.maximum(mixed, 0.0), 255.0).to(tl.uint8)


@triton.jit
def _paste_back_kernel(
    frames_ptr,  # (S, H, W, 3) uint8
    renders_ptr,  # (N, 3, R, R) float, contiguous
    mask_ptr,  # (R, R) float32
    inverse_ptr,  # (S, 2, 3) float32 frame -> render affines
    bounds_ptr,  # (S, 4) int32 [x0, y0, x1, y1)
    index_ptr,  # (N,) int source frame of each render (unused without HAS_INDEX)
    out_ptr,  # (N, H, W, 3) uint8
    height,
    width,
    size,
    HAS_INDEX: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_W: tl.constexpr,
):
    tile = tl.program_id(0)
    frame = tl.program_id(1).to(tl.int64)
    source = frame
    if HAS_INDEX:
        source = tl.load(index_ptr + frame).to(tl.int64)

    tiles_w = tl.cdiv(width, BLOCK_W)
    top = (tile // tiles_w) * BLOCK_H
    left = (tile % tiles_w) * BLOCK_W
    ys = top + tl.arange(0, BLOCK_H)[:, None]
    xs = left + tl.arange(0, BLOCK_W)[None, :]
    inside = (ys < height) & (xs < width)
    offsets = (ys * width + xs) * 3
    frame_bytes = height * width * 3
    src_ptr = frames_ptr + source * frame_bytes + offsets
    dst_ptr = out_ptr + frame * frame_bytes + offsets

    red = tl.load(src_ptr, mask=inside)
    green = tl.load(src_ptr + 1, mask=inside)
    blue = tl.load(src_ptr + 2, mask=inside)

    box = bounds_ptr + source * 4
    box_x0 = tl.load(box)
    box_y0 = tl.load(box + 1)
    box_x1 = tl.load(box + 2)
    box_y1 = tl.load(box + 3)
    if (left < box_x1) & (left + BLOCK_W > box_x0) & (top < box_y1) & (top + BLOCK_H > box_y0):
        affine = inverse_ptr + source * 6
        fx = xs.to(tl.float32)
        fy = ys.to(tl.float32)
        u = tl.load(affine) * fx + tl.load(affine + 1) * fy + tl.load(affine + 2)
        v = tl.load(affine + 3) * fx + tl.load(affine + 4) * fy + tl.load(affine + 5)
        u_floor = tl.floor(u)
        v_floor = tl.floor(v)
        # Pixels far outside the render map to huge coordinates; clamping before the int cast
        # keeps them defined (and still outside, so every tap reads zero).
        u0 = tl.minimum(tl.maximum(u_floor, -2.0), size + 1.0).to(tl.int32)
        v0 = tl.minimum(tl.maximum(v_floor, -2.0), size + 1.0).to(tl.int32)
        du = u - u_floor
        dv = v - v_floor
        w_nw = (1.0 - du) * (1.0 - dv)
        w_ne = du * (1.0 - dv)
        w_sw = (1.0 - du) * dv
        w_se = du * dv

        alpha = _bilinear(mask_ptr, u0, v0, w_nw, w_ne, w_sw, w_se, size)
        alpha = tl.minimum(tl.maximum(alpha, 0.0), 1.0)
        plane = size * size
        render = renders_ptr + frame * 3 * plane
        red = _blend(alpha, _bilinear(render, u0, v0, w_nw, w_ne, w_sw, w_se, size), red)
        green = _blend(alpha, _bilinear(render + plane, u0, v0, w_nw, w_ne, w_sw, w_se, size), green)
        blue = _blend(alpha, _bilinear(render + 2 * plane, u0, v0, w_nw, w_ne, w_sw, w_se, size), blue)

    tl.store(dst_ptr, red, mask=inside)
    tl.store(dst_ptr + 1, green, mask=inside)
    tl.store(dst_ptr + 2, blue, mask=inside)


def paste_back_triton(
    frames: Tensor,
    renders: Tensor,
    M_c2o: Tensor,
    source_index: Optional[Tensor],
    mask: Tensor,
    out: Tensor,
) -> Tensor:
    """Launch the fused kernel; arguments as validated by :func:`.putback.paste_back`."""
    frames = frames.contiguous()
    renders = renders.contiguous()
    height, width = frames.shape[1:3]
    size = renders.shape[-1]
    inverse = inverse_affine(M_c2o).contiguous()
    bounds = paste_bounds(M_c2o, size, height, width)
    index = source_index if source_index is not None else bounds  # placeholder pointer, never read
    grid = (triton.cdiv(height, _BLOCK_H) * triton.cdiv(width, _BLOCK_W), renders.shape[0])
    with launch_device(frames):
        _paste_back_kernel[grid](
            frames,
            renders,
            mask,
            inverse,
            bounds,
            index,
            out,
            height,
            width,
            size,
            HAS_INDEX=source_index is not None,
            BLOCK_H=_BLOCK_H,
            BLOCK_W=_BLOCK_W,
            num_warps=_NUM_WARPS,
        )
    return out
