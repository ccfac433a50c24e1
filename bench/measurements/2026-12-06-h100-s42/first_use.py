"""Session 42 probe: what a new process's first eager warp+decode batch pays, module by module.

A fresh interpreter builds the fp16 networks as the CLI renders a clip under its compile
threshold (every Triton kernel of ours on), then runs a batch of 32 twice and a batch of 6 (a
394-frame clip's last) twice, each module timed by hooks (its own time: its children's taken out) that synchronise before and after
it. Printed: the batch walls, then the modules whose first call cost most over their second,
grouped by class, and the largest single ones.
"""
import collections
import os
import sys
import time

T0 = time.perf_counter()
import torch  # noqa: E402

sys.path.insert(0, os.getcwd())
from bench.scene import render_networks  # noqa: E402
from ditto_core.models.triton_kernels import use_triton_kernels_  # noqa: E402
from ditto_core.render.aot_package import warp_decode_step  # noqa: E402

print(f"imports {time.perf_counter() - T0:.2f} s", flush=True)
dev = torch.device("cuda")
t = time.perf_counter()
torch.zeros(1, device=dev)
torch.cuda.synchronize()
print(f"cuda init {time.perf_counter() - t:.3f} s", flush=True)
t = time.perf_counter()
warp, decoder = render_networks(dev, torch.float16)
print(f"networks {time.perf_counter() - t:.2f} s; kernels on", use_triton_kernels_(warp, True),
      use_triton_kernels_(decoder, True), flush=True)

calls: dict[str, list[float]] = collections.defaultdict(list)
stack: list[list[float]] = []  # [start, time spent in children] of each module being run


def before(module, _inputs):
    torch.cuda.synchronize()
    stack.append([time.perf_counter(), 0.0])


def after(module, _inputs, _output):
    torch.cuda.synchronize()
    start, in_children = stack.pop()
    inclusive = time.perf_counter() - start
    calls[module._ditto_name].append(inclusive - in_children)  # the module's own code and ops
    if stack:
        stack[-1][1] += inclusive


for root, label in ((warp, "warp"), (decoder, "decoder")):
    for name, module in root.named_modules():
        module._ditto_name = f"{label}.{name or '(root)'}:{type(module).__name__}"
        module.register_forward_pre_hook(before)
        module.register_forward_hook(after)

g = torch.Generator().manual_seed(1)
f_s = torch.randn(1, 32, 16, 64, 64, generator=g).to(dev).half()
walls = []
with torch.inference_mode():
    for batch in (32, 32, 6, 6):
        kp_s = (torch.randn(batch, 21, 3, generator=g) * 0.1).to(dev)
        kp_d = kp_s + 0.01 * torch.randn(batch, 21, 3, generator=g).to(dev)
        torch.cuda.synchronize()
        t = time.perf_counter()
        warp_decode_step(warp, decoder, f_s, kp_s, kp_d)
        torch.cuda.synchronize()
        walls.append((batch, round(time.perf_counter() - t, 4)))
print("batch walls (hooks synchronise every leaf)", walls, flush=True)

extra = {}
for name, times in calls.items():
    n = len(times) // 4 or 1  # calls per batch
    first, second = sum(times[:n]), sum(times[n:2 * n])
    first6, second6 = sum(times[2 * n:3 * n]), sum(times[3 * n:4 * n])
    extra[name] = (first - second, first6 - second6, second)
by_class = collections.Counter()
by_class6 = collections.Counter()
for name, (d32, d6, _) in extra.items():
    by_class[name.split(":")[1]] += d32
    by_class6[name.split(":")[1]] += d6
print("first-call extra by class (batch 32 | first batch of 6):")
for cls, seconds in by_class.most_common():
    print(f"  {cls:28s} {seconds:7.3f} s | {by_class6[cls]:7.3f} s")
print("largest single modules (first - second, batch 32; batch 6; warm batch-32 call):")
for name, (d32, d6, warm) in sorted(extra.items(), key=lambda item: -item[1][0])[:25]:
    print(f"  {d32:7.3f} {d6:7.3f} {warm * 1e3:7.2f} ms  {name}")
