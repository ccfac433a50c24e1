"""Batch benchmark: jobs per hour on 1 and N GPUs, per-job overhead, the sharded long clip.

Random weights in the official layout (speed does not depend on their values), the example
portrait and speech (speech repeated or cut to the clip length), registered without face
detection as ``--random-weights`` does. Two parts:

* ``batch``: ``--jobs`` jobs of ``--seconds`` each (one portrait, a seed per job), run through
  :func:`ditto_core.batch.driver.run_batch` on 1 worker and on ``--gpus`` workers (one per
  GPU). Each pool first renders one short job per worker, so models, compiled engines and the
  avatar cache are warm, as for a long-running service. Reported: wall, jobs per hour and the
  speed-up, per job the driver's seconds against the pipeline's own stage times -- the
  overhead beyond them (scheduling, transfers, file loading, hashing, the record) is the goal
  of <= 0.3 s.
* ``long``: one ``--minutes`` clip rendered by one worker, then sharded over ``--gpus`` workers
  (``--shard``: motion once, one segment per GPU, joined). Reported: wall, delivered frames/s,
  speed-up, the frame count and the video/audio durations of both MP4s (audio sync), and
  how far apart the two MP4s' decoded first and last frames are.

Workers are Ray actors on a local cluster bound to 127.0.0.1 (``--backend ray``, when Ray is
installed) or local processes (``--backend local``); ``auto`` picks Ray when it is importable.

    python -m bench.bench_batch --gpus 1 --out $OUT/bench_batch_1gpu.json      # H200: about 4 minutes
    python -m bench.bench_batch --gpus 2 --out $OUT/bench_batch_2gpu.json      # 2x H200: about 5 minutes
    python -m bench.bench_batch --part batch --gpus 2 --jobs 20 --seconds 15   # one part only
    python -m bench.bench_batch --device-check                                 # what this machine offers
    python -m bench.bench_batch --backend local --gpus 2 --jobs 2 --seconds 0.3 --minutes 0.01 \
        --max-frames 2 --precision fp32 --no-compile        # CPU smoke run (two CPU workers): a few minutes
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import tempfile
import time
import wave
from pathlib import Path
from typing import Any, Optional

import av
import numpy as np
import torch

from ditto_core.audio.loading import load_audio, to_mono_16k
from ditto_core.batch.driver import run_batch
from ditto_core.batch.runner import PipelineSettings
from ditto_core.batch.scheduler import Scheduler

from .bench_common import emit
from .scene import PORTRAIT_CANDIDATES

STAGES = ("register", "audio_features", "motion", "render_video")


def find_example(name: str) -> Path:
    for portrait in PORTRAIT_CANDIDATES:
        if (portrait.parent / name).is_file():
            return portrait.parent / name
    raise SystemExit(f"example file {name} not found beside any of {[str(p) for p in PORTRAIT_CANDIDATES]}; "
                     "set DITTO_SHARED")


def write_speech(path: Path, seconds: float) -> Path:
    """The example speech, repeated or cut to ``seconds``, as a 16 kHz mono 16-bit WAV."""
    waveform, rate = load_audio(find_example("speech_24k_mono.wav"))
    mono = to_mono_16k(waveform, rate).numpy().reshape(-1)
    samples = int(seconds * 16000)
    mono = np.tile(mono, math.ceil(samples / mono.shape[0]))[:samples]
    with wave.open(str(path), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(16000)
        f.writeframes((np.clip(mono, -1, 1) * 32767).astype(np.int16).tobytes())
    return path


def write_jobs(path: Path, portrait: Path, speech: Path, count: int, options: dict, prefix: str) -> Path:
    lines = [json.dumps({"source": str(portrait), "audio": str(speech), "output": f"{prefix}{i:03d}.mp4",
                         "options": {**options, "seed": i}}) for i in range(count)]
    path.write_text("\n".join(lines) + "\n")
    return path


def job_options(args) -> dict[str, Any]:
    options = {"preset": args.preset, "crf": args.crf}
    if args.max_frames is not None:
        options["max_frames"] = args.max_frames
    return options


def make_pool(backend: str, settings: PipelineSettings, workers: int):
    if backend == "ray":
        from ditto_core.batch.ray_pool import RayPool

        return RayPool(settings, workers=workers)
    from ditto_core.batch.local_pool import LocalPool, local_devices

    return LocalPool(settings, local_devices(workers))


def start_ray(gpus: int) -> None:
    import ray

    ray.init(address="local", _node_ip_address="127.0.0.1", include_dashboard=False, num_gpus=gpus,
             num_cpus=os.cpu_count(), log_to_driver=False)


def probe(path: Path) -> dict[str, Any]:
    """Frame count and durations of an MP4 as its streams describe them (audio: decoded samples)."""
    with av.open(str(path)) as container:
        video = container.streams.video[0]
        frames = sum(1 for packet in container.demux(video) if packet.size)
    with av.open(str(path)) as container:
        audio = container.streams.audio[0] if container.streams.audio else None
        samples = sum(f.samples for f in container.decode(audio=0)) if audio is not None else 0
        rate = audio.rate if audio is not None else 1
        fps = float(container.streams.video[0].average_rate)
    return {"frames": frames, "video_seconds": frames / fps, "audio_seconds": samples / rate,
            "audio_minus_video_ms": 1000 * (samples / rate - frames / fps), "bytes": path.stat().st_size}


def end_frames(path: Path) -> tuple[np.ndarray, np.ndarray]:
    with av.open(str(path)) as container:
        first = last = None
        for frame in container.decode(video=0):
            last = frame.to_ndarray(format="rgb24")
            first = last if first is None else first
    return first, last


def per_job(report: dict) -> dict[str, Any]:
    """Driver seconds against the pipeline's own stage times, per finished job (medians and worst)."""
    rows = []
    for job in report["jobs"]:
        if job["status"] != "done" or "stage_seconds" not in job["details"]:  # a sharded clip has segments instead
            continue
        stages = job["details"]["stage_seconds"]
        rows.append({"seconds": job["seconds"], "render": stages["render_video"],
                     "pipeline": sum(stages.get(s, 0.0) for s in STAGES),
                     "overhead": job["seconds"] - sum(stages.get(s, 0.0) for s in STAGES),
                     "beyond_render": job["seconds"] - stages["render_video"], "fps": job["fps"]})
    if not rows:
        return {}
    return {key: {"median": float(np.median([r[key] for r in rows])), "max": max(r[key] for r in rows)}
            for key in rows[0]}


def run_pool(backend: str, settings: PipelineSettings, workers: int, folder: Path, jobs_file: Path,
             warm_file: Path, shard: bool = False) -> dict[str, Any]:
    pool = make_pool(backend, settings, workers)
    scheduler = Scheduler(pool)
    try:
        began = time.perf_counter()
        info = scheduler.wait_ready()
        startup = time.perf_counter() - began
        warm = run_batch(warm_file, folder / "warm", scheduler)
        report = run_batch(jobs_file, folder / "out", scheduler, shard=shard)
    finally:
        pool.close()
    failed = [j["error"] for j in warm["jobs"] + report["jobs"] if j["status"] == "failed"]
    if failed:
        raise SystemExit("benchmark jobs failed:\n  " + "\n  ".join(failed))
    summary = report["summary"]
    return {"workers": workers, "worker_info": info, "startup_seconds": startup,
            "warmup_seconds": warm["summary"]["seconds"], "wall_seconds": summary["seconds"],
            "jobs": summary["done"], "frames": summary["frames"], "jobs_per_hour": summary["jobs_per_hour"],
            "delivered_fps": summary["frames"] / summary["seconds"], "per_job": per_job(report),
            "report": report}


def bench_batch(args, settings: PipelineSettings, folder: Path, portrait: Path) -> dict[str, Any]:
    speech = write_speech(folder / f"speech_{args.seconds:g}s.wav", args.seconds)
    warm_speech = write_speech(folder / "speech_warm.wav", 2.0)
    options = job_options(args)
    result: dict[str, Any] = {"jobs": args.jobs, "seconds_per_job": args.seconds, "runs": {}}
    for workers in sorted({1, args.gpus}):
        run_dir = folder / f"batch_{workers}"
        run_dir.mkdir()
        jobs_file = write_jobs(run_dir / "jobs.jsonl", portrait, speech, args.jobs, options, "job")
        warm_file = write_jobs(run_dir / "warm.jsonl", portrait, warm_speech, workers, options, "warm")
        run = run_pool(args.backend, settings, workers, run_dir, jobs_file, warm_file)
        if not args.keep_reports:
            del run["report"]
        result["runs"][str(workers)] = run
        print(f"batch on {workers} worker(s): {run['jobs_per_hour']:.0f} jobs/h, overhead per job "
              f"{run['per_job'].get('overhead', {}).get('median', float('nan')):.3f} s (median)", flush=True)
    if args.gpus > 1:
        result["speedup"] = result["runs"][str(args.gpus)]["jobs_per_hour"] / result["runs"]["1"]["jobs_per_hour"]
    return result


def bench_long(args, settings: PipelineSettings, folder: Path, portrait: Path) -> dict[str, Any]:
    speech = write_speech(folder / f"speech_{args.minutes:g}min.wav", 60 * args.minutes)
    warm_speech = write_speech(folder / "speech_warm.wav", 2.0)
    options = job_options(args)
    result: dict[str, Any] = {"minutes": args.minutes, "expected_frames": math.ceil(60 * args.minutes * 25),
                              "runs": {}}
    outputs = {}
    for name, workers, shard in (("single", 1, False), ("sharded", args.gpus, True)):
        if name == "sharded" and args.gpus < 2:
            continue
        run_dir = folder / f"long_{name}"
        run_dir.mkdir()
        jobs_file = write_jobs(run_dir / "jobs.jsonl", portrait, speech, 1, options, "clip")
        warm_file = write_jobs(run_dir / "warm.jsonl", portrait, warm_speech, workers, options, "warm")
        run = run_pool(args.backend, settings, workers, run_dir, jobs_file, warm_file, shard=shard)
        outputs[name] = run_dir / "out" / "clip000.mp4"
        run["mp4"] = probe(outputs[name])
        run["details"] = run["report"]["jobs"][0]["details"]  # stage times, or the segments when sharded
        if not args.keep_reports:
            del run["report"]
        result["runs"][name] = run
        print(f"long clip, {name} on {workers} worker(s): {run['delivered_fps']:.0f} frames/s delivered, "
              f"{run['wall_seconds']:.1f} s, {run['mp4']['frames']} frames", flush=True)
    if "sharded" in outputs:
        single, sharded = result["runs"]["single"], result["runs"]["sharded"]
        result["speedup"] = sharded["delivered_fps"] / single["delivered_fps"]
        a, b = end_frames(outputs["single"]), end_frames(outputs["sharded"])
        # Not 0 at a lossy CRF (a segment starts with an IDR frame where the single encode has a
        # P frame; the CPU test compares at CRF 0), nor bitwise on a GPU (each range starts with
        # the engine's eager first batch): a sanity bound, not an equality check.
        result["end_frames_decoded_max_abs_diff"] = [int(np.abs(x.astype(int) - y.astype(int)).max()) for x, y in zip(a, b)]
    return result


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=("all", "batch", "long"), default="all")
    parser.add_argument("--gpus", type=int, default=None, help="workers of the N-GPU runs (default: every GPU)")
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=15.0, help="speech per batch job")
    parser.add_argument("--minutes", type=float, default=10.0, help="length of the long clip")
    parser.add_argument("--precision", choices=("fp32", "fp16", "bf16"), default="fp16")
    parser.add_argument("--preset", default="ultrafast")
    parser.add_argument("--crf", type=int, default=23)
    parser.add_argument("--max-frames", type=int, default=None,
                        help="render only the first N frames of every clip (CPU smoke runs; the motion covers all)")
    parser.add_argument("--backend", choices=("auto", "ray", "local"), default="auto")
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--keep-reports", action="store_true", help="include every batch report in the JSON")
    parser.add_argument("--workdir", type=Path, default=None, help="keep the inputs and MP4s here (default: a temp folder)")
    parser.add_argument("--device-check", action="store_true", help="print the GPUs and whether Ray imports, then exit")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)

    # Read when Ray is first imported: a cluster of this machine only, every server on
    # 127.0.0.1, no usage reporting.
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        import ray  # noqa: F401
        have_ray = True
    except ImportError:
        have_ray = False
    gpus = torch.cuda.device_count()
    if args.device_check:
        print(json.dumps({"gpus": gpus, "ray": have_ray, "cpus": os.cpu_count()}))
        return
    if args.backend == "auto":
        args.backend = "ray" if have_ray else "local"
    if args.backend == "ray" and not have_ray:
        raise SystemExit("--backend ray needs `pip install ray`")
    args.gpus = args.gpus or max(gpus, 1)
    if gpus and args.gpus > gpus:
        raise SystemExit(f"--gpus {args.gpus}: this machine has {gpus} GPU(s)")

    folder = args.workdir or Path(tempfile.mkdtemp(prefix="bench_batch_"))
    folder.mkdir(parents=True, exist_ok=True)
    portrait = find_example("portrait.jpg")
    settings = PipelineSettings(cache_dir=folder / "avatar_cache", random_weights=True, precision=args.precision,
                                compile=not args.no_compile)
    if args.backend == "ray":
        start_ray(gpus)
    result: dict[str, Any] = {
        "bench": "bench_batch", "backend": args.backend, "gpus": args.gpus, "precision": args.precision,
        "preset": args.preset, "crf": args.crf, "compile": not args.no_compile,
        "device": torch.cuda.get_device_name(0) if gpus else "cpu", "torch": torch.__version__,
        "goals": {"batch_speedup_2gpu": 1.9, "overhead_per_job_s": 0.3, "sharded_speedup_2gpu": 1.8},
    }
    try:
        if args.part in ("all", "batch"):
            result["batch"] = bench_batch(args, settings, folder, portrait)
        if args.part in ("all", "long"):
            result["long_clip"] = bench_long(args, settings, folder, portrait)
    finally:
        if args.workdir is None:
            shutil.rmtree(folder, ignore_errors=True)
    emit(result, args.out)


if __name__ == "__main__":
    main()
