"""A 3-D down block's conv bias, ReLU and 2x2 average pooling as one Triton kernel, for eager
half-precision batches. Imported lazily: needs ``triton`` (and a CUDA device, or ``TRITON_INTERPRET=1``).

Why: a compiled engine has Inductor fuse these into the convolution's neighbours, but a process
that renders eagerly (a new process's first clip, the CLI's clips under its compile threshold)
runs each as a pass over the conv output: PyTorch adds a conv's bias in a pass of its own (a
slow one over a channels-last output), then the ReLU, then ``avg_pool3d``, whose CUDA kernel works
on NCDHW: a channels-last input is copied first, and the pooled map it hands the next conv (and
the hourglass decoder's skip concatenation) is NCDHW, which cuDNN transposes back. Here one pass
reads the bias-free conv output once and writes the pooled activation channels-last, the layout
the next convolution reads.

The sum is taken in float32 and rounded once (PyTorch rounds after the bias and the ReLU too):
the two agree within a rounding of the half-precision output. Traces never see this kernel: the
block uses it outside a trace only (see :class:`~.blocks.DownBlock`).
"""
from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl
from torch import Tensor

from ..triton_launch import launch_device

__all__ = ["bias_relu_pool"]

_BLOCK = (32, 64)  # (output pixels, channels) per program
_WARPS = 4


@triton.jit
def _bias_relu_pool_kernel(
    y_ptr, bias_ptr, out_ptr, stride_b, stride_c, stride_d, stride_h, stride_w, C, D, HO, WO,
    HAS_BIAS: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr,
):
    plane = tl.program_id(0).to(tl.int64)  # b * D + d
    p = tl.program_id(1) * BLOCK_P + tl.arange(0, BLOCK_P)
    c = tl.program_id(2) * BLOCK_C + tl.arange(0, BLOCK_C)
    c_mask = c < C
    mask = (p < HO * WO)[:, None] & c_mask[None, :]
    row, col = p // WO, p % WO
    source = y_ptr + (plane // D) * stride_b + (plane % D) * stride_d + c[None, :].to(tl.int64) * stride_c
    if HAS_BIAS:
        bias = tl.load(bias_ptr + c, mask=c_mask, other=0.0).to(tl.float32)[None, :]
    total = tl.zeros([BLOCK_P, BLOCK_C], dtype=tl.float32)
    for dy in tl.static_range(2):
        for dx in tl.static_range(2):
            offset = ((2 * row + dy).to(tl.int64) * stride_h + (2 * col + dx).to(tl.int64) * stride_w)[:, None]
            v = tl.load(source + offset, mask=mask, other=0.0).to(tl.float32)
            if HAS_BIAS:
                v += bias
            total += tl.maximum(v, 0.0)
    # channels-last 3-D: (B, D, HO, WO, C) in memory, channels adjacent
    out = out_ptr + (plane * HO * WO + p.to(tl.int64))[:, None] * C + c[None, :]
    tl.store(out, (total * 0.25).to(out_ptr.dtype.element_ty), mask=mask)


def bias_relu_pool(y: Tensor, bias: Optional[Tensor]) -> Tensor:
    """``avg_pool3d(relu(y + bias), (1, 2, 2))`` of a (B, C, D, H, W) tensor of any strides with even
    H and W; ``bias`` (C,) or None. Returns (B, C, D, H/2, W/2) channels-last 3-D in ``y``'s dtype."""
    b, c, d, h, w = y.shape
    if h % 2 or w % 2:
        raise ValueError(f"bias_relu_pool halves H and W; got {h}x{w}")
    if bias is not None and tuple(bias.shape) != (c,):
        raise ValueError(f"bias_relu_pool: the bias must be ({c},), one per channel; got {tuple(bias.shape)}")
    ho, wo = h // 2, w // 2
    out = torch.empty((b, c, d, ho, wo), device=y.device, dtype=y.dtype, memory_format=torch.channels_last_3d)
    block_p, block_c = _BLOCK
    with launch_device(y):
        _bias_relu_pool_kernel[(b * d, triton.cdiv(ho * wo, block_p), triton.cdiv(c, block_c))](
            y, y if bias is None else bias, out, *y.stride(), c, d, ho, wo,
            HAS_BIAS=bias is not None, BLOCK_P=block_p, BLOCK_C=block_c, num_warps=_WARPS)
    return out
