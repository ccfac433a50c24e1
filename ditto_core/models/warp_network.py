"""Warping network: moves the source feature volume from source to driving keypoints."""
from __future__ import annotations

import torch
from torch import Tensor, nn

from ..errors import InputError
from .blocks import ConvNormAct, fold_batchnorms_
from .dense_motion import DenseMotionNetwork
from .depth_tap_conv import DepthTapConv3d
from .spatial_tap_conv import SpatialTapConv2d
from .triton_kernels import runs_triton
from .volume_sampling import sample_volume


class WarpingNetwork(nn.Module):
    """Warps ``f_s`` with the dense motion between two keypoint sets and projects it to 2-D.

    The warped (C, D) volume is flattened to C*D channels, mixed by a 3x3 conv-BN-LeakyReLU
    and a 1x1 conv, and dimmed where the occlusion map says the source cannot be trusted.
    Defaults are the official ``warp_network.pth``, whose state dict this module loads with
    ``strict=True``.

    Args:
        num_kp: keypoints K.
        feature_channels: channels C of the feature volume.
        feature_depth: depth D of the feature volume.
        out_channels: channels of the 2-D output handed to the decoder.
    """

    def __init__(
        self, num_kp: int = 21, feature_channels: int = 32, feature_depth: int = 16, out_channels: int = 256
    ) -> None:
        super().__init__()
        self.num_kp = num_kp
        self.feature_channels = feature_channels
        self.feature_depth = feature_depth
        self.dense_motion_network = DenseMotionNetwork(num_kp, feature_channels, feature_depth)
        self.third = ConvNormAct(feature_channels * feature_depth, out_channels, negative_slope=0.01)
        self.fourth = nn.Conv2d(out_channels, out_channels, kernel_size=1)
        self._hw_multiple = 2 ** len(self.dense_motion_network.hourglass.encoder.down_blocks)
        # The feature warp by :mod:`.volume_sampling_triton` for CUDA half-precision features
        # (see .triton_kernels).
        self.use_triton = False

    def forward(self, feature_3d: Tensor, kp_source: Tensor, kp_driving: Tensor) -> Tensor:
        """Warp and project.

        Args:
            feature_3d: (B, C, D, H, W) appearance features, (B, 32, 16, 64, 64) in Ditto.
            kp_source: (B, K, 3) source keypoints, normalised (x right, y down, z in).
            kp_driving: (B, K, 3) driving keypoints, same convention.

        Returns:
            (B, out_channels, H, W) in ``feature_3d``'s dtype.
        """
        self._check_inputs(feature_3d, kp_source, kp_driving)
        deformation, occlusion = self.dense_motion_network(feature_3d, kp_source, kp_driving)
        # Sampled at the deformation's (float32 or wider) precision; see DenseMotionNetwork.
        if runs_triton(self.use_triton, feature_3d):
            from .volume_sampling_triton import warp_volume  # imports Triton: only where it runs

            out = warp_volume(feature_3d, deformation)
        else:
            out = sample_volume(feature_3d, deformation)
        out = self.fourth(self.third(out.flatten(1, 2)))
        return out.mul_(occlusion)

    def _check_inputs(self, feature_3d: Tensor, kp_source: Tensor, kp_driving: Tensor) -> None:
        c, d, m = self.feature_channels, self.feature_depth, self._hw_multiple
        shape = tuple(feature_3d.shape)
        if (
            len(shape) != 5
            or shape[1:3] != (c, d)
            or shape[3] % m
            or shape[4] % m
            or not feature_3d.is_floating_point()
        ):
            raise InputError(
                f"WarpingNetwork: feature_3d must be a floating-point (B, {c}, {d}, H, W) volume "
                f"with H and W multiples of {m}, as the appearance extractor makes from a 256x256 "
                f"crop; got shape {shape}, dtype {feature_3d.dtype}."
            )
        for name, kp in (("kp_source", kp_source), ("kp_driving", kp_driving)):
            if tuple(kp.shape) != (shape[0], self.num_kp, 3):
                raise InputError(
                    f"WarpingNetwork: {name} must have shape (B, {self.num_kp}, 3) with B = "
                    f"{shape[0]} (the batch of feature_3d); got {tuple(kp.shape)}. Reshape "
                    f"flattened (B, {3 * self.num_kp}) keypoints with .reshape(B, {self.num_kp}, 3)."
                )

    def prepare_for_inference(self) -> "WarpingNetwork":
        """Exact inference rewrites (up to fp32 rounding): fold the eval BatchNorms that follow
        a conv into it, run the 7x7x7 occlusion-mask conv as depth-sliced 2-D convolution
        (:class:`DepthTapConv3d`) and the one-channel 7x7 occlusion conv as a GEMM onto its 49
        taps (:class:`SpatialTapConv2d`): same FLOPs, GEMM shapes the GPU's fast kernels take;
        and pad the hourglass's 110/142-channel tensors to 112/144 with zero channels
        (:meth:`DenseMotionNetwork.pad_hourglass_channels_`).

        The 3-D conv weights are also stored channels-last (NDHWC). The layout is all that
        changes, but it is the one cuDNN's tensor-core kernels read and write: convolutions
        follow their weights' layout, so the hourglass's activations stay NDHWC from conv to
        conv (and its output's depth slices are NHWC images for the mask conv) instead of
        being transposed before and after every 3-D conv (``bench/bench_warp_decode_variants.py``,
        variant ``channels_last_3d`` before it was adopted; docs/PERFORMANCE.md).

        Call after loading weights; the module no longer loads the official state dict.
        Calling it again does nothing.
        """
        dense = self.dense_motion_network
        fold_batchnorms_(self)
        if isinstance(dense.mask, nn.Conv3d):
            dense.mask = DepthTapConv3d(dense.mask)
        if isinstance(dense.occlusion, nn.Conv2d):
            dense.occlusion = SpatialTapConv2d(dense.occlusion)
        dense.pad_hourglass_channels_()
        for conv in self.modules():
            if isinstance(conv, nn.Conv3d):
                weight = conv.weight
                conv.weight = nn.Parameter(
                    weight.detach().contiguous(memory_format=torch.channels_last_3d), requires_grad=weight.requires_grad
                )
        return self
