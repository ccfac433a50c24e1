"""Session 35 probe: which PyTorch ops of an eager warp+decode batch (fp16, batch 32, every Triton
kernel of ours on, as a new process's first clip runs it) launch the strided elementwise kernels
and copies that call 1's profile put first (0.76 + 0.42 ms a frame): each aten op with its input
shapes and strides, its CUDA time a frame, and the module it ran in (innermost forward).
Prints the top 30.
"""
import os
import sys
from collections import defaultdict

import torch

sys.path.insert(0, os.getcwd())
from bench.scene import render_networks  # noqa: E402
from ditto_core.models.triton_kernels import use_triton_kernels_  # noqa: E402
from ditto_core.render.aot_package import warp_decode_step  # noqa: E402

BATCH, REPS = 32, 3
dev = torch.device("cuda")
warp, decoder = render_networks(dev, torch.float16)
use_triton_kernels_(warp, True)
use_triton_kernels_(decoder, True)
g = torch.Generator().manual_seed(1)
f_s = torch.randn(1, 32, 16, 64, 64, generator=g).to(dev, torch.float16)
kp_s = (torch.randn(BATCH, 21, 3, generator=g) * 0.1).to(dev)
kp_d = kp_s + 0.01 * torch.randn(BATCH, 21, 3, generator=g).to(dev)

where = []  # the module stack while the batch runs


def leave(_module, _args, _output):
    where.pop()  # returns None: a forward hook's return value would replace the module's output


for name, module in list(warp.named_modules(prefix="warp")) + list(decoder.named_modules(prefix="decoder")):
    module.register_forward_pre_hook(lambda _m, _a, name=name: where.append(name))
    module.register_forward_hook(leave)


class Ops(torch.utils._python_dispatch.TorchDispatchMode):
    """Records, per aten call, the module it ran in, bracketed by CUDA events."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        out = func(*args, **(kwargs or {}))
        stop.record()
        shapes = [(tuple(a.shape), a.stride(), a.is_contiguous(memory_format=torch.channels_last) if a.dim() == 4 else None)
                  for a in args if isinstance(a, torch.Tensor)]
        self.calls.append((str(func), where[-1] if where else "-", str(shapes)[:160], start, stop))
        return out


with torch.inference_mode():
    warp_decode_step(warp, decoder, f_s, kp_s, kp_d)
    torch.cuda.synchronize()
    total = defaultdict(float)
    counts = defaultdict(int)
    for _ in range(REPS):
        with Ops() as ops:
            warp_decode_step(warp, decoder, f_s, kp_s, kp_d)
        torch.cuda.synchronize()
        for op, module, shapes, a, b in ops.calls:
            total[(op, module, shapes)] += a.elapsed_time(b) / (REPS * BATCH)
            counts[(op, module, shapes)] += 1
by_op = defaultdict(float)
for (op, _, _), ms in total.items():
    by_op[op] += ms
print("by op:", ", ".join(f"{op} {ms:.3f}" for op, ms in sorted(by_op.items(), key=lambda kv: -kv[1])[:12]))
for key, ms in sorted(total.items(), key=lambda kv: -kv[1])[:30]:
    print(f"{ms:.4f} x{counts[key] // REPS} {key[0]} {key[1]} {key[2]}")
