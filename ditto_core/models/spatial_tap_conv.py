"""A 2-D convolution with few output channels computed as one GEMM onto its taps.

Why: the warp network's occlusion conv is 7x7, 2272 -> 1 channel (the hourglass output's 142
channels times 16 depth slices). A convolution kernel tiles its output channels onto the
tensor cores, and one output channel leaves them almost empty: cuDNN ran it on an Ampere
"indexed" implicit GEMM many times slower than reading its 18.6 MB input once. With the taps
on the output channels it is a plain matrix product, (49 x 2272) @ (2272 x H*W) per image,
which cuBLAS runs at memory speed, then a sum of 49 shifted single-channel planes
(``bench/bench_warp_decode_variants.py``, variant ``occlusion_conv2d``; the numbers are in
docs/PERFORMANCE.md).

Why the rewrite is exact: with taps ``(i, j)`` and 'same' padding ``(p, q)``,

    y[:, :, r, c] = bias + sum_ij  W[:, :, i, j] @ x[:, :, r + i - p, c + j - q]

so the products ``z[ij] = W[:, :, i, j] @ x`` of every pixel, followed by the shifted sum
``y[r, c] = sum_ij z[ij][r + i - p, c + j - q]`` over the zero-padded planes, compute the same
numbers with the same multiply-adds. As in :mod:`.depth_tap_conv`, each tap's partial sum
leaves the GEMM rounded to the input's precision and the taps are added in float32.

It only pays for few output channels: the tap planes are ``kh * kw`` times the output's size.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class SpatialTapConv2d(nn.Module):
    """``conv2d(x, weight, bias, padding=(kh // 2, kw // 2))`` as a tap GEMM plus a shifted sum.

    Args:
        conv: the :class:`~torch.nn.Conv2d` to reproduce (stride 1, no dilation, no groups,
            odd kernel, zero 'same' padding).

    Shape: (B, in, H, W) -> (B, out, H, W); the result is float32 for half-precision inputs
    (the taps are summed in float32), otherwise the input's dtype. Any memory format.
    """

    def __init__(self, conv: nn.Conv2d) -> None:
        super().__init__()
        out_channels, in_channels, height, width = conv.weight.shape
        if conv.stride != (1, 1) or conv.dilation != (1, 1) or conv.groups != 1 or height % 2 == 0 \
                or width % 2 == 0 or conv.padding != (height // 2, width // 2) or conv.padding_mode != "zeros":
            raise ValueError(
                "SpatialTapConv2d reproduces stride-1, undilated, ungrouped Conv2d layers with an odd kernel "
                f"and zero 'same' padding; got {conv}"
            )
        self.kernel_size = (height, width)
        self.out_channels = out_channels
        # Row (i * kw + j) * out + o is tap (i, j) of output channel o.
        weight = conv.weight.detach().permute(2, 3, 0, 1).reshape(height * width * out_channels, in_channels)
        self.tap_weight = nn.Parameter(weight.clone(), requires_grad=conv.weight.requires_grad)
        self.bias = conv.bias

    def forward(self, x: Tensor) -> Tensor:
        batch, _, height, width = x.shape
        kh, kw = self.kernel_size
        taps = torch.matmul(self.tap_weight, x.flatten(2))  # (B, kh*kw*out, H*W)
        taps = taps.view(batch, kh, kw, self.out_channels, height, width)
        taps = taps.to(torch.promote_types(taps.dtype, torch.float32))
        # Padded row r of a plane is input row r - kh // 2: zero where the conv pads.
        taps = F.pad(taps, (kw // 2, kw // 2, kh // 2, kh // 2))
        out = sum(taps[:, i, j, :, i : i + height, j : j + width] for i in range(kh) for j in range(kw))
        return out if self.bias is None else out + self.bias.to(out.dtype)[:, None, None]

    def extra_repr(self) -> str:
        return f"{self.tap_weight.shape[1]}, {self.out_channels}, kernel_size={self.kernel_size}"
