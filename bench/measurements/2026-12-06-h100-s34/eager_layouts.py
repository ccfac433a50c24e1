"""Session 34 probe: the eager warp+decode batch (fp16, batch 32, our Triton kernels on) in other
memory layouts. Call 2's profile of the eager batch (4.98 ms a frame against 2.56 compiled) had
0.67 ms of cuDNN layout transposes, 0.82 ms of strided (non-vectorised) adds and 0.54 ms of
copies: the decoder's tensors are NCHW while cuDNN's half-precision kernels are NHWC, and
F.instance_norm copies a channels-last input to NCHW. Variants (each timed with CUDA events and
profiled, rel-L2 against the fp32 networks in the current layout):

  current        as the engine runs it now
  cl_weights     the decoder's 2-D conv weights channels-last, its input channels-last
  cl_varmean     cl_weights + instance norm as var_mean (statistics in fp32, per-channel
                 scale/shift applied in one pass), which keeps the layout
  cl_groupnorm   cl_weights + instance norm as group_norm with one group per channel
  warp_cl        cl_varmean + the warp network's 2-D conv weights channels-last too
  decoder_kernels  (call 4) the decoder's own eager kernels switched on (ditto_core/models/spade_norm_triton.py)
"""
import copy
import json
import os
import sys
import types
from collections import defaultdict
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, os.getcwd())
from bench.bench_warp_decode_variants import KERNEL_KINDS  # noqa: E402
from bench.scene import render_networks  # noqa: E402
from ditto_core.models import decoder as decoder_module  # noqa: E402
from ditto_core.models.triton_kernels import use_triton_kernels_  # noqa: E402
from ditto_core.render.aot_package import warp_decode_step  # noqa: E402

BATCH, REPS = int(os.environ.get("PROBE_BATCH", "32")), 5
dev = torch.device(os.environ.get("PROBE_DEVICE", "cuda"))  # cpu: a dry run of the script
HALF = torch.float32 if dev.type == "cpu" else torch.float16  # the CPU dry run: no half 3-D pooling there
warp16, dec16 = render_networks(dev, HALF)
warp32, dec32 = render_networks(dev, torch.float32)
use_triton_kernels_(warp16, True)
g = torch.Generator().manual_seed(1)
f_s = torch.randn(1, 32, 16, 64, 64, generator=g).to(dev)
kp_s = (torch.randn(BATCH, 21, 3, generator=g) * 0.1).to(dev)
kp_d = kp_s + 0.01 * torch.randn(BATCH, 21, 3, generator=g).to(dev)


def varmean_instance_norm(x, running_mean=None, running_var=None, weight=None, bias=None,
                          use_input_stats=True, momentum=0.1, eps=1e-5):
    # Statistics in fp32 from fp32 sums (no fp32 copy of x), applied as one scale/shift pass.
    n = x.shape[2] * x.shape[3]
    mean = x.sum(dim=(2, 3), keepdim=True, dtype=torch.float32) / n
    square = torch.linalg.vector_norm(x, dim=(2, 3), keepdim=True, dtype=torch.float32).square() / n
    rstd = torch.rsqrt((square - mean.square()).clamp_min(0) + eps)
    return torch.addcmul((-mean * rstd).to(x.dtype), x, rstd.to(x.dtype))


def groupnorm_instance_norm(x, running_mean=None, running_var=None, weight=None, bias=None,
                            use_input_stats=True, momentum=0.1, eps=1e-5):
    return F.group_norm(x, x.shape[1], eps=eps)


def with_norm(norm):
    shim = types.SimpleNamespace(**{n: getattr(F, n) for n in dir(F) if not n.startswith("__")})
    if norm is not None:
        shim.instance_norm = norm
    return shim


def channels_last_(module):
    for p in module.parameters():
        if p.dim() == 4:
            p.data = p.data.contiguous(memory_format=torch.channels_last)
    return module


def kinds(fn):
    if dev.type != "cuda":
        return None
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(REPS):
            fn()
        torch.cuda.synchronize()
    out = defaultdict(float)
    strided = 0.0
    for e in prof.key_averages():
        ms = e.device_time_total / 1000 / (REPS * BATCH)
        out[next((k for k, p in KERNEL_KINDS if p.search(e.key)), "other")] += ms
        if "elementwise_kernel<128" in e.key or "direct_copy" in e.key:
            strided += ms
    return {**{k: round(v, 3) for k, v in out.items()}, "strided_or_copy": round(strided, 3)}


def timed(fn):
    if dev.type != "cuda":
        return None
    fn(); torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(3):
        a.record()
        for _ in range(REPS):
            fn()
        b.record(); torch.cuda.synchronize()
        times.append(a.elapsed_time(b) / REPS / BATCH)
    return round(sorted(times)[1], 4)


results = {"gpu": torch.cuda.get_device_name() if dev.type == "cuda" else "cpu", "torch": torch.__version__}
with torch.inference_mode():
    reference = warp_decode_step(warp32, dec32, f_s, kp_s, kp_d).float()
    variants = {
        "current": (warp16, dec16, None, False),
        "cl_weights": (warp16, channels_last_(copy.deepcopy(dec16)), None, True),
        "cl_varmean": (warp16, channels_last_(copy.deepcopy(dec16)), varmean_instance_norm, True),
        "cl_groupnorm": (warp16, channels_last_(copy.deepcopy(dec16)), groupnorm_instance_norm, True),
        "warp_cl": (channels_last_(copy.deepcopy(warp16)), channels_last_(copy.deepcopy(dec16)), varmean_instance_norm, True),
    }
    if hasattr(decoder_module, "runs_triton"):  # a tree with the decoder's kernels
        with_kernels = copy.deepcopy(dec16)
        use_triton_kernels_(with_kernels, True)
        variants["decoder_kernels"] = (warp16, with_kernels, None, False)
    for name, (w, d, norm, cl_input) in variants.items():
        decoder_module.F = with_norm(norm)
        f16 = f_s.to(HALF)

        def run(w=w, d=d, cl_input=cl_input):
            feature = w(f16.expand(BATCH, *f16.shape[1:]), kp_s, kp_d)
            if cl_input:
                feature = feature.contiguous(memory_format=torch.channels_last)
            return d(feature)
        try:
            got = run().float()
            results[name] = {"ms_per_frame": timed(run), "rel_l2_vs_fp32": float((got - reference).norm() / reference.norm()),
                             "kinds": kinds(run)}
        except Exception as error:  # one variant's failure must not lose the others
            results[name] = {"error": f"{type(error).__name__}: {error}"}
        print(name, json.dumps(results[name]), flush=True)
        Path(os.environ.get("OUT", "/tmp"), "eager_layouts.json").write_text(json.dumps(results, indent=1))
    decoder_module.F = F
