"""RGB -> yuv420p in one Triton kernel: the CUDA path of :func:`~ditto_core.video.colour.rgb_to_yuv420p`.

Imported lazily: needs ``triton``. The PyTorch formulation in ``colour.py`` makes about twenty
passes over float32 temporaries per frame (12 bytes a pixel each way); at 1080x1920 on an H200
that cost about a twentieth of the render's frame time. Here one program reads a row pair of
RGB once and writes its four luma samples per 2x2 block and the block's two chroma samples:
3 bytes a pixel in, 1.5 out. The arithmetic is ``colour.py``'s (same matrix, same rounding),
so the two paths agree except where a fused multiply-add rounds a value that sits exactly on a
level boundary the other way (within one level either way, and of swscale).
"""
from __future__ import annotations

import triton
import triton.language as tl
from torch import Tensor

from ..triton_launch import launch_device

# 2x2 blocks per program along a row pair: 512 pixels, 1.5 KiB of RGB a row.
_BLOCK = 256
_NUM_WARPS = 4


@triton.jit
def _level(red, green, blue, w_red: tl.constexpr, w_green: tl.constexpr, w_blue: tl.constexpr,
           offset: tl.constexpr):
    """``offset + w . (R, G, B)`` rounded as ``colour._combine`` rounds it (the 0.5 is in ``offset``)."""
    value = red * w_red + offset
    value = value + green * w_green
    value = value + blue * w_blue
    return tl.minimum(tl.maximum(tl.floor(value), 0.0), 255.0).to(tl.uint8)


@triton.jit
def _load_pixel(row_ptr, column, mask):
    """R, G, B of pixel ``column`` of one packed RGB row, as float32."""
    red = tl.load(row_ptr + 3 * column, mask=mask, other=0).to(tl.float32)
    green = tl.load(row_ptr + 3 * column + 1, mask=mask, other=0).to(tl.float32)
    blue = tl.load(row_ptr + 3 * column + 2, mask=mask, other=0).to(tl.float32)
    return red, green, blue


@triton.jit
def _row_of_blocks(row_ptr, y_ptr, left, right, inside, w_red: tl.constexpr, w_green: tl.constexpr,
                   w_blue: tl.constexpr, offset: tl.constexpr):
    """Luma of both pixels of each block on one row; returns the blocks' R, G, B sums on that row."""
    red_l, green_l, blue_l = _load_pixel(row_ptr, left, inside)
    red_r, green_r, blue_r = _load_pixel(row_ptr, right, inside)
    tl.store(y_ptr + left, _level(red_l, green_l, blue_l, w_red, w_green, w_blue, offset), mask=inside)
    tl.store(y_ptr + right, _level(red_r, green_r, blue_r, w_red, w_green, w_blue, offset), mask=inside)
    return red_l + red_r, green_l + green_r, blue_l + blue_r


@triton.jit
def _yuv420p_kernel(
    rgb_ptr,  # (N, H, W, 3) uint8, contiguous
    out_ptr,  # (N, H * 3 // 2, W) uint8: Y plane, then U, then V
    height,
    width,
    Y_R: tl.constexpr, Y_G: tl.constexpr, Y_B: tl.constexpr, Y_OFFSET: tl.constexpr,
    U_R: tl.constexpr, U_G: tl.constexpr, U_B: tl.constexpr,
    V_R: tl.constexpr, V_G: tl.constexpr, V_B: tl.constexpr, C_OFFSET: tl.constexpr,
    BLOCK: tl.constexpr,
):
    pair = tl.program_id(0).to(tl.int64)  # row pair 2p, 2p + 1 (chroma row p)
    frame = tl.program_id(2).to(tl.int64)
    half_w = width // 2
    blocks = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)  # chroma columns
    inside = blocks < half_w
    left, right = 2 * blocks, 2 * blocks + 1

    top_ptr = rgb_ptr + (frame * height + 2 * pair) * width * 3
    bottom_ptr = top_ptr + width * 3
    plane_ptr = out_ptr + frame * (height * width * 3 // 2)
    y_top_ptr = plane_ptr + 2 * pair * width
    y_bottom_ptr = y_top_ptr + width

    red_top, green_top, blue_top = _row_of_blocks(top_ptr, y_top_ptr, left, right, inside, Y_R, Y_G, Y_B, Y_OFFSET)
    red_low, green_low, blue_low = _row_of_blocks(bottom_ptr, y_bottom_ptr, left, right, inside, Y_R, Y_G, Y_B, Y_OFFSET)

    # The block means are exact in float32 (sums of four integers, times a power of two).
    red, green, blue = (red_top + red_low) * 0.25, (green_top + green_low) * 0.25, (blue_top + blue_low) * 0.25
    chroma_ptr = plane_ptr + height * width + pair * half_w + blocks
    tl.store(chroma_ptr, _level(red, green, blue, U_R, U_G, U_B, C_OFFSET), mask=inside)
    tl.store(chroma_ptr + (height // 2) * half_w, _level(red, green, blue, V_R, V_G, V_B, C_OFFSET), mask=inside)


def rgb_to_yuv420p_triton(frames: Tensor, out: Tensor, matrix: tuple, offsets: tuple) -> Tensor:
    """Fill ``out`` (N, H * 3 // 2, W) with the yuv420p of ``frames`` (N, H, W, 3), even sides.

    ``matrix`` (rows Y, Cb, Cr of R, G, B weights) and ``offsets`` are ``colour.py``'s; both
    tensors uint8 on one device (CUDA, or the CPU under Triton's interpreter).
    """
    count, height, width = frames.shape[:3]
    if count == 0:
        return out
    grid = (height // 2, triton.cdiv(width // 2, _BLOCK), count)
    with launch_device(frames):
        _yuv420p_kernel[grid](frames.contiguous(), out, height, width, **kernel_constants(matrix, offsets),
                              num_warps=_NUM_WARPS)
    return out


def kernel_constants(matrix: tuple, offsets: tuple) -> dict[str, float | int]:
    """The kernel's compile-time arguments: the matrix, the offsets with rounding's 0.5, the block."""
    (y_r, y_g, y_b), (u_r, u_g, u_b), (v_r, v_g, v_b) = matrix
    return dict(Y_R=y_r, Y_G=y_g, Y_B=y_b, Y_OFFSET=offsets[0] + 0.5, U_R=u_r, U_G=u_g, U_B=u_b,
                V_R=v_r, V_G=v_g, V_B=v_b, C_OFFSET=offsets[1] + 0.5, BLOCK=_BLOCK)
