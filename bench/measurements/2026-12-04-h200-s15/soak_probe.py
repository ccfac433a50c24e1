"""Which allocation appears between the soak's first and second render (call 2: +33 MiB, then flat).

Runs the soak test's pipeline (random weights, compiled engine at batch 8, 1 s of the example)
three times with the CUDA allocator recording its history, and prints, for every block alive
after render N+1 but not after render N, its size and the Python frames that allocated it.
"""
import gc
import sys
import tempfile
from pathlib import Path

import torch

from ditto_core.motion.motion_options import MotionOptions
from ditto_core.pipeline import DittoPipeline
from ditto_core.registration.cache import AvatarCache
from ditto_core.registration.options import RegistrationOptions

example = Path(sys.argv[1])
torch.cuda.memory._record_memory_history(max_entries=200000)


def live_blocks() -> dict:
    blocks = {}
    for segment in torch.cuda.memory._snapshot()["segments"]:
        for block in segment["blocks"]:
            if block["state"] == "active_allocated":
                blocks[block["address"]] = block
    return blocks


with tempfile.TemporaryDirectory() as tmp:
    tmp = Path(tmp)
    pipe = DittoPipeline.random(tmp, device="cuda", compile=True, batch_size=8)
    pipe.cache = AvatarCache(tmp / "cache")
    before = None
    for run in range(3):
        out = pipe.run(example / "portrait.jpg", example / "speech_24k_mono.wav", tmp / f"run{run}.mp4",
                       RegistrationOptions(detect_face=False), MotionOptions(seed=run), preset="ultrafast",
                       max_seconds=1.0)
        out.unlink()
        gc.collect()
        torch.cuda.synchronize()
        now = live_blocks()
        print(f"after render {run}: allocated {torch.cuda.memory_allocated() / 2**20:.1f} MiB in {len(now)} blocks",
              flush=True)
        if before is not None:
            for address in sorted(set(now) - set(before)):
                block = now[address]
                frames = [f"{f['filename'].split('site-packages/')[-1]}:{f['line']} {f['name']}"
                          for f in block.get("frames", []) if f["filename"].endswith(".py")]
                print(f"  new block {block['size'] / 2**20:.1f} MiB:", " <- ".join(frames[:14]), flush=True)
            for address in sorted(set(before) - set(now)):
                print(f"  freed block {before[address]['size'] / 2**20:.1f} MiB", flush=True)
        before = now
