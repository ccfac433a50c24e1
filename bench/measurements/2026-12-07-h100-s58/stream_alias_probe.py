"""Session 58: do our long-lived CUDA streams share a stream of PyTorch's pool?

``torch.cuda.Stream()`` hands out one of 32 pool streams per priority, round-robin (c10's
CUDAStream.h, "Stream pool note"): the 33rd request returns the first stream again. Our code keeps
streams for a thread's or an owner's life (the live runtime's motion and render streams, each
sampler's capture stream, HuBERT's window graphs, the writers' copy streams) and asks for a new one
at every recording's warm-up. Two owners on one stream lose their concurrency, and a recording on it
would take in the other owner's work. This builds a live runtime as tests/test_live_gpu.py does
(uncompiled: seconds), serves two streams, and lists every stream requested, by caller, marking
handles requested more than once (since session 58 owners take their streams through
``ditto_core/cuda_streams.py``, which asks the pool again for a stream no other owner holds: its
skipped requests show under the same caller).

    python bench/measurements/2026-12-07-h100-s58/stream_alias_probe.py .carry/shared/data/ditto_example [cuda|cpu]
"""
import asyncio
import collections
import sys
import tempfile
import traceback
from pathlib import Path

import numpy as np
import torch

requests = []  # (handle, priority, caller)
_new = torch.cuda.Stream.__new__


def _logged(cls, device=None, priority=0, **kwargs):
    stream = _new(cls, device=device, priority=priority, **kwargs)
    if not kwargs:  # a pool stream (not an external or unpacked one)
        frames = [f for f in traceback.extract_stack(limit=10)[:-1]
                  if "/ditto_core/" in f.filename and not f.filename.endswith("cuda_streams.py")]
        where = f"{frames[-1].filename.split('/ditto_core/')[-1]}:{frames[-1].lineno}" if frames else "outside"
        requests.append((stream.cuda_stream, priority, where))
    return stream


torch.cuda.Stream.__new__ = _logged

from ditto_core.live import AvatarStream, LiveRuntime, StreamConfig  # noqa: E402
from ditto_core.motion.motion_options import MotionOptions  # noqa: E402
from ditto_core.pipeline import DittoPipeline  # noqa: E402
from ditto_core.registration.image_io import load_source  # noqa: E402
from ditto_core.registration.options import RegistrationOptions  # noqa: E402

OPTIONS = MotionOptions(steps=25, sampler_precision="fp32", sampler_compile=False)
CONFIG = StreamConfig(output="jpeg", max_size=512, idle=False)


async def _serve(runtime, source, seconds):
    async with AvatarStream(runtime, source, OPTIONS, CONFIG) as stream:
        speech = (4000 * np.random.default_rng(0).standard_normal(int(seconds * 16000))).astype(np.int16)
        stream.push_audio(speech, 16000)
        stream.end()
        return len([f async for f in stream])


def main(example_dir: Path, device: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        pipeline = DittoPipeline.random(Path(folder), device, torch.float16 if device == "cuda" else torch.float32,
                                        compile=False)
        frames, _ = load_source(example_dir / "portrait.jpg")
        source = pipeline.register(frames, RegistrationOptions(detect_face=False), is_image=True)
        runtime = LiveRuntime(pipeline, max_streams=4, max_load=None)
        runtime.warm_up(source, OPTIONS, several_avatars=False)
        print("warm-up done;", len(requests), "pool streams requested", flush=True)
        for _ in range(2):
            print("frames", asyncio.run(_serve(runtime, source, 2.0)), flush=True)
        runtime.shutdown()
    seen = collections.defaultdict(list)
    for handle, priority, where in requests:
        seen[(handle, priority)].append(where)
    print(f"{len(requests)} requests, {len(seen)} distinct streams")
    for (handle, priority), callers in seen.items():
        mark = "SHARED" if len(callers) > 1 else "      "
        print(f"{mark} {handle:#x} priority {priority}: {', '.join(callers)}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "cuda")  # "cpu": the script's own dry run
