"""A Triton implicit-GEMM kernel for the mask conv's depth-sliced 7x7 2-D convolution
(:class:`DepthTapConv3d`'s ``slice_conv``: 142 or 144 -> 154 channels on 64x64 slices), for
``bench_mask_conv.py`` to time against cuDNN, which runs it on an Ampere kernel at about
250 TFLOP/s on an H200 while its 3x3 convolutions get Hopper ones.

Why a kernel of our own could win: the shape is fixed, so the tiles can be chosen for it
(cuDNN's 256x64 tile wastes a fifth of its MMA work on 154 output channels; here 128 + 32
channels per program waste 4 %), the input is read straight from the hourglass's NDHWC output,
and partial tap sums never leave registers.
Implicit GEMM: output pixel p of slice s and channel n is
``sum over taps (i, j) and channels c of x[s, y(p) + i - 3, x(p) + j - 3, c] * w[i, j, c, n]``;
each step of the K loop loads one tap's shifted pixel tile for one channel block (zero outside
the image) and one weight block, and multiplies them on the tensor cores in fp32.

Not used by the engine: a benchmark candidate until it is measured faster (``bench_mask_conv.py``
times the conv alone, ``bench_warp_decode_variants.py --variants baseline triton_mask_conv`` the
engine with :class:`TritonSliceConv` in the mask conv).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor, nn

# BLOCK_N + TAIL_N output channels per program, in two accumulators so that 154 channels fit
# one program (128 + 32 = 160) with power-of-two dot shapes. One program per pixel tile
# matters: each tile's input is read once per tap (49 times, through L2), so three programs of
# 64 channels would triple that traffic.
CONFIGS = [
    triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "TAIL_N": tn, "BLOCK_K": bk}, num_warps=w, num_stages=st)
    for bm, bn, tn, bk, w, st in (
        (128, 128, 32, 32, 8, 3), (128, 128, 32, 16, 8, 4), (64, 128, 32, 32, 4, 4),
        (128, 64, 0, 32, 4, 4), (128, 256, 0, 32, 8, 3), (256, 128, 32, 16, 8, 3),
    )
]


@triton.autotune(configs=CONFIGS, key=["H", "W", "C", "N"])
@triton.jit
def _slice_conv_kernel(
    x_ptr, w_ptr, out_ptr,
    x_slice_stride, x_row_stride, x_pixel_stride,
    H: tl.constexpr, W: tl.constexpr, C: tl.constexpr, N: tl.constexpr, N_PAD: tl.constexpr,
    KH: tl.constexpr, KW: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, TAIL_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    tiles_per_slice = tl.cdiv(H * W, BLOCK_M)
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    s = pid_m // tiles_per_slice
    offs_m = (pid_m % tiles_per_slice) * BLOCK_M + tl.arange(0, BLOCK_M)
    row = offs_m // W
    col = offs_m % W
    first_n = pid_n * (BLOCK_N + TAIL_N)
    offs_n = first_n + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    x_slice = x_ptr + s.to(tl.int64) * x_slice_stride
    k_blocks: tl.constexpr = (C + BLOCK_K - 1) // BLOCK_K
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if TAIL_N > 0:
        offs_tail = first_n + BLOCK_N + tl.arange(0, TAIL_N)
        acc_tail = tl.zeros((BLOCK_M, TAIL_N), dtype=tl.float32)
    for step in range(KH * KW * k_blocks):
        tap = step // k_blocks
        channels = (step % k_blocks) * BLOCK_K + offs_k
        src_row = row + tap // KW - KH // 2
        src_col = col + tap % KW - KW // 2
        inside = (src_row >= 0) & (src_row < H) & (src_col >= 0) & (src_col < W) & (offs_m < H * W)
        a = tl.load(
            x_slice + (src_row * x_row_stride + src_col * x_pixel_stride)[:, None] + channels[None, :],
            mask=inside[:, None] & (channels[None, :] < C), other=0.0,
        )
        w_rows = w_ptr + (tap * C + channels[:, None]) * N_PAD
        b = tl.load(w_rows + offs_n[None, :], mask=channels[:, None] < C, other=0.0)
        acc = tl.dot(a, b, acc)
        if TAIL_N > 0:
            b_tail = tl.load(w_rows + offs_tail[None, :], mask=channels[:, None] < C, other=0.0)
            acc_tail = tl.dot(a, b_tail, acc_tail)
    out = out_ptr + s.to(tl.int64) * (H * W * N) + offs_m[:, None] * N
    in_image = offs_m[:, None] < H * W
    tl.store(out + offs_n[None, :], acc.to(out_ptr.dtype.element_ty), mask=in_image & (offs_n[None, :] < N))
    if TAIL_N > 0:
        tl.store(out + offs_tail[None, :], acc_tail.to(out_ptr.dtype.element_ty),
                 mask=in_image & (offs_tail[None, :] < N))


def pack_weight(weight: Tensor, multiple: int = 320) -> Tensor:
    """(N, C, KH, KW) conv weight -> (KH * KW, C, N_PAD) with zero columns up to a multiple of
    ``multiple`` output channels, so that no config's program reads past the end (for N <= 320:
    two programs of 160 or one of 256 at most)."""
    n = weight.shape[0]
    packed = weight.permute(2, 3, 1, 0).reshape(-1, weight.shape[1], n)
    return torch.nn.functional.pad(packed, (0, -n % multiple)).contiguous()


def slice_conv_nhwc(x: Tensor, packed: Tensor, out_channels: int, kernel: tuple[int, int]) -> Tensor:
    """'Same' 2-D convolution of NHWC slices: ``x`` (S, H, W, C) with unit channel stride ->
    (S, H, W, out_channels), in ``x``'s dtype (fp32 accumulation, no bias)."""
    slices, height, width, channels = x.shape
    if x.stride(3) != 1:
        raise ValueError("slice_conv_nhwc needs channels innermost (NHWC)")
    out = torch.empty(slices, height, width, out_channels, device=x.device, dtype=x.dtype)

    def grid(meta: dict) -> tuple[int, int]:
        per_program = meta["BLOCK_N"] + meta["TAIL_N"]
        return (slices * triton.cdiv(height * width, meta["BLOCK_M"]), triton.cdiv(out_channels, per_program))

    _slice_conv_kernel[grid](
        x, packed, out, x.stride(0), x.stride(1), x.stride(2),
        H=height, W=width, C=channels, N=out_channels, N_PAD=packed.shape[2], KH=kernel[0], KW=kernel[1],
    )
    return out


class TritonSliceConv(nn.Module):
    """Drop-in for :class:`DepthTapConv3d`'s ``slice_conv`` (a bias-free 'same' 2-D conv) that
    runs the kernel: (S, C, H, W) in any memory format (channels-last is read in place) ->
    (S, N, H, W), channels-last, in the input's dtype."""

    def __init__(self, conv: nn.Conv2d) -> None:
        super().__init__()
        if conv.bias is not None:
            raise ValueError("TritonSliceConv replaces the bias-free slice conv of DepthTapConv3d")
        self.register_buffer("packed", pack_weight(conv.weight.detach()))
        self.out_channels = conv.out_channels
        self.kernel_size = tuple(conv.kernel_size)

    @staticmethod
    def tile_config() -> str:
        """The tile configuration the autotuner kept for the last shape it tuned."""
        return str(_slice_conv_kernel.best_config)

    def forward(self, x: Tensor) -> Tensor:
        x = x.contiguous(memory_format=torch.channels_last).to(self.packed.dtype)
        out = slice_conv_nhwc(x.permute(0, 2, 3, 1), self.packed, self.out_channels, self.kernel_size)
        return out.permute(0, 3, 1, 2)
