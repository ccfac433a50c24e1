"""The warp network's occlusion-mask layer (7x7x7 conv, 142 -> 22 channels on a 16x64x64
volume, 140 GFLOP a frame) in several exact formulations, side by side.

* ``conv3d``: the official layer, one cuDNN 3-D convolution;
* ``depth_taps``: :class:`DepthTapConv3d` (what the engine runs): one 2-D 7x7 conv over the
  depth slices with the 7 depth taps on the output channels (142 -> 154), then a shifted sum;
* ``depth_taps_cin144``: the same 2-D conv with the input channels zero-padded to 144
  (cuDNN's aligned kernels want a multiple of 8; conv only, the padding is not timed);
* ``depth_row_taps``: a 1x7 2-D conv with the depth and row taps on the output channels
  (142 -> 1078), then a shifted sum over both (more memory traffic, a GEMM-friendlier shape);
* ``depth_block_taps``: the 7x7 kernel of the depth-tap conv cut into 3 + 3 + 1 rows and
  columns: four 3x3, two 3x1, two 1x3 and one 1x1 block, each block shape one conv with its
  blocks (x 154 channels) on the output channels, then one shifted sum over blocks and depth
  taps. The same multiply-adds, in the 3x3 shapes that cuDNN gives its Hopper kernels (the 7x7
  conv gets an Ampere one), for 1386 channels of partial sums written and read back;
* ``depth_taps_conv_only_nhwc`` / ``depth_taps_triton_conv_only``: the depth-tap conv alone on
  what the engine hands it (NHWC slices, 144 channels), by cuDNN and by the implicit-GEMM
  Triton kernel the engine runs (``ditto_core/models/slice_conv_triton.py``, autotuned over its
  tile configs on the first call);
* ``triton_tile_*``: that kernel with each tile of the autotuner's list fixed, and with the
  candidate tiles of ``CANDIDATE_TILES`` (which the autotuner does not try);
* ``depth_taps_max_autotune``: the ``depth_taps`` conv compiled with Inductor's max-autotune,
  which benchmarks its Triton convolution templates against cuDNN and keeps the faster.

Each formulation's error is against the fp32 ``conv3d`` on the same inputs. Half precision,
batch 32 (the engine's batch on a large GPU), milliseconds per frame by CUDA events.

    python -m bench.bench_mask_conv --out $OUT/mask_conv.json
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn


from ditto_core.models.depth_tap_conv import DepthTapConv3d

from .bench_common import cuda_event_times, emit, rel_l2, summary_ms

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


# A 7x7 kernel axis cut into blocks of 3, 3 and 1 taps: (first tap, length) of each.
_BLOCKS = ((0, 3), (3, 3), (6, 1))


def depth_block_taps(conv: nn.Conv3d) -> Callable[[Tensor], Tensor]:
    """The mask layer as depth-tap convs over 3x3 / 3x1 / 1x3 / 1x1 blocks of the 7x7 kernel + shifted sums.

    With the input zero-padded by 3 once, block (rows r0.., columns c0..) as a valid conv gives
    z[r', c'] = sum_ab W[r0 + a, c0 + b] x_padded[r' + a, c' + b], and the 7x7 conv's output at
    (r, c) is the sum over blocks of z[r + r0, c + c0].
    """
    out_c, in_c, kd, kh, kw = conv.weight.shape
    assert kh == kw == sum(n for _, n in _BLOCKS), "the blocks cover a 7x7 kernel"
    taps = conv.weight.permute(2, 0, 1, 3, 4).reshape(kd * out_c, in_c, kh, kw)  # (depth tap, out) on dim 0
    shapes: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for (r0, rows), (c0, cols) in ((r, c) for r in _BLOCKS for c in _BLOCKS):
        shapes.setdefault((rows, cols), []).append((r0, c0))
    weights = {
        shape: torch.cat([taps[:, :, r0 : r0 + shape[0], c0 : c0 + shape[1]] for r0, c0 in starts]).contiguous()
        for shape, starts in shapes.items()
    }
    bias = conv.bias.float()
    pad = kh // 2

    def forward(x: Tensor) -> Tensor:
        b, _, d, h, w = x.shape
        padded = F.pad(x.transpose(1, 2).flatten(0, 1), (pad,) * 4)
        total = 0
        for shape, starts in shapes.items():
            z = F.conv2d(padded, weights[shape]).float().unflatten(1, (len(starts), kd * out_c))
            total = total + sum(z[:, i, :, r0 : r0 + h, c0 : c0 + w] for i, (r0, c0) in enumerate(starts))
        z = total.unflatten(0, (b, d)).unflatten(2, (kd, out_c))  # (B, D, kd, out, H, W)
        z = F.pad(z, (0, 0, 0, 0, 0, 0, 0, 0, kd // 2, kd // 2))
        out = sum(z[:, i : i + d, i] for i in range(kd))
        return out.transpose(1, 2) + bias[:, None, None, None]

    return forward


# Tile shapes the autotuner does not try, timed here as candidates for its list (BLOCK_M,
# BLOCK_N, TAIL_N, BLOCK_K, K_TAIL, warps, stages): 144 channels in one K step per tap (128 + 16;
# two stages of 83 KB fit an H200's shared memory, not a consumer card's), and the kept tile with
# more stages or fewer warps.
CANDIDATE_TILES = ((128, 128, 32, 32, 16, 4, 4), (128, 128, 32, 32, 16, 4, 2), (64, 128, 32, 32, 16, 2, 3),
                   (128, 128, 32, 32, 0, 4, 3))


def triton_slice_convs(weight: Tensor) -> dict[str, Callable[[Tensor], Tensor]]:
    """The depth-tap conv with ``weight`` (bias-free, 'same') by the engine's Triton kernel on
    NHWC images (N, C, H, W channels-last): autotuned as the engine runs it, and with each tile
    of its list and of :data:`CANDIDATE_TILES` fixed. Empty where Triton is missing."""
    try:
        from ditto_core.models.slice_conv_triton import CONFIGS, slice_conv_nhwc, tile_config
    except ImportError:
        return {}

    def conv(tile: Optional[object]) -> Callable[[Tensor], Tensor]:
        return lambda x: slice_conv_nhwc(x.permute(0, 2, 3, 1), weight, tile=tile).permute(0, 3, 1, 2)

    convs = {"depth_taps_triton_conv_only": conv(None)}
    for tile in [*CONFIGS, *(tile_config(*shape) for shape in CANDIDATE_TILES)]:
        k = tile.kwargs
        name = (f"triton_tile_{k['BLOCK_M']}x{k['BLOCK_N']}+{k['TAIL_N']}_k{k['BLOCK_K']}+{k['K_TAIL']}"
                f"_w{tile.num_warps}_s{tile.num_stages}")
        convs[name] = conv(tile)
    return convs


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
    compiled_block_taps = torch.compile(depth_block_taps(conv))
    variants: dict[str, tuple[Callable[[], Tensor], bool]] = {  # name -> (call, output is the layer's)
        "conv3d": (lambda: conv(x), True),
        "depth_taps_eager": (lambda: taps(x), True),
        "depth_taps_compiled": (lambda: compiled_taps(x), True),
        "depth_taps_conv_only": (lambda: taps.slice_conv(slices), False),
        "depth_taps_cin144_conv_only": (lambda: F.conv2d(padded, weight144, padding=TAPS // 2), False),
        "depth_row_taps_compiled": (lambda: compiled_row_taps(x), True),
        "depth_block_taps_compiled": (lambda: compiled_block_taps(x), True),
    }
    # What the engine hands the conv: 144 channels (the hourglass is padded), NHWC slices.
    slices_nhwc = padded.contiguous(memory_format=torch.channels_last)
    weight_nhwc = weight144.contiguous(memory_format=torch.channels_last)
    variants["depth_taps_conv_only_nhwc"] = (lambda: F.conv2d(slices_nhwc, weight_nhwc, padding=TAPS // 2), False)
    for name, triton_conv in triton_slice_convs(weight144).items():
        variants[name] = (lambda triton_conv=triton_conv: triton_conv(slices_nhwc), False)
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
        elif "triton" in name:
            entry["rel_l2_vs_cudnn_conv_only"] = rel_l2(out.float(), taps.slice_conv(slices).float())
        if name == "depth_taps_triton_conv_only":
            from ditto_core.models.slice_conv_triton import best_tile

            entry["config"] = str(best_tile())
        results["variants"][name] = entry
        print(f"{name:30s} {entry['ms_per_frame']['median_ms']:.3f} ms/frame  {entry['tflops']:.0f} TFLOP/s", flush=True)
    emit(results, args.out)


if __name__ == "__main__":
    main()
