"""Benchmark speech -> HuBERT features on the stub model: CPU vs CUDA execution provider.

    python -m bench.bench_audio [--audio speech.wav] [--repeats 5] [--out result.json]

Times decoding + 16 kHz conversion and feature extraction for the example clip (15.75 s; a
synthetic clip of that length if the example is not there) with the stub HuBERT, whose cost
per window is tiny: what this measures is the pipeline around the network (windowing, I/O
binding, host/device traffic), not HuBERT-large itself. Prints one JSON object.
"""
from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
from pathlib import Path

import torch


from ditto_core.audio import HubertFeatureExtractor, load_audio, to_mono_16k
from ditto_core.audio.hubert_stub import write_stub_hubert

from .bench_common import emit, wall_times
from .scene import SPEECH_CANDIDATES



def _timed(fn, repeats: int, device: str) -> dict:
    """Median and min wall time of ``fn()`` over ``repeats`` runs, after one warm-up run."""
    times = wall_times(fn, repeats, device)
    return {"median_s": statistics.median(times), "min_s": min(times)}


def _bench_extractor(model: Path, device: str, speech: torch.Tensor, repeats: int) -> dict:
    extractor = HubertFeatureExtractor(model, device=device, backend="onnxruntime")  # the stub is no HuBERT
    speech = speech.to(device)
    result = _timed(lambda: extractor(speech), repeats, device)
    frames = extractor(speech).num_frames
    windows = len(extractor.window.starts(frames))
    result.update(
        execution_provider=extractor.execution_provider,
        frames=frames,
        windows=windows,
        ms_per_window=1000 * result["median_s"] / windows,
        x_realtime=speech.shape[0] / 16000 / result["median_s"],
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--audio", type=Path, default=next((p for p in SPEECH_CANDIDATES if p.is_file()), SPEECH_CANDIDATES[0]))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    import onnxruntime as ort

    report: dict = {
        "torch": torch.__version__,
        "onnxruntime": ort.__version__,
        "ort_providers": ort.get_available_providers(),
        "cpu": platform.processor() or platform.machine(),
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
    }
    if args.audio.is_file():
        waveform, rate = load_audio(args.audio)
        report["audio"] = {"file": args.audio.name, "sample_rate": rate, "channels": waveform.shape[0]}
        report["load_and_resample"] = _timed(lambda: to_mono_16k(*load_audio(args.audio)), args.repeats, "cpu")
        speech = to_mono_16k(waveform, rate)
    else:
        report["audio"] = {"file": None, "note": "example not found: 15.75 s of synthetic noise"}
        speech = 0.1 * torch.randn(252_075, generator=torch.Generator().manual_seed(0))
    report["audio"]["seconds"] = speech.shape[0] / 16000

    with tempfile.TemporaryDirectory() as tmp:
        model = write_stub_hubert(Path(tmp) / "hubert_stub.onnx")
        report["extract_cpu"] = _bench_extractor(model, "cpu", speech, args.repeats)
        if torch.cuda.is_available():
            report["extract_cuda"] = _bench_extractor(model, "cuda", speech, args.repeats)
            if report["extract_cuda"]["execution_provider"] != "CUDAExecutionProvider":
                report["extract_cuda"]["note"] = "no CUDA provider in this onnxruntime: HuBERT ran on the CPU"
    emit(report, args.out)


if __name__ == "__main__":
    main()
