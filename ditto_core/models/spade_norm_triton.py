"""The decoder's instance norm + SPADE modulation (+ LeakyReLU) as two Triton kernels, for eager
half-precision batches. Imported lazily: needs ``triton`` (and a CUDA device, or ``TRITON_INTERPRET=1``).

Why: a compiled engine has Inductor fuse these passes into its convolutions' neighbours, but a
new process renders its first clip eagerly while the compile loads, and there PyTorch runs each
as a pass over full-resolution memory: ``instance_norm`` (statistics, then the normalised copy,
after copying a channels-last input to NCHW), the nearest upsampling, ``addcmul`` reading the
scale and shift as strided channel slices of one conv output (PyTorch's non-vectorised path),
and ``leaky_relu``. The eager profile of a batch is in docs/PERFORMANCE.md. Here
:func:`instance_stats` reads ``x`` once and :func:`spade_modulate` reads ``x``, the scale and the
shift once and writes the activation once, channels-last, which is what the next convolution
reads without cuDNN's layout transposes.

The statistics are PyTorch's (biased variance, ``eps`` inside the square root) in float32;
sums are taken relative to each plane's first value, so planes whose mean is large against
their spread keep their precision. The modulated value is computed in float32 and rounded once
(PyTorch rounds after the norm, the modulation and the activation): the two agree within a
rounding of the half-precision output. Traces (``torch.compile``, ``torch.export``) never see
these kernels: the decoder uses them outside a trace only (see :mod:`.decoder`).
"""
from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl
from torch import Tensor

from ..triton_launch import launch_device

__all__ = ["instance_stats", "spade_modulate"]

_PIXELS_PER_PROGRAM = 1024  # the statistics split a plane over programs of this many pixels
_STATS_BLOCK = (64, 32)  # (pixels, channels) per step of a statistics program
_MODULATE_BLOCK = (64, 64)  # (pixels, channels) per modulation program
_WARPS = 4


@triton.jit
def _stats_kernel(
    x_ptr, partial_ptr, stride_b, stride_c, stride_h, stride_w, C, W, P, SPLIT,
    PIXELS: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr,
):
    b = tl.program_id(0)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    split = tl.program_id(2)
    c_mask = c < C
    plane = x_ptr + b.to(tl.int64) * stride_b + c * stride_c
    reference = tl.load(plane, mask=c_mask, other=0.0).to(tl.float32)  # the plane's first value
    total = tl.zeros([BLOCK_C], dtype=tl.float32)
    squares = tl.zeros([BLOCK_C], dtype=tl.float32)
    for start in range(0, PIXELS, BLOCK_P):
        p = split * PIXELS + start + tl.arange(0, BLOCK_P)
        mask = (p < P)[:, None] & c_mask[None, :]
        offset = ((p // W) * stride_h + (p % W) * stride_w).to(tl.int64)
        v = tl.load(plane[None, :] + offset[:, None], mask=mask, other=0.0).to(tl.float32)
        d = tl.where(mask, v - reference[None, :], 0.0)
        total += tl.sum(d, axis=0)
        squares += tl.sum(d * d, axis=0)
    out = partial_ptr + ((b * SPLIT + split) * 3) * C + c
    tl.store(out, total, mask=c_mask)
    tl.store(out + C, squares, mask=c_mask)
    tl.store(out + 2 * C, reference, mask=c_mask)


def instance_stats(x: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """Per-plane mean and ``1 / sqrt(var + eps)`` (biased variance) of a (B, C, H, W) tensor of any
    strides, each (B, C) float32: what ``instance_norm`` normalises with."""
    b, c, h, w = x.shape
    pixels = h * w
    split = triton.cdiv(pixels, _PIXELS_PER_PROGRAM)
    partial = torch.empty(b, split, 3, c, device=x.device, dtype=torch.float32)
    block_p, block_c = _STATS_BLOCK
    with launch_device(x):
        _stats_kernel[(b, triton.cdiv(c, block_c), split)](
            x, partial, *x.stride(), c, w, pixels, split,
            PIXELS=_PIXELS_PER_PROGRAM, BLOCK_P=block_p, BLOCK_C=block_c, num_warps=_WARPS)
    shifted_mean = partial[:, :, 0].sum(1) / pixels
    variance = (partial[:, :, 1].sum(1) / pixels - shifted_mean.square()).clamp_min_(0)
    return partial[:, 0, 2] + shifted_mean, variance.add_(eps).rsqrt_()


@triton.jit
def _modulate_kernel(
    x_ptr, mean_ptr, rstd_ptr, scale_ptr, shift_ptr, scale_bias_ptr, shift_bias_ptr, out_ptr,
    x_sb, x_sc, x_sh, x_sw, s_sb, s_sc, s_sh, s_sw, t_sb, t_sc, t_sh, t_sw,
    C, H, W, UP: tl.constexpr, HAS_SHIFT: tl.constexpr, HAS_SCALE_BIAS: tl.constexpr,
    HAS_SHIFT_BIAS: tl.constexpr, ACTIVATE: tl.constexpr, SLOPE: tl.constexpr,
    BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    p = tl.program_id(1) * BLOCK_P + tl.arange(0, BLOCK_P)
    c = tl.program_id(2) * BLOCK_C + tl.arange(0, BLOCK_C)
    c_mask = c < C
    mask = (p < H * W)[:, None] & c_mask[None, :]
    row, col = p // W, p % W
    # x is read at the low-resolution pixel the nearest upsampling repeats.
    x = tl.load(x_ptr + b * x_sb + c[None, :] * x_sc + ((row // UP) * x_sh + (col // UP) * x_sw).to(tl.int64)[:, None],
                mask=mask, other=0.0).to(tl.float32)
    mean = tl.load(mean_ptr + b * C + c, mask=c_mask, other=0.0)
    rstd = tl.load(rstd_ptr + b * C + c, mask=c_mask, other=0.0)
    scale = tl.load(scale_ptr + b * s_sb + c[None, :] * s_sc + (row * s_sh + col * s_sw).to(tl.int64)[:, None],
                    mask=mask, other=0.0).to(tl.float32)
    if HAS_SCALE_BIAS:
        scale += tl.load(scale_bias_ptr + c, mask=c_mask, other=0.0).to(tl.float32)[None, :]
    y = (x - mean[None, :]) * rstd[None, :] * scale
    if HAS_SHIFT:
        y += tl.load(shift_ptr + b * t_sb + c[None, :] * t_sc + (row * t_sh + col * t_sw).to(tl.int64)[:, None],
                     mask=mask, other=0.0).to(tl.float32)
        if HAS_SHIFT_BIAS:
            y += tl.load(shift_bias_ptr + c, mask=c_mask, other=0.0).to(tl.float32)[None, :]
    if ACTIVATE:
        y = tl.where(y >= 0, y, y * SLOPE)
    # channels-last: pixel-major, channels adjacent
    tl.store(out_ptr + b * H * W * C + p.to(tl.int64)[:, None] * C + c[None, :], y.to(out_ptr.dtype.element_ty), mask=mask)


def spade_modulate(x: Tensor, stats: tuple[Tensor, Tensor], scale: Tensor, shift: Optional[Tensor], upsample: int,
                   negative_slope: Optional[float], scale_bias: Optional[Tensor] = None,
                   shift_bias: Optional[Tensor] = None) -> Tensor:
    """``act(upsample(instance_norm(x)) * (scale + scale_bias) + (shift + shift_bias))``, channels-last
    in ``x``'s dtype.

    Args:
        x: (B, C, h, w), any strides.
        stats: :func:`instance_stats` of ``x``.
        scale, shift: (B, C, upsample * h, upsample * w), any strides (channel slices of one
            conv output); ``shift`` None adds nothing.
        upsample: the nearest-neighbour factor between ``x`` and the output.
        negative_slope: LeakyReLU's slope, or None for no activation.
        scale_bias, shift_bias: (C,) per-channel terms added to ``scale`` / ``shift`` as they are
            read, or None: the bias of the conv that made them, which PyTorch would add in a pass
            of its own over the whole output.
    """
    b, c, h, w = x.shape
    height, width = h * upsample, w * upsample
    if scale.shape != (b, c, height, width) or (shift is not None and shift.shape != scale.shape):
        raise ValueError(f"spade_modulate: scale/shift must be {(b, c, height, width)}, got {tuple(scale.shape)}"
                         f"{'' if shift is None else f' and {tuple(shift.shape)}'}")
    for name, bias in (("scale_bias", scale_bias), ("shift_bias", shift_bias)):
        if bias is not None and (bias.shape != (c,) or not bias.is_contiguous()):
            raise ValueError(f"spade_modulate: {name} must be a contiguous ({c},) tensor, got {tuple(bias.shape)}")
    if shift_bias is not None and shift is None:
        raise ValueError("spade_modulate: shift_bias without a shift")
    out = torch.empty(b, c, height, width, device=x.device, dtype=x.dtype, memory_format=torch.channels_last)
    mean, rstd = stats
    block_p, block_c = _MODULATE_BLOCK
    shift_or_scale = scale if shift is None else shift  # a valid pointer where HAS_SHIFT is off
    with launch_device(x):
        _modulate_kernel[(b, triton.cdiv(height * width, block_p), triton.cdiv(c, block_c))](
            x, mean, rstd, scale, shift_or_scale, mean if scale_bias is None else scale_bias,
            mean if shift_bias is None else shift_bias, out,
            *x.stride(), *scale.stride(), *shift_or_scale.stride(), c, height, width,
            UP=upsample, HAS_SHIFT=shift is not None, HAS_SCALE_BIAS=scale_bias is not None,
            HAS_SHIFT_BIAS=shift_bias is not None, ACTIVATE=negative_slope is not None,
            SLOPE=0.0 if negative_slope is None else negative_slope, BLOCK_P=block_p, BLOCK_C=block_c,
            num_warps=_WARPS)
    return out
