"""Session 59 (CPU, no device): how many compiled entries the LMDM sampler's step gathers in one
process that runs what the GPU suite ran before the live crash (session 58, call 2), and whether the
last shapes still compile.

Real Dynamo on the CPU, with a backend that counts the graphs it is handed and runs them as they
are (``compile_available`` forced on, no CUDA graphs). The sequence, at 1 DDIM step for speed:

  the sampler tests   compiled fp32 and bf16 samplers, batch 1, under no_grad (window and step spans)
  the live warm-up    a new model's compiled bf16 sampler, batches 1, 2, 4, 8, 16 (max_streams 12),
                      in inference mode, as LiveRuntime.warm_up samples them

Run from a checkout: PYTHONPATH=. python bench/measurements/2026-12-08-cpu-s59/dynamo_entries_probe.py
It prints each step's graph count and whether torch reported its recompile limit.
"""
import logging

import torch

from ditto_core.models.keypoints import MOTION_DIM
from ditto_core.models.lmdm import LMDM, WINDOW
from ditto_core.motion import lmdm_sampler
from ditto_core.motion.lmdm_sampler import DDIMSampler

graphs = []
limit_hits = []


class LimitSeen(logging.Handler):
    def emit(self, record):
        if "recompile_limit" in record.getMessage():
            limit_hits.append(record.getMessage().splitlines()[0])


logging.getLogger("torch._dynamo").addHandler(LimitSeen())
real_compile = torch.compile
torch.compile = lambda fn, **options: real_compile(fn, backend=lambda gm, _: graphs.append(1) or gm.forward, **options)
lmdm_sampler.compile_available = lambda device: (True, "")


def window(sampler, batch):
    g = torch.Generator().manual_seed(batch)
    args = (torch.randn(batch, MOTION_DIM, generator=g), torch.randn(batch, WINDOW, 1103, generator=g),
            torch.randn(batch, WINDOW, MOTION_DIM, generator=g), torch.zeros(sampler.noise_shape(batch)))
    return sampler.sample(*args)


def step_span(sampler, batch=1):
    """The step span's recorded step (graph_span="step"), called as its recording calls it."""
    kp, aud = torch.randn(batch, MOTION_DIM), torch.randn(batch, WINDOW, 1103)
    with torch.no_grad():
        shared = sampler._prologue_tensors(kp, aud)
        sampler._recorded_step(torch.randn(batch, WINDOW, MOTION_DIM), torch.zeros(1, batch, WINDOW, MOTION_DIM),
                               torch.zeros(1, dtype=torch.long), shared)


torch.manual_seed(0)
print("torch", torch.__version__, "recompile_limit", torch._dynamo.config.recompile_limit, flush=True)
for precision in ("fp32", "bf16"):
    model = LMDM().eval().requires_grad_(False)
    sampler = DDIMSampler(model, 1, cuda_graph=False, precision=precision, compile=True)
    window(sampler, 1)
    step_span(sampler)
    print(f"sampler tests {precision}: {len(graphs)} graphs", flush=True)
live = DDIMSampler(LMDM().eval().requires_grad_(False), 1, cuda_graph=False, precision="bf16", compile=True)
for batch in (1, 2, 4, 8, 16):
    before = len(graphs)
    with torch.inference_mode():
        window(live, batch)
    print(f"live warm-up batch {batch}: {len(graphs)} graphs ({'compiled' if len(graphs) > before else 'no new graph'})",
          flush=True)
print("recompile limit reported:", limit_hits or "never", flush=True)
