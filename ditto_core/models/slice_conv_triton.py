"""The depth-tap mask conv's 2-D convolution as one Triton implicit-GEMM kernel. Imported lazily:
needs ``triton`` (and a CUDA device, or ``TRITON_INTERPRET=1`` with a fixed ``tile``).

Why: :class:`~.depth_tap_conv.DepthTapConv3d` turns the warp network's 7x7x7 mask conv into a
7x7, 144 -> 154 channel 2-D convolution over 64x64 depth slices (140 GFLOP a frame). cuDNN runs
that shape on an Ampere kernel on an H200, with a 256x64 tile that wastes a fifth of its MMA
work on 154 channels, while its 3x3 convolutions get Hopper kernels. This kernel takes about
half cuDNN's time (``bench/bench_mask_conv.py``; ``bench/bench_warp_decode_variants.py``,
variant ``cudnn_mask_conv``; the numbers are in docs/PERFORMANCE.md).

What makes it fast for this one shape: one program owns a tile of pixels and *all* output
channels, in two accumulators of BLOCK_N + TAIL_N = 128 + 32 channels (power-of-two dot shapes,
4 % wasted columns on 154), so each pixel tile's input is read once per tap rather than once per
channel tile; each K step takes BLOCK_K + K_TAIL = 32 + 16 channels, so 144 channels are three
steps with no masked-off waste; the input is read in place from the hourglass's channels-last
output (a depth slice of an NDHWC volume is an NHWC image, strides passed through).

Implicit GEMM: output pixel p of slice s and channel n is
``sum over taps (i, j) and channels c of x[s, y(p) + i - KH//2, x(p) + j - KW//2, c] * w[i, j, c, n]``;
each K step loads one tap's shifted pixel tile for one channel block (zero outside the image)
and the matching weight rows, and multiplies them on the tensor cores with fp32 accumulation.
"""
from __future__ import annotations

import inspect
from typing import Optional

import torch
import triton
import triton.language as tl
from torch import Tensor

from ..cuda_graphs import between_recordings
from .triton_operators import traceable, triton_operator

__all__ = ["CONFIGS", "best_tile", "pack_weight", "slice_class", "slice_conv_nhwc", "tile_config"]

# Tile shapes tried by the autotuner, fastest first for the mask conv on an H200 (fp16, a batch
# of 32: 512 slices; ms a frame by ``bench/bench_mask_conv.py``: 0.302, 0.313, 0.313, 0.334,
# 0.355), and last one without a column tail for convolutions with few output channels. Each
# entry: BLOCK_M, BLOCK_N, TAIL_N, BLOCK_K, K_TAIL, warps, stages.
_TILES = (
    (128, 128, 32, 32, 16, 4, 3), (128, 128, 32, 32, 16, 8, 3), (128, 128, 32, 32, 16, 8, 4),
    (256, 128, 32, 32, 16, 8, 3), (64, 128, 32, 32, 16, 4, 3), (128, 64, 0, 32, 16, 4, 4),
)


def tile_config(block_m: int, block_n: int, tail_n: int, block_k: int, k_tail: int, warps: int, stages: int
                ) -> triton.Config:
    """One tile shape as the kernel's launch config (``bench/bench_mask_conv.py`` times others)."""
    return triton.Config({"BLOCK_M": block_m, "BLOCK_N": block_n, "TAIL_N": tail_n, "BLOCK_K": block_k,
                          "K_TAIL": k_tail}, num_warps=warps, num_stages=stages)


CONFIGS = [tile_config(*tile) for tile in _TILES]


@triton.jit
def _pixel_block(pixels, inside, channels, C: tl.constexpr):
    """The (pixels, channels) input tile of one K step: zero outside the image and past C."""
    return tl.load(pixels + channels[None, :], mask=inside[:, None] & (channels[None, :] < C), other=0.0)


@triton.jit
def _multiply_add(a, w_rows, rows, valid_rows, columns, N_PAD: tl.constexpr, acc):
    """``acc + a @ w[rows, columns]`` on the tensor cores; weight rows past the input channels
    (``rows >= valid_rows``) and columns past the padded width read as zero."""
    b = tl.load(w_rows + rows[:, None] * N_PAD + columns[None, :],
                mask=(rows[:, None] < valid_rows) & (columns[None, :] < N_PAD), other=0.0)
    return tl.dot(a, b, acc)


@triton.jit
def _slice_conv_kernel(
    x_ptr, w_ptr, out_ptr,
    x_slice_stride, x_row_stride, x_pixel_stride,
    H: tl.constexpr, W: tl.constexpr, C: tl.constexpr, N: tl.constexpr, N_PAD: tl.constexpr,
    KH: tl.constexpr, KW: tl.constexpr, SLICE_CLASS,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, TAIL_N: tl.constexpr,
    BLOCK_K: tl.constexpr, K_TAIL: tl.constexpr,
):
    tiles_per_slice = tl.cdiv(H * W, BLOCK_M)
    pid_m = tl.program_id(0)
    s = pid_m // tiles_per_slice
    offs_m = (pid_m % tiles_per_slice) * BLOCK_M + tl.arange(0, BLOCK_M)
    row = offs_m // W
    col = offs_m % W
    first_n = tl.program_id(1) * (BLOCK_N + TAIL_N)
    offs_n = first_n + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    x_slice = x_ptr + s.to(tl.int64) * x_slice_stride
    step_k: tl.constexpr = BLOCK_K + K_TAIL
    k_steps: tl.constexpr = (C + step_k - 1) // step_k
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # Zero-width tails are not valid Triton shapes: the tail tensors exist only when used.
    if TAIL_N > 0:
        offs_tail_n = first_n + BLOCK_N + tl.arange(0, TAIL_N)
        acc_tail = tl.zeros((BLOCK_M, TAIL_N), dtype=tl.float32)
    if K_TAIL > 0:
        offs_tail_k = BLOCK_K + tl.arange(0, K_TAIL)
    for step in range(KH * KW * k_steps):
        tap = step // k_steps
        first_c = (step % k_steps) * step_k
        src_row = row + tap // KW - KH // 2
        src_col = col + tap % KW - KW // 2
        inside = (src_row >= 0) & (src_row < H) & (src_col >= 0) & (src_col < W) & (offs_m < H * W)
        pixels = x_slice + (src_row * x_row_stride + src_col * x_pixel_stride)[:, None]
        # Weight rows are (tap, channel) pairs of the (KH * KW * C, N_PAD) packed weight.
        w_rows = w_ptr + (tap * C + first_c) * N_PAD
        a = _pixel_block(pixels, inside, first_c + offs_k, C)
        acc = _multiply_add(a, w_rows, offs_k, C - first_c, offs_n, N_PAD, acc)
        if TAIL_N > 0:
            acc_tail = _multiply_add(a, w_rows, offs_k, C - first_c, offs_tail_n, N_PAD, acc_tail)
        if K_TAIL > 0:
            a = _pixel_block(pixels, inside, first_c + offs_tail_k, C)
            acc = _multiply_add(a, w_rows, offs_tail_k, C - first_c, offs_n, N_PAD, acc)
            if TAIL_N > 0:
                acc_tail = _multiply_add(a, w_rows, offs_tail_k, C - first_c, offs_tail_n, N_PAD, acc_tail)
    out = out_ptr + s.to(tl.int64) * (H * W * N) + offs_m[:, None] * N
    in_image = offs_m[:, None] < H * W
    tl.store(out + offs_n[None, :], acc.to(out_ptr.dtype.element_ty), mask=in_image & (offs_n[None, :] < N))
    if TAIL_N > 0:
        tl.store(out + offs_tail_n[None, :], acc_tail.to(out_ptr.dtype.element_ty),
                 mask=in_image & (offs_tail_n[None, :] < N))


# The slice count's class (:func:`slice_class`) is part of the key: 512 slices (a batch of 32)
# and 64 (the engine's eager first batch of 4) fill the GPU differently and may keep different
# tiles. Classes, not counts: each new key times all six tiles (most of a second), and a clip's
# last frames come in pieces of 1-3 frames whose count depends on the clip's length, so the
# first compiled clip of a ComfyUI process timed a new key at its very end (session 28). It is
# a plain argument, not a constant of the kernel (the kernel never reads it): as a constant,
# every batch size compiled every tile anew (the first run of a clip, with its first, full and
# last batches, compiled eighteen kernels instead of six, and the live ladder's four sizes
# twenty-four), and each compile costs seconds before the first frame.
# The winning tile is kept in Triton's on-disk cache (a JSON of timings, keyed by the kernel's
# source, the key values and the GPU) where this Triton can, so a new process does not re-time
# every tile before its first frame.
# Timing a tile synchronises the whole device, and a CUDA-graph recording on another thread
# meanwhile breaks and aborts the process: a new process's first eager batches run on the priming
# thread (tuning a shape the cache lacks) while the main thread records the LMDM's window. So each
# timing takes a device-wide turn (cuda_graphs.between_recordings). Inductor's compiled kernels
# time tiles with its own benchmarker; this one serves the eager path.


def _benchmarker():
    return triton.runtime.driver.active.get_benchmarker()


def _timed_between_recordings(kernel_call, quantiles):
    with between_recordings():
        return _benchmarker()(kernel_call, quantiles=quantiles)


_AUTOTUNE_OPTIONS = {name: value for name, value in (("cache_results", True), ("do_bench", _timed_between_recordings))
                     if name in inspect.signature(triton.autotune).parameters}
_autotuned_kernel = triton.autotune(configs=CONFIGS, key=["H", "W", "C", "N", "SLICE_CLASS"], **_AUTOTUNE_OPTIONS)(
    _slice_conv_kernel)


def slice_class(slices: int) -> int:
    """The autotuning key's slice count: the next power of two, at least 64 (a 4-frame batch),
    so that a clip's 1-4-frame pieces share one tuning and each larger batch size keeps its own."""
    return max(64, 1 << (slices - 1).bit_length())


def pack_weight(weight: Tensor) -> Tensor:
    """(N, C, KH, KW) conv weight -> (KH * KW * C, N_PAD): the GEMM's B operand, one row per
    (tap, channel), zero columns up to a multiple of 32. The padding is for alignment: rows of
    154 half-precision values (308 bytes) cannot be read in 16-byte vectors, and with them the
    kernel was a quarter slower on an H200."""
    packed = weight.permute(2, 3, 1, 0).reshape(-1, weight.shape[0])
    return torch.nn.functional.pad(packed, (0, -weight.shape[0] % 32)).contiguous()


def slice_conv_nhwc(x: Tensor, weight: Tensor, tile: Optional[triton.Config] = None) -> Tensor:
    """'Same' zero-padded, stride-1, bias-free 2-D convolution of NHWC images.

    Args:
        x: (S, H, W, C) with unit channel stride (any other strides: a depth slice of an NDHWC
            volume is read in place), float16 or bfloat16.
        weight: (N, C, KH, KW) with odd KH and KW, in ``x``'s dtype.
        tile: one of :data:`CONFIGS` to use instead of autotuning (a fixed tile also makes the
            rounding reproducible across runs). CPU tensors (Triton's interpreter, where there
            is nothing to time) use the first when none is given.

    Returns (S, H, W, N) in ``x``'s dtype, accumulated in float32.
    """
    slices, height, width, channels = x.shape
    out_channels, weight_channels, kh, kw = weight.shape
    if x.stride(3) != 1 or weight_channels != channels or kh % 2 == 0 or kw % 2 == 0:
        raise ValueError(
            f"slice_conv_nhwc: needs NHWC images with unit channel stride and an odd (N, C, KH, KW) kernel "
            f"with their C; got x {tuple(x.shape)} strides {x.stride()}, weight {tuple(weight.shape)}"
        )
    if tile is None and not x.is_cuda:
        tile = CONFIGS[0]
    shape = [] if tile is None else [*(tile.kwargs[k] for k in _TILE_KEYS), tile.num_warps, tile.num_stages]
    return _slice_conv(x, pack_weight(weight.to(x.dtype)), out_channels, kh, kw, shape)


_TILE_KEYS = ("BLOCK_M", "BLOCK_N", "TAIL_N", "BLOCK_K", "K_TAIL")


@triton_operator("slice_conv_nhwc")
def _slice_conv(x: Tensor, packed: Tensor, out_channels: int, kh: int, kw: int, tile: list[int]) -> Tensor:
    """The launch behind :func:`slice_conv_nhwc`: ``tile`` is :func:`tile_config`'s arguments,
    or empty to autotune (an operator's arguments cannot be a ``triton.Config``)."""
    slices, height, width, channels = x.shape
    out = torch.empty(slices, height, width, out_channels, device=x.device, dtype=x.dtype)

    def grid(meta: dict) -> tuple[int, int]:
        return (slices * triton.cdiv(height * width, meta["BLOCK_M"]),
                triton.cdiv(out_channels, meta["BLOCK_N"] + meta["TAIL_N"]))

    args = (x, packed, out, x.stride(0), x.stride(1), x.stride(2))
    shape = dict(H=height, W=width, C=channels, N=out_channels, N_PAD=packed.shape[1], KH=kh, KW=kw,
                 SLICE_CLASS=slice_class(slices))
    if not tile:
        traceable(_autotuned_kernel)[grid](*args, **shape)
    else:
        config = tile_config(*tile)
        traceable(_slice_conv_kernel)[grid](*args, **shape, **config.kwargs, num_warps=config.num_warps,
                                            num_stages=config.num_stages)
    return out


def best_tile() -> Optional[triton.Config]:
    """The tile the autotuner kept for the last shape it tuned (for benchmark reports)."""
    return getattr(_autotuned_kernel, "best_config", None)
