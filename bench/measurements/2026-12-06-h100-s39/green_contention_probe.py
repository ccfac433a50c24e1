"""Session 39: the live round's LMDM window beside the render, on ordinary streams and on disjoint
SMs (CUDA green contexts), with the real networks (random weights, compiled as the runtime does).

Session 37's ``contention_probe.py`` found a 4-stream window 16 ms alone and 263 ms beside 20-frame
render batches, whatever the motion stream's priority; ``green_context_probe.py`` (this folder)
found a chain of small GEMM kernels kept at 12-17 ms beside convolutions once it ran on 8-16 SMs
of its own. Here, for 12 streams (a 12-window LMDM batch, 25 steps, bf16 compiled; 40-frame
warp+decode batches, fp16 compiled): per variant, the window alone, a render batch alone, the
window while a thread keeps render batches queued (and the render's rate meanwhile). Variants:
``streams`` (the runtime's: motion at high priority, render normal) and ``green_N`` (the window on
a stream of N SMs, the render on a stream of the other SMs; the graphs recorded on ordinary
streams replay there). Also whether what the runtime does across its streams works across green
contexts: an event made on one thread recorded on a green stream and waited for on another, and a
tensor used on a green stream freed after ``record_stream``. Prints one JSON line.

    PYTHONPATH=$PWD python3 bench/measurements/2026-12-06-h100-s39/green_contention_probe.py
"""
from __future__ import annotations

import importlib.util
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path

import torch

from ditto_core.live.engine_renderer import EngineRenderer
from ditto_core.live.runtime import MOTION_PRIORITY
from ditto_core.models.keypoints import MOTION_DIM
from ditto_core.models.lmdm import WINDOW
from ditto_core.motion.conditions import build_kp_condition
from ditto_core.motion.lmdm_sampler import DDIMSampler
from ditto_core.pipeline import DittoPipeline
from ditto_core.registration.image_io import load_source
from ditto_core.registration.options import RegistrationOptions

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE.parents[2] / ".carry/shared/data/ditto_example/portrait.jpg"
REPS, WINDOWS, FRAMES = 10, 12, 40

_spec = importlib.util.spec_from_file_location("green_context_probe", HERE / "green_context_probe.py")
green = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(green)


def cross_context_checks(motion: torch.cuda.Stream, render: torch.cuda.Stream) -> dict:
    out = {}
    try:
        made = torch.cuda.Event()
        x = torch.ones(1 << 20, device="cuda")
        with torch.cuda.stream(motion):
            x.mul_(2)
        made.record(motion)
        render.wait_event(made)
        with torch.cuda.stream(render):
            y = x.sum()
        render.synchronize()
        out["event_across"] = f"ok ({y.item():.0f})"
    except Exception as e:
        out["event_across"] = f"{type(e).__name__}: {e}"[:300]
    try:
        for _ in range(50):
            t = torch.empty(1 << 18, device="cuda")
            with torch.cuda.stream(motion):
                t.fill_(1)
            t.record_stream(motion)
            del t
        torch.cuda.synchronize()
        out["record_stream_free"] = "ok"
    except Exception as e:
        out["record_stream_free"] = f"{type(e).__name__}: {e}"[:300]
    return out


def main() -> None:
    device = torch.device("cuda")
    pipeline = DittoPipeline.random(Path(tempfile.mkdtemp()), device, torch.float16, compile=True)
    frames, _ = load_source(EXAMPLE)
    source = pipeline.register(frames, RegistrationOptions(detect_face=False), is_image=True)
    ordinary = (torch.cuda.Stream(device, priority=MOTION_PRIORITY), torch.cuda.Stream(device))
    sampler = DDIMSampler(pipeline.models.lmdm, 25, precision="bf16", compile=True)
    kp = build_kp_condition(source)
    args = (kp.expand(WINDOWS, -1), torch.zeros(WINDOWS, WINDOW, pipeline.models.cond_dim, device=device),
            torch.zeros(WINDOWS, WINDOW, MOTION_DIM, device=device),
            torch.zeros(sampler.noise_shape(WINDOWS), device=device))
    torch.cuda.synchronize(device)

    renderer = EngineRenderer(pipeline.models, compile=True, batch_ladder=(FRAMES,))
    commands: list = []
    ready, done, keep = threading.Event(), threading.Event(), threading.Event()
    counted, failed = [0], []

    def batch() -> None:
        kp_batch = source.motion.kp[:1].reshape(1, -1, 3).to(device, torch.float32).expand(FRAMES, -1, -1)
        renderer.engine(FRAMES).render_batch(source.f_s[:1], kp_batch, kp_batch)

    def render_thread() -> None:
        with torch.inference_mode():
            with torch.cuda.stream(ordinary[1]):
                renderer.warm_up(source.to(device), per_frame_volumes=False)
            ready.set()
            while True:
                while not commands:
                    time.sleep(0.001)
                command, stream = commands.pop(0)
                if command == "stop":
                    return
                try:
                    with torch.cuda.stream(stream):
                        if command == "one":
                            batch()
                            stream.synchronize()
                        else:
                            while keep.is_set():
                                batch()
                                counted[0] += 1
                                stream.synchronize()
                except Exception as e:  # reported by the variant, which then stops
                    failed.append(f"render: {type(e).__name__}: {e}"[:300])
                done.set()

    thread = threading.Thread(target=render_thread, daemon=True)
    thread.start()
    ready.wait()
    result = {"device": torch.cuda.get_device_name(device), "torch": torch.__version__,
              "windows": WINDOWS, "frames": FRAMES}
    ms = lambda values: round(1000 * statistics.median(values), 2)  # noqa: E731

    def measure(motion: torch.cuda.Stream, render: torch.cuda.Stream) -> dict:
        def window() -> None:
            with torch.cuda.stream(motion):
                sampler.sample(*args)
            motion.synchronize()

        def render_once() -> None:
            done.clear()
            commands.append(("one", render))
            done.wait()
            if failed:
                raise RuntimeError(failed[-1])

        def timed(fn) -> float:
            torch.cuda.synchronize(device)
            start = time.perf_counter()
            fn()
            return time.perf_counter() - start

        with torch.inference_mode():
            for _ in range(3):  # the compile and the recordings (first variant), then a warm replay
                window()
            alone = [timed(window) for _ in range(REPS)]
            render_alone = [timed(render_once) for _ in range(REPS)]
            keep.set()
            done.clear()
            commands.append(("loop", render))
            time.sleep(0.3)
            counted[0] = 0
            start = time.perf_counter()
            beside = []
            for _ in range(REPS):
                t = time.perf_counter()
                window()
                beside.append(time.perf_counter() - t)
            span = time.perf_counter() - start
            batches = counted[0]
            keep.clear()
            done.wait()
            if failed:
                raise RuntimeError(failed[-1])
        return {"lmdm_alone_ms": ms(alone), "render_alone_ms": ms(render_alone),
                "lmdm_beside_render_ms": ms(beside), "lmdm_beside_render_p95_ms": round(1000 * sorted(beside)[-2], 2),
                "render_batches_per_s_alone": round(1 / statistics.median(render_alone), 2),
                "render_batches_per_s_beside": round(batches / span, 2)}

    result["streams"] = measure(*ordinary)
    print(json.dumps(result), flush=True)
    for sms in (16, 8):
        try:
            (motion, rest), counts = green.green_streams(sms)
            result[f"green_{sms}"] = {"sm_counts_whole_group_rest": counts, **cross_context_checks(motion, rest),
                                      **measure(motion, rest)}
        except Exception as e:
            result[f"green_{sms}"] = f"{type(e).__name__}: {e}"[:400]
        print(json.dumps(result), flush=True)
    commands.append(("stop", None))
    thread.join()


if __name__ == "__main__":
    main()
