"""Shared pieces of the bad-input tests (test_hardening_*.py): a pipeline of tiny stand-in
networks, stub face models placed where a test wants faces, generated media files, and the
checks that a failed run left nothing behind.

The stand-ins keep every stage's real code around them (file decoding, validation, crops,
cache, HuBERT windowing, the encoder); only the heavy networks are swapped out.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Sequence

import av
import numpy as np
import pytest
import torch

from ditto_core.audio.hubert import HubertFeatureExtractor
from ditto_core.pipeline import DittoPipeline
from ditto_core.registration import AuxModels, AvatarCache, load_aux_models
from tests.test_registration_end_to_end import TinyAppearance, TinyMotion
from tests.test_registration_stubs import (
    DET_INPUT, StubMesh, landmark106_model, landmark203_model, mesh_with_eyes, scrfd_model,
)

Box = tuple[float, float, float, float]


def tiny_models() -> SimpleNamespace:
    """The two extractors registration runs, as cheap modules with the official output shapes."""
    return SimpleNamespace(appearance_extractor=TinyAppearance(), motion_extractor=TinyMotion(),
                           device=torch.device("cpu"), dtype=torch.float32, identity="tiny")


def stub_aux(folder: Path, frame_hw: tuple[int, int], boxes: Sequence[Box]) -> AuxModels:
    """Face models that find ``boxes`` (x1, y1, x2, y2 in pixels of a ``frame_hw`` frame) in
    any frame, with landmarks laid out inside each box."""
    folder.mkdir(parents=True, exist_ok=True)
    scale = DET_INPUT / max(frame_hw)  # the detector letter-boxes the frame into its input
    faces = [(tuple(c * scale for c in box), 0.9, 32) for box in boxes]
    scrfd_model(folder / "det_10g.onnx", faces)
    landmark106_model(folder / "2d106det.onnx")
    landmark203_model(folder / "landmark203.onnx")
    aux = load_aux_models(folder, "cpu", required=("face_detector", "landmark106", "landmark203"))
    return replace(aux, landmark478=StubMesh(mesh_with_eyes()))


def tiny_pipeline(workdir: Path, hubert_path: Path, aux: AuxModels = AuxModels()) -> DittoPipeline:
    """A CPU pipeline with the tiny extractors, a stub HuBERT and an avatar cache in ``workdir/cache``.

    Enough for every stage up to the motion: the bad inputs under test fail before it.
    """
    return DittoPipeline(tiny_models(), aux, HubertFeatureExtractor(hubert_path), AvatarCache(workdir / "cache"))


def write_png(path: Path, pixels: np.ndarray) -> Path:
    """Write (H, W), (H, W, 3|4) uint8 or (H, W) uint16 pixels (RGB order) as a PNG."""
    from PIL import Image

    Image.fromarray(pixels).save(path, compress_level=1)
    return path


def write_video(path: Path, frames: int, size: int = 64) -> Path:
    """An H.264 MP4 of ``frames`` flat grey frames (brightness = frame index), ``size`` square."""
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=25)
        stream.width = stream.height = size
        stream.pix_fmt = "yuv420p"
        stream.options = {"preset": "ultrafast"}
        image = np.zeros((size, size, 3), np.uint8)
        for i in range(frames):
            image[:] = i % 256
            container.mux(stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")))
        container.mux(stream.encode(None))
    return path


def write_wav(path: Path, samples: np.ndarray, rate: int, codec: str = "pcm_s16le") -> Path:
    """Write (channels, samples) float samples in [-1, 1] as a WAV file (16-bit PCM by default;
    ``pcm_f32le`` keeps NaN and infinity)."""
    samples = np.ascontiguousarray(np.atleast_2d(samples), dtype=np.float32)
    layout = {1: "mono", 2: "stereo", 6: "5.1"}[samples.shape[0]]
    with av.open(str(path), "w", format="wav") as container:
        stream = container.add_stream(codec, rate=rate, layout=layout)
        if samples.shape[1]:
            frame = av.AudioFrame.from_ndarray(samples, format="fltp", layout=layout)
            frame.sample_rate = rate
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    return path


def speech_like(seconds: float, rate: int, channels: int = 1, seed: int = 0) -> np.ndarray:
    """(channels, samples) float32: a 220 Hz voice-like tone with a little noise, peak about 0.3."""
    t = np.arange(int(round(seconds * rate))) / rate
    noise = np.random.default_rng(seed).standard_normal((channels, t.size))
    return (0.25 * np.sin(2 * np.pi * 220 * t) + 0.02 * noise).astype(np.float32)


def traced_peak(fn):
    """``(fn(), peak bytes Python allocated meanwhile)`` measured with tracemalloc."""
    import tracemalloc

    tracemalloc.start()
    try:
        result = fn()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def files_under(folder: Path) -> list[str]:
    """Every file below ``folder`` (hidden and temporary ones included), relative, sorted."""
    if not folder.exists():
        return []
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def assert_no_output(out_dir: Path, cache_dir: Path) -> None:
    """Nothing a later run could take for a result: no video, no temporary file, no cache entry."""
    assert files_under(out_dir) == [], f"output left behind: {files_under(out_dir)}"
    assert files_under(cache_dir) == [], f"cache written: {files_under(cache_dir)}"


def assert_complete_cache(cache: AvatarCache) -> None:
    """Every cache entry present is complete and verifies (a valid avatar may be cached even when
    a later stage failed); no temporary file is left."""
    names = sorted(p.name for p in cache.root.iterdir()) if cache.root.exists() else []
    assert names == cache.keys(), f"temporary files or half-written entries left in the cache: {names}"
    for key in cache.keys():
        assert cache.load(key) is not None, f"cache entry {key} does not verify"


@pytest.fixture(scope="module")
def hubert_stub(tmp_path_factory) -> Path:
    """The stand-in HuBERT ONNX file (import this fixture into a test module to use it)."""
    from ditto_core.audio.hubert_stub import write_stub_hubert

    return write_stub_hubert(tmp_path_factory.mktemp("hubert") / "hubert_streaming_fix_kv.onnx")
