"""Appearance feature extractor: source portrait -> 3-D appearance feature volume ``f_s``."""
from __future__ import annotations

from collections import OrderedDict

from torch import Tensor, nn

from ..errors import InputError
from .blocks import ConvNormAct, DownBlock, ResBlock3d, fold_batchnorms_


class AppearanceFeatureExtractor(nn.Module):
    """Encodes a 256x256 RGB crop into a (32, 16, 64, 64) feature volume.

    A 2-D encoder (same-size block, two 2x down blocks, 1x1 lift to 512 channels) whose 512
    channels are then read as 32 channels x 16 depth slices and refined by 3-D residual
    blocks. The constructor takes no arguments: the sizes are those of the official
    ``appearance_extractor.pth``, whose state dict this module loads with ``strict=True``.
    """

    feature_channels = 32
    feature_depth = 16

    def __init__(self) -> None:
        super().__init__()
        self.first = ConvNormAct(3, 64)
        self.down_blocks = nn.ModuleList([DownBlock(64, 128), DownBlock(128, 256)])
        self.second = nn.Conv2d(256, self.feature_channels * self.feature_depth, kernel_size=1)
        self.resblocks_3d = nn.Sequential(
            OrderedDict((f"3dr{i}", ResBlock3d(self.feature_channels)) for i in range(6))
        )

    def forward(self, image: Tensor) -> Tensor:
        """(B, 3, H, W) RGB in [0, 1] -> (B, 32, 16, H/4, W/4) features, in the image's dtype.

        Ditto feeds 256x256 crops, giving (B, 32, 16, 64, 64).
        """
        if image.dim() != 4 or image.shape[1] != 3 or not image.is_floating_point():
            raise InputError(
                "AppearanceFeatureExtractor: image must be a floating-point (B, 3, H, W) RGB "
                f"tensor in [0, 1] (a 256x256 face crop); got shape {tuple(image.shape)}, "
                f"dtype {image.dtype}. Convert HWC/uint8 images with "
                "image.permute(0, 3, 1, 2).float() / 255."
            )
        out = self.first(image)
        for block in self.down_blocks:
            out = block(out)
        out = self.second(out)
        return self.resblocks_3d(out.unflatten(1, (self.feature_channels, self.feature_depth)))

    def prepare_for_inference(self) -> "AppearanceFeatureExtractor":
        """Fold the eval BatchNorms that follow a conv into it (exact up to fp32 rounding).

        Call after loading weights; the module no longer loads the official state dict.
        """
        return fold_batchnorms_(self)
