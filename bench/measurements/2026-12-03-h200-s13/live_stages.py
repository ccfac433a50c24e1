"""Device-call diagnostic (session 13): where a live round's time goes.

Runs the live runtime as bench_live does (example avatar, real-architecture HuBERT, fp16 engine,
LMDM bf16 25 steps), with each stage wrapped in CUDA synchronisations so that its own cost is
timed: HuBERT windows, LMDM batch sampling, stitching, warp+decode, put-back + scaling + copy,
JPEG. One stream pushed as fast as it is animated, then 8 streams at once. Prints JSON.
"""
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path.cwd()))
from bench import bench_live  # noqa: E402
from ditto_core.audio.hubert import HubertFeatureExtractor  # noqa: E402
from ditto_core.live import LiveRuntime, StreamConfig, runtime as live_runtime  # noqa: E402
from ditto_core.motion.lmdm_sampler import DDIMSampler  # noqa: E402
from ditto_core.motion.motion_options import MotionOptions  # noqa: E402
from ditto_core.pipeline import DittoPipeline  # noqa: E402
from ditto_core.registration.image_io import load_source  # noqa: E402
from ditto_core.registration.options import RegistrationOptions  # noqa: E402

TIMES = defaultdict(list)
CUDA = torch.cuda.is_available()


def timed(name, fn):
    def wrapper(*args, **kwargs):
        if CUDA:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        if CUDA:
            torch.cuda.synchronize()
        TIMES[name].append(1000 * (time.perf_counter() - t0))
        return out
    return wrapper


def summary():
    return {k: {"n": len(v), "median_ms": round(statistics.median(v), 3), "p95_ms": round(sorted(v)[int(0.95 * (len(v) - 1))], 3),
                "total_ms": round(sum(v), 1)} for k, v in TIMES.items()}


def main():
    hubert_path, streams = Path(sys.argv[1]), int(sys.argv[2])
    device = torch.device("cuda" if CUDA else "cpu")
    work = tempfile.mkdtemp()
    pipeline = DittoPipeline.random(Path(work), device, torch.float16 if CUDA else torch.float32, compile=CUDA)
    if CUDA:
        pipeline.hubert = HubertFeatureExtractor(hubert_path, device)
    frames, is_image = load_source(bench_live.EXAMPLE / "portrait.jpg")
    source = pipeline.register(frames, RegistrationOptions(detect_face=False), is_image=is_image)
    runtime = LiveRuntime(pipeline, max_streams=streams, batch_ladder=(5, 40))
    options = MotionOptions(steps=25 if CUDA else 2, sampler_precision="bf16" if CUDA else "fp32", sampler_compile=CUDA)
    config = StreamConfig(output="jpeg", max_size=512, idle=False)
    t0 = time.monotonic()
    runtime.warm_up(source, options)
    asyncio.run(bench_live._warm(runtime, source, options, config, 1))
    asyncio.run(bench_live._warm(runtime, source, options, config, streams))
    result = {"warm_up_s": round(time.monotonic() - t0, 1)}
    # Stage wrappers (after the warm-up: compiles are not timed).
    runtime.hubert.encode_window = timed("hubert_window", runtime.hubert.encode_window)
    DDIMSampler.sample = timed("lmdm_sample", DDIMSampler.sample)
    live_runtime.stitch_motion = timed("stitch", live_runtime.stitch_motion)
    renderer = runtime.renderer
    for engine in renderer._engines.values():
        engine.render_batch = timed(f"warp_decode_b{engine.batch_size}", engine.render_batch)
    live_runtime.paste_back = timed("paste_back", live_runtime.paste_back)
    live_runtime._scaled = timed("scale", live_runtime._scaled)
    live_runtime._encode_jpeg = timed("jpeg", live_runtime._encode_jpeg)
    runtime._motion_round = timed("motion_round", runtime._motion_round)
    runtime._render_round = timed("render_round", runtime._render_round)
    for label, n in (("one_stream_fast", 1), (f"{streams}_streams_fast", streams)):
        TIMES.clear()
        start = time.monotonic()

        async def run():
            return await asyncio.gather(*(bench_live._run_stream(runtime, source, options, config, bench_live._speech(8.0 if CUDA else 1.0, seed=i),
                                                                 realtime=False, keep=lambda f: None) for i in range(n)))
        out = asyncio.run(run())
        wall = time.monotonic() - start
        frames_out = sum(s["frames"] if "frames" in s else 0 for _, s in out)
        result[label] = {"wall_s": round(wall, 2), "stages": summary(), "stats": out[0][1]}
        print(label, json.dumps(result[label])[:3000], flush=True)
    runtime.shutdown()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
