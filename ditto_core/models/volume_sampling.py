"""Trilinear sampling of feature volumes, as the warp network does it twice a frame.

Both places sample a half- or single-precision volume at float32 (or wider) coordinates and
want the result back in the volume's dtype. This is PyTorch's path; where the compiled engine
runs on a GPU in half precision, :mod:`.volume_sampling_triton` does the same sampling fused with
the work around it.
"""
from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor


def sample_volume(volume: Tensor, grid: Tensor) -> Tensor:
    """``grid_sample`` of ``volume`` (B, C, D, H, W) at ``grid`` (B, D', H', W', 3) of normalised
    (x, y, z), trilinear, ``align_corners=False``, zero outside: (B, C, D', H', W') in the volume's
    dtype, computed at the grid's precision."""
    return F.grid_sample(volume.to(grid.dtype), grid, align_corners=False).to(volume.dtype)


def sample_translations(volume: Tensor, grid: Tensor, offsets: Tensor) -> Tensor:
    """``volume`` (B, C, D, H, W) sampled at ``grid`` (D, H, W, 3) moved by each of ``offsets``
    (B, M, 3): (B, M, C, D, H, W) in the volume's dtype.

    Stacking the M moved grids along the grid's depth samples them all in one call without
    replicating the volume M times.
    """
    b, _, d, h, w = volume.shape
    moved = grid + offsets[:, :, None, None, None, :]  # (B, M, D, H, W, 3)
    warped = sample_volume(volume, moved.reshape(b, -1, h, w, 3))  # (B, C, M * D, H, W)
    return warped.unflatten(2, (-1, d)).transpose(1, 2)
