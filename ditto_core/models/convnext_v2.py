"""ConvNeXt-V2 backbone (Woo et al., 2023), inference only.

LivePortrait's motion extractor, which Ditto reuses, runs a ConvNeXt-V2-tiny trunk over the
256x256 source crop. Parameter names follow the layout of the official checkpoints
(``downsample_layers``, ``stages``, ``norm``) so those files load with ``strict=True``.

Stochastic depth is a training-time regulariser that is the identity at inference, so it is
not modelled here.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

_EPS = 1e-6
"""Epsilon of every LayerNorm in the trunk (not PyTorch's 1e-5 default)."""


class LayerNorm2d(nn.Module):
    """LayerNorm over the channel dimension of an NCHW tensor.

    Normalises each pixel's C-vector with the biased variance and ``eps`` inside the square
    root, then applies a per-channel affine map. Doing it in place along dim 1 avoids the two
    permutes (and a contiguous copy) that routing through ``F.layer_norm`` would cost.

    Shape: (B, C, H, W) -> (B, C, H, W), any floating dtype.
    """

    def __init__(self, num_channels: int, eps: float = _EPS) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(num_channels))
        self.bias = nn.Parameter(torch.zeros(num_channels))

    def forward(self, x: Tensor) -> Tensor:
        var, mean = torch.var_mean(x, dim=1, keepdim=True, correction=0)
        x = (x - mean) * torch.rsqrt(var + self.eps)
        return torch.addcmul(self.bias[:, None, None], x, self.weight[:, None, None])

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"


class GlobalResponseNorm(nn.Module):
    """ConvNeXt-V2's Global Response Normalisation on channels-last features.

    ``y = gamma * (x * N(x)) + beta + x`` where ``G(x)`` is each channel's L2 norm over the
    spatial grid and ``N(x) = G(x) / (mean_c G(x) + 1e-6)``. The residual and the scaling are
    folded into a single ``x * (gamma * N + 1) + beta`` pass over the large tensor; only the
    (B, 1, 1, C) factor is computed separately.

    Shape: (B, H, W, C) -> (B, H, W, C). Parameters ``gamma``/``beta`` are (1, 1, 1, C), as
    stored in the checkpoints.
    """

    def __init__(self, num_channels: int) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.zeros(1, 1, 1, num_channels))
        self.beta = nn.Parameter(torch.zeros(1, 1, 1, num_channels))

    def forward(self, x: Tensor) -> Tensor:
        g = torch.linalg.vector_norm(x, dim=(1, 2), keepdim=True)
        n = g / (g.mean(dim=-1, keepdim=True) + 1e-6)
        return torch.addcmul(self.beta, x, torch.addcmul(torch.ones_like(n), self.gamma, n))


class ConvNeXtV2Block(nn.Module):
    """One residual block: 7x7 depthwise conv, then an inverted-bottleneck MLP with GRN.

    The MLP runs channels-last so its 1x1 convolutions are plain ``nn.Linear`` layers (the
    checkpoint stores them as such).

    Shape: (B, C, H, W) -> (B, C, H, W).
    """

    def __init__(self, dim: int, expansion: int = 4) -> None:
        super().__init__()
        hidden = expansion * dim
        self.dwconv = nn.Conv2d(dim, dim, kernel_size=7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=_EPS)
        self.pwconv1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.grn = GlobalResponseNorm(hidden)
        self.pwconv2 = nn.Linear(hidden, dim)

    def forward(self, x: Tensor) -> Tensor:
        y = self.dwconv(x).permute(0, 2, 3, 1)
        y = self.pwconv2(self.grn(self.act(self.pwconv1(self.norm(y)))))
        return x + y.permute(0, 3, 1, 2)


class ConvNeXtV2(nn.Module):
    """ConvNeXt-V2 trunk with global average pooling and a final LayerNorm; no classifier.

    A 4x4/stride-4 patchify stem, then four stages separated by 2x2/stride-2 downsampling,
    so the input side should be a multiple of 32.

    Args:
        in_channels: channels of the input image.
        depths: number of blocks in each of the four stages.
        dims: channel width of each stage.

    Shape: (B, in_channels, H, W) float -> (B, dims[-1]) pooled features.
    """

    def __init__(
        self,
        in_channels: int = 3,
        depths: Sequence[int] = (3, 3, 9, 3),
        dims: Sequence[int] = (96, 192, 384, 768),
    ) -> None:
        super().__init__()
        if len(depths) != len(dims):
            raise ValueError(f"depths {tuple(depths)} and dims {tuple(dims)} must have the same length")
        stem = nn.Sequential(nn.Conv2d(in_channels, dims[0], kernel_size=4, stride=4), LayerNorm2d(dims[0]))
        downsamples = [
            nn.Sequential(LayerNorm2d(c_in), nn.Conv2d(c_in, c_out, kernel_size=2, stride=2))
            for c_in, c_out in zip(dims[:-1], dims[1:])
        ]
        self.downsample_layers = nn.ModuleList([stem, *downsamples])
        self.stages = nn.ModuleList(
            nn.Sequential(*(ConvNeXtV2Block(dim) for _ in range(depth))) for depth, dim in zip(depths, dims)
        )
        self.norm = nn.LayerNorm(dims[-1], eps=_EPS)
        self.num_features = dims[-1]

    def forward(self, x: Tensor) -> Tensor:
        for downsample, stage in zip(self.downsample_layers, self.stages):
            x = stage(downsample(x))
        return self.norm(x.mean(dim=(-2, -1)))
