"""Benchmark HuBERT-large speech features: onnxruntime CPU vs PyTorch CPU vs PyTorch CUDA.

    python -m bench.bench_hubert [--model FILE] [--long-seconds 600] [--out result.json]

On a HuBERT-large of Ditto's architecture (random weights, written once by
``bench/make_hubert_large.py`` unless ``--model`` names a file), for the 15.75-s example speech
and a synthetic long clip (the example tiled to ``--long-seconds``): seconds per clip of the
feature extraction (model loaded, warm) and rel-L2 of the features against onnxruntime fp32.

* onnxruntime and PyTorch on the CPU run the example clip; their long-clip time is the
  example's time per window times the long clip's windows (``estimated``), measuring it would
  take minutes.
* PyTorch on CUDA runs both clips in fp32 (TF32 off), fp16 and bf16. The long clip's error is
  measured on every 50th window, whose onnxruntime rows are computed for the purpose (each
  window's features depend on that window alone).

Goal (issue 15): the 10-minute clip in at most 1 s on the GPU. Prints and writes one JSON object.
"""
from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from ditto_core.audio import HubertFeatureExtractor, load_audio, num_video_frames, to_mono_16k

from .bench_common import emit, rel_l2, wall_times
from .make_hubert_large import DEFAULT_OUT, make_hubert_large
from .scene import SPEECH_CANDIDATES

EXAMPLE = next((path for path in SPEECH_CANDIDATES if path.is_file()), SPEECH_CANDIDATES[0])
GOAL_LONG_GPU_S = 1.0
SPOT_CHECK_EVERY = 50


def _speech(audio: Path, long_seconds: float) -> tuple[torch.Tensor, torch.Tensor, str]:
    if audio.is_file():
        example, source = to_mono_16k(*load_audio(audio)), audio.name
    else:
        example = 0.1 * torch.randn(252_075, generator=torch.Generator().manual_seed(0))
        source = "synthetic noise (example not found)"
    repeats = int(long_seconds * 16000) // example.shape[0] + 1
    return example, example.repeat(repeats)[: int(long_seconds * 16000)], source


def _timed(extractor: HubertFeatureExtractor, speech: torch.Tensor, repeats: int) -> tuple[dict, torch.Tensor]:
    device = extractor.device
    speech = speech.to(device)
    times = wall_times(lambda: extractor(speech), repeats, device)
    features = extractor(speech).features
    windows = len(extractor.window.starts(num_video_frames(speech.shape[0])))
    return {"median_s": statistics.median(times), "min_s": min(times), "windows": windows,
            "ms_per_window": 1000 * statistics.median(times) / windows}, features


def _onnxruntime_spot_features(reference: HubertFeatureExtractor,
                               speech: torch.Tensor) -> tuple[list[int], torch.Tensor]:
    """onnxruntime's features of every ``SPOT_CHECK_EVERY``-th window of ``speech``: (frames, rows)."""
    window = reference.window
    num_frames = num_video_frames(speech.shape[0])
    padded = F.pad(speech, (window.pad_before, window.pad_after))
    frames, rows = [], []
    for k, start in enumerate(window.starts(num_frames)):
        if k % SPOT_CHECK_EVERY:
            continue
        rows.append(reference.encode_window(padded[start : start + window.num_samples]))
        frames += range(k * window.valid, (k + 1) * window.valid)
    keep = [i for i, f in enumerate(frames) if f < num_frames]
    return [frames[i] for i in keep], torch.cat(rows)[keep]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path,
                        help="a HuBERT ONNX file (default: the HuBERT-large of make_hubert_large.py)")
    parser.add_argument("--audio", type=Path, default=EXAMPLE)
    parser.add_argument("--long-seconds", type=float, default=600.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-cpu-torch", action="store_true", help="skip PyTorch on the CPU (slow on few cores)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    import onnxruntime as ort

    start = time.perf_counter()
    model = args.model or make_hubert_large(DEFAULT_OUT)
    example, long_clip, source = _speech(args.audio, args.long_seconds)
    report: dict = {
        "model": str(model), "model_ready_s": time.perf_counter() - start,
        "torch": torch.__version__, "onnxruntime": ort.__version__, "cpu": platform.processor() or platform.machine(),
        "cpu_threads": torch.get_num_threads(),
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "audio": {"source": source, "example_s": example.shape[0] / 16000, "long_s": long_clip.shape[0] / 16000},
        "goal_long_gpu_s": GOAL_LONG_GPU_S,
    }

    start = time.perf_counter()
    reference = HubertFeatureExtractor(model, backend="onnxruntime")
    report["onnxruntime_cpu"] = {"load_s": time.perf_counter() - start}
    timing, ref_example = _timed(reference, example, args.repeats)
    report["onnxruntime_cpu"]["example"] = timing
    long_windows = len(reference.window.starts(num_video_frames(long_clip.shape[0])))
    report["onnxruntime_cpu"]["long_estimated_s"] = timing["ms_per_window"] * long_windows / 1000
    spot_frames, ref_spots = _onnxruntime_spot_features(reference, long_clip)
    del reference

    runs = [("torch_cpu_fp32", "cpu", "fp32")] if not args.skip_cpu_torch else []
    if torch.cuda.is_available():
        runs += [(f"torch_cuda_{p}", "cuda", p) for p in ("fp32", "fp16", "bf16")]
    for name, device, precision in runs:
        start = time.perf_counter()
        extractor = HubertFeatureExtractor(model, device=device, backend="torch", precision=precision)
        entry: dict = {"load_s": time.perf_counter() - start, "max_batch_windows": extractor.max_batch_windows,
                       "weights_bytes": sum(p.numel() * p.element_size() for p in extractor.model.parameters())}
        timing, features = _timed(extractor, example, args.repeats)
        entry["example"] = {**timing, "rel_l2_vs_onnxruntime_fp32": rel_l2(features.cpu(), ref_example)}
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
            timing, features = _timed(extractor, long_clip, args.repeats)
            spots = features.cpu()[spot_frames]
            entry["long"] = {**timing, "rel_l2_vs_onnxruntime_fp32_spot_windows": rel_l2(spots, ref_spots),
                             "peak_vram_bytes": torch.cuda.max_memory_allocated(),
                             "meets_goal": timing["median_s"] <= GOAL_LONG_GPU_S}
        else:
            entry["long_estimated_s"] = timing["ms_per_window"] * long_windows / 1000
        report[name] = entry
        del extractor, features
        if device == "cuda":
            torch.cuda.empty_cache()
        print(f"{name}: example {entry['example']['median_s']:.3f} s (rel-L2 "
              f"{entry['example']['rel_l2_vs_onnxruntime_fp32']:.1e})"
              + (f", {args.long_seconds:.0f} s clip {entry['long']['median_s']:.3f} s (goal <= {GOAL_LONG_GPU_S} s)"
                 if "long" in entry else ""), file=sys.stderr)
    emit(report, args.out)


if __name__ == "__main__":
    main()
