"""Live avatar streams on one GPU: first-frame latency, per-chunk latency, concurrency, A/V sync, memory.

    python -m bench.bench_live --out $OUT/bench_live.json                 # H200, about 8-10 minutes
    python -m bench.bench_live --quick --device cpu                         # CPU smoke run

Random weights in the official layout (speed does not depend on the values) unless ``--models``
is given; HuBERT is ``--hubert`` (the official ``hubert_streaming_fix_kv.onnx`` or a
real-architecture export), else the small stand-in. Every stream runs through
:class:`~ditto_core.live.AvatarStream` exactly as the server runs it (JPEG frames, the example
portrait put back into its full frame and scaled to ``--max-size``), with speech pushed in real
time in 20 ms chunks. Parts:

* ``first_frame``: the schedule's audio delay (samples the first frame needs: 485 ms with
  overlap 75) and the compute after it: that audio pushed at once, time to the first frame;
* ``one_stream``: chunk latency (a window's last sample in -> its 5 frames encoded) p50/p95;
* ``concurrency``: N real-time streams at once (started together, so their speech arrives in
  step) for each N of ``--streams``, each ``--round-frames`` setting, each of ``--steps``, each
  LMDM ``--overlap`` (75: a window every 5 frames; 70: every 10, half the LMDM's work) and each
  ``--round-interval`` (seconds between motion rounds, at least: more windows an LMDM call):
  p95 chunk latency, frames short of real time, stalls, and the runtime's rounds (frames,
  windows, motion / queue / render times); ``max_realtime_streams`` is the largest N with p95
  <= 200 ms and no drops;
* ``av_sync``: every frame's audio slice against the pushed speech (offset in samples);
* ``profile`` (with ``--profile DIR``): 3 s of N streams under torch.profiler for each N of
  ``--profile-streams``, the traces in DIR, the GPU's busy share, stream by stream, in the JSON;
* ``long_stream``: one stream for ``--minutes`` of speech pushed as fast as it is animated:
  host RSS and GPU memory sampled along the way, and their drift.
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import math
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from ditto_core.audio.audio_features import FPS
from ditto_core.audio.hubert import HubertFeatureExtractor
from ditto_core.cuda_streams import side_stream
from ditto_core.gc_pauses import CollectorPauses
from ditto_core.live import AvatarStream, LiveRuntime, StreamConfig
from ditto_core.live.admission import MAX_LOAD
from ditto_core.live.runtime import quantile
from ditto_core.live.schedule import OnlineMotion
from ditto_core.models.keypoints import MOTION_DIM
from ditto_core.models.lmdm import WINDOW
from ditto_core.motion.motion_options import MotionOptions
from ditto_core.pipeline import DittoPipeline
from ditto_core.precision import NETWORK_PRECISIONS, network_dtype
from ditto_core.registration.image_io import load_source
from ditto_core.registration.options import RegistrationOptions

from .bench_common import emit
from .kernel_timeline import summarise as summarise_kernels
from .scene import PORTRAIT_CANDIDATES

EXAMPLE = next((path.parent for path in PORTRAIT_CANDIDATES if path.is_file()), PORTRAIT_CANDIDATES[0].parent)
CHUNK_S = 0.02


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _speech(seconds: float, seed: int = 0) -> np.ndarray:
    """Speech-like test signal at 16 kHz: noise bursts under a syllable-rate envelope, int16."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * 16000)) / 16000
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 4 * t + rng.uniform(0, 6))
    return (8000 * envelope * rng.standard_normal(t.shape)).astype(np.int16)


def _pct(values, q):
    return quantile(sorted(v for v in values if v is not None), q)


async def _run_stream(runtime, source, options, config, speech, realtime=True, keep=None):
    """Push ``speech`` (int16, 16 kHz) in 20 ms chunks (paced in real time), read every frame."""
    frames = []
    async with AvatarStream(runtime, source, options, config) as stream:
        step = int(CHUNK_S * 16000)

        async def push():
            start = time.monotonic()
            for k, i in enumerate(range(0, len(speech), step)):
                stream.push_audio(speech[i : i + step], 16000)
                if realtime:
                    await asyncio.sleep(max(0.0, start + (k + 1) * CHUNK_S - time.monotonic()))
                elif stream.stats()["buffered_speech_s"] > 2:
                    while stream.stats()["buffered_speech_s"] > 1:
                        await asyncio.sleep(0.01)
            stream.end()

        pusher = asyncio.ensure_future(push())
        async for frame in stream:
            frames.append(frame if keep is None else keep(frame))
        await pusher
        return frames, stream.stats()


def first_frame(runtime, source, options, config):
    """Audio delay of the schedule, and the compute from that audio to the first frame."""
    hop = runtime.hubert.window.valid * 640
    need = hop + runtime.hubert.window.num_samples - runtime.hubert.window.past * 640  # HuBERT window 1's last sample
    speech = _speech(need / 16000 + 0.5)

    async def run():
        results = []
        for _ in range(5):
            async with AvatarStream(runtime, source, options, config) as stream:
                start = time.monotonic()
                stream.push_audio(speech[:need], 16000)
                await stream.__anext__()
                results.append(time.monotonic() - start)
        return results

    times = asyncio.run(run())
    return {"audio_needed_s": need / 16000, "compute_ms": [round(1000 * t, 2) for t in times],
            "compute_ms_median": round(1000 * sorted(times)[len(times) // 2], 2), "goal_ms": 100}


def one_stream(runtime, source, options, config, seconds):
    with CollectorPauses() as pauses:  # a full collection holds the GIL that both worker threads need
        frames, stats = asyncio.run(_run_stream(runtime, source, options, config, _speech(seconds), keep=lambda f: f.index))
    return {"seconds": seconds, "frames": len(frames), "chunk_latency_p50_ms": 1000 * stats["chunk_latency_p50_s"],
            "chunk_latency_p95_ms": 1000 * stats["chunk_latency_p95_s"],
            "first_frame_latency_ms": 1000 * stats["first_frame_latency_s"], "goal_p95_ms": 25,
            "collector": _rounded(pauses.stages())}


def profile_stream(runtime, source, options, config, out_dir: Path, streams: int = 1):
    """``streams`` real-time streams of 3 s under torch.profiler, after 2 s of them to warm up: a
    Chrome trace (where a chunk's time goes between the two worker threads and the GPU) and the
    busiest kernels in ``out_dir`` (file names end in the stream count); the GPU's share busy,
    each CUDA stream's kernels and the idle gaps (:mod:`.kernel_timeline`) in the result."""
    from torch.profiler import ProfilerActivity, profile

    out_dir.mkdir(parents=True, exist_ok=True)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    asyncio.run(_warm(runtime, source, options, config, streams))

    async def run():
        return await asyncio.gather(*(_run_stream(runtime, source, options, config, _speech(3.0, seed=3 + i))
                                      for i in range(streams)))

    with profile(activities=activities) as prof:
        results = asyncio.run(run())
    trace = out_dir / f"live_profile_trace_{streams}.json"
    prof.export_chrome_trace(str(trace))
    sort = "cuda_time_total" if torch.cuda.is_available() else "cpu_time_total"
    (out_dir / f"live_profile_kernels_{streams}.txt").write_text(prof.key_averages().table(sort_by=sort, row_limit=40))
    return {"trace": str(trace), "streams": streams,
            "chunk_latency_p50_ms": 1000 * _pct([r[1]["chunk_latency_p50_s"] for r in results], 0.5),
            "chunk_latency_p95_ms": 1000 * max(r[1]["chunk_latency_p95_s"] for r in results),
            "gpu": summarise_kernels(trace)}


def concurrency(runtime, source, options, config, counts, seconds, round_frames=(None,), hubert_priorities=(None,),
                render_frames=(None,), every_level=False, steps=(None,), overlaps=(None,), intervals=(None,)):
    """N streams in step for each N of ``counts``, under each ``round_frames`` setting of the
    runtime (None: its default), each CUDA priority of its HuBERT windows' stream (None: the
    runtime's), each ``render_frames`` (None: rounds never joined), each of the DDIM ``steps``
    the runtime was warmed up for (None: ``options.steps``), each LMDM overlap of the streams
    (None: ``config.overlap``) and each ``round_interval`` of the runtime (None: its own), side
    by side; a setting stops at its first N missed unless ``every_level`` (settings meant for a
    saturated device, compared where they act)."""
    variants, default, stream = {}, runtime.round_frames, runtime.hubert_windows.stream
    default_render, default_interval = runtime.render_frames, runtime.round_interval
    for setting, priority, joined, n_steps, overlap, interval in itertools.product(
            round_frames, hubert_priorities, render_frames, steps, overlaps, intervals):
        runtime.round_frames = setting or default
        runtime.render_frames = joined
        runtime.round_interval = default_interval if interval is None else interval
        if priority is not None and stream is not None:  # the recorded graphs replay on any stream
            # For this variant only (put back below): a stream none of the runtime's owners holds.
            runtime.hubert_windows.stream = side_stream(runtime.device, priority)
        stream_options = options if n_steps is None else replace(options, steps=n_steps)
        stream_config = config if overlap is None else replace(config, overlap=overlap)
        name = (f"round_frames={runtime.round_frames}" + (f",hubert_priority={priority}" if priority is not None else "")
                + (f",render_frames={joined}" if joined is not None else "")
                + (f",steps={n_steps}" if len(steps) > 1 else "")
                + (f",overlap={overlap}" if len(overlaps) > 1 else "")
                + (f",round_interval={interval}" if len(intervals) > 1 else ""))
        levels = []
        for n in counts:
            if n > runtime.max_streams:
                break
            level = _concurrency_level(runtime, source, stream_options, stream_config, n, seconds)
            print({"variant": name, **level}, flush=True)
            levels.append(level)
            if not level["realtime_ok"] and not every_level:
                break
        ok = [lv["streams"] for lv in levels if lv["realtime_ok"]]
        variants[name] = {"levels": levels, "max_realtime_streams": max(ok) if ok else 0}
        runtime.hubert_windows.stream = stream
    # the parts after this one: as made
    runtime.round_frames, runtime.render_frames, runtime.round_interval = default, default_render, default_interval
    best = max(v["max_realtime_streams"] for v in variants.values())
    return {"variants": variants, "max_realtime_streams": best, "goal_streams": 12}


def _concurrency_level(runtime, source, options, config, n, seconds):
    speech = [_speech(seconds, seed=i) for i in range(n)]

    async def run():
        return await asyncio.gather(*(
            _run_stream(runtime, source, options, config, s, keep=lambda f: f.index) for s in speech))

    asyncio.run(_warm(runtime, source, options, config, n))
    runtime.clear_round_stats()
    start = time.monotonic()
    with CollectorPauses() as pauses:
        results = asyncio.run(run())
    wall = time.monotonic() - start
    expected = _frames_released(int(seconds * 16000), config.overlap)
    p95 = [r[1]["chunk_latency_p95_s"] for r in results]
    short = sum(max(0, expected - len(r[0])) for r in results)
    gaps = sum(1 for r in results if r[0] != list(range(len(r[0]))))
    return {"streams": n, "chunk_latency_p95_ms_max": round(1000 * max(p95), 2),
            "chunk_latency_p50_ms_median": round(1000 * _pct([r[1]["chunk_latency_p50_s"] for r in results], 0.5), 2),
            "frames_missing": short, "streams_with_gaps": gaps, "wall_s": round(wall, 2),
            "load": _load(runtime), "collector": _rounded(pauses.stages()),
            "realtime_ok": max(p95) <= 0.2 and short == 0 and gaps == 0, "rounds": runtime.round_stats()}


def _frames_released(samples: int, overlap: int) -> int:
    """Frames Ditto's online schedule shows for ``samples`` of speech: the schedule itself run on
    zero features (with overlap 75, 5 a HuBERT window and the final window's 5)."""
    hubert_windows = math.ceil((samples + 1920) / 3200)
    motion = OnlineMotion(torch.zeros(overlap, 1024), torch.zeros(1, MOTION_DIM), lambda features, first: features,
                          overlap=overlap)
    motion.push(torch.zeros(5 * hubert_windows, 1024))
    motion.end()
    while (window := motion.next_window()) is not None:
        motion.accept(window, torch.zeros(WINDOW, MOTION_DIM))
    return motion.frames_out


def _rounded(stages: dict[str, float]) -> dict[str, float]:
    """The interpreter's collections during the run (:meth:`CollectorPauses.stages`), for the JSON."""
    return {name: round(value, 4) for name, value in stages.items()}


def _load(runtime):
    """What the runtime's admission check measures as a level ends, and how many streams the
    default limit would admit at that cost (set beside ``realtime_ok`` to calibrate the limit)."""
    load = runtime.load()
    if load is None:
        return None
    each = load.per_stream(FPS)
    return {"busy": round(load.busy, 3), "per_stream": round(each, 4), "admits_at_default_limit": max(1, int(MAX_LOAD / each))}


async def _warm(runtime, source, options, config, n):
    """Two seconds of n streams: records the LMDM graph of batch n and touches every engine size."""
    await asyncio.gather(*(_run_stream(runtime, source, options, config, _speech(2.0, seed=99 + i), realtime=False,
                                       keep=lambda f: None) for i in range(n)))


def av_sync(runtime, source, options, config):
    """Where in the pushed speech each frame's audio slice comes from, against where it should (640 i)."""
    speech = _speech(4.0, seed=5)
    frames, _ = asyncio.run(_run_stream(runtime, source, options, config, speech,
                                        keep=lambda f: (f.index, f.audio.numpy().astype(np.float64))))
    padded = np.concatenate([np.zeros(640), speech, np.zeros(640 * (len(frames) + 2))]).astype(np.float64)
    offsets = []
    for index, audio in frames[1 : 4 * 25 - 1]:
        base = 640 + 640 * index
        errors = {d: np.abs(padded[base + d : base + d + 640] - audio).mean() for d in range(-640, 641, 8)}
        offsets.append(min(errors, key=errors.get))
    return {"max_offset_samples": int(max(map(abs, offsets))), "frames_checked": len(offsets), "goal_samples": 640}


def long_stream(runtime, source, options, config, minutes, progress=None):
    """One stream of ``minutes`` of speech; ``progress(summary)`` after every memory sample, so a
    run cut by a time limit still has the samples taken so far (``finished`` False)."""
    samples = []
    start = time.monotonic()

    def keep(frame):
        if frame.index % (25 * 10) == 0:  # every 10 s of stream time
            cuda = torch.cuda.is_available()
            samples.append({"stream_s": frame.index / 25, "wall_s": round(time.monotonic() - start, 2),
                            "rss_mib": round(_rss_mib(), 1),
                            "cuda_allocated_mib": round(torch.cuda.memory_allocated() / 2**20 if cuda else 0.0, 1),
                            "cuda_reserved_mib": round(torch.cuda.memory_reserved() / 2**20 if cuda else 0.0, 1)})
            if progress is not None:
                progress(_memory_summary(minutes, frame.index + 1, start, samples, finished=False))
        return None

    with CollectorPauses() as pauses:  # a long stream is where full collections come, if they come
        frames, stats = asyncio.run(_run_stream(runtime, source, options, config, _speech(60 * minutes, seed=7),
                                                realtime=False, keep=keep))
    return {**_memory_summary(minutes, len(frames), start, samples, finished=True),
            "collector": _rounded(pauses.stages())}


def _full_collection() -> dict:
    """What one full collection of the interpreter would stall every stream for from now on: the
    objects it walks (the compile's among them) and its time, taken after a first collection has
    freed the warm-up's garbage."""
    gc.collect()
    start = time.perf_counter()
    gc.collect()
    return {"tracked_objects": len(gc.get_objects()), "full_collection_s": round(time.perf_counter() - start, 4),
            "frozen_objects": gc.get_freeze_count()}


def _memory_summary(minutes, frames, start, samples, finished):
    tail = samples[len(samples) // 4 :] or samples
    drift = {k: round(tail[-1][k] - tail[0][k], 1) for k in ("rss_mib", "cuda_allocated_mib", "cuda_reserved_mib")} \
        if tail else {}
    return {"minutes": minutes, "finished": finished, "frames": frames, "wall_s": round(time.monotonic() - start, 1),
            "drift_after_first_quarter": drift, "samples": list(samples)}


PARTS = ("first_frame", "one_stream", "av_sync", "profile", "concurrency", "long_stream")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--models", type=Path, default=None, help="official model folder (default: random weights)")
    parser.add_argument("--hubert", type=Path, default=None, help="HuBERT ONNX to use instead of the stand-in")
    parser.add_argument("--avatar", type=Path, default=EXAMPLE / "portrait.jpg")
    parser.add_argument("--precision", choices=NETWORK_PRECISIONS, default="fp16")
    parser.add_argument("--steps", type=int, nargs="+", default=[25],
                        help="DDIM steps; several: the concurrency part runs each side by side, the other parts the first")
    parser.add_argument("--lmdm-precision", default="bf16", choices=("fp32", "tf32", "bf16"))
    parser.add_argument("--no-lmdm-compile", action="store_true")
    parser.add_argument("--max-size", type=int, default=512, help="longest side of the frames sent")
    parser.add_argument("--output", choices=("jpeg", "h264"), default="jpeg", help="how frames are encoded")
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 4, 8, 12, 16, 20, 24])
    parser.add_argument("--seconds", type=float, default=12.0, help="speech per stream in the concurrency part")
    parser.add_argument("--round-frames", type=int, nargs="+", default=[0],
                        help="LiveRuntime round_frames settings compared in the concurrency part (0: the default, "
                             "the largest render batch; e.g. 1000 for rounds as large as the streams due)")
    parser.add_argument("--hubert-priority", type=int, nargs="+", default=[None],
                        help="CUDA priorities of the HuBERT windows' stream compared in the concurrency part "
                             "(default: the runtime's; e.g. 0 -1: normal against the motion thread's)")
    parser.add_argument("--render-frames", type=int, nargs="+", default=[0],
                        help="LiveRuntime render_frames settings compared in the concurrency part (0: rounds never "
                             "joined; e.g. 80: a round queued behind the one rendered joins it up to 80 frames)")
    parser.add_argument("--overlap", type=int, nargs="+", default=[None],
                        help="LMDM overlaps of the streams compared in the concurrency part (default: StreamConfig's "
                             "75, Ditto's online setting; e.g. 75 70: a window every 5 frames against every 10)")
    parser.add_argument("--round-interval", type=float, nargs="+", default=[None],
                        help="LiveRuntime round_interval settings compared in the concurrency part (seconds between "
                             "motion rounds, at least; e.g. 0 0.1)")
    parser.add_argument("--every-level", action="store_true",
                        help="run every --streams count of the concurrency part, past the first that misses real time")
    parser.add_argument("--minutes", type=float, default=5.0, help="speech in the long-stream memory part")
    parser.add_argument("--quick", action="store_true",
                        help="tiny CPU smoke run of the script itself (frames are noise, warp+decode is skipped)")
    parser.add_argument("--stitch-graphs", action="store_true",
                        help="replay each round's stitching from CUDA graphs (LiveRuntime(stitch_graphs=True))")
    parser.add_argument("--profile", type=Path, default=None,
                        help="folder for a profiled 3-s stream (Chrome trace, kernel table), after av_sync")
    parser.add_argument("--profile-streams", type=int, nargs="+", default=[1],
                        help="streams at once in the profiled 3 s (one profile for each count)")
    parser.add_argument("--parts", nargs="+", default=list(PARTS), choices=PARTS,
                        help="which parts to run (default: all; profile only with --profile)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.quick:
        args.steps, args.streams, args.seconds, args.minutes = [2], [1, 2], 1.0, 0.1
    device = torch.device(args.device)
    compile_ok = device.type == "cuda"
    with tempfile.TemporaryDirectory() as workdir:
        setup = time.monotonic()
        if args.models is not None:
            pipeline = DittoPipeline.from_model_dir(args.models, device, network_dtype(args.precision), compile=compile_ok)
        else:
            pipeline = DittoPipeline.random(Path(workdir), device, network_dtype(args.precision), compile=compile_ok)
        if args.hubert is not None:
            pipeline.hubert = HubertFeatureExtractor(args.hubert, device)
        frames, is_image = load_source(args.avatar)
        source = pipeline.register(frames, RegistrationOptions(detect_face=args.models is not None), is_image=is_image)
        # No load limit: the benchmark measures past what the device sustains.
        runtime = LiveRuntime(pipeline, max_streams=max(args.streams), renderer=_NoiseRenderer() if args.quick else None,
                              stitch_graphs=args.stitch_graphs, max_load=None)
        options = MotionOptions(steps=args.steps[0], sampler_precision=args.lmdm_precision,
                                sampler_compile=not args.no_lmdm_compile and compile_ok)
        config = StreamConfig(output=args.output, max_size=args.max_size, idle=False)
        loaded = time.monotonic()
        # Every stream shows this one avatar; every step count is recorded before any stream runs.
        runtime.warm_up(source, options, several_avatars=False, steps=args.steps)
        asyncio.run(_warm(runtime, source, options, config, 1))
        result = {
            "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "torch": torch.__version__, "precision": args.precision, "steps": args.steps,
            "lmdm_precision": args.lmdm_precision, "lmdm_compile": options.sampler_compile,
            "stitch_graphs": args.stitch_graphs,
            "hubert": str(args.hubert or "stand-in"), "hubert_provider": runtime.hubert.execution_provider,
            "output": args.output, "frame_size": list(config.frame_size(*source.frames.shape[1:3])),
            "setup_s": round(loaded - setup, 1), "warm_up_s": round(time.monotonic() - loaded, 1),
            # What the warm-up measured of each render batch size: the costs the rounds are split by.
            "render_batch_ms": {size: round(1000 * t, 2) for size, t in (getattr(runtime.renderer, "batch_costs",
                                                                               None) or {}).items()},
        }
        result["collector_after_warm_up"] = _full_collection()
        print({k: result[k] for k in ("setup_s", "warm_up_s", "hubert_provider", "render_batch_ms",
                                      "collector_after_warm_up")}, flush=True)
        parts = {
            "first_frame": lambda: first_frame(runtime, source, options, config),
            "one_stream": lambda: one_stream(runtime, source, options, config, 4 * args.seconds / 3),
            "av_sync": lambda: av_sync(runtime, source, options, config),
            **({"profile": lambda: {
                str(n): profile_stream(runtime, source, options, config, args.profile, n)
                for n in args.profile_streams}} if args.profile else {}),
            "concurrency": lambda: concurrency(runtime, source, options, config, args.streams, args.seconds,
                                               [r or None for r in args.round_frames], args.hubert_priority,
                                               [r or None for r in args.render_frames], args.every_level,
                                               args.steps, args.overlap, args.round_interval),
            "long_stream": lambda: long_stream(runtime, source, options, config, args.minutes, progress=partial_long),
        }

        def partial_long(summary):
            result["long_stream"] = summary
            if args.out is not None:
                emit(result, args.out, quiet=True)

        for name, part in parts.items():
            if name not in args.parts:
                continue
            # Written after every part, so a run cut by a time limit keeps what it measured.
            result[name] = part()
            print(name, result[name] if name != "long_stream" else result[name]["drift_after_first_quarter"], flush=True)
            if args.out is not None:
                emit(result, args.out, quiet=True)
        runtime.shutdown()
    emit(result, args.out)



class _NoiseRenderer:
    """--quick: frames of noise at the output size instead of warp+decode (seconds a frame on a CPU)."""

    def render(self, jobs):
        return [torch.randint(0, 256, (j.motion.kp_driving.shape[0], *j.stream.frame_size, 3), dtype=torch.uint8)
                for j in jobs]


if __name__ == "__main__":
    main()
