"""Session 52: session 33's first-prompt probe (`2026-12-06-h100-s33/first_prompt_probe.py`: a
ComfyUI first prompt's path, the engine ``deferred``, the allocator from the shell) with the
LMDM's recording chosen: ``step`` (its prologue and one step, every pipeline's default since
session 51) or ``window`` (whole windows, the default before).

    PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync python3 graph_span_probe.py SPAN MODELS IMAGE AUDIO OUT.json [JOBS]

torch is imported here, before the probe runs, so the probe's ``import_torch_s`` is not the
import's cost; its load and job times are comparable between the two spans.
"""
import runpy
import sys
from pathlib import Path

span = sys.argv[1]
from ditto_core.pipeline import DittoPipeline  # noqa: E402

start_warmup = DittoPipeline.start_warmup


def start_warmup_with_span(self, prime="full"):
    self.lmdm_graph_span = span  # the probe makes its sampler after start_warmup, at the job's first window
    start_warmup(self, prime)


DittoPipeline.start_warmup = start_warmup_with_span
sys.argv[1] = "main"  # in the span's place, the probe's variant: as the nodes do
runpy.run_path(str(Path(__file__).parents[1] / "2026-12-06-h100-s33" / "first_prompt_probe.py"), run_name="__main__")
