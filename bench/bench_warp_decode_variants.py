"""Warp+decode compile variants side by side, and where the time of one frame goes.

Every variant compiles the same ``WarpDecodeEngine`` (CUDA graph, one static batch) under
different backend settings, in one process, and is timed on the same inputs:

* ``baseline``: what the engine ships with;
* ``mask_conv3d``: the occlusion-mask conv as the plain 7x7x7 Conv3d (before
  :class:`DepthTapConv3d`);
* ``occlusion_conv2d``: the one-channel 7x7 occlusion conv as the plain Conv2d (before
  :class:`SpatialTapConv2d`);
* ``hourglass_110``: the hourglass input back at 110 channels and its output at 142 (before
  ``DenseMotionNetwork.pad_hourglass_channels_`` padded them to 112 and 144);
* ``depth_taps_everywhere``: every 3-D conv of the warp network with depth taps as
  :class:`DepthTapConv3d` (the 3x3x3 hourglass convs too; the compiled engine runs each on the
  Triton kernel of ``ditto_core/models/slice_conv_triton.py``, as it does the mask conv);
* ``depth_taps_full_res``: the same for the three 3x3x3 convs at the volume's full 64x64
  resolution only (the first down block's and last up block's, on which cuDNN picks an Ampere
  kernel, and the hourglass's output conv);
* ``pad_channels_8``: conv channels zero-padded to multiples of 8 (the warp network has 110,
  142 and 22);
* ``cudnn_benchmark``: ``torch.backends.cudnn.benchmark`` on (cuDNN times its algorithms for
  each convolution shape instead of using its heuristics);
* ``freezing+cudnn_benchmark``: with Inductor's ``freezing`` too (weights become constants:
  folded, and pre-laid-out for the convolution layout Inductor chooses);
* ``channels_last+...``: conv weights stored NHWC / NDHWC before compiling;
* ``ncdhw_3d``: the 3-D conv weights (the hourglass) stored NCDHW again (before
  ``WarpingNetwork.prepare_for_inference`` stored them NDHWC);
* ``cudnn_mask_conv``: the mask conv's depth-sliced 7x7 conv by cuDNN (before the engine ran
  it as the Triton kernel of ``ditto_core/models/slice_conv_triton.py``);
* ``pytorch_sampling``: the warp network's two trilinear samplings by PyTorch (float32
  ``grid_sample`` between casts and layout copies; before the engine ran the kernels of
  ``ditto_core/models/volume_sampling_triton.py``); ``pytorch_hourglass_input`` and
  ``pytorch_feature_warp``: one of the two each;
* ``pad_mask_taps``: the mask conv's 154 tap channels (7 depth taps x 22) zero-padded to 160;
* ``max_autotune``: Inductor's Triton convolution templates benchmarked against cuDNN (slow to
  compile);
* ``coordinate_descent``: Inductor tunes the block sizes of its own Triton kernels (the SPADE
  normalisations, activations, copies) by coordinate descent;
* ``conv_1x1_as_mm``: Inductor runs 1x1 convolutions as matrix products.

The breakdown part times each network stage eagerly with CUDA events (forward hooks) and lists
the GPU kernels of one compiled replay by total time, grouped by kind (convolution, Triton
fusions, grid sampling, other) for each variant.

    python -m bench.bench_warp_decode_variants --out $OUT/variants.json            # GPU
    python -m bench.bench_warp_decode_variants --variants baseline mask_conv3d --no-breakdown
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import re
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Callable, Iterator, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn


from ditto_core.models.depth_tap_conv import DepthTapConv3d
from ditto_core.precision import NETWORK_PRECISIONS, network_dtype
from ditto_core.render.warp_decode import WarpDecodeEngine

from .bench_common import cuda_event_times, emit, rel_l2, summary_ms
from .scene import (
    Settings, channels_last_copies, make_scene, reference_renders, render_networks,
)

VARIANTS: dict[str, dict] = {
    "baseline": {},
    "mask_conv3d": {"mask_conv3d": True},
    "occlusion_conv2d": {"occlusion_conv2d": True},
    "hourglass_110": {"hourglass_110": True},
    "cudnn_benchmark": {"cudnn_benchmark": True},
    "freezing+cudnn_benchmark": {"inductor": {"freezing": True}, "cudnn_benchmark": True},
    "channels_last+cudnn_benchmark": {"channels_last": True, "cudnn_benchmark": True},
    "pad_channels_8": {"pad_channels": 8},
    "depth_taps_everywhere": {"depth_taps_everywhere": True},
    "depth_taps_full_res": {"depth_taps_full_res": True},
    "channels_last+pad_channels_8": {"channels_last": True, "pad_channels": 8},
    "ncdhw_3d": {"ncdhw_3d": True},
    "pad_mask_taps": {"pad_mask_taps": True},
    "cudnn_mask_conv": {"pytorch_layers": ("mask_conv",)},
    "pytorch_sampling": {"pytorch_layers": ("hourglass_input", "feature_warp")},
    "pytorch_hourglass_input": {"pytorch_layers": ("hourglass_input",)},
    "pytorch_feature_warp": {"pytorch_layers": ("feature_warp",)},
    "max_autotune": {"inductor": {"max_autotune": True, "max_autotune_gemm_backends": "ATEN,TRITON"}},
    "coordinate_descent": {"inductor": {"coordinate_descent_tuning": True}},
    "conv_1x1_as_mm": {"inductor": {"conv_1x1_as_mm": True}},
}
DEFAULT_VARIANTS = ("baseline", "ncdhw_3d", "hourglass_110", "occlusion_conv2d", "pad_channels_8")
ERROR_FRAMES = 4
KERNEL_KINDS = (  # first match wins: Inductor names its fusions after the ops they absorbed
    ("triton_fusion", re.compile(r"^triton_", re.I)),
    ("layout_copy", re.compile(r"nchwToNhwc|nhwcToNchw|AddPadding", re.I)),
    ("convolution", re.compile(r"conv|xmma|implicit|cudnn|cutlass|sm\d\d_|fprop|gemm|nvjet", re.I)),
    ("grid_sample", re.compile(r"grid_sampler", re.I)),
)


@contextlib.contextmanager
def variant_settings(spec: dict) -> Iterator[None]:
    saved = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = spec.get("cudnn_benchmark", False)
    try:
        with torch._inductor.config.patch(spec.get("inductor", {})):
            yield
    finally:
        torch.backends.cudnn.benchmark = saved


class ChannelPaddedConv(nn.Module):
    """A conv with its input and output channels zero-padded to a multiple (an experiment:
    do the odd channel counts of the warp network, 110/142/22, keep cuDNN off its fast kernels?)."""

    def __init__(self, conv: nn.Conv2d | nn.Conv3d, multiple: int) -> None:
        super().__init__()
        out_c, in_c = conv.weight.shape[:2]
        self.in_pad = -in_c % multiple
        self.out_channels = out_c
        weight = conv.weight.new_zeros(out_c + -out_c % multiple, in_c + self.in_pad, *conv.weight.shape[2:])
        weight[:out_c, :in_c] = conv.weight
        bias = None
        if conv.bias is not None:
            bias = conv.bias.new_zeros(weight.shape[0])
            bias[:out_c] = conv.bias
        self.conv = copy.deepcopy(conv)
        self.conv.weight, self.conv.bias = nn.Parameter(weight), None if bias is None else nn.Parameter(bias)

    def forward(self, x: Tensor) -> Tensor:
        if self.in_pad:
            x = F.pad(x, (0, 0) * (x.dim() - 2) + (0, self.in_pad))
        return self.conv(x)[:, : self.out_channels]


def with_replaced(nets: tuple[nn.Module, ...], replace: Callable[[nn.Module], Optional[nn.Module]]
                   ) -> tuple[nn.Module, ...]:
    """Copies of ``nets`` in which every submodule for which ``replace`` returns a module is swapped for it."""
    copies = tuple(copy.deepcopy(net) for net in nets)
    for net in copies:
        for parent in list(net.modules()):
            for name, child in list(parent.named_children()):
                new = replace(child)
                if new is not None:
                    setattr(parent, name, new)
    return copies


def pad_conv_channels(nets: tuple[nn.Module, ...], multiple: int) -> tuple[nn.Module, ...]:
    def replace(child: nn.Module) -> Optional[nn.Module]:
        odd = isinstance(child, (nn.Conv2d, nn.Conv3d)) and child.groups == 1 and (
            child.in_channels % multiple or child.out_channels % multiple)
        return ChannelPaddedConv(child, multiple) if odd else None

    return with_replaced(nets, replace)


class _KeepDtype(nn.Module):
    """A :class:`DepthTapConv3d` whose float32 sums are cast back to the input's dtype (for
    layers whose output feeds another half-precision conv)."""

    def __init__(self, conv: nn.Conv3d) -> None:
        super().__init__()
        self.conv = DepthTapConv3d(conv)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(x).to(x.dtype)


def depth_taps_everywhere(nets: tuple[nn.Module, ...]) -> tuple[nn.Module, ...]:
    return with_replaced(
        nets, lambda child: _KeepDtype(child) if isinstance(child, nn.Conv3d) and child.kernel_size[0] > 1 else None)


def depth_taps_full_res(nets: tuple[nn.Module, nn.Module]) -> tuple[nn.Module, nn.Module]:
    """Copies whose 3x3x3 convs at the feature volume's full resolution are depth-tap convs."""
    warp, decoder = (copy.deepcopy(net) for net in nets)
    hourglass = warp.dense_motion_network.hourglass
    for parent in (hourglass.encoder.down_blocks[0], hourglass.decoder.up_blocks[-1], hourglass.decoder):
        parent.conv = _KeepDtype(parent.conv)
    return warp, decoder


def with_mask_conv3d(nets: tuple[nn.Module, nn.Module]) -> tuple[nn.Module, nn.Module]:
    """Copies with the occlusion-mask conv back as the 7x7x7 Conv3d it replaces."""
    warp, decoder = (copy.deepcopy(net) for net in nets)
    dense = warp.dense_motion_network
    taps = dense.mask
    weight = taps.slice_conv.weight
    conv = nn.Conv3d(weight.shape[1], taps.out_channels, (taps.taps, *weight.shape[2:]),
                     padding=(taps.taps // 2, *taps.slice_conv.padding)).to(weight)
    conv.weight = nn.Parameter(weight.unflatten(0, (taps.taps, taps.out_channels)).permute(1, 2, 0, 3, 4).contiguous())
    conv.bias = taps.bias
    dense.mask = conv
    return warp, decoder


def with_occlusion_conv2d(nets: tuple[nn.Module, nn.Module]) -> tuple[nn.Module, nn.Module]:
    """Copies with the occlusion conv back as the 7x7 Conv2d it replaces."""
    warp, decoder = (copy.deepcopy(net) for net in nets)
    dense = warp.dense_motion_network
    taps = dense.occlusion
    (height, width), out_channels = taps.kernel_size, taps.out_channels
    weight = taps.tap_weight.unflatten(0, (height, width, out_channels)).permute(2, 3, 0, 1).contiguous()
    conv = nn.Conv2d(weight.shape[1], out_channels, (height, width), padding=(height // 2, width // 2)).to(weight)
    conv.weight, conv.bias = nn.Parameter(weight), taps.bias
    dense.occlusion = conv
    return warp, decoder


def with_hourglass_110(nets: tuple[nn.Module, nn.Module]) -> tuple[nn.Module, nn.Module]:
    """Copies with the hourglass's zero padding channels removed again (110 in, 142 out)."""
    warp, decoder = (copy.deepcopy(net) for net in nets)
    dense = warp.dense_motion_network
    pad, dense.input_padding = dense.input_padding, 0
    hourglass = dense.hourglass
    hidden = hourglass.out_channels - pad

    def keep(module: nn.Module, name: str, dim: int, count: int) -> None:
        tensor = getattr(module, name)
        setattr(module, name, nn.Parameter(tensor.narrow(dim, 0, count).contiguous()))

    keep(hourglass.encoder.down_blocks[0].conv, "weight", 1, hourglass.encoder.down_blocks[0].conv.in_channels - pad)
    keep(hourglass.decoder.conv, "weight", 1, hidden)
    keep(hourglass.decoder.conv, "weight", 0, hidden)
    keep(hourglass.decoder.conv, "bias", 0, hidden)
    keep(dense.mask.slice_conv, "weight", 1, hidden)
    taps = dense.occlusion.tap_weight
    dense.occlusion.tap_weight = nn.Parameter(taps.unflatten(1, (hidden + pad, -1))[:, :hidden].flatten(1, 2))
    hourglass.out_channels = hourglass.decoder.out_channels = hidden
    return warp, decoder


def with_ncdhw_3d_weights(nets: tuple[nn.Module, nn.Module]) -> tuple[nn.Module, nn.Module]:
    """Copies whose 3-D conv weights are stored NCDHW (contiguous) instead of NDHWC."""
    copies = tuple(copy.deepcopy(net) for net in nets)
    for param in copies[0].parameters():
        if param.dim() == 5:
            param.data = param.data.contiguous()
    return copies


def with_padded_mask_taps(nets: tuple[nn.Module, nn.Module]) -> tuple[nn.Module, nn.Module]:
    """Copies whose mask conv makes 160 tap channels (6 of them zero) and drops the padding."""
    warp, decoder = (copy.deepcopy(net) for net in nets)
    mask = warp.dense_motion_network.mask
    mask.slice_conv = ChannelPaddedConv(mask.slice_conv, 8)
    return warp, decoder


# Variant spec keys that rebuild the networks (each called with the networks and the key's
# value), applied in this order.
NETWORK_CHANGES: dict[str, Callable[[tuple[nn.Module, ...], object], tuple[nn.Module, ...]]] = {
    "mask_conv3d": lambda nets, _: with_mask_conv3d(nets),
    "occlusion_conv2d": lambda nets, _: with_occlusion_conv2d(nets),
    "hourglass_110": lambda nets, _: with_hourglass_110(nets),
    "depth_taps_everywhere": lambda nets, _: depth_taps_everywhere(nets),
    "depth_taps_full_res": lambda nets, _: depth_taps_full_res(nets),
    "pad_channels": pad_conv_channels,
    "ncdhw_3d": lambda nets, _: with_ncdhw_3d_weights(nets),
    "pad_mask_taps": lambda nets, _: with_padded_mask_taps(nets),
    "pytorch_layers": lambda nets, names: with_pytorch_layers(nets, *names),
    "channels_last": lambda nets, _: channels_last_copies(nets),
}


def ignoring_triton_switch(layer: nn.Module) -> nn.Module:
    """``layer`` made to run PyTorch's ops whatever the engine decides: its class becomes a
    subclass whose ``use_triton`` reads False and ignores being set."""
    kind = type(layer)
    layer.__dict__.pop("use_triton", None)
    layer.__class__ = type(f"PyTorch{kind.__name__}", (kind,),
                           {"use_triton": property(lambda self: False, lambda self, enabled: None)})
    return layer


# Where each "back to PyTorch" variant's layers sit in the warp network.
PYTORCH_LAYERS = {
    "mask_conv": ("dense_motion_network.mask",),
    "hourglass_input": ("dense_motion_network",),
    "feature_warp": ("",),
}


def with_pytorch_layers(nets: tuple[nn.Module, nn.Module], *names: str) -> tuple[nn.Module, nn.Module]:
    """Copies whose named warp-network layers (keys of :data:`PYTORCH_LAYERS`) keep PyTorch's ops."""
    warp, decoder = (copy.deepcopy(net) for net in nets)
    for name in names:
        for path in PYTORCH_LAYERS[name]:
            ignoring_triton_switch(warp.get_submodule(path))
    return warp, decoder


def run_variant(name: str, nets: tuple[nn.Module, nn.Module], inputs: tuple[Tensor, Tensor, Tensor],
                batch: int, reference: Tensor, cache_dir: Path, reps: int, profile: bool) -> dict:
    spec = VARIANTS[name]
    torch._dynamo.reset()
    for key, change in NETWORK_CHANGES.items():
        if spec.get(key):
            nets = change(nets, spec[key])
    f_s, kp_s, kp_d = inputs
    with variant_settings(spec):
        engine = WarpDecodeEngine(*nets, batch_size=batch, compile=True, cache_dir=cache_dir)
        start = time.perf_counter()
        for _ in range(3):  # compile + warm-up, CUDA-graph record, first replay
            out = engine.render_batch(f_s, kp_s[:batch], kp_d[:batch])
        torch.cuda.synchronize()
        ready_s = time.perf_counter() - start
        times = cuda_event_times(lambda: engine.render_batch(f_s, kp_s[:batch], kp_d[:batch]), reps)
        kernels = kernel_breakdown(engine, inputs, batch) if profile else None
    n = min(len(reference), batch)  # a batch smaller than the reference is compared frame for frame
    result = {
        "spec": spec, "compiled": engine.stats.compiled, "reason_eager": engine.stats.reason_eager,
        "triton_kernels": engine.stats.triton_kernels,
        "compile_ready_s": ready_s, "ms_per_frame": summary_ms([t / batch for t in times]),
        "rel_l2_vs_strict_fp32": rel_l2(out[:n], reference[:n]),
    }
    if kernels is not None:
        result["kernels"] = kernels
    return result


def stage_breakdown(nets: tuple[nn.Module, nn.Module], inputs: tuple[Tensor, Tensor, Tensor], batch: int,
                    reps: int) -> dict[str, float]:
    """Eager ms per frame of each stage, from CUDA events recorded by forward hooks."""
    warp, decoder = nets
    dense = warp.dense_motion_network
    stages = {
        "warp.hourglass": dense.hourglass, "warp.mask_conv_7x7x7": dense.mask,
        "warp.occlusion_conv": dense.occlusion, "warp.third": warp.third, "warp.fourth": warp.fourth,
        "decoder.fc": decoder.fc, **{f"decoder.G_middle_{i}": getattr(decoder, f"G_middle_{i}") for i in range(6)},
        "decoder.up_0": decoder.up_0, "decoder.up_1": decoder.up_1, "decoder.conv_img": decoder.conv_img,
        "warp.total": warp, "decoder.total": decoder,
    }
    events: dict[str, list[tuple[torch.cuda.Event, torch.cuda.Event]]] = defaultdict(list)
    handles = []
    for name, module in stages.items():
        def pre(_m, _a, name=name):
            start = torch.cuda.Event(enable_timing=True)
            start.record()
            events[name].append((start, None))

        def post(_m, _a, _o, name=name):
            stop = torch.cuda.Event(enable_timing=True)
            stop.record()
            events[name][-1] = (events[name][-1][0], stop)

        handles += [module.register_forward_pre_hook(pre), module.register_forward_hook(post)]
    engine = WarpDecodeEngine(*nets, batch_size=batch, compile=False)
    f_s, kp_s, kp_d = inputs
    try:
        engine.render_batch(f_s, kp_s[:batch], kp_d[:batch])
        torch.cuda.synchronize()
        events.clear()
        for _ in range(reps):
            engine.render_batch(f_s, kp_s[:batch], kp_d[:batch])
        torch.cuda.synchronize()
    finally:
        for handle in handles:
            handle.remove()
    return {name: sum(a.elapsed_time(b) for a, b in pairs) / (reps * batch) for name, pairs in events.items()}


def kernel_breakdown(engine: WarpDecodeEngine, inputs: tuple[Tensor, Tensor, Tensor], batch: int,
                     reps: int = 5, top: int = 30) -> dict:
    """GPU kernels of ``reps`` compiled replays: ms per frame by kind and the ``top`` kernels."""
    f_s, kp_s, kp_d = inputs
    activities = [torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(reps):
            engine.render_batch(f_s, kp_s[:batch], kp_d[:batch])
        torch.cuda.synchronize()
    per_frame = reps * batch
    kinds: dict[str, float] = defaultdict(float)
    kernels = []
    for event in prof.key_averages():
        ms = event.device_time_total / 1000 / per_frame
        if ms <= 0:
            continue
        kind = next((k for k, pattern in KERNEL_KINDS if pattern.search(event.key)), "other")
        kinds[kind] += ms
        kernels.append({"kernel": event.key[:160], "kind": kind, "calls_per_replay": event.count // reps,
                        "ms_per_frame": ms})
    kernels.sort(key=lambda k: -k["ms_per_frame"])
    return {"by_kind_ms_per_frame": dict(kinds), "total_ms_per_frame": sum(kinds.values()), "top": kernels[:top]}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(DEFAULT_VARIANTS))
    parser.add_argument("--precision", choices=NETWORK_PRECISIONS, default="fp16")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--no-breakdown", action="store_true", help="skip the stage and kernel breakdowns")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_warp_decode_variants.py needs a CUDA GPU")
    device = torch.device("cuda")
    settings = Settings(device, max(args.batch, ERROR_FRAMES), 1080, 1920, 64, args.batch, (args.precision,),
                        compile=True, reps=args.reps, preset="ultrafast", crf=18)
    scene, _ = make_scene(settings)
    dtype = network_dtype(args.precision)
    reference = reference_renders(render_networks(device, torch.float32), scene, ERROR_FRAMES)
    nets = render_networks(device, dtype)
    inputs = (scene.source.f_s.to(dtype), scene.motion.kp_source, scene.motion.kp_driving)
    results: dict = {"config": {"precision": args.precision, "batch": args.batch, "reps": args.reps,
                                "hardware": torch.cuda.get_device_name(device), "torch": torch.__version__},
                     "variants": {}}
    with tempfile.TemporaryDirectory(prefix="variants_") as tmp:  # one cache: variants share most kernels
        for name in args.variants:
            try:
                result = run_variant(name, nets, inputs, args.batch, reference, Path(tmp), args.reps,
                                     profile=not args.no_breakdown)
            except Exception as error:  # one broken variant must not lose the others' numbers
                results["variants"][name] = {"error": f"{type(error).__name__}: {error}"}
                continue
            results["variants"][name] = result
            print(f"{name:32s} {result['ms_per_frame']['median_ms']:.3f} ms/frame  "
                  f"compile {result['compile_ready_s']:.1f} s  err {result['rel_l2_vs_strict_fp32']:.2e}", flush=True)
            if args.out is not None:  # so far, in case a later variant runs out of time
                emit(results, args.out, quiet=True)
    if not args.no_breakdown:
        results["stages_eager_ms_per_frame"] = stage_breakdown(nets, inputs, args.batch, 3)
    emit(results, args.out)


if __name__ == "__main__":
    main()
