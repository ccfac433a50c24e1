"""Session 41 probe: an eager fp16 warp+decode batch of 32 (every Triton kernel of ours on, as the CLI
renders a clip under its compile threshold) with the hourglass encoder's down blocks as PyTorch's
ops ("before": the conv adding its bias, ReLU, avg_pool3d) and as one kernel of
``models/down_pool_triton.py`` ("after"), alternating in one process: ms a frame (CUDA events)
and rel-L2 against the fp32 eager batch.
"""
import os
import sys

import torch

sys.path.insert(0, os.getcwd())
from bench.scene import render_networks  # noqa: E402
from ditto_core.models.triton_kernels import use_triton_kernels_  # noqa: E402
from ditto_core.render.aot_package import warp_decode_step  # noqa: E402

BATCH, REPS = 32, 5
dev = torch.device("cuda")
g = torch.Generator().manual_seed(1)
f_s = torch.randn(1, 32, 16, 64, 64, generator=g).to(dev)
kp_s = (torch.randn(BATCH, 21, 3, generator=g) * 0.1).to(dev)
kp_d = kp_s + 0.01 * torch.randn(BATCH, 21, 3, generator=g).to(dev)
torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
with torch.inference_mode():
    reference = warp_decode_step(*render_networks(dev, torch.float32), f_s, kp_s, kp_d).float()
    torch.cuda.empty_cache()
    warp, decoder = render_networks(dev, torch.float16)
    print("warp layers with kernels", use_triton_kernels_(warp, True), "decoder",
          use_triton_kernels_(decoder, True), flush=True)
    blocks = warp.dense_motion_network.hourglass.encoder.down_blocks
    half = f_s.half()
    results = {"before": [], "after": []}
    for round_ in range(3):
        for name in results:
            for block in blocks:
                block.use_triton = name == "after"
            assert all(block.runs_kernel(half) == (name == "after") for block in blocks)
            out = warp_decode_step(warp, decoder, half, kp_s, kp_d).float()
            torch.cuda.synchronize()
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(REPS):
                warp_decode_step(warp, decoder, half, kp_s, kp_d)
            stop.record()
            torch.cuda.synchronize()
            results[name].append(round(start.elapsed_time(stop) / REPS / BATCH, 4))
            rel = float((out - reference).norm() / reference.norm())
            print(name, "round", round_, "ms/frame", results[name][-1], "rel-L2 vs fp32", f"{rel:.3e}", flush=True)
print({name: min(times) for name, times in results.items()})
