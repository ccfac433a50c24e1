"""Session 55: the warm worker's engine under cudaMallocAsync (``deferred``) in one process: two clips
queued at once, a pause until the compile that the pause starts is ready, two clips more. Prints one JSON
line: each clip's wall time and the engine's batch counts after it, and when the graph became ready.
Run (device): PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync python3 <this> MODELS IMAGE AUDIO OUT_DIR"""
import json
import sys
import time
from pathlib import Path

import torch

from ditto_core.motion.motion_options import MotionOptions
from ditto_core.pipeline import DittoPipeline
from ditto_core.registration.options import RegistrationOptions

models, image, audio, out = sys.argv[1:5]
pipeline = DittoPipeline.from_model_dir(models, torch.device("cuda"), torch.float16, cache_dir=Path(out) / "avatars",
                                        detect_face=False, warmup="background")
pipeline.start_warmup()
records, t0 = [], time.time()


def clip(name: str) -> None:
    start = time.time()
    pipeline.run(image, audio, Path(out) / f"{name}.mp4", RegistrationOptions(detect_face=False), MotionOptions())
    engine = pipeline.engine()
    records.append({"clip": name, "began_s": round(start - t0, 2), "wall_s": round(time.time() - start, 3),
                    "eager_batches": engine.stats.eager_batches, "graph_batches": engine.stats.graph_batches,
                    "render_s": round(pipeline.times.seconds["render"], 3)})


clip("first")
clip("queued_at_once")
ended = time.time()
engine = pipeline.engine()
while not engine.compiled_ready() and time.time() - ended < 90:
    time.sleep(0.05)
ready = engine.stats.compiled_at
clip("after_the_pause")
clip("queued_at_once_after")
print("RESULT " + json.dumps({"warmup": engine.warmup, "last_clip_end_s": round(ended - t0, 2),
                              "graph_ready_s": None if ready is None else round(ready - t0, 2),
                              "compile_seconds": engine.stats.compile_seconds, "clips": records}), flush=True)
