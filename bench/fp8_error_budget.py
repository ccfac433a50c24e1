"""What FP8 convolutions would cost in accuracy, measured before any FP8 kernel is written.

Every convolution's input and weight are rounded through float8 e4m3 (weights with one scale
per output channel; inputs with one scale per tensor, or one per pixel as row-wise scaled FP8
GEMMs allow), accumulation stays float32, and the render is compared with the float32 one. The same is done
with bfloat16 rounding as the yardstick: bf16 is a shipped precision (render error about
4e-3 on the H200). Runs on the CPU (the rounding is emulated), on random weights in the
official layout unless ``--model-dir`` holds the official files: trained weights can have
other ranges, so rerun with them before trusting the numbers.

    python -m bench.fp8_error_budget --out bench/results/fp8_error.json
"""
from __future__ import annotations

import argparse
import copy
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn


from ditto_core.models.ditto_models import load_ditto_models, random_ditto_models

from .bench_common import emit, rel_l2
from .bench_warp_decode_variants import with_replaced

E4M3_MAX = torch.finfo(torch.float8_e4m3fn).max


def _round_e4m3(x: Tensor, dims: tuple[int, ...]) -> Tensor:
    """``x`` through float8 e4m3 with one scale per slice over ``dims`` (amax maps to the format's max)."""
    scale = x.abs().amax(dim=dims, keepdim=True).clamp_min(1e-12) / E4M3_MAX
    return (x / scale).to(torch.float8_e4m3fn).to(x.dtype) * scale


FORMATS = {
    # name: how an input is scaled (weights always get one scale per output channel)
    "bf16": None,
    "fp8_e4m3": "tensor",  # one scale per input tensor: a plain scaled FP8 GEMM
    "fp8_e4m3_pixelwise": "pixel",  # one scale per input pixel (over its channels): row-wise scaling
}


def _round_weight(w: Tensor, fmt: str) -> Tensor:
    if FORMATS[fmt] is None:
        return w.to(torch.bfloat16).to(w.dtype)
    return _round_e4m3(w, tuple(range(1, w.dim())))


def _round_input(x: Tensor, fmt: str) -> Tensor:
    scaling = FORMATS[fmt]
    if scaling is None:
        return x.to(torch.bfloat16).to(x.dtype)
    return _round_e4m3(x, tuple(range(x.dim())) if scaling == "tensor" else (1,))


class RoundedConv(nn.Module):
    """A conv whose input and weight go through ``fmt`` rounding; float32 arithmetic otherwise."""

    def __init__(self, conv: nn.Conv2d | nn.Conv3d, fmt: str) -> None:
        super().__init__()
        self.conv = conv
        self.fmt = fmt
        self.weight = _round_weight(conv.weight.detach(), fmt)

    def forward(self, x: Tensor) -> Tensor:
        conv = self.conv
        op = F.conv2d if isinstance(conv, nn.Conv2d) else F.conv3d
        return op(_round_input(x, self.fmt), self.weight, conv.bias, conv.stride, conv.padding,
                  conv.dilation, conv.groups)


def rounded(net: nn.Module, fmt: str) -> nn.Module:
    """A copy of ``net`` with every Conv2d/Conv3d rounded through ``fmt``."""
    return with_replaced(
        (net,), lambda child: RoundedConv(child, fmt) if isinstance(child, (nn.Conv2d, nn.Conv3d)) else None)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--model-dir", type=Path, help="official files (default: random weights)")
    parser.add_argument("--frames", type=int, default=2)
    parser.add_argument("--side", type=int, default=64, help="feature volume side (64 = 512x512 renders)")
    args = parser.parse_args()
    torch.manual_seed(0)
    models = (load_ditto_models(args.model_dir, "cpu", torch.float32) if args.model_dir
              else random_ditto_models("cpu", torch.float32, seed=0))
    warp, decoder = models.warp_network, models.decoder
    g = torch.Generator().manual_seed(1)
    feature = torch.randn(args.frames, 32, 16, args.side, args.side, generator=g)
    kp_source = torch.rand(args.frames, 21, 3, generator=g) - 0.5
    kp_driving = kp_source + 0.03 * torch.randn(args.frames, 21, 3, generator=g)
    results: dict = {"config": {"frames": args.frames, "side": args.side,
                                "weights": str(args.model_dir) if args.model_dir else "random (seed 0)"},
                     "rel_l2_vs_fp32": {}}
    with torch.inference_mode():
        warped = warp(feature, kp_source, kp_driving)
        reference = decoder(warped)
        for fmt in FORMATS:
            warp_q, decoder_q = rounded(copy.deepcopy(warp), fmt), rounded(copy.deepcopy(decoder), fmt)
            row = {
                "decoder_convs": rel_l2(decoder_q(warped), reference),
                "warp_convs": rel_l2(decoder(warp_q(feature, kp_source, kp_driving)), reference),
                "all_convs": rel_l2(decoder_q(warp_q(feature, kp_source, kp_driving)), reference),
            }
            results["rel_l2_vs_fp32"][fmt] = row
            print(fmt, {k: f"{v:.2e}" for k, v in row.items()}, flush=True)
    emit(results, args.out)


if __name__ == "__main__":
    main()
