"""Session 34 probe: where an eager warp+decode batch spends its GPU time, as a new process's
first clip runs it (fp16, batch 32, our Triton kernels on, as the engine sets them where it can
compile), against the same batch compiled (plain Inductor kernels, as under ComfyUI's allocator).

PROBE_DECODER_KERNELS=1 switches the decoder's eager kernels on (ditto_core/models/spade_norm_triton.py);
PROBE_COMPILED=0 skips the compiled batch. Prints and writes $OUT/eager_profile.json: ms per frame (CUDA events), kernels by kind and the
top kernels of each path, and eager stage times from forward hooks.
"""
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, os.getcwd())
from bench.bench_warp_decode_variants import KERNEL_KINDS  # noqa: E402
from bench.scene import render_networks  # noqa: E402
from ditto_core.models.triton_kernels import use_triton_kernels_  # noqa: E402
from ditto_core.render.aot_package import warp_decode_step  # noqa: E402

BATCH, REPS = 32, 5
dev = torch.device("cuda")
warp, decoder = render_networks(dev, torch.float16)
print("triton layers", use_triton_kernels_(warp, True), flush=True)
if os.environ.get("PROBE_DECODER_KERNELS") == "1":  # the decoder's eager kernels (after call 4)
    print("decoder blocks with kernels", use_triton_kernels_(decoder, True), flush=True)
g = torch.Generator().manual_seed(1)
f_s = torch.randn(1, 32, 16, 64, 64, generator=g).to(dev, torch.float16)
kp_s = (torch.randn(BATCH, 21, 3, generator=g) * 0.1).to(dev)
kp_d = kp_s + 0.01 * torch.randn(BATCH, 21, 3, generator=g).to(dev)


def timed(fn, reps=REPS):
    fn(); torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    stop.record(); torch.cuda.synchronize()
    return start.elapsed_time(stop) / reps / BATCH


def kernels(fn):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(REPS):
            fn()
        torch.cuda.synchronize()
    kinds, top = defaultdict(float), []
    for e in prof.key_averages():
        ms = e.device_time_total / 1000 / (REPS * BATCH)
        if ms <= 0:
            continue
        kind = next((k for k, p in KERNEL_KINDS if p.search(e.key)), "other")
        kinds[kind] += ms
        top.append({"kernel": e.key[:140], "kind": kind, "calls": e.count // REPS, "ms_per_frame": round(ms, 4)})
    top.sort(key=lambda k: -k["ms_per_frame"])
    return {"by_kind": {k: round(v, 4) for k, v in kinds.items()}, "total": round(sum(kinds.values()), 4),
            "kernels_per_batch": sum(k["calls"] for k in top), "top": top[:45]}


def stages():
    dense = warp.dense_motion_network
    named = {"warp.dense_motion": dense, "warp.hourglass": dense.hourglass, "warp.mask": dense.mask,
             "warp.third": warp.third, "warp.fourth": warp.fourth, "decoder.fc": decoder.fc,
             **{f"decoder.G_middle_{i}": getattr(decoder, f"G_middle_{i}") for i in range(6)},
             "decoder.up_0": decoder.up_0, "decoder.up_1": decoder.up_1, "decoder.conv_img": decoder.conv_img,
             "warp.total": warp, "decoder.total": decoder}
    events, hooks = defaultdict(list), []
    for name, m in named.items():
        def pre(_m, _a, name=name):
            e = torch.cuda.Event(enable_timing=True); e.record(); events[name].append([e, None])

        def post(_m, _a, _o, name=name):
            e = torch.cuda.Event(enable_timing=True); e.record(); events[name][-1][1] = e
        hooks += [m.register_forward_pre_hook(pre), m.register_forward_hook(post)]
    try:
        eager(); torch.cuda.synchronize(); events.clear()
        for _ in range(REPS):
            eager()
        torch.cuda.synchronize()
    finally:
        for h in hooks:
            h.remove()
    return {n: round(sum(a.elapsed_time(b) for a, b in p) / (REPS * BATCH), 4) for n, p in events.items()}


out = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "batch": BATCH}
with torch.inference_mode():
    eager = lambda: warp_decode_step(warp, decoder, f_s, kp_s, kp_d)  # noqa: E731
    ref = eager().float()
    out["eager_ms_per_frame"] = round(timed(eager), 4)
    print("eager", out["eager_ms_per_frame"], flush=True)
    out["eager_kernels"] = kernels(eager)
    out["eager_stages"] = stages()
    print(json.dumps(out["eager_stages"]), flush=True)
    Path(os.environ.get("OUT", "/tmp"), "eager_profile.json").write_text(json.dumps(out, indent=1))
    if os.environ.get("PROBE_COMPILED", "1") == "1":
        t = time.perf_counter()
        compiled = torch.compile(lambda a, b, c: warp_decode_step(warp, decoder, a, b, c), dynamic=False)
        step = lambda: compiled(f_s, kp_s, kp_d)  # noqa: E731
        got = step().float(); torch.cuda.synchronize()
        out["compile_s"] = round(time.perf_counter() - t, 1)
        out["compiled_rel_l2"] = float((got - ref).norm() / ref.norm())
        out["compiled_ms_per_frame"] = round(timed(step), 4)
        print("compiled", out["compiled_ms_per_frame"], "compile s", out["compile_s"], flush=True)
        out["compiled_kernels"] = kernels(step)
for side in ("eager_kernels", "compiled_kernels"):
    if side in out:
        print(side, out[side]["total"], out[side]["kernels_per_batch"], json.dumps(out[side]["by_kind"]))
        for k in out[side]["top"][:25]:
            print("  ", k["ms_per_frame"], k["calls"], k["kind"], k["kernel"][:110])
Path(os.environ.get("OUT", "/tmp"), "eager_profile.json").write_text(json.dumps(out, indent=1))
