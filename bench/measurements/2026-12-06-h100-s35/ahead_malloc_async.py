"""Session 35: the motion ahead of the render under cudaMallocAsync (ComfyUI's allocator), now that
the render is marked as work beside recordings: two clips of the smoke-mode pipeline (random
weights, the stand-in HuBERT), fp16, motion_ahead=True, the eager path primed as the nodes do.
The caller counts "uncaptured free of a captured allocation" warnings on stderr (session 35's
real ComfyUI printed 20 with the worker recording beside the render).

    PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync python3 ahead_malloc_async.py EXAMPLE_DIR
"""
import sys
import tempfile
from pathlib import Path

import torch

from ditto_core.motion.motion_options import MotionOptions
from ditto_core.pipeline import DittoPipeline
from ditto_core.registration.options import RegistrationOptions

example = Path(sys.argv[1])
with tempfile.TemporaryDirectory() as tmp:
    pipeline = DittoPipeline.random(Path(tmp), "cuda", torch.float16, compile=False, motion_ahead=True)
    pipeline.start_warmup()
    for clip in range(2):
        pipeline.run(example / "portrait.jpg", example / "speech_24k_mono.wav", Path(tmp) / f"{clip}.mp4",
                     RegistrationOptions(detect_face=False), MotionOptions(steps=25), preset="ultrafast", max_seconds=8)
        sampler = next(iter(pipeline._samplers.values()))
        print("clip", clip, {k: round(v, 3) for k, v in pipeline.times.seconds.items()}, "window graphs",
              len(sampler._graphs), flush=True)
    del pipeline, sampler
    torch.cuda.synchronize()
print("allocator", torch.cuda.memory.get_allocator_backend())
