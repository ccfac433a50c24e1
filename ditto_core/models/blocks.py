"""Convolutional building blocks shared by the appearance extractor and the warp network.

Attribute names (``conv``, ``norm``, ``down_blocks``, ...) follow the official checkpoints so
that their state dicts load with ``strict=True``; activations and pools carry no weights and
are free to differ.

Every BatchNorm here runs in eval mode on stored statistics, so it is a per-channel affine
map. Modules list the ``(conv, norm)`` attribute pairs in which the norm directly follows the
conv in ``foldable_norms``; :func:`fold_batchnorms_` merges each such norm into its conv.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm

from .triton_kernels import runs_eager_triton

_CONV = {2: nn.Conv2d, 3: nn.Conv3d}
_BATCHNORM = {2: nn.BatchNorm2d, 3: nn.BatchNorm3d}


class ConvNormAct(nn.Module):
    """Convolution -> BatchNorm -> ReLU (or LeakyReLU), keeping the spatial size.

    Works on (N, C, H, W) when ``dims=2`` and on (N, C, D, H, W) when ``dims=3``; any
    floating dtype.

    Args:
        in_channels: channels of the input.
        out_channels: channels of the output.
        dims: 2 or 3 spatial dimensions.
        kernel_size: cubic/square kernel; padding keeps the size (odd kernels only).
        negative_slope: 0 for ReLU, otherwise the LeakyReLU slope.
    """

    foldable_norms = (("conv", "norm"),)

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        dims: int = 2,
        kernel_size: int = 3,
        negative_slope: float = 0.0,
    ) -> None:
        super().__init__()
        if dims not in _CONV:
            raise ValueError(f"dims must be 2 or 3, got {dims}")
        self.conv = _CONV[dims](in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.norm = _BATCHNORM[dims](out_channels)
        self.act = nn.LeakyReLU(negative_slope, inplace=True) if negative_slope else nn.ReLU(inplace=True)

    def forward(self, x: Tensor) -> Tensor:
        return self.act(self.norm(self.conv(x)))


class DownBlock(ConvNormAct):
    """:class:`ConvNormAct` then 2x average pooling of H and W (depth is kept in 3-D).

    (N, C_in, [D,] H, W) -> (N, C_out, [D,] H // 2, W // 2).

    A 3-D block (the warp network's hourglass) has a ``use_triton`` switch (off by default; the
    warp+decode engine sets it with its other kernels): eager half-precision CUDA inputs then
    take the conv's bias, the ReLU and the pooling in one kernel of :mod:`.down_pool_triton`,
    channels-last out, once the norm is folded into the conv (:func:`fold_batchnorms_`).
    """

    def __init__(self, in_channels: int, out_channels: int, dims: int = 2) -> None:
        super().__init__(in_channels, out_channels, dims)
        self.pool = nn.AvgPool2d(2) if dims == 2 else nn.AvgPool3d((1, 2, 2))
        if dims == 3:
            self.use_triton = False

    def forward(self, x: Tensor) -> Tensor:
        if self.runs_kernel(x):
            return self._forward_kernel(x)
        return self.pool(super().forward(x))

    def _forward_kernel(self, x: Tensor) -> Tensor:
        """:meth:`forward` of a folded 3-D block as the bias-free conv and one kernel; channels-last out."""
        from .down_pool_triton import bias_relu_pool  # imports Triton: only where it runs

        return bias_relu_pool(self.conv._conv_forward(x, self.conv.weight, None), self.conv.bias)

    def runs_kernel(self, x: Tensor) -> bool:
        """Whether :meth:`forward` runs the kernel on ``x``: a 3-D block switched on, a half-precision
        CUDA input, outside a trace, the norm folded and the activation a ReLU."""
        return (runs_eager_triton(getattr(self, "use_triton", False), x)
                and isinstance(self.norm, nn.Identity) and isinstance(self.act, nn.ReLU))


class UpBlock3d(ConvNormAct):
    """Nearest 2x upsampling of H and W, then a 3-D :class:`ConvNormAct`.

    (N, C_in, D, H, W) -> (N, C_out, D, 2H, 2W).
    """

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__(in_channels, out_channels, dims=3)

    def forward(self, x: Tensor) -> Tensor:
        return super().forward(F.interpolate(x, scale_factor=(1.0, 2.0, 2.0), mode="nearest"))


class ResBlock3d(nn.Module):
    """Pre-activation residual block: ``x + conv2(relu(bn2(conv1(relu(bn1(x))))))``.

    (N, C, D, H, W) -> same shape. ``norm1`` acts on the residual input itself, so only
    ``norm2`` can be folded into a conv.
    """

    foldable_norms = (("conv1", "norm2"),)

    def __init__(self, channels: int, kernel_size: int = 3) -> None:
        super().__init__()
        self.conv1 = nn.Conv3d(channels, channels, kernel_size, padding=kernel_size // 2)
        self.conv2 = nn.Conv3d(channels, channels, kernel_size, padding=kernel_size // 2)
        self.norm1 = nn.BatchNorm3d(channels)
        self.norm2 = nn.BatchNorm3d(channels)

    def forward(self, x: Tensor) -> Tensor:
        out = self.conv1(F.relu(self.norm1(x)))
        out = self.conv2(F.relu(self.norm2(out), inplace=True))
        return out.add_(x)


def _widths(block_expansion: int, max_features: int, num_blocks: int) -> list[int]:
    """Channel widths of the hourglass levels 1..num_blocks (level i has expansion * 2**i)."""
    return [min(max_features, block_expansion * 2**i) for i in range(num_blocks + 1)]


class HourglassEncoder(nn.Module):
    """A stack of 3-D :class:`DownBlock` s that keeps every intermediate for the skips."""

    def __init__(self, in_channels: int, block_expansion: int, num_blocks: int, max_features: int) -> None:
        super().__init__()
        widths = _widths(block_expansion, max_features, num_blocks)
        ins = [in_channels] + widths[1:-1]
        self.down_blocks = nn.ModuleList(DownBlock(i, o, dims=3) for i, o in zip(ins, widths[1:]))

    def forward(self, x: Tensor) -> list[Tensor]:
        """(N, C, D, H, W) -> [x, level 1, ..., level num_blocks], each halving H and W."""
        levels = [x]
        for block in self.down_blocks:
            levels.append(block(levels[-1]))
        return levels


class HourglassDecoder(nn.Module):
    """:class:`UpBlock3d` s that each concatenate the encoder level of matching size, then a
    3x3x3 conv-BN-ReLU over the last concatenation (which includes the hourglass input).

    ``conv``/``norm`` sit on this module rather than in a :class:`ConvNormAct` child
    because that is where the checkpoints store them.
    """

    foldable_norms = (("conv", "norm"),)

    def __init__(self, in_channels: int, block_expansion: int, num_blocks: int, max_features: int) -> None:
        super().__init__()
        widths = _widths(block_expansion, max_features, num_blocks)
        # Below the bottleneck each up block sees its predecessor's output next to an
        # encoder level of the same width, hence twice the channels.
        ins = [widths[-1]] + [2 * w for w in widths[-2:0:-1]]
        self.up_blocks = nn.ModuleList(UpBlock3d(i, o) for i, o in zip(ins, widths[-2::-1]))
        self.out_channels = block_expansion + in_channels
        self.conv = nn.Conv3d(self.out_channels, self.out_channels, 3, padding=1)
        self.norm = nn.BatchNorm3d(self.out_channels)

    def forward(self, levels: list[Tensor]) -> Tensor:
        """Encoder levels (as :class:`HourglassEncoder` returns them) -> (N, out_channels, D, H, W)."""
        out = levels[-1]
        for block, skip in zip(self.up_blocks, reversed(levels[:-1])):
            out = torch.cat([block(out), skip], dim=1)
        return F.relu(self.norm(self.conv(out)), inplace=True)


class Hourglass3d(nn.Module):
    """3-D U-Net that halves H and W ``num_blocks`` times (depth untouched) and comes back.

    (N, in_channels, D, H, W) -> (N, block_expansion + in_channels, D, H, W); H and W must be
    multiples of ``2 ** num_blocks``.
    """

    def __init__(self, in_channels: int, block_expansion: int, num_blocks: int, max_features: int) -> None:
        super().__init__()
        self.encoder = HourglassEncoder(in_channels, block_expansion, num_blocks, max_features)
        self.decoder = HourglassDecoder(in_channels, block_expansion, num_blocks, max_features)
        self.out_channels = self.decoder.out_channels

    def forward(self, x: Tensor) -> Tensor:
        return self.decoder(self.encoder(x))


@torch.no_grad()
def _fold_into_conv(conv: nn.Conv2d | nn.Conv3d, norm: _BatchNorm) -> None:
    """Rewrite ``conv`` in place so that it computes ``norm(conv(x))`` with eval statistics."""
    # float64 so the folded weights round once, to the same precision as the originals.
    scale = norm.weight.double() * torch.rsqrt(norm.running_var.double() + norm.eps)
    bias = conv.bias.double() if conv.bias is not None else torch.zeros_like(scale)
    new_bias = (bias - norm.running_mean.double()) * scale + norm.bias.double()
    shape = (-1,) + (1,) * (conv.weight.dim() - 1)
    conv.weight.copy_((conv.weight.double() * scale.reshape(shape)).to(conv.weight.dtype))
    if conv.bias is None:
        conv.bias = nn.Parameter(new_bias.to(conv.weight))
    else:
        conv.bias.copy_(new_bias.to(conv.bias.dtype))


def fold_batchnorms_(root: nn.Module) -> nn.Module:
    """Merge every eval-mode BatchNorm listed in a ``foldable_norms`` into its conv.

    The norm is replaced by ``nn.Identity``, so the result no longer loads the original state
    dict: call this after loading. Idempotent; returns ``root``.
    """
    for module in list(root.modules()):
        for conv_name, norm_name in getattr(module, "foldable_norms", ()):
            norm = getattr(module, norm_name)
            if isinstance(norm, _BatchNorm):
                _fold_into_conv(getattr(module, conv_name), norm)
                setattr(module, norm_name, nn.Identity())
    return root
