"""Device-call diagnostic (session 13, call 3): two questions left by call 2.

1. ``hubert``: call 2's bench_live saw the round's HuBERT graph report fp16 rows that are not
   finite (the eager path in session 9 never did on the same speech). For the benchmark's
   speeches, cut as the online schedule cuts them, per window: the eager fp16 rows' largest
   magnitude and finiteness, the graph's finiteness at batch 1 and 2, and the graph's error
   against eager where both are finite.
2. ``identical``: two streams with the same speech and seed beside four others differed by up
   to 62 levels. Here the same experiment with the worker streams on and off, LMDM bf16 and
   fp32: if the difference is the batches' rounding it shrinks in fp32; a race does not care.
"""
import asyncio
import json
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path.cwd()))
from bench import bench_live  # noqa: E402
from ditto_core.audio.hubert import HubertFeatureExtractor  # noqa: E402
from ditto_core.audio.window_graphs import LiveWindowEncoder  # noqa: E402
from ditto_core.live import AvatarStream, LiveRuntime, StreamConfig  # noqa: E402
from ditto_core.motion.motion_options import MotionOptions  # noqa: E402
from ditto_core.pipeline import DittoPipeline  # noqa: E402
from ditto_core.registration.image_io import load_source  # noqa: E402
from ditto_core.registration.options import RegistrationOptions  # noqa: E402


def hubert_part(path):
    out = {}
    for name, seconds, seed in (("one_stream", 16.0, 0), ("av_sync", 4.0, 5), ("warm", 2.0, 99), ("level_1", 12.0, 0)):
        pcm = torch.from_numpy(bench_live._speech(seconds, seed=seed)).float() / 32768
        padded = F.pad(pcm, (1920, 6480))
        starts = range(0, pcm.shape[0] + 1920, 3200)
        windows = torch.stack([padded[s : s + 6480] for s in starts])
        extractor = HubertFeatureExtractor(path, "cuda", backend="torch", precision="fp16")
        with torch.inference_mode():
            rows = extractor.model(windows.cuda())
        finite_rows = torch.isfinite(rows.float()).flatten(1).all(1)
        eager = extractor.encode_windows(windows) if bool(finite_rows.all()) else None
        graph_ok = {}
        for batch in (1, 2):
            extractor = HubertFeatureExtractor(path, "cuda", backend="torch", precision="fp16")  # fp16 again
            encoder = LiveWindowEncoder(extractor)
            bad, errors = 0, []
            for i in range(0, windows.shape[0], batch):
                got = encoder.encode(windows[i : i + batch])
                if extractor.precision != "fp16":
                    bad = "switched to fp32"
                    break
                if eager is not None:
                    ref = eager[i : i + batch]
                    errors.append(float((got - ref).norm() / ref.norm()))
            graph_ok[f"batch_{batch}"] = {"overflow": bad, "max_rel_l2_vs_eager": max(errors) if errors else None}
        out[name] = {"windows": windows.shape[0], "eager_nonfinite_windows": int((~finite_rows).sum()),
                     "eager_max_abs": float(rows.float().nan_to_num(0, 0, 0).abs().max()), "graph": graph_ok}
        print(name, out[name], flush=True)
    return out


class _NoWorkerStreams(LiveRuntime):
    def _worker_streams(self):
        return None, None


def identical_part():
    work = tempfile.mkdtemp()
    pipeline = DittoPipeline.random(Path(work), "cuda", torch.float16, compile=False)
    frames, _ = load_source(bench_live.EXAMPLE / "portrait.jpg")
    source = pipeline.register(frames, RegistrationOptions(detect_face=False), is_image=True)
    config = StreamConfig(output="rgb", max_size=256, idle=False)
    result = {}
    for streams_on in (True, False):
        for precision in ("bf16", "fp32"):
            options = MotionOptions(steps=25, sampler_precision=precision, sampler_compile=False)
            runtime = (LiveRuntime if streams_on else _NoWorkerStreams)(pipeline, max_streams=6)
            runtime.warm_up(source, options)

            async def frames_of(speech):
                async with AvatarStream(runtime, source, options, config) as stream:
                    stream.push_audio(speech, 16000)
                    stream.end()
                    return [frame.image.clone() async for frame in stream]

            async def run():
                same = bench_live._speech(3.0, seed=21)
                others = [bench_live._speech(3.0, seed=30 + i) for i in range(4)]
                return await asyncio.gather(*(frames_of(s) for s in [same, same] + others))

            for repeat in range(2):
                first, second, *_ = asyncio.run(run())
                diffs = [(a.int() - b.int()).abs() for a, b in zip(first, second)]
                differing = [i for i, d in enumerate(diffs) if int(d.max()) > 0]
                key = f"streams_{'on' if streams_on else 'off'}_{precision}_{repeat}"
                result[key] = {"frames": len(first), "max": max(int(d.max()) for d in diffs),
                               "mean_max": round(max(float(d.float().mean()) for d in diffs), 4),
                               "frames_differing": len(differing), "first_differing": differing[:1]}
                print(key, result[key], flush=True)
            runtime.shutdown()
    return result


if __name__ == "__main__":
    print(json.dumps({"hubert": hubert_part(sys.argv[1]), "identical": identical_part()}))
