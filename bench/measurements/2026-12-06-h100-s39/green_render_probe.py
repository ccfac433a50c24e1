"""Session 39 (prepared, not run): the live render's CUDA graphs recorded inside a green context.

``green_contention_probe.py`` replayed graphs recorded on ordinary streams on green streams and
found no isolation (they ran on the whole device); ``green_context_probe.py`` found a small
kernel chain kept its speed once the convolutions beside it were kept off some SMs. So here the
render alone is recorded inside the larger partition: a render thread makes the 116-SM green
context current (``cuCtxPushCurrent_v2``) and its stream the current stream, then builds, compiles
and warms up an ``EngineRenderer`` (40-frame fp16 batches) and serves batches from there. The LMDM
window (12 streams, bf16, 25 steps, recorded on the main thread as the runtime does) runs alone and
beside that render, on an ordinary high-priority stream; the same against a render recorded and
replayed on ordinary streams. Prints one JSON line per variant.

    PYTHONPATH=$PWD python3 bench/measurements/2026-12-06-h100-s39/green_render_probe.py
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
REPS, WINDOWS, FRAMES, MOTION_SMS = 10, 12, 40, 16

_spec = importlib.util.spec_from_file_location("green_capture_probe", HERE / "green_capture_probe.py")
capture = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(capture)


class RenderThread:
    """A thread that builds and warms up its own renderer (inside ``ctx`` when given, on
    ``stream``), then renders one batch or keeps batches going on command."""

    def __init__(self, models, source, stream, green=None, ctx=None):
        self.models, self.source, self.stream, self.green, self.ctx = models, source, stream, green, ctx
        self.commands, self.failed, self.count = [], [], 0
        self.ready, self.done, self.keep = threading.Event(), threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        self.ready.wait()
        if self.failed:
            raise RuntimeError(self.failed[0])

    def _run(self):
        try:
            if self.ctx is not None:
                self.green.ok(self.green.cu.cuCtxPushCurrent_v2(self.ctx))
            with torch.inference_mode(), torch.cuda.stream(self.stream):
                renderer = EngineRenderer(self.models, compile=True, batch_ladder=(FRAMES,))
                renderer.warm_up(self.source, per_frame_volumes=False)
                kp = self.source.motion.kp[:1].reshape(1, -1, 3).float().expand(FRAMES, -1, -1)
                batch = lambda: renderer.engine(FRAMES).render_batch(self.source.f_s[:1], kp, kp)  # noqa: E731
                self.ready.set()
                while True:
                    while not self.commands:
                        time.sleep(0.001)
                    command = self.commands.pop(0)
                    if command == "stop":
                        return
                    try:
                        batch()
                        self.stream.synchronize()
                        while command == "loop" and self.keep.is_set():
                            batch()
                            self.count += 1
                            self.stream.synchronize()
                    except Exception as e:
                        self.failed.append(f"render: {type(e).__name__}: {e}"[:300])
                    self.done.set()
        except Exception as e:
            self.failed.append(f"render set-up: {type(e).__name__}: {e}"[:300])
            self.ready.set()

    def once(self):
        self.done.clear(); self.commands.append("one"); self.done.wait()

    def stop(self):
        self.commands.append("stop"); self.thread.join()


def main() -> None:
    device = torch.device("cuda")
    pipeline = DittoPipeline.random(Path(tempfile.mkdtemp()), device, torch.float16, compile=True)
    frames, _ = load_source(EXAMPLE)
    source = pipeline.register(frames, RegistrationOptions(detect_face=False), is_image=True).to(device)
    sampler = DDIMSampler(pipeline.models.lmdm, 25, precision="bf16", compile=True)
    kp = build_kp_condition(source)
    args = (kp.expand(WINDOWS, -1), torch.zeros(WINDOWS, WINDOW, pipeline.models.cond_dim, device=device),
            torch.zeros(WINDOWS, WINDOW, MOTION_DIM, device=device), torch.zeros(sampler.noise_shape(WINDOWS), device=device))
    motion = torch.cuda.Stream(device, priority=MOTION_PRIORITY)
    torch.cuda.synchronize(device)
    ms = lambda values: round(1000 * statistics.median(values), 2)  # noqa: E731

    def window():
        with torch.inference_mode(), torch.cuda.stream(motion):
            sampler.sample(*args)
        motion.synchronize()

    def measure(render: RenderThread) -> dict:
        for _ in range(3):
            window()
        alone = [timed(window) for _ in range(REPS)]
        render_alone = [timed(render.once) for _ in range(REPS)]
        render.keep.set(); render.done.clear(); render.commands.append("loop"); time.sleep(0.3)
        c0, t0, beside = render.count, time.perf_counter(), []
        for _ in range(REPS):
            beside.append(timed(window, sync=False))
        rate = (render.count - c0) / (time.perf_counter() - t0)
        render.keep.clear(); render.done.wait()
        if render.failed:
            raise RuntimeError(render.failed[-1])
        return {"lmdm_alone_ms": ms(alone), "render_alone_ms": ms(render_alone), "lmdm_beside_render_ms": ms(beside),
                "lmdm_beside_render_p95_ms": round(1000 * sorted(beside)[-2], 2),
                "render_batches_per_s_alone": round(1 / statistics.median(render_alone), 2),
                "render_batches_per_s_beside": round(rate, 2)}

    def timed(fn, sync=True):
        if sync:
            torch.cuda.synchronize(device)
        t = time.perf_counter(); fn(); return time.perf_counter() - t

    result = {"device": torch.cuda.get_device_name(device), "torch": torch.__version__}
    ordinary = RenderThread(pipeline.models, source, torch.cuda.Stream(device))
    result["ordinary"] = measure(ordinary)
    ordinary.stop()
    print(json.dumps(result), flush=True)
    try:
        green = capture.Green(MOTION_SMS)
        (_, _), (rest_ctx, rest_stream) = green.parts
        inside = RenderThread(pipeline.models, source, rest_stream, green, rest_ctx)
        sms = torch.cuda.get_device_properties(device).multi_processor_count - MOTION_SMS
        result[f"render_recorded_inside_{sms}_sms"] = measure(inside)
        inside.stop()
    except Exception as e:
        result["render_recorded_inside"] = f"{type(e).__name__}: {e}"[:400]
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
