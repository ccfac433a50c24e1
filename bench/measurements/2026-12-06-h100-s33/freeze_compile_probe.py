"""Session 33, call 1 found main's deferred compile never finishing in a real ComfyUI on the GPU
since the freeze fix (no prompt after the first ran compiled; "before" compiled in 3.5-5.4 s).
This reproduces it without ComfyUI: the engine as ComfyUI builds it ("deferred", fp16, ComfyUI's
allocator from the shell), clip 1 eager, then what the node and ComfyUI do at a prompt's end:
freeze_live_objects() (the node), gc.collect() (ComfyUI's collection after a prompt); then it
waits for the compile, and if it is not ready after WAIT s dumps every thread's stack.

  VARIANT: nofreeze (the control), freeze (as the node, with whatever the interpreter froze before
  us), clean (gc.unfreeze() first: an interpreter with no earlier freeze, as on most machines)

    PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync python3 freeze_compile_probe.py VARIANT MODELS OUT.json [WAIT [FRAMES]]
"""
import faulthandler
import gc
import json
import sys
import threading
import time
import traceback

import torch

from ditto_core.gc_pauses import freeze_live_objects
from ditto_core.models.checkpoints import load_network
from ditto_core.render.warp_decode import WarpDecodeEngine
from tests.test_warp_decode import make_motion, make_source


def stacks() -> dict:
    names = {t.ident: t.name for t in threading.enumerate()}
    return {names.get(ident, str(ident)): traceback.format_stack(frame)[-14:]
            for ident, frame in sys._current_frames().items()}


def main() -> None:
    variant, models, out = sys.argv[1:4]
    wait = float(sys.argv[4]) if len(sys.argv) > 4 else 40.0
    frames = int(sys.argv[5]) if len(sys.argv) > 5 else 100  # a CPU dry run: a few
    faulthandler.dump_traceback_later(wait + 60, exit=True)
    result = {"variant": variant, "frozen_at_start": gc.get_freeze_count()}
    if variant == "clean":
        gc.unfreeze()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.float16 if device == "cuda" else torch.float32
    nets = [load_network(name, models, device=device, dtype=dtype) for name in ("warp_network", "decoder")]
    engine = WarpDecodeEngine(*nets, batch_size=32, warmup="deferred")
    engine.prime(full_batch=True)
    source = make_source(torch.randn(1, 32, 16, 64, 64, generator=torch.Generator().manual_seed(0)))
    start = time.perf_counter()
    for _ in engine.iter_render(source, make_motion(frames)):
        pass
    if device == "cuda":
        torch.cuda.synchronize()
    result["clip1_s"] = round(time.perf_counter() - start, 3)
    began = time.perf_counter()
    if variant != "nofreeze":
        result["froze"] = freeze_live_objects()
        result["frozen_after_freeze"] = gc.get_freeze_count()
    time.sleep(0.05)
    collect = time.perf_counter()
    gc.collect()  # ComfyUI's, after a prompt
    result["host_collect_s"] = round(time.perf_counter() - collect, 4)
    log = []
    while time.perf_counter() - began < wait and not engine.compiled_ready():
        time.sleep(0.5)
        log.append((round(time.perf_counter() - began, 1), gc.get_freeze_count(), gc.get_count()))
    result["ready"] = engine.compiled_ready()
    result["waited_s"] = round(time.perf_counter() - began, 2)
    result["compile_seconds"] = engine.stats.compile_seconds
    result["poll"] = log[::4]
    if not result["ready"]:
        result["stacks"] = stacks()
    else:
        start = time.perf_counter()
        for _ in engine.iter_render(source, make_motion(frames, seed=2)):
            pass
        if device == "cuda":
            torch.cuda.synchronize()
        result["clip2_s"] = round(time.perf_counter() - start, 3)
        result["graph_batches"] = engine.stats.graph_batches
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    print(variant, {k: v for k, v in result.items() if k not in ("stacks", "poll")})
    if "stacks" in result:
        for name, frames in result["stacks"].items():
            print("  thread", name, "".join(frames[-4:]).replace("\n", " | ")[:900])
    faulthandler.cancel_dump_traceback_later()
    import os
    os._exit(0)


if __name__ == "__main__":
    main()
