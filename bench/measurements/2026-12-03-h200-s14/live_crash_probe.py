"""Which owner faults when a compiled live runtime serves its first stream (call 2's illegal
memory access)? One variant per process (a fault kills it): the runtime as it is, then with one
CUDA-graph owner at a time taken off its graphs, or its graphs recorded the old way."""
import asyncio
import os
import sys
import time
from pathlib import Path
import tempfile

import torch

from bench.bench_live import _run_stream, _speech
from ditto_core.audio.hubert import HubertFeatureExtractor
from ditto_core.audio.window_graphs import LiveWindowEncoder
from ditto_core import cuda_graphs
from ditto_core.live import LiveRuntime, StreamConfig
from ditto_core.motion.motion_options import MotionOptions
from ditto_core.pipeline import DittoPipeline
from ditto_core.registration.image_io import load_source
from ditto_core.registration.options import RegistrationOptions

variant = sys.argv[1]
E = Path(os.environ["E"])


def old_capture(self):  # session 12's recording: PyTorch's shared default capture stream
    torch.cuda.synchronize()
    result = self._run(*self.inputs)
    with torch.cuda.graph(self.graph, capture_error_mode="thread_local"):
        self.outputs = self._run(*self.inputs)
    return result


if variant == "old-capture":
    cuda_graphs.CapturedCall.capture = old_capture
t0 = time.monotonic()
with tempfile.TemporaryDirectory() as workdir:
    pipeline = DittoPipeline.random(Path(workdir), torch.device("cuda"), torch.float16, compile=variant != "eager-engine")
    pipeline.hubert = HubertFeatureExtractor(Path(os.environ["H"]), torch.device("cuda"))
    frames, is_image = load_source(E / "portrait.jpg")
    source = pipeline.register(frames, RegistrationOptions(detect_face=False), is_image=is_image)
    runtime = LiveRuntime(pipeline, max_streams=2, batch_ladder=(5,))
    options = MotionOptions(steps=25, sampler_precision="bf16", sampler_compile=True)
    if variant == "no-hubert-graphs":
        runtime.hubert_windows = LiveWindowEncoder(runtime.hubert, cuda_graphs=False)
    if variant == "no-lmdm-graphs":
        runtime.sampler(options).cuda_graph = False
    runtime.warm_up(source, options)
    print(variant, "warm", round(time.monotonic() - t0, 1), flush=True)
    config = StreamConfig(output="jpeg", max_size=512, idle=False)

    async def run():
        return await asyncio.gather(*(_run_stream(runtime, source, options, config, _speech(2.0, seed=i), realtime=False)
                                      for i in range(2)))

    for rep in range(3):
        results = asyncio.run(run())
        print(variant, "rep", rep, "frames", [len(f) for f, _ in results], flush=True)
    runtime.shutdown()
print(variant, "OK", round(time.monotonic() - t0, 1), flush=True)
