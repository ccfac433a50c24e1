"""Session 28: why is a ComfyUI process's first clip after the deferred compile slower than the
next? (call 2: 1.61-2.95 s against 1.44-1.65 queued right after, and a later prompt after the
same idle wait is not slow.) One process, ComfyUI's allocator (set PYTORCH_CUDA_ALLOC_CONF in the
shell), the engine as ComfyUI builds it (fp16, batch 32, "deferred"): clip 1 eager (the compile
starts at its end, in a thread), a wait, then clips 2 and 3 on this thread, each batch timed to
its end, Dynamo's counters before and after each clip, and where this thread's Python time went
(cProfile, top functions). Random networks of the official layout; frames not encoded.

    PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync python3 second_clip_probe.py MODELS OUT.json
"""
import cProfile
import io
import json
import pstats
import sys
import time

import torch

from ditto_core.models.checkpoints import load_network
from ditto_core.render.warp_decode import WarpDecodeEngine
from tests.test_warp_decode import make_motion, make_source


def dynamo_counts() -> dict:
    from torch._dynamo.utils import counters

    return {f"{group}.{key}": value for group in ("stats", "recompiles", "frames") for key, value in counters[group].items()}


def clip(engine, source, motion) -> dict:
    before = dynamo_counts() if "torch._dynamo" in sys.modules else {}
    profile, times = cProfile.Profile(), []
    start = time.perf_counter()
    profile.enable()
    last = start
    for _, images in engine.iter_render(source, motion):
        if images.is_cuda:
            torch.cuda.synchronize()
        now = time.perf_counter()
        times.append(round(now - last, 4))
        last = now
    profile.disable()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(12)
    after = dynamo_counts() if "torch._dynamo" in sys.modules else {}
    return {"seconds": round(time.perf_counter() - start, 3), "batches_s": times,
            "graph_batches": engine.stats.graph_batches, "eager_batches": engine.stats.eager_batches,
            "dynamo_changed": {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)},
            "profile_top": text.getvalue().splitlines()[:40]}


def main() -> None:
    models, out = sys.argv[1], sys.argv[2]
    device, frames = (sys.argv[3], int(sys.argv[4])) if len(sys.argv) > 4 else ("cuda", 394)  # a CPU dry run: cpu 40
    dtype = torch.float16 if device == "cuda" else torch.float32
    nets = [load_network(name, models, device=device, dtype=dtype) for name in ("warp_network", "decoder")]
    engine = WarpDecodeEngine(*nets, batch_size=32, warmup="deferred")
    engine.prime(full_batch=True)
    source = make_source(torch.randn(1, 32, 16, 64, 64, generator=torch.Generator().manual_seed(0)))
    motion = make_motion(frames)
    result = {"backend": torch.cuda.memory.get_allocator_backend() if device == "cuda" else None, "clip1": clip(engine, source, motion)}
    start = time.perf_counter()
    while engine.stats.compiled and not engine.compiled_ready() and time.perf_counter() - start < 300:
        time.sleep(0.1)
    result["compile_s"] = engine.stats.compile_seconds
    time.sleep(4 if frames > 100 else 0)
    result["clip2"] = clip(engine, source, make_motion(frames, seed=2))
    result["clip3"] = clip(engine, source, make_motion(frames, seed=3))
    time.sleep(10 if frames > 100 else 0)
    result["clip4_after_10s"] = clip(engine, source, make_motion(frames, seed=4))
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    for name in ("clip1", "clip2", "clip3", "clip4_after_10s"):
        print(name, result[name]["seconds"], result[name]["batches_s"][:6], result[name]["dynamo_changed"])


if __name__ == "__main__":
    main()
