"""Session 59's question for a device: does a compiled engine's VRAM come back when the models go?

Under the native allocator an engine's compiled step runs from torch's CUDA-graph trees
(``warmup="foreground"``: ``serve``, the CLI's long clips, the Python API, a ComfyUI started with
``--disable-cuda-malloc``). Torch keeps a device's graph-tree manager, with its recorded graphs and
memory pool, while any cudagraphified function of the process lives, and Dynamo never frees a
compiled entry; so dropping the engine and its models may leave the pool's memory held. This prints
the CUDA memory (MiB) before loading, with a batch-32 fp16 engine recorded, after dropping engine
and models (a collection and empty_cache), and after ``torch._dynamo.reset()`` as well.

Run on a GPU from a checkout: PYTHONPATH=. python bench/measurements/2026-12-08-cpu-s59/graph_tree_unload_probe.py
"""
import gc
import json

import torch
import torch._dynamo

from ditto_core.models.ditto_models import random_ditto_models
from ditto_core.render.warp_decode import WarpDecodeEngine

device = torch.device("cuda")


def memory() -> dict:
    torch.cuda.synchronize()
    return {"allocated": round(torch.cuda.memory_allocated() / 2**20, 1),
            "reserved": round(torch.cuda.memory_reserved() / 2**20, 1)}


report = {"before": memory()}
models = random_ditto_models(device, torch.float16, 0)
engine = WarpDecodeEngine(models.warp_network, models.decoder, batch_size=32, warmup="foreground")
f_s = torch.randn(1, 32, 16, 64, 64, device=device, dtype=torch.float16)
kp = 0.3 * torch.randn(32, 21, 3, device=device)
for _ in range(3):  # warm-up, recording, replay
    frames = engine.render_batch(f_s, kp, kp)
report["engine_recorded"] = memory()
report["graph_batches"] = engine.stats.graph_batches
del frames, engine, models, f_s, kp
gc.collect()
torch.cuda.empty_cache()
report["engine_and_models_dropped"] = memory()
torch._dynamo.reset()
gc.collect()
torch.cuda.empty_cache()
report["after_dynamo_reset"] = memory()
print(json.dumps(report), flush=True)
