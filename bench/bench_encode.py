"""Encoder benchmark: frames/s of every x264 preset, one encoder against parallel segments.

For each frame size (512x512 and 1080x1920 by default) and each x264 preset, the same clip (the
example portrait letterboxed into the frame, panning a pixel a frame, with a little noise) goes
through :class:`VideoWriter` with

* one encoder and with ``--encoders`` parallel segment encoders (default: the writer's choice
  for this host, one per four cores);
* the frames as host RGB (colour conversion by swscale in the encoder threads) and, where CUDA
  is available, as CUDA RGB (converted to yuv420p on the GPU; only the planes cross PCIe: the
  encoder's ceiling, since the host does no colour work).

Per run: frames/s from opening the writer to the finished file, file size, and the luma PSNR
of the decoded MP4 against the source (so parallel and single encodes at the same CRF compare
on quality, not only speed). Also the GPU conversion's time per frame, and whether libx264
instances scale in Python threads as they do in processes (``thread_scaling``: PyAV releases
the GIL in ``encode``, so both speed-ups should approach the instance count). Prints a table and
writes JSON with ``--out``::

    python -m bench.bench_encode --out $OUT/bench_encode.json     # H200 host: about 8 min
    python -m bench.bench_encode --quick                            # CPU smoke run, seconds

A time budget (``--budget``) skips the slowest presets' runs that would not fit; they are listed
under ``skipped``.
"""
from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import platform
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import av
import numpy as np
import torch

from ditto_core.video.colour import rgb_to_yuv420p
from ditto_core.video.encoder import SegmentEncoder
from ditto_core.video.encoder_settings import EncoderSettings, default_preset, usable_cores
from ditto_core.video.x264_presets import X264_PRESETS
from ditto_core.video.writer import VideoWriter

from .bench_common import cuda_event_times, emit
from .scene import load_frame

FPS = 25
BATCH = 16  # frames per write, as the render hands them over
# Issue 16's goals at 1080x1920 on the H200 host (delivered frames/s of the whole render are in
# bench_delivered.py; here the encoder alone must at least reach them).
GOALS = {"ultrafast": 360.0, "superfast": 250.0, "medium": 100.0}


def make_clip(height: int, width: int, frames: int) -> torch.Tensor:
    """(frames, H, W, 3) uint8: the portrait panning one pixel a frame, with light noise."""
    still, _ = load_frame(height, width + frames)
    rng = np.random.default_rng(0)
    clip = np.stack([still[:, i : i + width] for i in range(frames)])
    noise = rng.integers(-3, 4, clip.shape, dtype=np.int16)
    return torch.from_numpy(np.clip(clip.astype(np.int16) + noise, 0, 255).astype(np.uint8))


def luma_psnr(path: Path, reference_y: np.ndarray) -> float:
    """PSNR (dB) of the decoded MP4's luma against the source luma, over all frames."""
    squared, count = 0.0, 0
    height, width = reference_y.shape[1:]
    with av.open(str(path)) as container:
        for i, frame in enumerate(container.decode(video=0)):
            y = frame.to_ndarray()[:height, :width].astype(np.float64)  # yuv420p: luma rows first
            squared += float(((y - reference_y[i]) ** 2).sum())
            count += y.size
    if count != reference_y.size:
        raise RuntimeError(f"{path}: decoded {count // (height * width)} frames, expected {len(reference_y)}")
    mse = squared / count
    return math.inf if mse == 0 else 10 * math.log10(255.0**2 / mse)


def encode(path: Path, clip: torch.Tensor, preset: str, crf: int, encoders: int) -> float:
    """Frames/s through a VideoWriter, from opening it to the finished file."""
    frames, height, width = clip.shape[:3]
    if clip.is_cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    with VideoWriter(path, width=width, height=height, fps=FPS, crf=crf, preset=preset, encoders=encoders,
                     expected_frames=frames) as writer:
        for first in range(0, frames, BATCH):
            writer.write(clip[first : first + BATCH])
    return frames / (time.perf_counter() - start)


def bench_size(height: int, width: int, args: argparse.Namespace, workdir: Path, deadline: float,
               skipped: list[str]) -> dict:
    frames = args.frames or (500 if height * width <= 512 * 512 else 250)
    clip = make_clip(height, width, frames)
    reference_y = rgb_to_yuv420p(clip.cuda() if torch.cuda.is_available() else clip)[:, :height].cpu().numpy()
    inputs = {"host_rgb": clip}
    result: dict = {"frames": frames, "runs": []}
    if torch.cuda.is_available():
        inputs["cuda_rgb"] = clip.cuda()
        batch = inputs["cuda_rgb"][:BATCH]
        result["gpu_conversion_ms_per_frame"] = float(np.median(cuda_event_times(lambda: rgb_to_yuv420p(batch), 20))) / BATCH
    last_seconds: dict = {}
    for preset in args.presets:
        for encoders in sorted({1, args.encoders}):
            for name, frames_in in inputs.items():
                key = (encoders, name)
                guess = last_seconds.get(key, 0.0) * 1.6  # each slower preset costs about this much more
                if time.perf_counter() + guess > deadline:
                    skipped.append(f"{width}x{height} {preset} encoders={encoders} {name}: ~{guess:.0f} s, over budget")
                    continue
                path = workdir / f"{height}x{width}_{preset}_{encoders}_{name}.mp4"
                fps = encode(path, frames_in, preset, args.crf, encoders)
                last_seconds[key] = frames / fps
                run = {"preset": preset, "encoders": encoders, "input": name, "fps": fps,
                       "bytes": path.stat().st_size,
                       "kbit_per_s": path.stat().st_size * 8 / 1000 / (frames / FPS)}
                if name == "host_rgb" or "host_rgb" not in inputs:
                    run["psnr_y_db"] = luma_psnr(path, reference_y)
                result["runs"].append(run)
                path.unlink()
                print(f"{width}x{height} {preset:>9} encoders={encoders:<2} {name:>8}: {fps:7.1f} frames/s "
                      f"{run['kbit_per_s']:8.0f} kbit/s  PSNR {run.get('psnr_y_db', float('nan')):.2f} dB", flush=True)
    result["parallel_vs_single"] = compare(result["runs"], args.encoders)
    return result


def _encode_alone(args: tuple) -> float:
    """Seconds one single-threaded x264 instance takes for ``clip`` (packed yuv420p)."""
    clip, path, preset = args
    settings = EncoderSettings(width=clip.shape[2], height=clip.shape[1] * 2 // 3, fps=FPS, preset=preset, threads=1)
    start = time.perf_counter()
    with SegmentEncoder(path, settings, whole=True) as encoder:
        encoder.write_yuv(clip)
    return time.perf_counter() - start


def thread_scaling(instances: int, workdir: Path, preset: str = "medium", frames: int = 60) -> dict:
    """Does PyAV let libx264 instances in Python threads run concurrently (the GIL released in
    encode)? ``instances`` single-threaded encoders of 512x512 frames, in threads and in
    processes, against one alone: aggregate frames/s and speed-up (``instances`` is ideal)."""
    clip = rgb_to_yuv420p(make_clip(512, 512, frames)).numpy()
    jobs = [(clip, workdir / f"scaling_{i}.mp4", preset) for i in range(instances)]
    alone = _encode_alone(jobs[0])
    with ThreadPoolExecutor(instances) as pool:
        start = time.perf_counter()
        list(pool.map(_encode_alone, jobs))
        threads_s = time.perf_counter() - start
    with multiprocessing.get_context("spawn").Pool(instances) as pool:
        pool.map(abs, range(instances))  # start the workers first: their start-up is not encoding
        start = time.perf_counter()
        pool.map(_encode_alone, jobs)
        processes_s = time.perf_counter() - start
    for _, path, _ in jobs:
        path.unlink(missing_ok=True)
    return {"instances": instances, "preset": preset, "frames_each": frames, "alone_fps": frames / alone,
            "threads_fps": instances * frames / threads_s, "processes_fps": instances * frames / processes_s,
            "threads_speedup": alone / threads_s * instances, "processes_speedup": alone / processes_s * instances}


def compare(runs: list[dict], encoders: int) -> dict:
    """Per preset: parallel / single frames/s, PSNR difference and size ratio (host RGB input)."""
    table = {}
    by = {(r["preset"], r["encoders"], r["input"]): r for r in runs}
    for (preset, count, name), parallel in by.items():
        single = by.get((preset, 1, name))
        if count == 1 or single is None:
            continue
        entry = table.setdefault(preset, {})
        entry[f"speedup_{name}"] = parallel["fps"] / single["fps"]
        if "psnr_y_db" in parallel and "psnr_y_db" in single:
            entry["psnr_parallel_minus_single_db"] = parallel["psnr_y_db"] - single["psnr_y_db"]
            entry["size_parallel_over_single"] = parallel["bytes"] / single["bytes"]
    return table


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--quick", action="store_true", help="CPU smoke run: tiny frames, three presets")
    parser.add_argument("--sizes", nargs="+", default=["512x512", "1080x1920"], help="HxW frame sizes")
    parser.add_argument("--presets", nargs="+", choices=X264_PRESETS, default=list(X264_PRESETS))
    parser.add_argument("--encoders", type=int, default=4, help="parallel encoders to compare with 1")
    parser.add_argument("--frames", type=int, help="frames per run (default 500 at 512x512, 250 (10 s) at 1080x1920)")
    parser.add_argument("--crf", type=int, default=18)
    parser.add_argument("--budget", type=float, default=480.0, help="seconds before slow runs are skipped")
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.presets, args.frames = ["64x128"], ["ultrafast", "veryfast", "medium"], args.frames or 60
        args.encoders = max(args.encoders, 2)
    return args


def main() -> None:
    args = parse_args()
    began = time.perf_counter()
    skipped: list[str] = []
    results: dict = {
        "config": {"cpu_count": os.cpu_count(), "usable_cores": usable_cores(), "encoders": args.encoders, "crf": args.crf, "fps": FPS,
                   "default_preset": default_preset(), "cpu": platform.processor() or platform.machine(),
                   "pyav": av.__version__, "ffmpeg": {k: list(v) for k, v in av.library_versions.items()},
                   "torch": torch.__version__,
                   "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None},
        "goals_1080x1920_fps": GOALS, "sizes": {},
    }
    with tempfile.TemporaryDirectory(prefix="bench_encode_") as tmp:
        results["thread_scaling"] = thread_scaling(max(2, args.encoders), Path(tmp), frames=12 if args.quick else 60)
        print("x264 instances in threads vs processes:", results["thread_scaling"], flush=True)
        for size in args.sizes:
            height, width = (int(v) for v in size.lower().split("x"))
            results["sizes"][size] = bench_size(height, width, args, Path(tmp), began + args.budget, skipped)
    results["skipped"] = skipped
    results["elapsed_s"] = time.perf_counter() - began
    for size, r in results["sizes"].items():
        for preset, entry in r["parallel_vs_single"].items():
            print(f"{size} {preset:>9}: " + ", ".join(f"{k} {v:.3g}" for k, v in entry.items()))
    emit(results, args.out, quiet=args.out is not None)


if __name__ == "__main__":
    main()
