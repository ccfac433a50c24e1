"""SPADE decoder (Park et al., 2019, as used by LivePortrait and Ditto), inference only.

Turns the warped 256-channel feature map (B, 256, 64, 64) into the 512x512 RGB render. The
same feature map is also the "label map" of every SPADE normalisation, so each residual block
is modulated by the appearance it is decoding.

The residual blocks' convolutions were trained with spectral normalisation. The official
checkpoint stores them as ``weight_orig`` plus the power-iteration vectors ``weight_u`` /
``weight_v``; the effective weight is ``weight_orig / sigma`` with
``sigma = weight_u . (weight_orig.reshape(out, -1) @ weight_v)``. Parameter names follow the
official file so it loads with ``strict=True``.

Inference rewrites
------------------
:meth:`SPADEDecoder.prepare_for_inference` rewrites the module into one that computes the same
function (up to fp32 rounding) with fewer FLOPs and kernel launches:

* Spectral norm is folded: inference never updates ``u``/``v``, so divide once, keep plain convs.
* Each SPADE's ``mlp_gamma``/``mlp_beta`` become one conv with the "+1" of the scale in its bias.
* The two or three SPADEs of a residual block each embed the *same* label map with their own
  ``mlp_shared`` conv (256 -> 128, 3x3) + ReLU. Their weights are stacked on the output
  channels into one 256 -> 128k conv, so the label is read once by one larger GEMM.
* In the two upsampling blocks that embedding conv runs on the label map nearest-upsampled
  x2 (``up_0``, 128x128) or x4 (``up_1``, 256x256); :class:`NearestUpsampledConv2d` evaluates
  it on the 64x64 map instead. Why that is exact: the upsampled map at row ``s*p + a`` holds
  low-res row ``p``, so the three taps of output row ``s*p + a`` (rows ``s*p + a + d``,
  ``d = -1, 0, 1``) read low-res rows ``p + floor((a + d) / s)``. For phase ``a = 0`` that is
  rows ``p-1, p, p``; for ``a = s-1`` rows ``p, p, p+1``; for any other phase row ``p`` three
  times. Taps that read the same low-res row can be added into one, so each output phase is a
  conv over the low-res map with a 2- or 1-row kernel (same for columns). The zero padding
  row ``-1`` / ``s*H`` of the upsampled map is exactly where those kernels read the low-res
  zero padding row ``-1`` / ``H``, so borders are exact too. Phases with the same row and
  column pattern share a kernel: 3 x 3 = 9 distinct kernels for s = 4, 2 x 2 = 4 for s = 2.
  They are grouped by kernel shape (2x2, 2x1, 1x2, 1x1), one conv per shape with its kernels
  stacked on the output channels: kernels reading rows ``p-1, p`` and rows ``p, p+1`` both run
  in one 2-row conv with padding 1, whose outputs for them are read one row apart. Copies then
  interleave the s*s phase maps into the high-res map (a pixel shuffle). Only the embedding
  moves to low resolution: after its ReLU it differs per high-res pixel, so the scale/shift
  convs and ``conv_0`` / ``conv_1`` still run at high resolution.

  Label-embedding FLOPs per 512x512 frame (64x64 input, 2 FLOPs per multiply-add):

  - ``up_0``: 3 convs 256 -> 128 on 128x128, 3 x 9.66 = 29.0 GFLOP, become one 2x2 conv
    256 -> 4 x 384 whose 65x65 output (padding 1) holds all four phase kinds: 13.3 GFLOP.
  - ``up_1``: 3 convs on 256x256, 3 x 38.65 = 116.0 GFLOP, become a 2x2 conv (4 kinds, 65x65,
    13.3) + a 2x1 and a 1x2 conv (2 kinds each, 65x64 / 64x65, 3.3 each) + a 1x1 conv
    (1 kind, 64x64, 0.8): 20.6 GFLOP.

  Embedding convs go from 18 launches to 11 (6 middle blocks x 1, ``up_0`` 1, ``up_1`` 4).
* In the two blocks with a learned shortcut, the shortcut SPADE's shift goes through the 1x1
  ``conv_s`` before it is computed (:class:`ShiftFoldedShortcut`): ``conv_s`` is linear, so
  ``conv_s(n * scale + shift) = conv_s(n * scale) + conv_s(shift)``, and ``conv_s(shift)`` is
  one 3x3 conv of the embedding straight to the output channels (128 -> 64 instead of
  128 -> 256 at 256x256 in ``up_1``; 128 -> 256 instead of 128 -> 512 at 128x128 in ``up_0``):
  38.6 GFLOP less.

The whole decoder goes from 891.6 to 741.9 GFLOP a frame (``torch.utils.flop_counter``; 780.5
before the shortcut fold).

Independently of the rewrites, the upsampling blocks instance-normalise *before* upsampling:
a nearest-upsampled map repeats every pixel s*s times, so it has exactly the low-res map's
mean and (biased) variance; normalising the small map and upsampling the result equals
normalising the upsampled one, and the upsampled input itself is never materialised.

Eager half-precision batches on CUDA (a new process's first clip, while the compile loads) run
each prepared block's instance norms, modulations and LeakyReLUs as two Triton kernels of ours
(:mod:`.spade_norm_triton`) on channels-last tensors, where PyTorch's ops make a pass over memory
each (``use_triton``, switched on by the warp+decode engine with its other kernels). Inside a
trace the blocks keep PyTorch's ops, which Inductor fuses itself.
"""
from __future__ import annotations

import itertools
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import InputError
from .meta_build import building_on_meta
from .triton_kernels import runs_eager_triton

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
        if building_on_meta():  # it takes a checkpoint's tensors: nothing to initialise (see meta_build)
            return
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


def _upsample(x: Tensor, scale_factor: int) -> Tensor:
    """Nearest-neighbour upsampling by an integer factor (the identity for 1)."""
    return x if scale_factor == 1 else F.interpolate(x, scale_factor=scale_factor, mode="nearest")


def _phase_offsets(kernel_size: int, scale_factor: int) -> list[tuple[int, ...]]:
    """Along one axis, the low-res offset each kernel tap reads, for each output phase.

    Output index ``s*p + a`` (phase ``a``) reads upsampled indices ``s*p + a + d`` for
    ``d in [-r, r]``, which hold low-res index ``p + floor((a + d) / s)``.
    """
    radius = kernel_size // 2
    return [tuple((a + d) // scale_factor for d in range(-radius, radius + 1)) for a in range(scale_factor)]


def _tap_sum_matrix(offsets: tuple[int, ...]) -> Tensor:
    """(support, kernel_size) 0/1 matrix adding the taps that read the same low-res index."""
    support = offsets[-1] - offsets[0] + 1
    matrix = torch.zeros(support, len(offsets))
    matrix[torch.tensor(offsets) - offsets[0], torch.arange(len(offsets))] = 1
    return matrix


def _interleave_phases(
    kind_maps: dict[tuple[int, int], Tensor], phase_pattern: list[int], channels_last: bool
) -> Tensor:
    """Assemble the (B, C, s*H, s*W) map whose pixel (s*h + a, s*w + b) is ``kind_maps[p[a], p[b]][..., h, w]``.

    ``kind_maps`` holds (B, C, H, W) maps keyed by (row pattern, column pattern) and ``p`` is
    ``phase_pattern``, the pattern of each of the s phases. Columns are interleaved once per
    distinct row pattern (phases sharing a pattern reuse it), then rows. Channels-last maps are
    handled as (B, H, W, C) views so that both copies write memory in order and the result
    stays channels-last.
    """
    order, inverse = ((0, 2, 3, 1), (0, 3, 1, 2)) if channels_last else ((0, 1, 2, 3), (0, 1, 2, 3))
    height_dim, width_dim = order.index(2), order.index(3)
    rows = {
        i: torch.stack([kind_maps[i, j].permute(order) for j in phase_pattern], dim=width_dim + 1).flatten(
            width_dim, width_dim + 1
        )
        for i in dict.fromkeys(phase_pattern)
    }
    interleaved = torch.stack([rows[i] for i in phase_pattern], dim=height_dim + 1)
    return interleaved.flatten(height_dim, height_dim + 1).permute(inverse)


class NearestUpsampledConv2d(nn.Module):
    """``conv2d(interpolate(x, scale_factor=s, mode="nearest"), weight, bias, padding=k // 2)``
    evaluated on ``x`` itself, never upsampling it.

    Each of the s*s output phases is a conv over ``x`` whose taps are sums of the original
    taps that read the same input pixel (module docstring: why this is exact). Phases with the
    same per-axis tap pattern share one kernel; kernels of one shape run as a single conv with
    their phases stacked on the output channels, so a 3x3 kernel costs one conv for s = 2 and
    four for s >= 3 (one, a plain conv, for s = 1); copies then interleave the phases.

    Args:
        weight: (out, in, k, k) with k odd; the conv uses "same" padding k // 2.
        bias: (out,) or ``None``.
        scale_factor: the integer nearest-upsampling factor s >= 1 of the input.

    Shape: (B, in, H, W) -> (B, out, s*H, s*W), in the weights' dtype; any memory format.
    """

    def __init__(self, weight: Tensor, bias: Optional[Tensor], scale_factor: int) -> None:
        super().__init__()
        requires_grad = weight.requires_grad
        weight = weight.detach()  # the phase kernels are new leaves, like nn.Conv2d's
        out_channels, in_channels, kernel_size, kernel_width = weight.shape
        if kernel_size != kernel_width or kernel_size % 2 == 0 or scale_factor < 1:
            raise ValueError(
                f"NearestUpsampledConv2d needs a square odd kernel and a scale factor >= 1, got kernel "
                f"{kernel_size}x{kernel_width} and scale {scale_factor}"
            )
        self.scale_factor = scale_factor
        self.out_channels = out_channels
        offsets = _phase_offsets(kernel_size, scale_factor)
        patterns = list(dict.fromkeys(offsets))  # distinct per-axis tap patterns
        self._phase_pattern = [patterns.index(o) for o in offsets]
        tap_sums = [_tap_sum_matrix(p).to(weight) for p in patterns]
        # Patterns of one support length share a conv and so a padding; it can be symmetric
        # because phase s-1-a mirrors phase a. A pattern starting at low-res offset o then reads
        # that conv's output from row (or column) o + padding on.
        padding: dict[int, int] = {}
        for pattern in patterns:
            support = pattern[-1] - pattern[0] + 1
            padding[support] = max(padding.get(support, 0), -pattern[0])
        by_shape: dict[tuple[int, int], list[tuple[int, int]]] = {}
        for i, j in itertools.product(range(len(patterns)), repeat=2):
            by_shape.setdefault((len(tap_sums[i]), len(tap_sums[j])), []).append((i, j))

        self.convs = nn.ModuleList()
        # Per conv: (row pattern, column pattern, first row, first column) of each stacked phase kind.
        self._kinds: list[list[tuple[int, int, int, int]]] = []
        for (rows, cols), kinds in by_shape.items():
            conv = nn.Conv2d(
                in_channels, len(kinds) * out_channels, (rows, cols), padding=(padding[rows], padding[cols]),
                bias=bias is not None, device="meta",
            )
            kernels = [torch.einsum("ik,ockl,jl->ocij", tap_sums[i], weight, tap_sums[j]) for i, j in kinds]
            conv.weight = nn.Parameter(torch.cat(kernels), requires_grad=requires_grad)
            if bias is not None:
                conv.bias = nn.Parameter(bias.detach().repeat(len(kinds)), requires_grad=requires_grad)
            self.convs.append(conv)
            self._kinds.append(
                [(i, j, patterns[i][0] + padding[rows], patterns[j][0] + padding[cols]) for i, j in kinds]
            )

    def forward(self, x: Tensor) -> Tensor:
        return self.forward_chunks(x, 1)[0]

    def forward_chunks(self, x: Tensor, chunks: int) -> list[Tensor]:
        """``forward(x).chunk(chunks, dim=1)``, each chunk assembled into a dense tensor of its own.

        Callers that feed each channel group to a different conv get contiguous inputs with no
        extra copy: the interleaving copy writes every chunk separately.
        """
        if self.scale_factor == 1:
            # A plain conv: nothing to interleave, the copy only makes each chunk dense.
            return [chunk.clone() for chunk in self.convs[0](x).chunk(chunks, dim=1)]
        height, width = x.shape[-2:]
        outputs = [conv(x) for conv in self.convs]
        # Keep the layout the convolutions chose (channels-last for channels-last inputs or weights).
        channels_last = outputs[0].is_contiguous(memory_format=torch.channels_last)
        kind_maps: dict[tuple[int, int], tuple[Tensor, ...]] = {}
        for out, kinds in zip(outputs, self._kinds):
            stacked = out.unflatten(1, (len(kinds), self.out_channels))
            for k, (i, j, row, col) in enumerate(kinds):
                kind_maps[i, j] = stacked[:, k, :, row : row + height, col : col + width].chunk(chunks, dim=1)
        return [
            _interleave_phases({key: parts[c] for key, parts in kind_maps.items()}, self._phase_pattern, channels_last)
            for c in range(chunks)
        ]

    def extra_repr(self) -> str:
        return f"scale_factor={self.scale_factor}"


class SPADE(nn.Module):
    """Spatially-adaptive denormalisation.

    Instance-normalises ``x`` (no affine, biased variance, eps 1e-5, no running statistics)
    and modulates it per pixel: ``norm(x) * (1 + gamma(hidden)) + beta(hidden)``, where
    ``gamma``/``beta`` are 3x3 convs over the embedding ``hidden = mlp_shared(label)``, a 3x3
    conv + ReLU of the label map.

    Shape: ``x`` (B, num_features, H, W) and ``label`` (B, label_channels, H, W) ->
    (B, num_features, H, W); the label map must already have ``x``'s spatial size.

    Inside a :class:`SPADEResnetBlock` that has been prepared for inference, the block owns
    the label embedding (``mlp_shared`` is ``None``) and only :meth:`modulate` is used.
    """

    def __init__(self, num_features: int, label_channels: int, hidden_channels: int = _SPADE_HIDDEN) -> None:
        super().__init__()
        self.mlp_shared: Optional[nn.Sequential] = nn.Sequential(
            nn.Conv2d(label_channels, hidden_channels, 3, padding=1), nn.ReLU()
        )
        self.mlp_gamma = nn.Conv2d(hidden_channels, num_features, 3, padding=1)
        self.mlp_beta = nn.Conv2d(hidden_channels, num_features, 3, padding=1)
        # After prepare_for_inference: gamma and beta as one conv whose first half already
        # includes the "+1".
        self.register_module("mlp_scale_shift", None)

    def forward(self, x: Tensor, label: Tensor) -> Tensor:
        return self.modulate(F.instance_norm(x, eps=_INSTANCE_NORM_EPS), self.mlp_shared(label))

    def modulate(self, normalized: Tensor, hidden: Tensor) -> Tensor:
        """Scale and shift an instance-normalised (B, num_features, H, W) tensor by the label embedding.

        ``hidden`` is ``mlp_shared(label)``: (B, hidden_channels, H, W).
        """
        scale, shift = self.scale_shift(hidden)
        return torch.addcmul(shift, normalized, scale)

    def scale_shift(self, hidden: Tensor) -> tuple[Tensor, Tensor]:
        """``(1 + gamma(hidden), beta(hidden))``, each (B, num_features, H, W)."""
        if self.mlp_scale_shift is None:
            return 1 + self.mlp_gamma(hidden), self.mlp_beta(hidden)
        return self.mlp_scale_shift(hidden).chunk(2, dim=1)

    def unbiased_scale_shift(self, hidden: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """:meth:`scale_shift` of a prepared SPADE without the conv's bias, then that bias for
        each: ``(scale, shift, scale_bias, shift_bias)``, the biases (num_features,)."""
        channels = self.mlp_scale_shift.out_channels // 2
        return _unbiased_split(self.mlp_scale_shift, hidden, (channels, channels))

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


class ShiftFoldedShortcut(nn.Module):
    """A block's learned shortcut ``conv_s(norm_s.modulate(normalized, hidden))`` with the SPADE
    shift pushed through ``conv_s``.

    ``conv_s`` is a 1x1 conv without bias, linear per pixel, so
    ``conv_s(normalized * scale + shift) = conv_s(normalized * scale) + conv_s(shift)``, and
    ``conv_s(shift)`` is itself a 3x3 conv of ``hidden`` whose kernel is ``conv_s``'s matrix
    times the shift kernel: it maps the embedding straight to the block's output channels. The
    scale/shift conv then makes in + out channels instead of 2 x in: 128 -> 320 instead of
    128 -> 512 in ``up_1`` (at 256x256), 128 -> 768 instead of 128 -> 1024 in ``up_0``.

    Args:
        scale_shift: a prepared SPADE's ``mlp_scale_shift`` (hidden -> 2 x in, "+1" in the scale bias).
        conv_s: the folded 1x1 shortcut conv (in -> out, no bias).

    Shape: ``normalized`` (B, in, H, W) and ``hidden`` (B, hidden, H, W) -> (B, out, H, W).
    """

    def __init__(self, scale_shift: nn.Conv2d, conv_s: nn.Conv2d) -> None:
        super().__init__()
        in_channels = scale_shift.out_channels // 2
        out_channels = conv_s.out_channels
        requires_grad = scale_shift.weight.requires_grad
        # float64, so that the product rounds once to the weights' precision.
        mix = conv_s.weight.detach()[:, :, 0, 0].double()
        shift_weight = torch.einsum("oc,cikl->oikl", mix, scale_shift.weight.detach()[in_channels:].double())
        shift_bias = mix @ scale_shift.bias.detach()[in_channels:].double()
        fused = nn.Conv2d(
            scale_shift.in_channels, in_channels + out_channels, scale_shift.kernel_size,
            padding=scale_shift.padding, device="meta",
        )
        weight = torch.cat([scale_shift.weight.detach()[:in_channels], shift_weight.to(scale_shift.weight)])
        bias = torch.cat([scale_shift.bias.detach()[:in_channels], shift_bias.to(scale_shift.bias)])
        fused.weight = nn.Parameter(weight, requires_grad=requires_grad)
        fused.bias = nn.Parameter(bias, requires_grad=requires_grad)
        self.scale_shift = fused
        self.conv = conv_s
        self._split = (in_channels, out_channels)

    def forward(self, normalized: Tensor, hidden: Tensor) -> Tensor:
        scale, shift = self.scale_and_conv_shift(hidden)
        return self.conv(normalized * scale).add_(shift)

    def scale_and_conv_shift(self, hidden: Tensor) -> tuple[Tensor, Tensor]:
        """The SPADE scale (B, in, H, W) and ``conv_s(shift)`` (B, out, H, W)."""
        return self.scale_shift(hidden).split(self._split, dim=1)

    def unbiased_scale_and_conv_shift(self, hidden: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """:meth:`scale_and_conv_shift` without the conv's bias, then that bias for each: (in,), (out,)."""
        return _unbiased_split(self.scale_shift, hidden, self._split)


def _unbiased_split(conv: nn.Conv2d, x: Tensor, sizes: tuple[int, int]) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``conv(x)`` without its bias split into two channel groups of ``sizes``, then the bias split
    alike: for a kernel that adds the bias as it reads the output, where PyTorch would add it in a
    pass of its own over the whole output."""
    first, second = conv._conv_forward(x, conv.weight, None).split(sizes, dim=1)
    first_bias, second_bias = conv.bias.split(sizes)
    return first, second, first_bias, second_bias


class SPADEResnetBlock(nn.Module):
    """Pre-activation residual block with SPADE normalisations and spectral-normalised convs.

    ``x`` is first nearest-upsampled by ``upsample``; then
    ``out = shortcut(x) + conv_1(act(norm_1(conv_0(act(norm_0(x))))))`` with LeakyReLU(0.2);
    the middle width is ``min(in, out)``. When the width changes, the shortcut is
    ``conv_s(norm_s(x))`` (1x1, no bias), otherwise the identity. The SPADEs see the label
    map nearest-upsampled by ``label_scale`` to the block's working resolution.

    Args:
        upsample: integer upsampling factor of ``x`` (1: none).
        label_scale: the block's working (= output) resolution over the label map's; fixed at
            construction so that :meth:`prepare_for_inference` can bake it into the
            embedding conv.

    Shape: ``x`` (B, in_channels, H, W) and ``label`` (B, label_channels, h, w) with
    ``upsample * H == label_scale * h`` (same for widths) -> (B, out_channels, upsample * H, upsample * W).
    """

    def __init__(
        self, in_channels: int, out_channels: int, label_channels: int, upsample: int = 1, label_scale: int = 1
    ) -> None:
        super().__init__()
        self.upsample = upsample
        self.label_scale = label_scale
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
        # After prepare_for_inference: the SPADEs' mlp_shared convs as one, at label resolution,
        # and norm_s + conv_s as one ShiftFoldedShortcut.
        self.register_module("label_embedding", None)
        self.register_module("shortcut", None)
        self.use_triton = False  # eager half-precision CUDA inputs: the kernels of .spade_norm_triton

    def _norms(self) -> list[SPADE]:
        return [norm for norm in (self.norm_0, self.norm_1, self.norm_s) if norm is not None]

    def _embed(self, label: Tensor) -> list[Tensor]:
        """Each SPADE's ``mlp_shared`` embedding of ``label`` at the working resolution: norm_0's,
        norm_1's, then the shortcut's where there is one."""
        if self.label_embedding is None:
            label = _upsample(label, self.label_scale)
            return [norm.mlp_shared(label) for norm in self._norms()]
        chunks = self.label_embedding.out_channels // _SPADE_HIDDEN
        # Each chunk comes back as a fresh tensor: the ReLU can overwrite it.
        return [F.relu_(hidden) for hidden in self.label_embedding.forward_chunks(label, chunks)]

    def forward(self, x: Tensor, label: Tensor) -> Tensor:
        if self.runs_kernels(x):
            return self._forward_kernels(x, label)
        hidden = self._embed(label)
        # Normalising before upsampling is exact (see the module docstring) and touches
        # upsample**2 times fewer pixels; norm_0 and norm_s share the result.
        normalized = _upsample(F.instance_norm(x, eps=_INSTANCE_NORM_EPS), self.upsample)
        dx = self.conv_0(_leaky_relu(self.norm_0.modulate(normalized, hidden[0])))
        dx = self.conv_1(_leaky_relu(self.norm_1.modulate(F.instance_norm(dx, eps=_INSTANCE_NORM_EPS), hidden[1])))
        if self.shortcut is not None:
            shortcut = self.shortcut(normalized, hidden[2])
        elif self.conv_s is not None:
            shortcut = self.conv_s(self.norm_s.modulate(normalized, hidden[2]))
        else:
            shortcut = _upsample(x, self.upsample)
        return dx.add_(shortcut)

    def runs_kernels(self, x: Tensor) -> bool:
        """Whether :meth:`forward` runs the Triton kernels on ``x``: switched on, a half-precision
        CUDA input, outside a trace, and prepared for inference (the kernels take the fused
        scale/shift convs)."""
        return (runs_eager_triton(self.use_triton, x)
                and self.label_embedding is not None and self.norm_s is None)

    def _forward_kernels(self, x: Tensor, label: Tensor) -> Tensor:
        """:meth:`forward` with each norm + modulation (+ LeakyReLU) one kernel; channels-last out.

        PyTorch adds a conv's bias in a pass of its own over the output (a slow one for these
        channels-last outputs), so no conv here adds its bias where something else can: the
        scale/shift convs' biases are added by the modulation kernel as it reads them, conv_0's
        is left out (norm_1's instance norm subtracts every per-channel constant again) and the
        shortcut's conv_s(shift) bias joins conv_1's.
        """
        from .spade_norm_triton import instance_stats, spade_modulate

        hidden = self._embed(label)
        stats = instance_stats(x, _INSTANCE_NORM_EPS)
        scale, shift, scale_bias, shift_bias = self.norm_0.unbiased_scale_shift(hidden[0])
        dx = spade_modulate(x, stats, scale, shift, self.upsample, _NEGATIVE_SLOPE, scale_bias, shift_bias)
        dx = self.conv_0._conv_forward(dx, self.conv_0.weight, None)
        scale, shift, scale_bias, shift_bias = self.norm_1.unbiased_scale_shift(hidden[1])
        dx = spade_modulate(dx, instance_stats(dx, _INSTANCE_NORM_EPS), scale, shift, 1, _NEGATIVE_SLOPE,
                            scale_bias, shift_bias)
        if self.shortcut is None:
            return self.conv_1(dx).add_(_upsample(x, self.upsample))
        scale, conv_shift, scale_bias, conv_shift_bias = self.shortcut.unbiased_scale_and_conv_shift(hidden[2])
        dx = self.conv_1._conv_forward(dx, self.conv_1.weight, self.conv_1.bias + conv_shift_bias)
        shortcut = self.shortcut.conv(spade_modulate(x, stats, scale, None, self.upsample, None, scale_bias))
        return dx.add_(shortcut.add_(conv_shift))

    @torch.no_grad()
    def prepare_for_inference(self) -> None:
        """Fold spectral norm, fuse each SPADE's gamma/beta and all SPADEs' label embeddings, and
        push the shortcut SPADE's shift through ``conv_s`` (:class:`ShiftFoldedShortcut`)."""
        for name in ("conv_0", "conv_1", "conv_s"):
            conv = getattr(self, name)
            if isinstance(conv, SpectralNormConv2d):
                setattr(self, name, conv.folded())
        norms = self._norms()
        for norm in norms:
            norm.prepare_for_inference()
        if self.label_embedding is None:
            embeddings = [norm.mlp_shared[0] for norm in norms]
            self.label_embedding = NearestUpsampledConv2d(
                torch.cat([conv.weight for conv in embeddings]),
                torch.cat([conv.bias for conv in embeddings]),
                self.label_scale,
            ).requires_grad_(embeddings[0].weight.requires_grad)
            for norm in norms:
                norm.mlp_shared = None
        if self.norm_s is not None:
            self.shortcut = ShiftFoldedShortcut(self.norm_s.mlp_scale_shift, self.conv_s)
            self.norm_s = self.conv_s = None


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
        self.up_0 = SPADEResnetBlock(wide, FEATURE_CHANNELS, FEATURE_CHANNELS, upsample=2, label_scale=2)
        self.up_1 = SPADEResnetBlock(FEATURE_CHANNELS, out_features, FEATURE_CHANNELS, upsample=2, label_scale=4)
        self.conv_img = nn.Sequential(nn.Conv2d(out_features, 3 * 2 * 2, 3, padding=1), nn.PixelShuffle(2))

    def _blocks(self) -> list[SPADEResnetBlock]:
        return [*(getattr(self, f"G_middle_{i}") for i in range(_NUM_MIDDLE_BLOCKS)), self.up_0, self.up_1]

    def forward(self, feature: Tensor) -> Tensor:
        if feature.ndim != 4 or feature.shape[1] != FEATURE_CHANNELS:
            raise InputError(
                f"SPADEDecoder: 'feature' must be a (batch, {FEATURE_CHANNELS}, height, width) tensor "
                f"(the warp network's output), got shape {tuple(feature.shape)}."
            )
        kernels = self.up_1.runs_kernels(feature)
        if kernels:  # the blocks' kernels write channels-last, and cuDNN's half-precision convs read it without transposes
            feature = feature.contiguous(memory_format=torch.channels_last)
        x = self.fc(feature)
        for block in self._blocks():
            x = block(x, feature)
        image = torch.sigmoid_(self.conv_img(_leaky_relu(x)))
        return image.contiguous() if kernels else image

    @torch.no_grad()
    def prepare_for_inference(self) -> None:
        """Exact inference rewrites (module docstring): fold spectral norm, fuse convs, sub-pixel embeddings.

        Afterwards the state dict no longer has the official layout (plain ``weight`` keys,
        ``mlp_scale_shift``, ``label_embedding``) and the outputs agree with the unprepared
        module to fp32 rounding. Calling it again does nothing.
        """
        for block in self._blocks():
            block.prepare_for_inference()
