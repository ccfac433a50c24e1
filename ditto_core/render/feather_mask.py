"""Ditto's feathered blending mask: 1 in the middle of the crop, fading to 0 at its border."""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from ..errors import InputError


def _border_distance(size: int, inner: int, device: Optional[torch.device]) -> Tensor:
    """Per-index distance into the border band along one axis, in units of the band width.

    The inner ``inner`` indices get 0; the leading band ramps 1 -> 0 towards the inside, the
    trailing band 0 -> 1 towards the outside, both inclusive of their end points. A band one
    pixel wide therefore sits at distance 1 (fully transparent), as in the reference.

    Returns a (size,) float64 tensor.
    """
    lead = (size - inner) // 2
    trail = size - inner - lead
    return torch.cat(
        [
            torch.linspace(1.0, 0.0, lead, dtype=torch.float64, device=device),
            torch.zeros(inner, dtype=torch.float64, device=device),
            torch.linspace(0.0, 1.0, trail, dtype=torch.float64, device=device),
        ]
    )


def feather_mask(
    size: int = 512, ratio: float = 0.9, device: Optional[torch.device | str] = None
) -> Tensor:
    """The blending mask Ditto pastes its crop back with.

    The central ``int(size * ratio)`` square is opaque. Each border band fades linearly to 0
    at the crop edge, and each corner fades radially (Euclidean distance from the inner
    square's corner, clipped at one band width). Both cases are ``1 - min(1, hypot(dx, dy))``
    with ``dx``/``dy`` the per-axis distances into the band, so one expression builds it all.
    The result is evaluated in float64 and rounded once, which is what keeps it within float32
    rounding of the reference mask.

    Args:
        size: side of the square crop in pixels (Ditto renders 512).
        ratio: fraction of the side that stays fully opaque, in (0, 1].
        device: where to build the mask.

    Returns:
        (size, size) float32 tensor in [0, 1].
    """
    if size < 2:
        raise InputError(f"feather_mask: size must be at least 2 pixels, got {size}")
    if not 0.0 < ratio <= 1.0:
        raise InputError(f"feather_mask: ratio must be in (0, 1], got {ratio}")
    axis = _border_distance(size, int(size * ratio), device)
    distance = torch.hypot(axis[:, None], axis[None, :])
    return (1.0 - distance.clamp(max=1.0)).to(torch.float32)
