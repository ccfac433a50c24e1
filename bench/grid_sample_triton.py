"""Triton kernels for the warp network's two trilinear samplings, a benchmark candidate
(variant ``triton_grid_sample`` of ``bench_warp_decode_variants.py``) until measured faster.

What the engine does now (``ditto_core/models/volume_sampling.py``): cast the half-precision
volume to float32, ``grid_sample`` it in float32 (PyTorch's own CUDA kernel: 0.057 ms a frame
for both samplings on an H200, at batch 32), cast the result back. For the dense motion's 22
candidate motions it also writes the moved grids out first: (B, 22, 16, 64, 64, 3) float32, 17 MB
a frame, read back once by ``grid_sample``, and the float32 result (23 MB a frame) is cast and
copied into the hourglass input by the next fusion.

Here the volume is read in its own dtype and layout (strides passed through), the coordinates
stay float32 (computed exactly as PyTorch computes them: unnormalised with ``align_corners``
off, the same corner weights multiplied in the same order, out-of-volume corners skipped), and
the result is written in the volume's dtype; the translation kernel makes each candidate's
coordinates in registers from the identity grid and its offset instead of reading a grid.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

_BLOCK = 256
_WARPS = 4


@triton.jit
def _corner(volume, acc, x, y, z, weight, W: tl.constexpr, H: tl.constexpr, D: tl.constexpr,
            stride_d, stride_h, stride_w, mask):
    """``acc + weight * volume[z, y, x]`` where the corner lies inside the volume, else ``acc``."""
    inside = mask & (x >= 0) & (x < W) & (y >= 0) & (y < H) & (z >= 0) & (z < D)
    value = tl.load(volume + z * stride_d + y * stride_h + x * stride_w, mask=inside, other=0.0)
    return acc + tl.where(inside, value.to(tl.float32) * weight, 0.0)


@triton.jit
def _trilinear_into(volume, out, gx, gy, gz, C: tl.constexpr, D: tl.constexpr, H: tl.constexpr, W: tl.constexpr,
                    stride_c, stride_d, stride_h, stride_w, out_stride_c, mask):
    """Sample every channel of one (C, D, H, W) volume at normalised (gx, gy, gz) and store
    channel c of each sample at ``out + c * out_stride_c``."""
    # PyTorch's grid_sampler_unnormalize (align_corners=False) and its trilinear weights.
    ix = ((gx + 1) * W - 1) / 2
    iy = ((gy + 1) * H - 1) / 2
    iz = ((gz + 1) * D - 1) / 2
    fx0 = tl.floor(ix)
    fy0 = tl.floor(iy)
    fz0 = tl.floor(iz)
    wx0 = (fx0 + 1) - ix
    wx1 = ix - fx0
    wy0 = (fy0 + 1) - iy
    wy1 = iy - fy0
    wz0 = (fz0 + 1) - iz
    wz1 = iz - fz0
    x0 = fx0.to(tl.int32)
    y0 = fy0.to(tl.int32)
    z0 = fz0.to(tl.int32)
    for c in range(C):
        channel = volume + c * stride_c
        acc = tl.zeros(gx.shape, dtype=tl.float32)
        # PyTorch's corner order (x fastest, then y, then z), so the sums round alike.
        for corner in tl.static_range(8):
            dx: tl.constexpr = corner % 2
            dy: tl.constexpr = corner // 2 % 2
            dz: tl.constexpr = corner // 4
            weight = (wx1 if dx else wx0) * (wy1 if dy else wy0) * (wz1 if dz else wz0)
            acc = _corner(channel, acc, x0 + dx, y0 + dy, z0 + dz, weight, W, H, D, stride_d, stride_h, stride_w,
                          mask)
        tl.store(out + c * out_stride_c, acc.to(out.dtype.element_ty), mask=mask)


@triton.jit
def _sample_grid_kernel(volume_ptr, grid_ptr, out_ptr, stride_b, stride_c, stride_d, stride_h, stride_w,
                        C: tl.constexpr, D: tl.constexpr, H: tl.constexpr, W: tl.constexpr, POINTS: tl.constexpr,
                        BLOCK: tl.constexpr):
    b = tl.program_id(0)
    p = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = p < POINTS
    point = grid_ptr + (b.to(tl.int64) * POINTS + p) * 3
    gx = tl.load(point, mask=mask, other=0.0).to(tl.float32)
    gy = tl.load(point + 1, mask=mask, other=0.0).to(tl.float32)
    gz = tl.load(point + 2, mask=mask, other=0.0).to(tl.float32)
    _trilinear_into(volume_ptr + b.to(tl.int64) * stride_b, out_ptr + b.to(tl.int64) * C * POINTS + p,
                    gx, gy, gz, C, D, H, W, stride_c, stride_d, stride_h, stride_w, POINTS, mask)


@triton.jit
def _sample_translations_kernel(volume_ptr, offsets_ptr, out_ptr, stride_b, stride_c, stride_d, stride_h, stride_w,
                                C: tl.constexpr, D: tl.constexpr, H: tl.constexpr, W: tl.constexpr,
                                MOVES: tl.constexpr, BLOCK: tl.constexpr):
    b = tl.program_id(0) // MOVES
    move = tl.program_id(0) % MOVES
    p = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = p < D * H * W
    offset = offsets_ptr + (b * MOVES + move) * 3
    # The identity grid of dense_motion.identity_grid (voxel centres from -1 to +1), moved.
    gx = 2 * ((p % W).to(tl.float32) / (W - 1)) - 1 + tl.load(offset)
    gy = 2 * ((p // W % H).to(tl.float32) / (H - 1)) - 1 + tl.load(offset + 1)
    gz = 2 * ((p // (W * H)).to(tl.float32) / (D - 1)) - 1 + tl.load(offset + 2)
    _trilinear_into(volume_ptr + b.to(tl.int64) * stride_b, out_ptr + tl.program_id(0).to(tl.int64) * C * D * H * W + p,
                    gx, gy, gz, C, D, H, W, stride_c, stride_d, stride_h, stride_w, D * H * W, mask)


def sample_volume(volume: Tensor, grid: Tensor) -> Tensor:
    """Drop-in for ``ditto_core.models.volume_sampling.sample_volume`` (float32 grids)."""
    b, c, d, h, w = volume.shape
    points = grid[0, ..., 0].numel()
    out = torch.empty(b, c, *grid.shape[1:4], device=volume.device, dtype=volume.dtype)
    _sample_grid_kernel[(b, triton.cdiv(points, _BLOCK))](
        volume, grid.float().contiguous(), out, *volume.stride(), C=c, D=d, H=h, W=w, POINTS=points, BLOCK=_BLOCK,
        num_warps=_WARPS)
    return out


def sample_translations(volume: Tensor, grid: Tensor, offsets: Tensor) -> Tensor:
    """Drop-in for ``ditto_core.models.volume_sampling.sample_translations`` when ``grid`` is
    ``dense_motion.identity_grid`` (it is rebuilt in registers, not read)."""
    b, c, d, h, w = volume.shape
    moves = offsets.shape[1]
    out = torch.empty(b, moves, c, d, h, w, device=volume.device, dtype=volume.dtype)
    _sample_translations_kernel[(b * moves, triton.cdiv(d * h * w, _BLOCK))](
        volume, offsets.float().contiguous(), out, *volume.stride(), C=c, D=d, H=h, W=w, MOVES=moves, BLOCK=_BLOCK,
        num_warps=_WARPS)
    return out
