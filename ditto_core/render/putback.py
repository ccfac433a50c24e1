"""Put-back: blend the 512x512 face renders into the full-resolution source frames.

Each render is warped into its frame by the crop-to-frame affine ``M_c2o`` together with a
feathered mask, then blended as ``mask * render * 255 + (1 - mask) * frame`` in float32 and
truncated to uint8 (the reference's rounding: no round-to-nearest).

Three implementations of the same operation:

- :func:`paste_back_cv2`: one frame, NumPy in and out, OpenCV ``warpAffine``; bit-exact to
  the reference and the ground truth for the others.
- the pure-PyTorch path of :func:`paste_back` (``grid_sample``, ``align_corners=True``): CPU
  tensors, and CUDA without Triton. It differs from OpenCV by at most 1 on ~1.5 % of values,
  because OpenCV quantises sub-pixel positions to 1/32 of a pixel.
- the Triton path of :func:`paste_back` (:mod:`.putback_triton`): one fused kernel on CUDA.
"""
from __future__ import annotations

import functools
from typing import Callable, Optional

import cv2
import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ..errors import InputError
from .feather_mask import feather_mask
from .putback_geometry import inverse_affine, paste_bounds

# Output pixels per chunk of the PyTorch path: bounds its float32 temporaries (about 70 bytes a
# pixel) to a few hundred MB, so full-HD batches fit next to the models on an 8 GB GPU.
_TORCH_CHUNK_PIXELS = 1 << 23

_BACKENDS = ("auto", "triton", "torch")


@functools.lru_cache(maxsize=8)
def default_mask(size: int, device: torch.device) -> Tensor:
    """Cached :func:`feather_mask` of side ``size`` on ``device``: (size, size) float32."""
    return feather_mask(size, device=device)


def paste_back_cv2(
    frame_rgb: np.ndarray, render: np.ndarray, M_c2o: np.ndarray, mask: Optional[np.ndarray] = None
) -> np.ndarray:
    """Reference put-back of one frame with OpenCV, bit-exact to Ditto's.

    Args:
        frame_rgb: (H, W, 3) uint8 frame.
        render: (R, R, 3) float32 render in [0, 255] (HWC, the reference's layout).
        M_c2o: (3, 3) or (2, 3) affine from render pixels to frame pixels.
        mask: (R, R) float32 blending mask; defaults to :func:`feather_mask`.

    Returns:
        (H, W, 3) uint8 blended frame.
    """
    h, w = frame_rgb.shape[:2]
    if mask is None:
        mask = default_mask(render.shape[0], torch.device("cpu")).numpy()
    affine = np.asarray(M_c2o, dtype=np.float64)[:2]
    warped_mask = cv2.warpAffine(mask, affine, (w, h), flags=cv2.INTER_LINEAR).clip(0, 1)[..., None]
    warped_render = cv2.warpAffine(
        np.ascontiguousarray(render, dtype=np.float32), affine, (w, h), flags=cv2.INTER_LINEAR
    )
    blended = warped_mask * warped_render + (1 - warped_mask) * frame_rgb
    return np.clip(blended, 0, 255).astype(np.uint8)


def paste_back(
    frames: Tensor,
    renders: Tensor,
    M_c2o: Tensor,
    source_index: Optional[Tensor] = None,
    out: Optional[Tensor] = None,
    mask: Optional[Tensor] = None,
    backend: str = "auto",
) -> Tensor:
    """Blend N renders into their source frames, batched, on the inputs' device.

    Args:
        frames: (S, H, W, 3) uint8 source frames.
        renders: (N, 3, R, R) float renders in [0, 1], any float dtype.
        M_c2o: (S, 3, 3) or (S, 2, 3) float affines from render pixels to frame pixels, one per
            source frame.
        source_index: (N,) integer index of the source frame (and affine) of each render; by
            default render i goes into frame i (S == N). Values must lie in [0, S): they are
            not checked, since that would stall the GPU.
        out: optional (N, H, W, 3) contiguous uint8 destination; may be ``frames`` itself when
            ``source_index`` is None (in-place put-back).
        mask: (R, R) float32 blending mask; defaults to Ditto's :func:`feather_mask`.
        backend: ``"auto"`` (Triton on CUDA when importable, else PyTorch), ``"triton"`` or
            ``"torch"``.

    Returns:
        (N, H, W, 3) uint8 frames (``out`` when given).
    """
    _check_inputs(frames, renders, M_c2o, source_index, out, mask)
    if backend not in _BACKENDS:
        raise InputError(f"paste_back: backend must be one of {_BACKENDS}, got {backend!r}")
    if mask is None:
        mask = default_mask(renders.shape[-1], frames.device)
    mask = mask.to(torch.float32).contiguous()
    if out is None:
        out = torch.empty(
            (renders.shape[0], *frames.shape[1:]), dtype=torch.uint8, device=frames.device
        )

    triton_impl = _triton_impl() if frames.is_cuda and backend != "torch" else None
    if backend == "triton" and triton_impl is None:
        raise InputError(
            "paste_back: backend='triton' needs CUDA tensors and the `triton` package; "
            "install triton or use backend='auto'"
        )
    if triton_impl is not None:
        return triton_impl(frames, renders, M_c2o, source_index, mask, out)
    return _paste_back_torch(frames, renders, M_c2o, source_index, mask, out)


@functools.lru_cache(maxsize=None)
def _triton_impl() -> Optional[Callable[..., Tensor]]:
    """The Triton kernel's launcher, or None where Triton cannot be imported."""
    try:
        from .putback_triton import paste_back_triton
    except ImportError:
        return None
    return paste_back_triton


def _paste_back_torch(
    frames: Tensor,
    renders: Tensor,
    M_c2o: Tensor,
    source_index: Optional[Tensor],
    mask: Tensor,
    out: Tensor,
) -> Tensor:
    """``grid_sample`` put-back over the frames' box, in chunks of whole frames."""
    if source_index is None:
        out.copy_(frames)
    else:
        torch.index_select(frames, 0, source_index, out=out)
        M_c2o = M_c2o.index_select(0, source_index)
    n, height, width = out.shape[:3]
    size = renders.shape[-1]
    if out.is_cuda:
        # Reading the box back to the host would stall the stream; the whole frame costs a
        # few hundred microseconds of bandwidth instead.
        x0, y0, x1, y1 = 0, 0, width, height
    else:
        bounds = paste_bounds(M_c2o, size, height, width)
        x0, y0 = bounds[:, :2].amin(dim=0).tolist()
        x1, y1 = bounds[:, 2:].amax(dim=0).tolist()
    if x1 <= x0 or y1 <= y0:
        return out

    # Frame pixel -> normalised render coordinate, with align_corners=True (-1 and 1 are the
    # centres of the first and last render pixels).
    to_grid = inverse_affine(M_c2o) * (2.0 / (size - 1))
    to_grid[:, :, 2] -= 1.0
    xs = torch.arange(x0, x1, device=out.device, dtype=torch.float32)
    ys = torch.arange(y0, y1, device=out.device, dtype=torch.float32)
    chunk = max(1, _TORCH_CHUNK_PIXELS // ((x1 - x0) * (y1 - y0)))
    for start in range(0, n, chunk):
        rows = slice(start, start + chunk)
        affine = to_grid[rows, None, None]  # (n, 1, 1, 2, 3)
        grid = affine[..., 0] * xs[:, None] + affine[..., 1] * ys[:, None, None] + affine[..., 2]
        count = grid.shape[0]  # grid: (n, h, w, 2)
        source = torch.cat([renders[rows].float(), mask.expand(count, 1, size, size)], dim=1)
        warped = F.grid_sample(source, grid, mode="bilinear", padding_mode="zeros", align_corners=True)
        alpha = warped[:, 3:].clamp(0.0, 1.0)
        window = out[rows, y0:y1, x0:x1]
        background = window.permute(0, 3, 1, 2).float()
        blended = alpha * (warped[:, :3] * 255.0) + (1.0 - alpha) * background
        window.copy_(blended.clamp(0.0, 255.0).to(torch.uint8).permute(0, 2, 3, 1))
    return out


def _check_inputs(
    frames: Tensor,
    renders: Tensor,
    M_c2o: Tensor,
    source_index: Optional[Tensor],
    out: Optional[Tensor],
    mask: Optional[Tensor],
) -> None:
    """Shape, dtype and device checks; nothing here reads tensor values (no GPU sync)."""
    if frames.dtype != torch.uint8 or frames.dim() != 4 or frames.shape[-1] != 3:
        raise InputError(
            f"paste_back: frames must be a (S, H, W, 3) uint8 RGB tensor, got {tuple(frames.shape)} "
            f"{frames.dtype}"
        )
    if (
        not renders.is_floating_point()
        or renders.dim() != 4
        or renders.shape[1] != 3
        or renders.shape[2] != renders.shape[3]
        or renders.shape[2] < 2
    ):
        raise InputError(
            f"paste_back: renders must be a (N, 3, R, R) float tensor in [0, 1], got "
            f"{tuple(renders.shape)} {renders.dtype}"
        )
    if M_c2o.dim() != 3 or M_c2o.shape[1] not in (2, 3) or M_c2o.shape[2] != 3:
        raise InputError(f"paste_back: M_c2o must be (S, 3, 3) or (S, 2, 3), got {tuple(M_c2o.shape)}")
    num_sources, num_renders = frames.shape[0], renders.shape[0]
    if M_c2o.shape[0] != num_sources:
        raise InputError(
            f"paste_back: M_c2o has {M_c2o.shape[0]} affines for {num_sources} frames; pass one per frame"
        )
    if source_index is None:
        if num_sources != num_renders:
            raise InputError(
                f"paste_back: {num_renders} renders for {num_sources} frames; pass source_index "
                "to say which frame each render belongs to"
            )
    elif source_index.shape != (num_renders,) or source_index.dtype not in (torch.int32, torch.int64):
        raise InputError(
            f"paste_back: source_index must be a ({num_renders},) integer tensor, got "
            f"{tuple(source_index.shape)} {source_index.dtype}"
        )
    size = renders.shape[-1]
    if mask is not None and mask.shape != (size, size):
        raise InputError(f"paste_back: mask must be ({size}, {size}) to match the renders, got {tuple(mask.shape)}")
    expected = (num_renders, *frames.shape[1:])
    if out is not None and (out.shape != expected or out.dtype != torch.uint8 or not out.is_contiguous()):
        raise InputError(
            f"paste_back: out must be a contiguous {expected} uint8 tensor, got {tuple(out.shape)} {out.dtype}"
        )
    named = {"frames": frames, "renders": renders, "M_c2o": M_c2o}
    named.update({k: v for k, v in (("source_index", source_index), ("out", out), ("mask", mask)) if v is not None})
    devices = {name: t.device for name, t in named.items()}
    if len(set(devices.values())) > 1:
        raise InputError(f"paste_back: all tensors must be on one device, got {devices}")
