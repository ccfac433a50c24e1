"""The warp network's occlusion-mask layer (7x7x7 conv, 142 -> 22 channels on a 16x64x64
volume, 140 GFLOP a frame) in several exact formulations, side by side.

* ``conv3d``: the official layer, one cuDNN 3-D convolution;
* ``depth_taps``: :class:`DepthTapConv3d` (what the engine runs): one 2-D 7x7 conv over the
  depth slices with the 7 depth taps on the output channels (142 -> 154), then a shifted sum;
* ``depth_taps_cin144``: the same 2-D conv with the input channels zero-padded to 144
  (cuDNN's aligned kernels want a multiple of 8; conv only, the padding is not timed);
* ``depth_row_taps``: a 1x7 2-D conv with the depth and row taps on the output channels
  (142 -> 1078), then a shifted sum over both (more memory traffic, a GEMM-friendlier shape);
* ``depth_taps_max_autotune``: the ``depth_taps`` conv compiled with Inductor's max-autotune,
  which benchmarks its Triton convolution templates against cuDNN and keeps the faster.

Each formulation's error is against the fp32 ``conv3d`` on the same inputs. Half precision,
batch 32 (the engine's batch on a large GPU), milliseconds per frame by CUDA events.

    python3 bench/bench_mask_conv.py --out $OUT/mask_conv.json
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_common import cuda_event_times, emit, rel_l2, summary_ms  # noqa: E402
from ditto_core.models.depth_tap_conv import DepthTapConv3d  # noqa: E402

IN_CHANNELS, OUT_CHANNELS, TAPS, DEPTH, SIDE = 142, 22, 7, 16, 64


def depth_row_taps(conv: nn.Conv3d) -> Callable[[Tensor], Tensor]:
    """The mask layer as a 1x7 conv with (depth tap, row tap, out) output channels + shifted sums."""
    out_c, in_c, kd, kh, kw = conv.weight.shape
    weight = conv.weight.permute(2, 3, 0, 1, 4).reshape(kd * kh * out_c, in_c, 1, kw).contiguous()
    bias = conv.bias.float()

    def forward(x: Tensor) -> Tensor:
        b, _, d, h, w = x.shape
        z = F.conv2d(x.transpose(1, 2).flatten(0, 1), weight, padding=(0, kw // 2))
        z = z.unflatten(0, (b, d)).unflatten(2, (kd, kh, out_c)).float()  # (B, D, kd, kh, out, H, W)
        z = F.pad(z, (0, 0, kh // 2, kh // 2, 0, 0, 0, 0, 0, 0, kd // 2, kd // 2))
        out = sum(z[:, i : i + d, i, j, :, j : j + h] for i in range(kd) for j in range(kh))
        return out.transpose(1, 2) + bias[:, None, None, None]

    return forward


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--skip-autotune", action="store_true")
    args = parser.parse_args()
    device = torch.device("cuda")
    torch.manual_seed(0)
    conv32 = nn.Conv3d(IN_CHANNELS, OUT_CHANNELS, TAPS, padding=TAPS // 2).to(device)
    x32 = torch.randn(args.batch, IN_CHANNELS, DEPTH, SIDE, SIDE, device=device)
    with torch.inference_mode():
        reference = conv32(x32)
    conv = nn.Conv3d(IN_CHANNELS, OUT_CHANNELS, TAPS, padding=TAPS // 2).to(device).half()
    conv.load_state_dict(conv32.state_dict())
    x = x32.half()
    taps = DepthTapConv3d(conv)
    slices = x.transpose(1, 2).flatten(0, 1).contiguous()
    padded = F.pad(slices, (0, 0, 0, 0, 0, 144 - IN_CHANNELS))
    weight144 = F.pad(taps.slice_conv.weight, (0, 0, 0, 0, 0, 144 - IN_CHANNELS))
    flops = 2 * args.batch * DEPTH * SIDE * SIDE * OUT_CHANNELS * IN_CHANNELS * TAPS**3

    compiled_taps = torch.compile(taps)
    compiled_row_taps = torch.compile(depth_row_taps(conv))
    variants: dict[str, tuple[Callable[[], Tensor], bool]] = {  # name -> (call, output is the layer's)
        "conv3d": (lambda: conv(x), True),
        "depth_taps_eager": (lambda: taps(x), True),
        "depth_taps_compiled": (lambda: compiled_taps(x), True),
        "depth_taps_conv_only": (lambda: taps.slice_conv(slices), False),
        "depth_taps_cin144_conv_only": (lambda: F.conv2d(padded, weight144, padding=TAPS // 2), False),
        "depth_row_taps_compiled": (lambda: compiled_row_taps(x), True),
    }
    if not args.skip_autotune:
        with torch._inductor.config.patch(max_autotune=True, max_autotune_gemm_backends="ATEN,TRITON"):
            autotuned = torch.compile(taps, mode="max-autotune-no-cudagraphs")
            start = time.perf_counter()
            with torch.inference_mode():
                autotuned(x)
            torch.cuda.synchronize()
            autotune_s = time.perf_counter() - start
        variants["depth_taps_max_autotune"] = (lambda: autotuned(x), True)

    results: dict = {"config": {"batch": args.batch, "reps": args.reps, "gflop_per_frame": flops / args.batch / 1e9,
                                "hardware": torch.cuda.get_device_name(device), "torch": torch.__version__},
                     "variants": {}}
    if not args.skip_autotune:
        results["config"]["max_autotune_compile_s"] = autotune_s
    for name, (call, is_layer) in variants.items():
        try:
            with torch.inference_mode():
                out = call()
                times = cuda_event_times(call, args.reps, warmup=2)
        except Exception as error:  # keep the other formulations' numbers
            results["variants"][name] = {"error": f"{type(error).__name__}: {error}"}
            continue
        entry = {"ms_per_frame": summary_ms([t / args.batch for t in times])}
        entry["tflops"] = flops / (entry["ms_per_frame"]["median_ms"] * args.batch / 1e3) / 1e12
        if is_layer:
            entry["rel_l2_vs_fp32_conv3d"] = rel_l2(out, reference)
        results["variants"][name] = entry
        print(f"{name:30s} {entry['ms_per_frame']['median_ms']:.3f} ms/frame  {entry['tflops']:.0f} TFLOP/s", flush=True)
    emit(results, args.out)


if __name__ == "__main__":
    main()
