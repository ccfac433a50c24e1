"""SPADE decoder (Park et al., 2019, as used by LivePortrait and Ditto), inference only.

Turns the warped 256-channel feature map (B, 256, 64, 64) into the 512x512 RGB render. The
same feature map is also the "label map" of every SPADE normalisation, so each residual block
is modulated by the appearance it is decoding.

The residual blocks' convolutions were trained with spectral normalisation. The official
checkpoint stores them as ``weight_orig`` plus the power-iteration vectors ``weight_u`` /
``weight_v``; the effective weight is ``weight_orig / sigma`` with
``sigma = weight_u . (weight_orig.reshape(out, -1) @ weight_v)``. Inference never updates
``u``/``v``, so :meth:`SPADEDecoder.prepare_for_inference` divides once and keeps plain convs.
Parameter names follow the official file so it loads with ``strict=True``.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import InputError

FEATURE_CHANNELS = 256
"""Channels of the warped feature map the decoder consumes (also its SPADE label map)."""

_NEGATIVE_SLOPE = 0.2
_INSTANCE_NORM_EPS = 1e-5
_SPADE_HIDDEN = 128
_NUM_MIDDLE_BLOCKS = 6
_INIT_POWER_ITERATIONS = 3


def _leaky_relu(x: Tensor) -> Tensor:
    # Every input here is a freshly computed activation nobody else holds, so overwrite it
    # rather than allocate another full-resolution tensor.
    return F.leaky_relu(x, _NEGATIVE_SLOPE, inplace=True)


class SpectralNormConv2d(nn.Module):
    """A 2-D convolution whose weight is ``weight_orig / sigma`` with frozen singular vectors.

    Holds the spectral-norm state layout of the official checkpoints: parameters ``bias``
    (optional) and ``weight_orig`` (out, in, k, k); buffers ``weight_u`` (out,) and
    ``weight_v`` (in * k * k,). ``sigma`` is recomputed from the stored vectors on every call
    and no power iteration ever runs, which is what the reference does in eval mode.
    Use :meth:`folded` to get the equivalent plain :class:`~torch.nn.Conv2d`.

    Shape: (B, in, H, W) -> (B, out, H + 2 * padding - k + 1, W + 2 * padding - k + 1).
    """

    def __init__(
        self, in_channels: int, out_channels: int, kernel_size: int, padding: int = 0, bias: bool = True
    ) -> None:
        super().__init__()
        self.padding = padding
        # Registered before weight_orig to keep the official file's key order.
        self.bias = nn.Parameter(torch.empty(out_channels)) if bias else None
        self.weight_orig = nn.Parameter(torch.empty(out_channels, in_channels, kernel_size, kernel_size))
        self.register_buffer("weight_u", torch.empty(out_channels))
        self.register_buffer("weight_v", torch.empty(in_channels * kernel_size * kernel_size))
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """``nn.Conv2d``'s initialisation, then a few power-iteration steps for ``u``/``v``.

        Random ``u``/``v`` could make ``sigma`` arbitrarily small or negative. Ending on a
        ``v`` step makes ``sigma = |weight_orig^T u|``: positive and close to the largest
        singular value, so even an unloaded module is a sensibly normalised conv.
        """
        nn.init.kaiming_uniform_(self.weight_orig, a=5**0.5)
        if self.bias is not None:
            bound = self.weight_orig[0].numel() ** -0.5
            nn.init.uniform_(self.bias, -bound, bound)
        matrix = self.weight_orig.flatten(1)
        v = F.normalize(torch.ones_like(self.weight_v), dim=0)
        for _ in range(_INIT_POWER_ITERATIONS):
            u = F.normalize(matrix @ v, dim=0)
            v = F.normalize(matrix.T @ u, dim=0)
        self.weight_u.copy_(u)
        self.weight_v.copy_(v)

    def sigma(self) -> Tensor:
        """The stored estimate of the largest singular value, a 0-dim tensor."""
        return torch.dot(self.weight_u, torch.mv(self.weight_orig.flatten(1), self.weight_v))

    def normalized_weight(self) -> Tensor:
        """The effective convolution weight ``weight_orig / sigma``, (out, in, k, k)."""
        return self.weight_orig / self.sigma()

    def forward(self, x: Tensor) -> Tensor:
        return F.conv2d(x, self.normalized_weight(), self.bias, padding=self.padding)

    @torch.no_grad()
    def folded(self) -> nn.Conv2d:
        """A plain ``nn.Conv2d`` computing the same function; ``bias`` is shared, not copied."""
        out_channels, in_channels, kernel_size, _ = self.weight_orig.shape
        # Built on the meta device: its random initialisation would be overwritten at once.
        conv = nn.Conv2d(
            in_channels, out_channels, kernel_size, padding=self.padding, bias=self.bias is not None, device="meta"
        )
        conv.weight = nn.Parameter(self.normalized_weight(), requires_grad=self.weight_orig.requires_grad)
        conv.bias = self.bias
        return conv

    def extra_repr(self) -> str:
        out_channels, in_channels, kernel_size, _ = self.weight_orig.shape
        return (
            f"{in_channels}, {out_channels}, kernel_size={kernel_size}, padding={self.padding}, "
            f"bias={self.bias is not None}"
        )


class SPADE(nn.Module):
    """Spatially-adaptive denormalisation.

    Instance-normalises ``x`` (no affine, biased variance, eps 1e-5, no running statistics)
    and modulates it per pixel: ``norm(x) * (1 + gamma(label)) + beta(label)``, where
    ``gamma``/``beta`` are 3x3 convs over a shared 3x3 conv + ReLU embedding of the label map.

    Shape: ``x`` (B, num_features, H, W) and ``label`` (B, label_channels, H, W) ->
    (B, num_features, H, W); the label map must already have ``x``'s spatial size.
    """

    def __init__(self, num_features: int, label_channels: int, hidden_channels: int = _SPADE_HIDDEN) -> None:
        super().__init__()
        self.mlp_shared = nn.Sequential(nn.Conv2d(label_channels, hidden_channels, 3, padding=1), nn.ReLU())
        self.mlp_gamma = nn.Conv2d(hidden_channels, num_features, 3, padding=1)
        self.mlp_beta = nn.Conv2d(hidden_channels, num_features, 3, padding=1)
        # After prepare_for_inference: gamma and beta as one conv whose first half already
        # includes the "+1".
        self.register_module("mlp_scale_shift", None)

    def forward(self, x: Tensor, label: Tensor) -> Tensor:
        return self.modulate(F.instance_norm(x, eps=_INSTANCE_NORM_EPS), label)

    def modulate(self, normalized: Tensor, label: Tensor) -> Tensor:
        """Apply the label-conditioned scale and shift to an already instance-normalised tensor."""
        hidden = self.mlp_shared(label)
        if self.mlp_scale_shift is None:
            scale, shift = 1 + self.mlp_gamma(hidden), self.mlp_beta(hidden)
        else:
            scale, shift = self.mlp_scale_shift(hidden).chunk(2, dim=1)
        return torch.addcmul(shift, normalized, scale)

    @torch.no_grad()
    def prepare_for_inference(self) -> None:
        """Merge ``mlp_gamma``/``mlp_beta`` into one conv (one launch, one read of ``hidden``)."""
        if self.mlp_scale_shift is not None:
            return
        gamma, beta = self.mlp_gamma, self.mlp_beta
        fused = nn.Conv2d(
            gamma.in_channels, 2 * gamma.out_channels, gamma.kernel_size, padding=gamma.padding, device="meta"
        )
        requires_grad = gamma.weight.requires_grad
        fused.weight = nn.Parameter(torch.cat([gamma.weight, beta.weight]), requires_grad=requires_grad)
        fused.bias = nn.Parameter(torch.cat([gamma.bias + 1, beta.bias]), requires_grad=requires_grad)
        self.mlp_scale_shift = fused
        del self.mlp_gamma, self.mlp_beta


class SPADEResnetBlock(nn.Module):
    """Pre-activation residual block with SPADE normalisations and spectral-normalised convs.

    ``out = shortcut(x) + conv_1(act(norm_1(conv_0(act(norm_0(x))))))`` with LeakyReLU(0.2);
    the middle width is ``min(in, out)``. When the width changes, the shortcut is
    ``conv_s(norm_s(x))`` (1x1, no bias), otherwise the identity.

    Shape: ``x`` (B, in_channels, H, W), ``label`` (B, label_channels, h, w) with H, W integer
    multiples of h, w (it is nearest-upsampled to H, W) -> (B, out_channels, H, W).
    """

    def __init__(self, in_channels: int, out_channels: int, label_channels: int) -> None:
        super().__init__()
        middle_channels = min(in_channels, out_channels)
        learned_shortcut = in_channels != out_channels
        # Typed nn.Module: prepare_for_inference swaps them for plain nn.Conv2d.
        self.conv_0: nn.Module = SpectralNormConv2d(in_channels, middle_channels, 3, padding=1)
        self.conv_1: nn.Module = SpectralNormConv2d(middle_channels, out_channels, 3, padding=1)
        self.conv_s: Optional[nn.Module] = (
            SpectralNormConv2d(in_channels, out_channels, 1, bias=False) if learned_shortcut else None
        )
        self.norm_0 = SPADE(in_channels, label_channels)
        self.norm_1 = SPADE(middle_channels, label_channels)
        self.norm_s = SPADE(in_channels, label_channels) if learned_shortcut else None

    def forward(self, x: Tensor, label: Tensor) -> Tensor:
        if label.shape[-2:] != x.shape[-2:]:
            label = F.interpolate(label, size=x.shape[-2:], mode="nearest")
        # norm_0 and norm_s normalise the same x with the same parameter-free norm: do it once.
        normalized = F.instance_norm(x, eps=_INSTANCE_NORM_EPS)
        dx = self.conv_0(_leaky_relu(self.norm_0.modulate(normalized, label)))
        dx = self.conv_1(_leaky_relu(self.norm_1(dx, label)))
        shortcut = x if self.conv_s is None else self.conv_s(self.norm_s.modulate(normalized, label))
        return dx.add_(shortcut)

    @torch.no_grad()
    def prepare_for_inference(self) -> None:
        """Fold spectral norm into plain convs and fuse each SPADE's gamma/beta convs."""
        for name in ("conv_0", "conv_1", "conv_s"):
            conv = getattr(self, name)
            if isinstance(conv, SpectralNormConv2d):
                setattr(self, name, conv.folded())
        for norm in (self.norm_0, self.norm_1, self.norm_s):
            if norm is not None:
                norm.prepare_for_inference()


class SPADEDecoder(nn.Module):
    """Warped feature map -> RGB image in (0, 1).

    ``fc`` (3x3, 256 -> 512), six 512-wide SPADE residual blocks at the input resolution, then
    two nearest x2 upsamplings each followed by a narrowing block (512 -> 256 -> 64), and a
    3x3 conv to 12 channels + pixel shuffle (x2) + sigmoid. The input feature map is the SPADE
    label map of every block.

    Fully convolutional: (B, 256, H, W) float -> (B, 3, 8H, 8W) of the same dtype, RGB,
    channels first; Ditto uses H = W = 64, giving 512x512. Batch elements never interact.
    """

    def __init__(self) -> None:
        super().__init__()
        wide = 2 * FEATURE_CHANNELS
        out_features = 64
        self.fc = nn.Conv2d(FEATURE_CHANNELS, wide, 3, padding=1)
        for i in range(_NUM_MIDDLE_BLOCKS):
            self.add_module(f"G_middle_{i}", SPADEResnetBlock(wide, wide, FEATURE_CHANNELS))
        self.up_0 = SPADEResnetBlock(wide, FEATURE_CHANNELS, FEATURE_CHANNELS)
        self.up_1 = SPADEResnetBlock(FEATURE_CHANNELS, out_features, FEATURE_CHANNELS)
        self.conv_img = nn.Sequential(nn.Conv2d(out_features, 3 * 2 * 2, 3, padding=1), nn.PixelShuffle(2))

    def _middle_blocks(self) -> list[SPADEResnetBlock]:
        return [getattr(self, f"G_middle_{i}") for i in range(_NUM_MIDDLE_BLOCKS)]

    def _blocks(self) -> list[SPADEResnetBlock]:
        return [*self._middle_blocks(), self.up_0, self.up_1]

    def forward(self, feature: Tensor) -> Tensor:
        if feature.ndim != 4 or feature.shape[1] != FEATURE_CHANNELS:
            raise InputError(
                f"SPADEDecoder: 'feature' must be a (batch, {FEATURE_CHANNELS}, height, width) tensor "
                f"(the warp network's output), got shape {tuple(feature.shape)}."
            )
        x = self.fc(feature)
        for block in self._middle_blocks():
            x = block(x, feature)
        x = self.up_0(F.interpolate(x, scale_factor=2, mode="nearest"), feature)
        x = self.up_1(F.interpolate(x, scale_factor=2, mode="nearest"), feature)
        return torch.sigmoid_(self.conv_img(_leaky_relu(x)))

    @torch.no_grad()
    def prepare_for_inference(self) -> None:
        """Exact inference rewrites: fold spectral norm, fuse SPADE gamma/beta convs.

        Afterwards the state dict no longer has the official layout (plain ``weight`` keys,
        ``mlp_scale_shift``) and the outputs agree with the unprepared module to fp32
        rounding. Calling it again does nothing.
        """
        for block in self._blocks():
            block.prepare_for_inference()
