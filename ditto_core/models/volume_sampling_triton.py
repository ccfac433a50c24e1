"""The warp network's two trilinear samplings as Triton kernels, each fused with what PyTorch
does around it. Imported lazily: needs ``triton`` (and a CUDA device, or ``TRITON_INTERPRET=1``).

Why: in PyTorch each sampling is a float32 ``grid_sample`` between dtype and layout passes over
memory. For the dense motion's hourglass input, the 22 moved identity grids are written out
(17 MB a frame in float32), ``grid_sample`` reads them and writes the 22 warped copies of the
compressed feature in float32 (23 MB), the heatmaps are drawn, and a fusion casts and
concatenates it all. For the feature warp, the volume is cast to float32, sampled into a
float32 result and cast back. Here the hourglass input is one kernel that makes each
candidate motion's coordinates in registers, draws the heatmap and writes every channel once in
half precision; the feature warp reads the half-precision volume and writes half precision.

What that saves is measured by ``bench/bench_warp_decode_variants.py`` (variant
``pytorch_sampling`` for PyTorch's); the numbers are in docs/PERFORMANCE.md.

Each thread takes one output voxel and loops over the channels, as PyTorch's ``grid_sample``
does: neighbouring threads read neighbouring voxels of a channel and write neighbouring
outputs of a channel plane, so loads and stores coalesce. A first version that gave each
thread a voxel's channels as a 2-D tile and wrote the channels-last layout the next
convolutions read was several times slower (a warp's loads then spanned one cache line per
channel), and its channels-last hourglass input slowed three of Inductor's fusions in the
hourglass (docs/PERFORMANCE.md).

The arithmetic is PyTorch's, operation for operation, in float32: the identity grid of
:func:`~.dense_motion.identity_grid`, ``grid_sample``'s unnormalisation (``align_corners``
off) and trilinear weights with corners in its order and zero outside the volume, and
:func:`~.dense_motion.keypoint_gaussians`. In Triton's interpreter the results equal PyTorch's
bit for bit; compiled for a GPU they differ only where Triton's ``exp`` or a fused
multiply-add rounds differently, within one rounding of the half-precision output.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from .triton_operators import traceable, triton_operator

__all__ = ["make_hourglass_input", "warp_volume"]

_BLOCK = 128
_WARPS = 4


@triton.jit
def _axis(i, n: tl.constexpr):
    """Voxel-centre coordinate of index ``i`` of an ``n``-long axis: -1 at the first, +1 at the last."""
    return 2 * tl.math.div_rn(i.to(tl.float32), tl.full(i.shape, n - 1, tl.float32)) - 1


@triton.jit
def _keypoint(kp, m):
    """Keypoint m - 1 of one frame's (K, 3) keypoints ``kp``; the origin for m = 0."""
    x = tl.load(kp + (m - 1) * 3, mask=m > 0, other=0.0)
    y = tl.load(kp + (m - 1) * 3 + 1, mask=m > 0, other=0.0)
    z = tl.load(kp + (m - 1) * 3 + 2, mask=m > 0, other=0.0)
    return x, y, z


@triton.jit
def _gaussian(ax, ay, az, kx, ky, kz, COEF: tl.constexpr):
    """keypoint_gaussians' ``exp(COEF dz^2) exp(COEF dy^2) exp(COEF dx^2)``, in its order."""
    dz = az - kz
    dy = ay - ky
    dx = ax - kx
    return tl.exp(COEF * (dz * dz)) * tl.exp(COEF * (dy * dy)) * tl.exp(COEF * (dx * dx))


@triton.jit
def _sample_channel(channel, gx, gy, gz, D: tl.constexpr, H: tl.constexpr, W: tl.constexpr,
                    stride_d, stride_h, stride_w, mask):
    """float32 samples of one (D, H, W) channel at normalised (gx, gy, gz), as ``grid_sample``
    computes them (trilinear, ``align_corners=False``, zeros outside)."""
    ix = ((gx + 1) * W - 1) / 2
    iy = ((gy + 1) * H - 1) / 2
    iz = ((gz + 1) * D - 1) / 2
    fx = tl.floor(ix)
    fy = tl.floor(iy)
    fz = tl.floor(iz)
    acc = tl.zeros(gx.shape, dtype=tl.float32)
    # grid_sample's corner order (x fastest, then y, then z) and weights, so the sums round alike.
    for corner in tl.static_range(8):
        dx = corner % 2
        dy = corner // 2 % 2
        dz = corner // 4
        weight = ((ix - fx) if dx else ((fx + 1) - ix)) * ((iy - fy) if dy else ((fy + 1) - iy)) \
            * ((iz - fz) if dz else ((fz + 1) - iz))
        x = fx.to(tl.int32) + dx
        y = fy.to(tl.int32) + dy
        z = fz.to(tl.int32) + dz
        inside = mask & (x >= 0) & (x < W) & (y >= 0) & (y < H) & (z >= 0) & (z < D)
        value = tl.load(channel + z * stride_d + y * stride_h + x * stride_w, mask=inside, other=0.0)
        acc += value.to(tl.float32) * weight
    return acc


@triton.jit
def _hourglass_input_kernel(
    volume_ptr, kp_source_ptr, kp_driving_ptr, out_ptr,
    stride_b, stride_c, stride_d, stride_h, stride_w,
    C: tl.constexpr, D: tl.constexpr, H: tl.constexpr, W: tl.constexpr, MOVES: tl.constexpr,
    CHANNELS: tl.constexpr, COEF: tl.constexpr, BLOCK: tl.constexpr,
):
    b = tl.program_id(0)
    p = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = p < D * H * W
    ax = _axis(p % W, W)
    ay = _axis(p // W % H, H)
    az = _axis(p // (W * H), D)
    volume = volume_ptr + b.to(tl.int64) * stride_b
    kp_source = kp_source_ptr + b * (MOVES - 1) * 3
    kp_driving = kp_driving_ptr + b * (MOVES - 1) * 3
    # Channel planes of D * H * W: per move m, its heatmap then its C warped channels; then the
    # zero planes of DenseMotionNetwork.input_padding.
    out = out_ptr + b.to(tl.int64) * CHANNELS * D * H * W + p
    for m in range(MOVES):
        # Move m carries driving keypoint m - 1 onto source keypoint m - 1. Move 0 stays put:
        # both keypoints read as the origin, so its offset and heatmap are exactly zero.
        sx, sy, sz = _keypoint(kp_source, m)
        dx, dy, dz = _keypoint(kp_driving, m)
        heat = _gaussian(ax, ay, az, dx, dy, dz, COEF) - _gaussian(ax, ay, az, sx, sy, sz, COEF)
        plane = out + m * (C + 1) * D * H * W
        tl.store(plane, heat.to(out_ptr.dtype.element_ty), mask=mask)
        gx = ax + (sx - dx)
        gy = ay + (sy - dy)
        gz = az + (sz - dz)
        for c in tl.static_range(C):
            warped = _sample_channel(volume + c * stride_c, gx, gy, gz, D, H, W, stride_d, stride_h, stride_w, mask)
            tl.store(plane + (c + 1) * D * H * W, warped.to(out_ptr.dtype.element_ty), mask=mask)
    for c in range(MOVES * (C + 1), CHANNELS):
        tl.store(out + c * D * H * W, tl.zeros((BLOCK,), out_ptr.dtype.element_ty), mask=mask)


def make_hourglass_input(volume: Tensor, kp_source: Tensor, kp_driving: Tensor, coef: float,
                         padding: int = 0) -> Tensor:
    """What :meth:`~.dense_motion.DenseMotionNetwork.forward` feeds its hourglass.

    Args:
        volume: (B, C, D, H, W) compressed source feature, any strides, float16 or bfloat16.
        kp_source, kp_driving: (B, K, 3) keypoints, float32.
        coef: the Gaussians' exponent factor, ``-0.5 / variance``.
        padding: zero channels appended.

    Returns (B, (K + 1) (C + 1) + padding, D, H, W) in ``volume``'s dtype, contiguous: channel
    m (C + 1) is move m's heatmap (driving minus source Gaussian of keypoint m - 1; zero for
    move 0), the next C are ``volume`` sampled with ``grid_sample`` at the identity grid moved
    by ``kp_source[m - 1] - kp_driving[m - 1]``.
    """
    b, c, d, h, w = volume.shape
    k = kp_source.shape[1]
    if kp_source.shape != (b, k, 3) or kp_driving.shape != (b, k, 3):
        raise ValueError(
            f"make_hourglass_input: needs a (B, C, D, H, W) volume and (B, K, 3) keypoints; got "
            f"{tuple(volume.shape)}, {tuple(kp_source.shape)}, {tuple(kp_driving.shape)}"
        )
    return _hourglass_input(volume, kp_source.float().contiguous(), kp_driving.float().contiguous(), coef, padding)


@triton_operator("hourglass_input")
def _hourglass_input(volume: Tensor, kp_source: Tensor, kp_driving: Tensor, coef: float, padding: int) -> Tensor:
    """The launch behind :func:`make_hourglass_input` (checked float32 contiguous keypoints)."""
    b, c, d, h, w = volume.shape
    moves = kp_source.shape[1] + 1
    channels = moves * (c + 1) + padding
    out = torch.empty(b, channels, d, h, w, device=volume.device, dtype=volume.dtype)
    traceable(_hourglass_input_kernel)[(b, triton.cdiv(d * h * w, _BLOCK))](
        volume, kp_source, kp_driving, out, *volume.stride(),
        C=c, D=d, H=h, W=w, MOVES=moves, CHANNELS=channels, COEF=coef, BLOCK=_BLOCK, num_warps=_WARPS)
    return out


@triton.jit
def _warp_kernel(
    volume_ptr, grid_ptr, out_ptr,
    stride_b, stride_c, stride_d, stride_h, stride_w,
    grid_stride_b, grid_stride_d, grid_stride_h, grid_stride_w, grid_stride_xyz,
    C: tl.constexpr, D: tl.constexpr, H: tl.constexpr, W: tl.constexpr,
    OUT_D: tl.constexpr, OUT_H: tl.constexpr, OUT_W: tl.constexpr, BLOCK: tl.constexpr,
):
    b = tl.program_id(0)
    p = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)  # output voxel (d, h, w), w fastest
    mask = p < OUT_D * OUT_H * OUT_W
    pixel = p % (OUT_W * OUT_H)
    point = grid_ptr + b.to(tl.int64) * grid_stride_b + (p // (OUT_W * OUT_H)) * grid_stride_d \
        + (pixel // OUT_W) * grid_stride_h + (pixel % OUT_W) * grid_stride_w
    gx = tl.load(point, mask=mask, other=0.0)
    gy = tl.load(point + grid_stride_xyz, mask=mask, other=0.0)
    gz = tl.load(point + 2 * grid_stride_xyz, mask=mask, other=0.0)
    volume = volume_ptr + b.to(tl.int64) * stride_b
    out = out_ptr + b.to(tl.int64) * C * OUT_D * OUT_H * OUT_W + p
    for c in range(C):
        warped = _sample_channel(volume + c * stride_c, gx, gy, gz, D, H, W, stride_d, stride_h, stride_w, mask)
        tl.store(out + c * OUT_D * OUT_H * OUT_W, warped.to(out_ptr.dtype.element_ty), mask=mask)


def warp_volume(volume: Tensor, grid: Tensor) -> Tensor:
    """``sample_volume(volume, grid)`` (see :mod:`.volume_sampling`) in ``volume``'s dtype.

    Args:
        volume: (B, C, D, H, W), any strides, float16 or bfloat16.
        grid: (B, D', H', W', 3) normalised (x, y, z), float32, any strides (the deformation is
            a permuted view).

    Returns (B, C, D', H', W') in ``volume``'s dtype, contiguous: the volume sampled
    trilinearly (``align_corners=False``, zeros outside) at ``grid``.
    """
    b, c, d, h, w = volume.shape
    _, out_d, out_h, out_w, _ = grid.shape
    if grid.shape[0] != b or grid.shape[-1] != 3 or grid.dtype != torch.float32:
        raise ValueError(
            f"warp_volume: needs a (B, C, D, H, W) volume and a float32 (B, D', H', W', 3) grid; got "
            f"{tuple(volume.shape)}, {tuple(grid.shape)} {grid.dtype}"
        )
    return _warp_volume(volume, grid)


@triton_operator("warp_volume")
def _warp_volume(volume: Tensor, grid: Tensor) -> Tensor:
    """The launch behind :func:`warp_volume` (checked shapes)."""
    b, c, d, h, w = volume.shape
    _, out_d, out_h, out_w, _ = grid.shape
    out = torch.empty(b, c, out_d, out_h, out_w, device=volume.device, dtype=volume.dtype)
    traceable(_warp_kernel)[(b, triton.cdiv(out_d * out_h * out_w, _BLOCK))](
        volume, grid, out, *volume.stride(), *grid.stride(), C=c, D=d, H=h, W=w, OUT_D=out_d, OUT_H=out_h,
        OUT_W=out_w, BLOCK=_BLOCK, num_warps=_WARPS)
    return out
