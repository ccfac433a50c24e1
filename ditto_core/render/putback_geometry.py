"""Put-back geometry shared by the PyTorch and Triton paths of :func:`.putback.paste_back`.

Where each 512x512 render lands in its frame: the inverse of the crop-to-frame affine and the
frame box a render can touch.
"""
from __future__ import annotations

import torch
from torch import Tensor


def inverse_affine(M_c2o: Tensor) -> Tensor:
    """Frame-to-render affines: (S, 3, 3) or (S, 2, 3) -> (S, 2, 3) float32, on the same device.

    Inverted in closed form in float64 (as OpenCV does) with elementwise ops only, so it never
    waits on the GPU the way ``torch.linalg.inv``'s error check does.
    """
    m = M_c2o[:, :2].double()
    a, b, c = m[:, 0, 0], m[:, 0, 1], m[:, 0, 2]
    d, e, f = m[:, 1, 0], m[:, 1, 1], m[:, 1, 2]
    det = a * e - b * d
    inv = torch.stack(
        [
            torch.stack([e, -b, b * f - c * e], dim=-1),
            torch.stack([-d, a, c * d - a * f], dim=-1),
        ],
        dim=1,
    )
    return (inv / det[:, None, None]).float()


def paste_bounds(M_c2o: Tensor, render_size: int, height: int, width: int) -> Tensor:
    """Frame box each render can touch: (S, 4) int32 ``[x0, y0, x1, y1)``, clipped to the frame.

    A bilinear sample with zero padding is non-zero only for render coordinates in the open
    square (-1, R); the box bounds that square's image with a pixel of margin. Pixels outside
    it are copied from the frame unchanged.
    """
    m = M_c2o[:, :2].double()
    lo, hi = -1.0, float(render_size)
    # The corners' images, from Python scalars only: a tensor made from a list on the GPU is a
    # copy from pageable memory, which waits for everything queued on the stream (the render of
    # the very frames being pasted), so the render loop could never queue ahead of the GPU.
    mapped = torch.stack([m[:, :, 0] * x + m[:, :, 1] * y + m[:, :, 2]
                          for x, y in ((lo, lo), (hi, lo), (lo, hi), (hi, hi))], dim=1)  # (S, 4 corners, xy)
    low = mapped.amin(dim=1).floor().clamp(min=0)
    high = (mapped.amax(dim=1).ceil() + 1).clamp(min=0)
    return torch.cat([_clip_xy(low, width, height), _clip_xy(high, width, height)], dim=1).to(torch.int32)


def _clip_xy(points: Tensor, width: int, height: int) -> Tensor:
    """(S, 2) x, y clipped to at most the frame's width and height."""
    return torch.stack([points[:, 0].clamp(max=width), points[:, 1].clamp(max=height)], dim=1)
