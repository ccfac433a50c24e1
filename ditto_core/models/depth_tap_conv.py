"""A 3-D convolution computed as one 2-D convolution over depth slices.

Why: the warp network's 7x7x7, 142 -> 22 occlusion-mask convolution is 140 GFLOP a frame
(an eighth of warp+decode), and cuDNN runs it as a 3-D implicit GEMM with 22 output channels,
far below the tensor cores' speed: a third of the whole warp+decode time. As 2-D convolution
over the depth slices with 154 output channels it takes about half as long
(``bench/bench_mask_conv.py``, ``bench/bench_warp_decode_variants.py``; the numbers are in
docs/PERFORMANCE.md). Alternatives that did not beat it: input channels padded to 144, the row taps on the output channels too (a 1x7 conv,
142 -> 1078), and Inductor's Triton convolution templates (max-autotune; the best at 66 % of
cuDNN's speed).

Why the rewrite is exact: with depth taps ``k = 0..K-1`` and depth padding ``p``,

    y[:, :, t] = bias + sum_k  W[:, :, k] (*) x[:, :, t + k - p]        ((*): a 2-D conv)

so one 2-D conv of every depth slice ``s`` with the K tap kernels stacked on its output
channels, ``z[s, k] = W[:, :, k] (*) x[:, :, s]``, followed by the shifted sum
``y[t] = sum_k z[t + k - p, k]`` (slices outside the volume are the zero padding), computes
the same numbers. The multiply-adds are the same; what changes is the GEMM's shape: K x 22 =
154 output channels fill the tensor-core tiles that 22 left mostly empty. Each tap's partial
sum leaves the 2-D conv rounded to the input's precision; the partial sums are added in
float32 and the result stays float32, so in half precision the error is that of the 3-D
kernel or lower (2.3e-4 against cuDNN's fp16 3-D conv's 3.1e-4, both against fp32;
``bench/bench_mask_conv.py``).

On CUDA in half precision the 2-D conv can run as a Triton kernel of ours instead of cuDNN
(:mod:`.slice_conv_triton`, about twice as fast as cuDNN on an H200); the compiled
warp+decode engine switches it on (:mod:`.triton_kernels`).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .triton_kernels import runs_triton


class DepthTapConv3d(nn.Module):
    """``conv3d(x, weight, bias, padding)`` with 'same' depth padding, via depth-sliced 2-D convolution.

    Args:
        conv: the :class:`~torch.nn.Conv3d` to reproduce (stride 1, no dilation, no groups,
            depth padding ``kernel_depth // 2`` so the depth is kept).

    Shape: (B, in, D, H, W) -> (B, out, D, H', W') with H', W' those of ``conv``; the result
    is float32 for half-precision inputs (the sums are float32; callers such as a softmax
    want float32 anyway), otherwise the input's dtype.
    """

    def __init__(self, conv: nn.Conv3d) -> None:
        super().__init__()
        out_channels, in_channels, depth, height, width = conv.weight.shape
        if conv.stride != (1, 1, 1) or conv.dilation != (1, 1, 1) or conv.groups != 1 or depth % 2 == 0 \
                or conv.padding[0] != depth // 2 or conv.padding_mode != "zeros":
            raise ValueError(
                "DepthTapConv3d reproduces stride-1, undilated, ungrouped, zero-padded Conv3d layers with "
                f"an odd kernel depth and 'same' depth padding; got {conv}"
            )
        self.taps = depth
        self.out_channels = out_channels
        # Output channel k * out + o of the 2-D conv is tap k of output channel o.
        weight = conv.weight.detach().permute(2, 0, 1, 3, 4).reshape(depth * out_channels, in_channels, height, width)
        self.slice_conv = nn.Conv2d(
            in_channels, depth * out_channels, (height, width), padding=conv.padding[1:], bias=False, device="meta"
        )
        self.slice_conv.weight = nn.Parameter(weight.clone(), requires_grad=conv.weight.requires_grad)
        self.bias = conv.bias
        # The Triton kernel instead of ``slice_conv`` for CUDA half-precision inputs (see .triton_kernels).
        self.use_triton = False

    def forward(self, x: Tensor) -> Tensor:
        batch, _, depth = x.shape[:3]
        slices = x.transpose(1, 2).flatten(0, 1)  # (B*D, in, H, W): every depth slice an image
        if runs_triton(self.use_triton, slices):
            from .slice_conv_triton import slice_conv_nhwc  # imports Triton: only where it runs

            # An NDHWC volume's depth slices are NHWC images already: no copy then.
            nhwc = slices.contiguous(memory_format=torch.channels_last).permute(0, 2, 3, 1)
            taps = slice_conv_nhwc(nhwc, self.slice_conv.weight).permute(0, 3, 1, 2)
        else:
            taps = self.slice_conv(slices)
        taps = taps.unflatten(0, (batch, depth)).unflatten(2, (self.taps, self.out_channels))  # (B, D, K, out, H', W')
        taps = taps.to(torch.promote_types(taps.dtype, torch.float32))
        pad = self.taps // 2
        # Slice s of the padded stack is input slice s - pad: zero where the 3-D conv pads.
        taps = F.pad(taps, (0, 0, 0, 0, 0, 0, 0, 0, pad, pad))
        out = sum(taps[:, k : k + depth, k] for k in range(self.taps))  # (B, D, out, H', W')
        out = out.transpose(1, 2)
        return out if self.bias is None else out + self.bias.to(out.dtype)[:, None, None, None]
