"""Dense motion estimator of the warp network.

From a source/driving pair of implicit keypoints it predicts, for every voxel of the driving
volume, where to sample the source feature volume (a backward flow) and, per pixel, how much
of the warped feature to trust (the occlusion map).

Coordinates are normalised to [-1, 1], x along W, y along H, z along D, with the end points
on the first and last voxel centres. The flows are nevertheless sampled with
``align_corners=False``, as the checkpoints were trained that way.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .blocks import Hourglass3d
from .triton_kernels import runs_triton
from .volume_sampling import sample_translations

KP_VARIANCE = 0.01
"""Variance of the Gaussian blob drawn around each keypoint in the heatmaps."""


def _axis(n: int, like: Tensor) -> Tensor:
    """(n,) voxel-centre coordinates of one axis, -1 at the first voxel and +1 at the last."""
    return 2 * (torch.arange(n, dtype=like.dtype, device=like.device) / (n - 1)) - 1


def identity_grid(depth: int, height: int, width: int, like: Tensor) -> Tensor:
    """(D, H, W, 3) grid of (x, y, z) voxel coordinates, on ``like``'s device and dtype."""
    z, y, x = torch.meshgrid(_axis(depth, like), _axis(height, like), _axis(width, like), indexing="ij")
    return torch.stack([x, y, z], dim=-1)


def keypoint_gaussians(kp: Tensor, depth: int, height: int, width: int) -> Tensor:
    """(B, K, 3) keypoints -> (B, K, D, H, W) unnormalised Gaussians ``exp(-|p - kp|^2 / 2v)``.

    The Gaussian factorises over the three axes, so it is built as a broadcast product of
    three 1-D profiles instead of materialising a (B, K, D, H, W, 3) offset volume.
    """
    coef = -0.5 / KP_VARIANCE
    x, y, z = (
        torch.exp(coef * (_axis(n, kp)[None, None, :] - kp[..., i, None]) ** 2)
        for i, n in enumerate((width, height, depth))
    )
    return z[..., :, None, None] * y[..., None, :, None] * x[..., None, None, :]


class DenseMotionNetwork(nn.Module):
    """Keypoints + source features -> dense backward flow and occlusion map.

    The flow is a per-voxel softmax blend of K + 1 candidate motions: the identity (for the
    background) and, for each keypoint k, the translation that carries the driving keypoint k
    onto the source keypoint k. A 3-D hourglass chooses the blend from the compressed source
    feature warped by every candidate, each next to the difference of the keypoint's driving
    and source heatmaps.

    Args:
        num_kp: keypoints K.
        feature_channels: channels C of the source feature volume.
        feature_depth: depth D of the source feature volume (fixes the occlusion conv width).
        compress: channels the feature is squeezed to before warping it K + 1 times.
        block_expansion, num_blocks, max_features: hourglass size.
    """

    foldable_norms = (("compress", "norm"),)

    def __init__(
        self,
        num_kp: int = 21,
        feature_channels: int = 32,
        feature_depth: int = 16,
        compress: int = 4,
        block_expansion: int = 32,
        num_blocks: int = 5,
        max_features: int = 1024,
    ) -> None:
        super().__init__()
        self.num_kp = num_kp
        # Each of the K + 1 motions contributes its heatmap channel and its warped feature.
        self.hourglass = Hourglass3d((num_kp + 1) * (compress + 1), block_expansion, num_blocks, max_features)
        hidden = self.hourglass.out_channels
        self.mask = nn.Conv3d(hidden, num_kp + 1, kernel_size=7, padding=3)
        self.compress = nn.Conv3d(feature_channels, compress, kernel_size=1)
        self.norm = nn.BatchNorm3d(compress)
        self.occlusion = nn.Conv2d(hidden * feature_depth, 1, kernel_size=7, padding=3)
        # Zero channels appended to the hourglass input (see pad_hourglass_channels_).
        self.input_padding = 0
        # The hourglass input by :mod:`.volume_sampling_triton` for CUDA half-precision features
        # (see .triton_kernels).
        self.use_triton = False

    def forward(self, feature: Tensor, kp_source: Tensor, kp_driving: Tensor) -> tuple[Tensor, Tensor]:
        """Estimate the flow.

        Args:
            feature: (B, C, D, H, W) source feature volume, any floating dtype.
            kp_source, kp_driving: (B, K, 3) keypoints.

        Returns:
            deformation: (B, D, H, W, 3) sampling grid for ``grid_sample(feature, ...)``, in
                float32 (float64 for a float64 feature) whatever the feature's dtype.
            occlusion: (B, 1, H, W) in (0, 1), in the feature's dtype.
        """
        b, _, d, h, w = feature.shape
        # Coordinates stay in (at least) float32: bfloat16 resolves only about 1/8 of a voxel
        # near the border of a 64-wide grid, which visibly jitters the warp.
        coord_dtype = torch.promote_types(feature.dtype, torch.float32)
        kp_source, kp_driving = kp_source.to(coord_dtype), kp_driving.to(coord_dtype)
        grid = identity_grid(d, h, w, kp_source)
        # Candidate k moves every voxel by the same vector; the background one (first) by 0.
        delta = kp_source - kp_driving  # (B, K, 3)

        squeezed = F.relu(self.norm(self.compress(feature)), inplace=True)
        if runs_triton(self.use_triton, squeezed):
            from .volume_sampling_triton import make_hourglass_input  # imports Triton: only where it runs

            hourglass_input = make_hourglass_input(squeezed, kp_source, kp_driving, -0.5 / KP_VARIANCE,
                                                   self.input_padding)
        else:
            hourglass_input = self.hourglass_input(squeezed, kp_source, kp_driving, grid)
        hidden = self.hourglass(hourglass_input)

        weights = torch.softmax(self.mask(hidden), dim=1, dtype=coord_dtype)  # (B, K+1, D, H, W)
        # The weights sum to one, so the blend of "grid + offset_k" is the grid plus the
        # weighted offsets; the background offset is zero and drops out.
        shift = torch.bmm(delta.transpose(1, 2), weights[:, 1:].flatten(2))  # (B, 3, DHW)
        deformation = grid + shift.reshape(b, 3, d, h, w).permute(0, 2, 3, 4, 1)

        # Prepared for inference, the occlusion conv returns float32 logits for half inputs.
        occlusion = torch.sigmoid(self.occlusion(hidden.flatten(1, 2))).to(feature.dtype)
        return deformation, occlusion

    def hourglass_input(self, squeezed: Tensor, kp_source: Tensor, kp_driving: Tensor, grid: Tensor) -> Tensor:
        """(B, (K + 1) (c + 1) + input_padding, D, H, W): per candidate motion, the difference of
        the keypoint's driving and source heatmaps next to ``squeezed`` (B, c, D, H, W) warped by
        the motion (the identity ``grid`` moved by ``kp_source - kp_driving``, or not at all)."""
        _, _, d, h, w = squeezed.shape
        offsets = F.pad(kp_source - kp_driving, (0, 0, 1, 0))  # (B, K+1, 3): the background's zero first
        warped = sample_translations(squeezed, grid, offsets)  # (B, K+1, c, D, H, W)
        heat = keypoint_gaussians(kp_driving, d, h, w) - keypoint_gaussians(kp_source, d, h, w)
        heat = F.pad(heat.to(squeezed.dtype), (0, 0, 0, 0, 0, 0, 1, 0))  # zero heatmap for the background
        hourglass_input = torch.cat([heat.unsqueeze(2), warped], dim=2).flatten(1, 2)
        if self.input_padding:
            hourglass_input = F.pad(hourglass_input, (0, 0) * 3 + (0, self.input_padding))
        return hourglass_input

    @torch.no_grad()
    def pad_hourglass_channels_(self, multiple: int = 8) -> None:
        """Append zero channels to the hourglass input so that every layer it feeds has a
        channel count that is a multiple of ``multiple``; the outputs do not change.

        Why: cuDNN's tensor-core kernels read channels in groups of 8 (16 bytes of half
        precision). The hourglass input has (K + 1) x (compress + 1) = 110 channels and the
        hourglass output, which concatenates that input, 142: cuDNN copied each such tensor
        into a padded buffer before every convolution that reads it. Padded once here, at the
        concatenation that makes the input, the input becomes 112 channels and the output 144.

        Exact: the padded input channels are zero and meet zero weight columns in the first
        encoder conv; the hourglass output carries them on (it concatenates its input), the
        last decoder conv gets zero columns for them and zero rows and bias for its two new
        outputs, which the ReLU keeps at zero; the mask and occlusion convs get zero columns.
        Call after :func:`~.blocks.fold_batchnorms_` (the last decoder conv must carry the
        folded norm); calling it again does nothing.
        """
        hidden = self.hourglass.out_channels
        pad = -self.hourglass.encoder.down_blocks[0].conv.in_channels % multiple
        if self.input_padding or not pad:
            return
        decoder = self.hourglass.decoder
        if not isinstance(decoder.norm, nn.Identity):
            raise RuntimeError("pad_hourglass_channels_ needs the hourglass BatchNorms folded first")
        first = self.hourglass.encoder.down_blocks[0].conv
        _pad_weight_(first, 1, pad)
        _pad_weight_(decoder.conv, 1, pad)
        _pad_weight_(decoder.conv, 0, pad)
        decoder.out_channels += pad
        self.hourglass.out_channels += pad
        mask = getattr(self.mask, "slice_conv", self.mask)  # a Conv3d or a DepthTapConv3d
        _pad_weight_(mask, 1, pad)
        # The occlusion conv reads the hourglass output's channels c and depth slices d as
        # channel c * D + d: pad along c.
        occlusion = self.occlusion
        name = "tap_weight" if hasattr(occlusion, "tap_weight") else "weight"
        weight = getattr(occlusion, name)
        grouped = weight.unflatten(1, (hidden, -1))
        padded = F.pad(grouped, (0, 0) * (grouped.dim() - 3) + (0, 0, 0, pad)).flatten(1, 2)
        setattr(occlusion, name, nn.Parameter(padded, requires_grad=weight.requires_grad))
        if isinstance(occlusion, nn.Conv2d):
            occlusion.in_channels = padded.shape[1]
        self.input_padding = pad


def _pad_weight_(conv: nn.Module, dim: int, pad: int) -> None:
    """Append ``pad`` zero input (``dim`` 1) or output (``dim`` 0, bias too) channels to a conv."""
    weight = conv.weight
    shape = list(weight.shape)
    shape[dim] = pad
    conv.weight = nn.Parameter(torch.cat([weight, weight.new_zeros(shape)], dim), requires_grad=weight.requires_grad)
    if dim == 0:
        if conv.bias is not None:
            conv.bias = nn.Parameter(F.pad(conv.bias, (0, pad)), requires_grad=conv.bias.requires_grad)
        conv.out_channels += pad
    else:
        conv.in_channels += pad
