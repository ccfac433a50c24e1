"""Long-clip benchmark: a 10-minute 1080x1920 render in bounded host and GPU memory.

The claim under test: a 10-minute clip at 1080x1920 renders with host RAM under 4 GB and VRAM
independent of the clip length. The whole pipeline runs with random weights in the official
layout (memory and speed do not depend on their values): a portrait letterboxed into a
1080-wide, 1920-high frame (registered without face detection, as ``--random-weights`` does),
the example speech repeated to ``--minutes``, then HuBERT features -> LMDM motion ->
warp+decode, put-back and encoding into an MP4 (x264 ``ultrafast``, CRF 23, AAC audio).

A short clip (``--compare-minutes``) runs first, then the long one, in one process and
through the same models and compiled engine; when the engine compiles, a 5 s clip runs before
both so that compilation and CUDA-graph capture stay out of the comparison. Host RSS (VmRSS;
VmHWM, reset per stage) and the CUDA allocator's counters (peaks reset per stage) are read at
every percent of every stage's progress, and host RSS twice a second by a sampler thread.
Reported: peaks per stage and for the process, VRAM and RSS at 10 %, 50 % and 100 % of the
long render (flat = independent of length), stage times, render frames/s, and the MP4 as its
header describes it (frames, video and audio duration, size). Prints a table next to the
goals and, with ``--out``, writes everything as JSON. Linux only (reads ``/proc/self``).

    python -m bench.bench_long_clip --out $OUT/bench_long_clip.json   # H200: about 4 minutes
    python -m bench.bench_long_clip --device cpu --minutes 0.02 --compare-minutes 0.01 \\
        --precision fp32 --no-compile                      # CPU smoke run: about a minute on 2 cores

On the CPU, warp+decode costs seconds per frame, so only the first ``--render-frames``
frames of each clip are rendered there (1 by default); audio and motion cover the whole clip.
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import math
import platform
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional

import av
import torch
from torch import Tensor


from ditto_core.audio.audio_features import FPS, SAMPLES_PER_FRAME
from ditto_core.audio.chunking import num_video_frames
from ditto_core.audio.loading import load_audio
from ditto_core.compilation import compile_available
from ditto_core.errors import InputError
from ditto_core.motion.motion_options import MotionOptions
from ditto_core.motion.motion_sequence import MotionSequence
from ditto_core.pipeline import DittoPipeline
from ditto_core.precision import NETWORK_PRECISIONS, network_dtype
from ditto_core.registration.options import RegistrationOptions
from ditto_core.registration.source_info import SourceInfo
from ditto_core.render.warp_decode import MAX_BATCH

from .bench_common import emit
from .scene import SPEECH_CANDIDATES, load_frame

MIB = 1 << 20
# Synthetic speech when the example is missing: noise under a 4 Hz syllable envelope.
SYNTHETIC_RATE = 16000
SYLLABLE_HZ = 4.0
# The clip that absorbs compilation and CUDA-graph capture: the engine's graph reaches steady
# state on its third call (compile, record, replay), and a clip's first batch may run eagerly.
WARMUP_SECONDS = 4 * MAX_BATCH / FPS
# Points of the long render where memory is compared: flat means independent of length.
CHECKPOINTS = (10, 50, 100)
SAMPLE_PERIOD_S = 0.5

# Goals on one H200: (comparison, threshold).
GOALS = {
    "host_rss_peak_gib": ("<", 4.0),  # VmHWM of the whole process
    "vram_peak_diff_mib": ("<=", 64.0),  # |long - short| peak allocated during the render stage
    "render_vram_growth_mib": ("<=", 64.0),  # allocated at 100 % minus at 10 % of the long render
    "render_rss_growth_mib": ("<=", 64.0),  # host RSS at 100 % minus at 10 % of the long render
    "mp4_frames_off": ("==", 0),  # worst |frames in the MP4 - expected| over the measured clips
    "audio_offset_frames": ("<=", 1.0),  # worst |audio - video duration| in frames
}


# ----------------------------------------------------------------------------------- memory


def proc_status() -> dict[str, int]:
    """Bytes of VmRSS (resident now) and VmHWM (resident peak) of this process."""
    values = {}
    with open("/proc/self/status") as status:
        for line in status:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0]) * 1024  # reported in kB
    return values


def reset_hwm() -> bool:
    """Lower VmHWM to the current RSS (Linux >= 4.0); False where the kernel refuses."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def device_memory(device: torch.device) -> dict[str, float]:
    """MiB held by the CUDA caching allocator, and in use on the whole GPU; empty on the CPU."""
    if device.type != "cuda":
        return {}
    free, total = torch.cuda.mem_get_info(device)  # also counts onnxruntime's arena and the context
    return {"vram_allocated_mib": torch.cuda.memory_allocated(device) / MIB,
            "vram_reserved_mib": torch.cuda.memory_reserved(device) / MIB,
            "device_used_mib": (total - free) / MIB}


@dataclass
class StageRecord:
    """Memory through one stage of one clip: a sample at each new percent of its progress."""

    clip: str
    name: str
    device: torch.device
    began: float
    samples: list[dict] = field(default_factory=list)
    sampled_rss_max: int = 0  # bytes: the thread's and the callbacks' samples
    peaks: dict[str, Optional[float]] = field(default_factory=dict)
    _percent: int = field(default=-1, init=False, repr=False)

    def note_rss(self, rss: int) -> None:
        self.sampled_rss_max = max(self.sampled_rss_max, rss)

    def progress(self, done: int, total: int) -> None:
        """The stage's progress callback; prints at each new tenth."""
        percent = 100 * done // max(total, 1)
        if percent == self._percent:
            return
        new_tenth = percent // 10 != self._percent // 10
        self._percent = percent
        rss = proc_status()["VmRSS"]
        self.note_rss(rss)
        sample = {"done": done, "total": total, "seconds": time.perf_counter() - self.began,
                  "rss_mib": rss / MIB, **device_memory(self.device)}
        self.samples.append(sample)
        if new_tenth:
            vram = f", VRAM {sample['vram_allocated_mib']:.0f} MiB" if "vram_allocated_mib" in sample else ""
            print(f"  [{self.clip}] {self.name} {done}/{total} ({percent} %) {sample['seconds']:.1f} s, "
                  f"RSS {sample['rss_mib']:.0f} MiB{vram}", flush=True)

    def at(self, percent: int) -> dict:
        """The first sample at or past ``percent`` of the stage."""
        return next(s for s in self.samples if 100 * s["done"] >= percent * s["total"])

    def summary(self) -> dict:
        return {**self.peaks, "host_sampled_max_mib": self.sampled_rss_max / MIB}


class MemoryMonitor:
    """Per-stage peaks (host VmHWM and CUDA allocator, both reset at each stage) and a 2 Hz RSS timeline."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.began = time.perf_counter()
        self.process_hwm = proc_status()["VmHWM"]
        self.hwm_resets = reset_hwm()
        self.timeline: list[tuple[float, str, float]] = []  # (seconds, clip/stage, RSS MiB)
        self.records: list[StageRecord] = []
        self._label = "setup"
        self._current: Optional[StageRecord] = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="rss-sampler", daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(SAMPLE_PERIOD_S):
            rss = proc_status()["VmRSS"]
            record = self._current
            if record is not None:
                record.note_rss(rss)
            self.timeline.append((round(time.perf_counter() - self.began, 2), self._label, round(rss / MIB, 1)))

    def _reset_peaks(self) -> None:
        self.process_hwm = max(self.process_hwm, proc_status()["VmHWM"])
        reset_hwm()
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)

    @contextlib.contextmanager
    def stage(self, clip: str, name: str) -> Iterator[StageRecord]:
        """Peaks of the block, recorded on the yielded record; its ``progress`` samples along."""
        self._reset_peaks()
        record = StageRecord(clip, name, self.device, time.perf_counter())
        self.records.append(record)
        self._label, self._current = f"{clip}/{name}", record
        try:
            yield record
        finally:
            self._current, self._label = None, "between stages"
            hwm = proc_status()["VmHWM"]
            self.process_hwm = max(self.process_hwm, hwm)
            record.peaks["host_peak_mib"] = hwm / MIB if self.hwm_resets else None
            if self.device.type == "cuda":
                record.peaks["vram_peak_allocated_mib"] = torch.cuda.max_memory_allocated(self.device) / MIB
                record.peaks["vram_peak_reserved_mib"] = torch.cuda.max_memory_reserved(self.device) / MIB

    def close(self) -> dict[str, float]:
        """Stop sampling; the process's peaks: host VmHWM and, on CUDA, the largest stage peaks."""
        self._stop.set()
        self._thread.join()
        self.process_hwm = max(self.process_hwm, proc_status()["VmHWM"])
        peaks = {"host_rss_peak_mib": self.process_hwm / MIB}
        if self.device.type == "cuda":
            for key in ("vram_peak_allocated_mib", "vram_peak_reserved_mib"):
                peaks[key] = max(record.peaks[key] for record in self.records)
        return peaks


# ----------------------------------------------------------------------------------- inputs


def example_speech() -> tuple[Tensor, int, str]:
    """The example speech (float32 (1, T), its rate, its path), or synthetic speech at 16 kHz."""
    for path in SPEECH_CANDIDATES:
        if path.is_file():
            waveform, rate = load_audio(path)
            return waveform[:1], rate, str(path)
    seconds = torch.arange(10 * SYNTHETIC_RATE) / SYNTHETIC_RATE
    envelope = 0.55 + 0.45 * torch.sin(2 * math.pi * SYLLABLE_HZ * seconds)
    noise = torch.randn(seconds.shape[0], generator=torch.Generator().manual_seed(0))
    return (0.1 * noise * envelope)[None], SYNTHETIC_RATE, "synthetic"


def speech_of(unit: Tensor, rate: int, seconds: float) -> tuple[Tensor, int]:
    """``unit`` repeated to a whole number of video frames closest to ``seconds``."""
    if rate % FPS:
        raise InputError(f"speech at {rate} Hz does not divide into {FPS} fps frames; use a multiple of {FPS} Hz")
    samples = max(1, round(seconds * FPS)) * (rate // FPS)
    return unit.repeat(1, -(-samples // unit.shape[1]))[:, :samples], rate


def expected_frames(speech: tuple[Tensor, int]) -> int:
    """Frames the pipeline makes for this speech (the 16 kHz length is exact: whole frames)."""
    waveform, rate = speech
    return num_video_frames(waveform.shape[1] // (rate // FPS) * SAMPLES_PER_FRAME)


def first_frames(motion: MotionSequence, count: Optional[int]) -> MotionSequence:
    """The first ``count`` frames of ``motion``; ``motion`` itself when ``count`` is None."""
    if count is None:
        return motion
    return MotionSequence(motion.kp_source[:count], motion.kp_driving[:count], motion.source_index[:count],
                          motion.fps)


# ----------------------------------------------------------------------------------- clips


def probe_mp4(path: Path) -> dict:
    """Frames and durations as the MP4's header records them, and the file size."""
    with av.open(str(path)) as container:
        video, audio = container.streams.video[0], container.streams.audio[0]
        return {"frames": video.frames, "video_s": float(video.duration * video.time_base),
                "audio_s": float(audio.duration * audio.time_base), "mib": path.stat().st_size / MIB}


def run_clip(
    pipeline: DittoPipeline, source: SourceInfo, speech: tuple[Tensor, int], clip: str, monitor: MemoryMonitor,
    workdir: Path, args: argparse.Namespace,
) -> dict:
    """Speech -> MP4 through the pipeline's stages, in :meth:`DittoPipeline.run`'s order."""
    waveform, rate = speech
    print(f"{clip}: {waveform.shape[1] / rate:.1f} s of speech", flush=True)
    with monitor.stage(clip, "audio_features") as audio_stage:
        features = pipeline.audio_features(waveform, rate, progress=audio_stage.progress)
    with monitor.stage(clip, "motion") as motion_stage:
        motion = pipeline.motion(source, features, MotionOptions(), progress=motion_stage.progress)
    # Per-frame tensors on the device through the render: the VRAM that grows with the clip.
    clip_tensors = (features.features, motion.kp_source, motion.kp_driving, motion.source_index)
    clip_tensors_mib = sum(t.numel() * t.element_size() for t in clip_tensors) / MIB
    # Nothing but the motion stays on the device through the render, as in DittoPipeline.run.
    del clip_tensors, features
    rendered = first_frames(motion, args.render_frames)
    path = workdir / f"{clip}.mp4"
    with monitor.stage(clip, "render_video") as render_stage:
        pipeline.render_video(source, rendered, path, audio=speech, crf=args.crf, preset=args.preset,
                              progress=render_stage.progress)
    stages = (audio_stage, motion_stage, render_stage)
    result = {
        "speech_s": waveform.shape[1] / rate,
        "expected_frames": min(expected_frames(speech), args.render_frames or math.inf),
        "rendered_frames": len(rendered),
        "render_fps": len(rendered) / pipeline.times.seconds["render_video"],
        "stages": {s.name: {"seconds": pipeline.times.seconds[s.name], **s.summary()} for s in stages},
        "clip_tensors_on_device_mib": clip_tensors_mib,
        "render_at": {f"{p}%": render_stage.at(p) for p in CHECKPOINTS},
        "mp4": probe_mp4(path),
    }
    path.unlink()  # a 10-minute clip is hundreds of MB
    return result


# ----------------------------------------------------------------------------------- report


def growth(clip: dict, key: str) -> Optional[float]:
    first, last = clip["render_at"][f"{CHECKPOINTS[0]}%"], clip["render_at"][f"{CHECKPOINTS[-1]}%"]
    return last[key] - first[key] if key in last else None


def goal_values(results: dict) -> dict[str, Optional[float]]:
    clips, process = results["clips"], results["process"]
    short, long = clips["short"]["stages"]["render_video"], clips["long"]["stages"]["render_video"]
    measured = [clips["short"], clips["long"]]
    vram_diff = None
    if "vram_peak_allocated_mib" in long:
        vram_diff = abs(long["vram_peak_allocated_mib"] - short["vram_peak_allocated_mib"])
    return {
        "host_rss_peak_gib": process["host_rss_peak_mib"] / 1024,
        "vram_peak_diff_mib": vram_diff,
        "render_vram_growth_mib": growth(clips["long"], "vram_allocated_mib"),
        "render_rss_growth_mib": growth(clips["long"], "rss_mib"),
        "mp4_frames_off": max(abs(c["mp4"]["frames"] - c["expected_frames"]) for c in measured),
        "audio_offset_frames": max(abs(c["mp4"]["audio_s"] - c["mp4"]["video_s"]) * FPS for c in measured),
    }


def judge(results: dict) -> dict[str, dict]:
    checks = {"<": float.__lt__, "<=": float.__le__, "==": float.__eq__}
    goals = {}
    for key, value in goal_values(results).items():
        op, threshold = GOALS[key]
        met = None if value is None else checks[op](float(value), float(threshold))
        goals[key] = {"goal": f"{op} {threshold:g}", "value": value, "met": met}
    return goals


def show(value: object, width: int) -> str:
    text = "-" if value is None else f"{value:.1f}" if isinstance(value, float) else str(value)
    return text.rjust(width)


def print_table(results: dict) -> None:
    config, process = results["config"], results["process"]
    vram = ", ".join(f"{k.removeprefix('vram_peak_')} {v:.0f}" for k, v in process.items() if k.startswith("vram"))
    print(f"\n{config['hardware']}, {config['precision']}, engine batch {config['engine_batch_size']} "
          f"({'compiled' if config['engine_compiled'] else 'eager'}); process peaks: host RSS "
          f"{process['host_rss_peak_mib']:.0f} MiB" + (f", VRAM (MiB) {vram}" if vram else ""))
    print(f"\n{'clip':<7}{'speech s':>9}{'frames':>8}{'in MP4':>8}{'A-V ms':>8}{'MP4 MiB':>9}{'render fps':>11}"
          f"{'host peak MiB':>14}{'VRAM peak alloc/res MiB':>25}{'clip tensors MiB':>18}")
    for name, clip in results["clips"].items():
        mp4, render = clip["mp4"], clip["stages"]["render_video"]
        host = max((s["host_peak_mib"] or s["host_sampled_max_mib"]) for s in clip["stages"].values())
        vram = "-"
        if "vram_peak_allocated_mib" in render:
            vram = f"{render['vram_peak_allocated_mib']:.0f} / {render['vram_peak_reserved_mib']:.0f}"
        print(f"{name:<7}{show(clip['speech_s'], 9)}{show(clip['expected_frames'], 8)}{show(mp4['frames'], 8)}"
              f"{show(1000 * (mp4['audio_s'] - mp4['video_s']), 8)}{show(mp4['mib'], 9)}"
              f"{show(clip['render_fps'], 11)}{show(host, 14)}{vram:>25}"
              f"{show(clip['clip_tensors_on_device_mib'], 18)}")
    print(f"\n{'stage seconds':<14}" + "".join(f"{n:>15}" for n in ("audio_features", "motion", "render_video")))
    for name, clip in results["clips"].items():
        print(f"{name:<14}" + "".join(show(s["seconds"], 15) for s in clip["stages"].values()))
    long = results["clips"]["long"]
    print(f"\n{'long render at':<22}" + "".join(f"{p:>8} %" for p in CHECKPOINTS) + f"{'growth':>10}")
    for key in ("rss_mib", "vram_allocated_mib", "vram_reserved_mib", "device_used_mib"):
        if key in long["render_at"]["100%"]:
            values = "".join(show(long["render_at"][f"{p}%"][key], 10) for p in CHECKPOINTS)
            print(f"{key:<22}{values}{show(growth(long, key), 10)}")
    print(f"\n{'goal':<24}{'value':>10}{'goal':>9}{'met':>5}")
    for key, goal in results["goals"].items():
        met = {True: "yes", False: "NO", None: "n/a"}[goal["met"]]
        print(f"{key:<24}{show(goal['value'], 10)}{goal['goal']:>9}{met:>5}")


# ----------------------------------------------------------------------------------- main


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--minutes", type=float, default=10.0, help="length of the long clip")
    parser.add_argument("--compare-minutes", type=float, default=0.5, help="length of the short clip")
    parser.add_argument("--precision", choices=NETWORK_PRECISIONS, default="fp16")
    parser.add_argument("--no-compile", dest="compile", action="store_false", help="eager warp+decode")
    parser.add_argument("--batch-size", type=int, default=0, help="warp+decode batch (0: automatic)")
    parser.add_argument("--width", type=int, default=1080)
    parser.add_argument("--height", type=int, default=1920)
    parser.add_argument("--preset", default="ultrafast", help="x264 preset")
    parser.add_argument("--crf", type=int, default=23)
    parser.add_argument("--render-frames", type=int,
                        help="render only this many frames of each clip (default: all on CUDA, 1 on the CPU)")
    args = parser.parse_args()
    if args.render_frames is not None and args.render_frames < 1:
        parser.error(f"--render-frames must be at least 1, got {args.render_frames}")
    if args.render_frames is None and torch.device(args.device).type == "cpu":
        args.render_frames = 1
    return args


def main() -> None:
    args = parse_args()
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("ditto_core").setLevel(logging.INFO)  # the engine's compile time, eager fallbacks
    began = time.perf_counter()
    device = torch.device(args.device)
    monitor = MemoryMonitor(device)
    with tempfile.TemporaryDirectory(prefix="bench_long_clip_") as tmp:
        workdir = Path(tmp)
        pipeline = DittoPipeline.random(workdir, device=device, dtype=network_dtype(args.precision), compile=args.compile,
                                        batch_size=args.batch_size)
        frame, frame_origin = load_frame(args.height, args.width)
        with monitor.stage("source", "register") as register_stage:
            source = pipeline.register(frame, RegistrationOptions(detect_face=False), is_image=True,
                                       progress=register_stage.progress)
        unit, rate, speech_origin = example_speech()
        lengths = {"short": 60 * args.compare_minutes, "long": 60 * args.minutes}
        if args.compile and compile_available(device)[0]:
            lengths = {"warmup": WARMUP_SECONDS, **lengths}
        clips = {clip: run_clip(pipeline, source, speech_of(unit, rate, seconds), clip, monitor, workdir, args)
                 for clip, seconds in lengths.items()}
        process = monitor.close()
    engine = pipeline.engine()
    results = {
        "config": {
            **{k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "hardware": (torch.cuda.get_device_name(device) if device.type == "cuda"
                         else platform.processor() or platform.machine()),
            "torch": torch.__version__, "source_frame": frame_origin, "speech": speech_origin,
            "engine_batch_size": engine.stats.batch_size, "engine_compiled": engine.stats.compiled,
            "engine_reason_eager": engine.stats.reason_eager, "compile_seconds": engine.stats.compile_seconds,
            "hubert_provider": pipeline.hubert.execution_provider, "vmhwm_reset": monitor.hwm_resets,
        },
        "register": {"seconds": pipeline.times.seconds["register"], **register_stage.summary()},
        "clips": clips,
        "process": process,
        "timeline": monitor.timeline,
        "elapsed_s": time.perf_counter() - began,
    }
    results["goals"] = judge(results)
    print_table(results)
    emit(results, args.out, quiet=args.out is not None)


if __name__ == "__main__":
    main()
