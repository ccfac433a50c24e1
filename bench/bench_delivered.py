"""Delivered against GPU-side frames/s for each x264 preset, one encoder and parallel, in one run.

The render half of bench_render.py (cached avatar, 10 s of motion, compiled fp16 warp+decode,
Triton put-back into a 1080x1920 frame), measured on the GPU side alone (render + put-back, then
with the yuv420p conversion by each backend, then with the host copy on the render's stream or a
side stream; device synchronised), x264 alone on the clip's frames from host memory
(``encode_only_fps``, one instance per preset and per one-encoder layout with its thread count), and
then into a finished MP4 with 10 s of AAC audio through
:class:`VideoWriter`, for each preset and each encoder layout (x264 instances x frame threads
each, ``--layouts``). Each MP4 is checked: the expected number of frames and audio within one frame of
the video. Prints a table next to issue 16's goals and writes JSON with ``--out``::

    python -m bench.bench_delivered --out $OUT/bench_delivered.json   # H200: about 3-5 min
    python -m bench.bench_delivered --quick                             # CPU smoke run

``--cache-dir`` reuses an Inductor cache (bench_render.py's, say) to skip the cold compile.
"""
from __future__ import annotations

import argparse
import itertools
import os
import re
import statistics
import tempfile
import time
from pathlib import Path
from typing import NamedTuple, Optional

import av
import numpy as np
import torch

from ditto_core import gil_turns
from ditto_core.compilation import compile_available
from ditto_core.cuda_streams import side_stream
from ditto_core.precision import NETWORK_PRECISIONS, network_dtype
from ditto_core.render.putback import paste_back
from ditto_core.render.warp_decode import WarpDecodeEngine, auto_batch_size
from ditto_core.video.colour import rgb_to_yuv420p
from ditto_core.video import mp4_file
from ditto_core.video.encoder import SegmentEncoder
from ditto_core.video.encoder_settings import EncoderSettings, usable_cores
from ditto_core.video.x264_presets import X264_PRESETS
from ditto_core.video import writer as writer_module
from ditto_core.video.writer import VideoWriter

from .bench_common import emit, sync
from .bench_render import compiled_engine
from .scene import FPS, Settings, make_scene, render_networks

AUDIO_RATE = 48000
REPEATS = 2
# Issue 16 (H200 host, 1080x1920): ("ratio", r) is delivered >= r * GPU-side; ("fps", f) is >= f.
GOALS = {"ultrafast": ("ratio", 0.95), "superfast": ("fps", 250.0), "medium": ("fps", 100.0)}


def check_mp4(path: Path, frames: int) -> dict:
    """Frames in the file (demuxed packets) and audio minus video duration, in frames."""
    with av.open(str(path)) as container:
        video, audio = container.streams.video[0], container.streams.audio[0]
        packets = sum(1 for p in container.demux(video) if p.size)
        video_s = float(video.duration * video.time_base)
        audio_s = float(audio.duration * audio.time_base)
    return {"mp4_frames": packets, "frames_ok": packets == frames,
            "audio_minus_video_frames": (audio_s - video_s) * FPS,
            "audio_ok": abs(audio_s - video_s) * FPS <= 1.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--quick", action="store_true", help="CPU smoke run: tiny frames, eager, two presets")
    parser.add_argument("--presets", nargs="+", choices=X264_PRESETS,
                        default=["ultrafast", "superfast", "veryfast", "faster", "fast", "medium"])
    parser.add_argument("--layouts", nargs="+", type=parse_layout, default=[Layout(1), Layout(2), Layout(3)],
                        help="writer configurations side by side, E[xT][nN][qQ][s]: E x264 instances of T frame threads "
                             "each, their threads N nice levels below the render thread, a host pool of Q frames, "
                             "s: encoder threads spinning while they wait for the GPU's copies (before session 16); "
                             "what is left out takes the writer's default (e.g. 1 1s 2x7 1n0 1x16n10q128)")
    parser.add_argument("--frames", type=int, default=250, help="frames per MP4 (250: 10 s)")
    parser.add_argument("--precision", choices=NETWORK_PRECISIONS, default="fp16")
    parser.add_argument("--crf", type=int, default=18)
    parser.add_argument("--cache-dir", type=Path, help="Inductor cache to reuse")
    parser.add_argument("--gil-intervals", type=float, nargs="+", default=[gil_turns.SHORT_INTERVAL],
                        help="GIL switch intervals (s) the writer's threads run under, side by side (0.005: Python's "
                             "default, i.e. the writer before it shortened them)")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() and not args.quick else "cpu")
    if args.quick:
        settings = Settings(device, 4, 180, 320, 32, 4, (args.precision,), False, 1, "ultrafast", args.crf)
        args.presets, args.layouts = args.presets[:2], args.layouts[:2]
    else:
        settings = Settings(device, args.frames, 1080, 1920, 64, 0, (args.precision,), compile_available(device)[0], 3,
                            "ultrafast", args.crf)
    began = time.perf_counter()
    dtype = network_dtype(args.precision) if device.type == "cuda" else torch.float32
    scene, origin = make_scene(settings)
    nets = render_networks(device, dtype)
    batch = settings.batch or auto_batch_size(device, dtype)
    motion, frames = scene.motion, len(scene.motion)
    wave = (0.2 * np.sin(2 * np.pi * 220 * np.arange(int(frames / FPS * AUDIO_RATE)) / AUDIO_RATE)).astype(np.float32)

    with tempfile.TemporaryDirectory(prefix="bench_delivered_") as tmp:
        workdir = Path(tmp)
        if settings.compile:
            f_s = scene.source.f_s.to(dtype)
            engine, ready_s = compiled_engine(nets, batch, args.cache_dir or workdir / "inductor", f_s,
                                              motion.kp_source, motion.kp_driving, device)
        else:
            engine, ready_s = WarpDecodeEngine(*nets, batch_size=batch, compile=False), 0.0

        def frames_of_clip():
            for first, renders in engine.iter_render(scene.source, motion):
                yield paste_back(scene.frame, renders, scene.M_c2o, motion.source_index[first : first + len(renders)])

        def gpu_side(convert: Optional[str] = None, copy: Optional[str] = None) -> float:
            """Frames/s of render + put-back, then the yuv420p conversion (``convert``: its backend)
            and the host copy into pinned buffers (``copy``: on the render's stream or a side stream)."""
            if copy is not None:
                # Two pinned batches reused in turn: only the transfers' cost is of interest here.
                pool = [torch.empty(batch * settings.height * settings.width * 3 // 2, dtype=torch.uint8,
                                    pin_memory=True) for _ in range(2)]
                side = side_stream(device) if copy == "side" else None
            for _ in frames_of_clip():  # warm: put-back kernels compile on first use
                break
            sync(device)
            start = time.perf_counter()
            for i, out in enumerate(frames_of_clip()):
                if convert is None:
                    continue
                packed = rgb_to_yuv420p(out, backend=convert)
                if copy is None:
                    continue
                target = pool[i % 2][: packed.numel()].view(packed.shape)
                if side is None:
                    target.copy_(packed, non_blocking=True)
                    continue
                side.wait_stream(torch.cuda.current_stream(device))
                with torch.cuda.stream(side):
                    target.copy_(packed, non_blocking=True)
                packed.record_stream(side)
            sync(device)
            return frames / (time.perf_counter() - start)

        def encode_only(preset: str, packed: list, threads: Optional[int] = None) -> float:
            """Frames/s of one x264 instance alone on the clip's yuv420p frames, already in host memory."""
            path = workdir / f"encode_only_{preset}.mp4"
            encoder_settings = EncoderSettings(settings.width, settings.height, FPS, args.crf, preset,
                                               threads=threads or 0)
            start = time.perf_counter()
            with SegmentEncoder(path, encoder_settings, audio=(wave, AUDIO_RATE)) as encoder:
                for batch_yuv in packed:
                    for first in range(0, len(batch_yuv), 4):  # the writer's chunk
                        encoder.write_yuv(batch_yuv[first : first + 4])
            return frames / (time.perf_counter() - start)

        gpu_variants = {"render_and_putback": {}, "yuv_torch": {"convert": "torch"}}
        if device.type == "cuda":
            gpu_variants.update({"yuv_triton": {"convert": "triton"},
                                 "yuv_triton_copy_render_stream": {"convert": "triton", "copy": "render"},
                                 "yuv_triton_copy_side_stream": {"convert": "triton", "copy": "side"}})
        gpu_fps = {name: statistics.median(gpu_side(**variant) for _ in range(settings.reps))
                   for name, variant in gpu_variants.items()}
        print("GPU side, frames/s: " + "  ".join(f"{name} {fps:.1f}" for name, fps in gpu_fps.items()), flush=True)
        host_yuv = [rgb_to_yuv420p(out).cpu().numpy() for out in frames_of_clip()]
        results: dict = {
            "config": {"device": str(device), "frames": frames, "size": [settings.height, settings.width],
                       "precision": args.precision, "batch": batch, "compiled": settings.compile,
                       "compile_ready_s": ready_s, "crf": args.crf,
                       "layouts": [layout.name for layout in args.layouts],
                       "source_frame": origin, "cpu_count": os.cpu_count(), "usable_cores": usable_cores(),
                       "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None},
            "gpu_fps": gpu_fps["render_and_putback"],
            "gpu_side_fps": gpu_fps,
            "presets": {},
        }
        writeback_default = mp4_file.WRITEBACK_BYTES
        for preset, interval in itertools.product(args.presets, args.gil_intervals):
            gil_turns.SHORT_INTERVAL = interval
            entry = {"gil_interval_s": interval, "encode_only_fps": encode_only(preset, host_yuv)}
            for layout in args.layouts:
                runs = []
                name = layout.name
                path = workdir / f"{preset}_{name}.mp4"
                writer_module.HOST_WAIT_BLOCKS = not layout.spin
                mp4_file.WRITEBACK_BYTES = writeback_default if layout.writeback_mib is None \
                    else layout.writeback_mib << 20
                writer_module.TRIM_IN_BACKGROUND = not layout.trim_in_caller
                tails, finishes = [], []
                for _ in range(1 if args.quick else REPEATS):
                    start = time.perf_counter()
                    with VideoWriter(path, width=settings.width, height=settings.height, fps=FPS, crf=args.crf,
                                     preset=preset, **layout.writer_options(), audio=(wave, AUDIO_RATE),
                                     expected_frames=frames) as writer:
                        while layout.wait_open and writer._final is None and writer._error is None:
                            time.sleep(1e-4)
                        for out in frames_of_clip():
                            writer.write(out)
                        last_write = time.perf_counter()
                    runs.append(frames / (time.perf_counter() - start))
                    tails.append(time.perf_counter() - last_write)
                    finishes.append({k: round(v, 4) for k, v in writer.finish_seconds.items()})
                alone = encode_only(preset, host_yuv, layout.threads) if layout.encoders == 1 and layout.threads else None
                entry.setdefault("layouts", {})[name] = {
                    **layout._asdict(), "delivered_fps": statistics.median(runs), "runs": runs,
                    "tail_s": tails,  # from the last frame handed over to the MP4 in place
                    "finish_s": finishes,  # the writer's breakdown of each tail
                    "encode_only_fps": alone,
                              "bytes": path.stat().st_size, **check_mp4(path, frames)}
            entry["goal"], entry["met"] = goal(preset, entry, results["gpu_fps"])
            name = preset if len(args.gil_intervals) == 1 else f"{preset}@gil{interval:g}"
            results["presets"][name] = entry
            print_row(name, entry, results["gpu_fps"])
        results["elapsed_s"] = time.perf_counter() - began
    emit(results, args.out, quiet=args.out is not None)


class Layout(NamedTuple):
    """One writer configuration: x264 instances, and None for the writer's defaults of the rest."""

    encoders: int
    threads: Optional[int] = None  # frame threads of each instance
    nice: Optional[int] = None  # levels x264's threads run below the render thread (the writer's default: 0)
    queue: Optional[int] = None  # frames the host pool holds between the render and x264
    spin: bool = False  # the encoder threads spin while they wait for the GPU's copies (before session 16)
    wait_open: bool = False  # the render waits for x264 to open, as when the writer opened it (before session 17)
    trim_in_caller: bool = False  # the caller trims the host heap before it gets its MP4 (before session 18)
    # MiB between the MP4's early writebacks (None: the writer's default; 0: only the sync before
    # its rename, as before session 18)
    writeback_mib: Optional[int] = None

    def writer_options(self) -> dict:
        """The :class:`VideoWriter` arguments of this layout (what it leaves out, the writer's defaults)."""
        return {"encoders": self.encoders, "threads": self.threads, "nice": self.nice or 0, "queue_frames": self.queue}

    @property
    def name(self) -> str:
        return (f"{self.encoders}" + "".join(f"{tag}{value}" for tag, value in zip("xnq", self[1:4]) if value is not None)
                + ("s" if self.spin else "") + ("w" if self.wait_open else "") + ("t" if self.trim_in_caller else "")
                + (f"b{self.writeback_mib}" if self.writeback_mib is not None else ""))


def parse_layout(text: str) -> Layout:
    """"3" -> Layout(3); "1x16n10q128" -> 1 encoder of 16 threads at nice 10 with a 128-frame pool."""
    match = re.fullmatch(r"(\d+)(?:x(\d+))?(?:n(\d+))?(?:q(\d+))?(s?)(w?)(t?)(?:b(\d+))?", text)
    layout = Layout(*(int(group) if group else None for group in match.groups()[:4]), spin=bool(match[5]),
                    wait_open=bool(match[6]), trim_in_caller=bool(match[7]),
                    writeback_mib=int(match[8]) if match[8] else None) if match else None
    if layout is None or layout.encoders < 1 or layout.threads == 0 or (layout.nice or 0) > 19 \
            or (layout.queue is not None and layout.queue < 8):
        raise argparse.ArgumentTypeError(
            f"a layout is E[xT][nN][qQ][s][w][t][bB] (encoders, threads each, nice 0-19, queue >= 8 frames, "
            f"spinning waits, the render waiting for x264 to open, the heap trimmed by the caller, MiB between "
            f"the MP4's writebacks with 0 for none before the final sync), got {text!r}")
    return layout


def goal(preset: str, entry: dict, gpu_fps: float) -> tuple:
    if preset not in GOALS:
        return None, None
    kind, value = GOALS[preset]
    best = max(r["delivered_fps"] for r in entry["layouts"].values())
    threshold = value * gpu_fps if kind == "ratio" else value
    return f">= {threshold:.0f} frames/s", best >= threshold


def print_row(preset: str, entry: dict, gpu_fps: float) -> None:
    cells = []
    for key, r in entry["layouts"].items():
        alone = f" [alone {r['encode_only_fps']:.0f}]" if r.get("encode_only_fps") else ""
        cells.append(f"{key}: {r['delivered_fps']:6.1f} ({100 * r['delivered_fps'] / gpu_fps:3.0f} %){alone}"
                     f"{'' if r['frames_ok'] and r['audio_ok'] else ' MP4 CHECK FAILED'}")
    print(f"{preset:>9}: GPU-side {gpu_fps:6.1f}  x264 alone {entry['encode_only_fps']:6.1f}  " + "  ".join(cells)
          + (f"  goal {entry['goal']}: {'met' if entry['met'] else 'NOT met'}" if entry["goal"] else ""), flush=True)


if __name__ == "__main__":
    main()
