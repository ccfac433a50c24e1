"""Prepared in session 37 (not yet run): what a live round's LMDM window costs beside the render.

At 12 streams the motion thread's rounds took 89 ms (p50) where an LMDM window alone takes
13.5 ms and a round's HuBERT about 3 ms (call 6): the window's ~4,000 serial small kernels
wait for SMs that the render's large kernels hold, whatever the motion stream's priority.
Before changing the schedule (rounds of the motion and the render taking turns, or windows
of several rounds batched), this measures, with the live runtime's streams and priorities:

* ``lmdm_alone``: one compiled bf16 LMDM window (batch 4, 25 steps) on the motion stream;
* ``render_alone``: one compiled 20-frame warp+decode batch on the render stream;
* ``lmdm_beside_render``: the window while a render thread keeps 20-frame batches queued,
  and the render batches done meanwhile (the throughput the overlap keeps);
* ``taking_turns``: a window then a batch, one after the other, per pair.

Run on the device from the repository root: ``python3 bench/measurements/2026-12-06-h200-s37/contention_probe.py``
(with ``PYTHONPATH=$PWD``). Prints one JSON line.
"""
from __future__ import annotations

import json
import statistics
import tempfile
import threading
import time
from pathlib import Path

import torch

from ditto_core.live.engine_renderer import EngineRenderer
from ditto_core.live.runtime import MOTION_PRIORITY
from ditto_core.models.lmdm import WINDOW
from ditto_core.models.keypoints import MOTION_DIM
from ditto_core.motion.conditions import build_kp_condition
from ditto_core.motion.lmdm_sampler import DDIMSampler
from ditto_core.pipeline import DittoPipeline
from ditto_core.registration.image_io import load_source
from ditto_core.registration.options import RegistrationOptions

EXAMPLE = Path(__file__).resolve().parents[3] / ".carry/shared/data/ditto_example/portrait.jpg"
REPS, WINDOWS, FRAMES = 20, 4, 20


def main() -> None:
    device = torch.device("cuda")
    pipeline = DittoPipeline.random(Path(tempfile.mkdtemp()), device, torch.float16, compile=True)
    frames, _ = load_source(EXAMPLE)
    source = pipeline.register(frames, RegistrationOptions(detect_face=False), is_image=True)
    motion_stream = torch.cuda.Stream(device, priority=MOTION_PRIORITY)
    render_stream = torch.cuda.Stream(device)

    sampler = DDIMSampler(pipeline.models.lmdm, 25, precision="bf16", compile=True)
    kp = build_kp_condition(source)
    args = (kp.expand(WINDOWS, -1), torch.zeros(WINDOWS, WINDOW, pipeline.models.cond_dim, device=device),
            torch.zeros(WINDOWS, WINDOW, MOTION_DIM, device=device),
            torch.zeros(sampler.noise_shape(WINDOWS), device=device))
    torch.cuda.synchronize(device)  # the inputs and the avatar exist before either stream reads them

    def window() -> None:
        with torch.cuda.stream(motion_stream):
            sampler.sample(*args)
        motion_stream.synchronize()

    # The render's compiled graphs belong to the thread that records them (as in the runtime).
    renderer = EngineRenderer(pipeline.models, compile=True, batch_ladder=(FRAMES,))
    commands: list = []
    ready, done = threading.Event(), threading.Event()
    keep_rendering = threading.Event()
    counted = [0]

    def batch() -> None:
        kp_batch = source.motion.kp[:1].reshape(1, -1, 3).to(device, torch.float32).expand(FRAMES, -1, -1)
        renderer.engine(FRAMES).render_batch(source.f_s[:1], kp_batch, kp_batch)

    def render_thread() -> None:
        with torch.inference_mode(), torch.cuda.stream(render_stream):
            renderer.warm_up(source.to(device), per_frame_volumes=False)
            ready.set()
            while True:
                while not commands:
                    time.sleep(0.001)
                command = commands.pop(0)
                if command == "stop":
                    return
                if command == "one":
                    batch()
                    render_stream.synchronize()
                elif command == "loop":
                    while keep_rendering.is_set():
                        batch()
                        counted[0] += 1
                        render_stream.synchronize()  # one batch queued at a time, as the render thread does
                done.set()

    thread = threading.Thread(target=render_thread, daemon=True)
    thread.start()
    ready.wait()

    def timed(fn) -> float:
        torch.cuda.synchronize(device)
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start

    def render_once() -> None:
        done.clear()
        commands.append("one")
        done.wait()

    with torch.inference_mode():
        for _ in range(3):  # the sampler's compile and graph recording
            window()
        lmdm_alone = [timed(window) for _ in range(REPS)]
        render_alone = [timed(render_once) for _ in range(REPS)]
        keep_rendering.set()
        done.clear()
        commands.append("loop")
        time.sleep(0.2)
        counted[0] = 0
        start = time.perf_counter()
        beside = []
        for _ in range(REPS):
            t = time.perf_counter()
            window()
            beside.append(time.perf_counter() - t)
        span = time.perf_counter() - start
        batches_beside = counted[0]
        keep_rendering.clear()
        done.wait()
        turns = [timed(lambda: (window(), render_once())) for _ in range(REPS)]
        commands.append("stop")
        thread.join()

    ms = lambda values: round(1000 * statistics.median(values), 2)  # noqa: E731
    print(json.dumps({
        "device": torch.cuda.get_device_name(device), "windows": WINDOWS, "frames": FRAMES,
        "lmdm_alone_ms": ms(lmdm_alone), "render_alone_ms": ms(render_alone),
        "lmdm_beside_render_ms": ms(beside), "lmdm_beside_render_p95_ms": round(1000 * sorted(beside)[-2], 2),
        "render_batches_per_s_beside": round(batches_beside / span, 2),
        "render_batches_per_s_alone": round(1 / statistics.median(render_alone), 2),
        "taking_turns_pair_ms": ms(turns),
    }))


if __name__ == "__main__":
    main()
