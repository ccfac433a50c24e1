"""WarpDecodeEngine: fused == unfused, batching/padding invariance, source paths, OOM retry,
progress and cancellation, eager fallback; on the GPU, compiled == eager and half-precision error.

Most CPU tests use two tiny stand-in networks with the real interfaces (the real decoder takes
seconds per frame on two cores); every output frame depends on its own keypoints and source
volume, so a frame rendered out of order, from the wrong source or from padding shows up.
"""
from __future__ import annotations

import gc
import json
import logging
import os
import subprocess
import sys
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ditto_core import compilation, cuda_graphs, priming
from ditto_core.errors import DittoError, InputError, Interrupted
from ditto_core.models.checkpoints import load_network
from ditto_core.models.depth_tap_conv import DepthTapConv3d
from ditto_core.models.keypoints import MotionInfo
from ditto_core.motion.motion_sequence import MotionSequence
from ditto_core.quiet_spells import QuietSpells
from ditto_core.registration.source_info import SourceInfo
from ditto_core.render import warp_decode
from ditto_core.render.warp_decode import WarpDecodeEngine
from tests.parity import rel_l2

REPO = Path(__file__).resolve().parents[1]

NUM_KP = 21


class ToyWarp(nn.Module):
    """(B, 32, 16, h, w) + keypoints (B, 21, 3) x2 -> (B, 256, h, w): the warp network's interface."""

    def __init__(self) -> None:
        super().__init__()
        self.mix = nn.Conv2d(32 * 16, 256, 1)
        self.kp_proj = nn.Linear(2 * NUM_KP * 3, 256)
        self.keypoint_dtypes: list[torch.dtype] = []
        self.record = True  # appending makes each compiled call recompile (Dynamo guards on the list's length)

    def forward(self, f_s: Tensor, kp_source: Tensor, kp_driving: Tensor) -> Tensor:
        if self.record:
            self.keypoint_dtypes.append(kp_driving.dtype)
        offset = self.kp_proj(torch.cat([kp_source, kp_driving], dim=1).flatten(1).to(f_s.dtype))
        return self.mix(f_s.flatten(1, 2)) + offset[:, :, None, None]


class ToyDecoder(nn.Module):
    """(B, 256, h, w) -> (B, 3, 8h, 8w) in (0, 1), with a per-sample norm like the SPADE decoder."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(256, 3, 3, padding=1)
        self.batch_sizes: list[int] = []
        self.record = True  # as ToyWarp's

    def forward(self, feature: Tensor) -> Tensor:
        if self.record:
            self.batch_sizes.append(feature.shape[0])
        x = F.instance_norm(self.conv(feature))
        return torch.sigmoid(F.interpolate(x, scale_factor=8, mode="nearest"))


class OutOfMemoryAbove(nn.Module):
    """Wraps a decoder and raises CUDA out-of-memory for batches larger than ``limit``."""

    def __init__(self, decoder: nn.Module, limit: int) -> None:
        super().__init__()
        self.decoder = decoder
        self.limit = limit

    def forward(self, feature: Tensor) -> Tensor:
        if feature.shape[0] > self.limit:
            raise torch.cuda.OutOfMemoryError(f"simulated: batch {feature.shape[0]} > {self.limit}")
        return self.decoder(feature)


def toy_networks(seed: int = 0) -> tuple[ToyWarp, ToyDecoder]:
    torch.manual_seed(seed)
    return ToyWarp().eval(), ToyDecoder().eval()


def make_source(f_s: Tensor) -> SourceInfo:
    """A SourceInfo around ``f_s`` (N, 32, 16, h, w); the engine reads nothing else but N."""
    n = f_s.shape[0]
    zeros = lambda *shape: torch.zeros(n, *shape)  # noqa: E731
    motion = MotionInfo(zeros(1), zeros(66), zeros(66), zeros(66), zeros(3), zeros(63), zeros(63))
    return SourceInfo(
        frames=torch.zeros(n, 8, 8, 3, dtype=torch.uint8), M_c2o=torch.eye(3).expand(n, 3, 3), f_s=f_s,
        motion=motion, eye_open=zeros(2), eye_ball=zeros(6), is_image=n == 1,
    )


def make_motion(frames: int, source_index: Tensor | None = None, seed: int = 1) -> MotionSequence:
    g = torch.Generator().manual_seed(seed)
    kp_source = torch.rand(frames, NUM_KP, 3, generator=g) * 1.2 - 0.6
    kp_driving = kp_source + 0.05 * torch.randn(frames, NUM_KP, 3, generator=g)
    if source_index is None:
        source_index = torch.zeros(frames, dtype=torch.int64)
    return MotionSequence(kp_source=kp_source, kp_driving=kp_driving, source_index=source_index)


def volumes(n: int, side: int = 4, seed: int = 2) -> Tensor:
    return torch.randn(n, 32, 16, side, side, generator=torch.Generator().manual_seed(seed))


@torch.inference_mode()
def unfused(warp: nn.Module, decoder: nn.Module, source: SourceInfo, motion: MotionSequence) -> Tensor:
    """The plain way: every frame on its own, warp then decode."""
    frames = []
    for i in range(len(motion)):
        f_s = source.f_s[motion.source_index[i : i + 1]]
        feature = warp(f_s, motion.kp_source[i : i + 1], motion.kp_driving[i : i + 1])
        frames.append(decoder(feature))
    return torch.cat(frames)


def pretend_compile_is_available(monkeypatch, malloc_async: bool = False) -> None:
    """The engine's view of a CUDA machine where torch.compile works (no cache folder touched)."""
    monkeypatch.setattr(warp_decode, "compile_available", lambda device: (True, ""))
    monkeypatch.setattr(warp_decode, "use_compile_cache", lambda cache_dir=None: None)
    monkeypatch.setattr(warp_decode, "uses_cuda_malloc_async", lambda device: malloc_async)


@pytest.fixture
def fake_compile(monkeypatch):
    """Make the CPU engine take its compiled path, with ``torch.compile`` replaced by a recorder
    of what Dynamo guards on for each argument: its shape and whether it is an inference tensor
    (a change in either recompiles the CUDA graph)."""
    seen: list[tuple[tuple[tuple[int, ...], bool], ...]] = []

    def compile_(fn, **kwargs):
        assert kwargs == {"mode": "reduce-overhead", "dynamic": False, "recompile_limit": compilation.RECOMPILE_BUDGET}

        def recorded(*args):
            seen.append(tuple((tuple(a.shape), a.is_inference()) for a in args))
            return fn(*args)

        return recorded

    pretend_compile_is_available(monkeypatch)
    monkeypatch.setattr(torch, "compile", compile_)
    return seen


# ------------------------------------------------------------------------------- real networks


@pytest.mark.slow
def test_engine_matches_unfused_official_networks(official_ckpt_dir):
    # One frame of a two-frame source (the index path) at 32x32, the smallest volume the warp
    # network's hourglass takes (256x256 render): the real decoder costs seconds a frame here.
    # Batching is covered with stand-ins below.
    warp = load_network("warp_network", official_ckpt_dir)
    decoder = load_network("decoder", official_ckpt_dir)
    source = make_source(volumes(2, side=32))
    motion = make_motion(1, source_index=torch.tensor([1]))
    engine = WarpDecodeEngine(warp, decoder, batch_size=2, compile=False)
    got = engine.render(source, motion)
    assert got.images.shape == (1, 3, 256, 256) and got.images.dtype == torch.float32
    assert torch.equal(got.source_index, motion.source_index)
    assert rel_l2(got.images, unfused(warp, decoder, source, motion)) < 1e-5


# ------------------------------------------------------------------------------- stand-ins


# 5 frames in batches of each size, first batch 4: a last stretch shorter than a batch larger than
# 4 goes in pieces of 4, each computed as 4 (the last frame repeated).
@pytest.mark.parametrize("batch_size, computed", [(1, [1] * 5), (3, [3, 2]), (4, [4, 1]), (5, [5]), (8, [4, 4])])
def test_batch_size_does_not_change_frames(batch_size, computed):
    warp, decoder = toy_networks()
    source, motion = make_source(volumes(1)), make_motion(5)
    expected = unfused(warp, decoder, source, motion)
    got = WarpDecodeEngine(warp, decoder, batch_size=batch_size, compile=False).render(source, motion)
    assert got.images.shape == (5, 3, 32, 32)
    assert rel_l2(got.images, expected) < 1e-6
    assert decoder.batch_sizes[5:] == computed


def test_multi_source_frames_use_their_own_volume():
    warp, decoder = toy_networks()
    f_s = volumes(3)
    motion = make_motion(5, source_index=torch.tensor([2, 0, 1, 1, 2]))
    engine = WarpDecodeEngine(warp, decoder, batch_size=2, compile=False)
    got = engine.render(make_source(f_s), motion).images
    assert rel_l2(got, unfused(warp, decoder, make_source(f_s), motion)) < 1e-6
    # The frames do depend on which volume they get: a wrong gather could not pass the above.
    assert rel_l2(engine.render(make_source(f_s.flip(0)), motion).images, got) > 1e-2


def test_single_source_expand_equals_multi_source_index():
    warp, decoder = toy_networks()
    one = volumes(1)
    motion = make_motion(5)
    engine = WarpDecodeEngine(warp, decoder, batch_size=3, compile=False)
    shared = engine.render(make_source(one), motion).images
    repeated = make_source(one.expand(4, -1, -1, -1, -1).clone())
    indexed = engine.render(repeated, make_motion(5, source_index=torch.tensor([3, 0, 2, 1, 3]))).images
    assert rel_l2(shared, indexed) < 1e-6


def test_render_batch_accepts_shared_or_per_frame_volumes():
    warp, decoder = toy_networks()
    engine = WarpDecodeEngine(warp, decoder, batch_size=4, compile=False)
    motion = make_motion(3)
    f_s = volumes(3)
    per_frame = engine.render_batch(f_s, motion.kp_source, motion.kp_driving)
    for i in range(3):
        alone = engine.render_batch(f_s[i : i + 1], motion.kp_source[i : i + 1], motion.kp_driving[i : i + 1])
        assert rel_l2(alone, per_frame[i : i + 1]) < 1e-6
    with pytest.raises(InputError, match="1 to 4"):
        too_many = make_motion(5)
        engine.render_batch(volumes(1), too_many.kp_source, too_many.kp_driving)
    with pytest.raises(InputError, match="2 volumes for 3 frames"):
        engine.render_batch(f_s[:2], motion.kp_source, motion.kp_driving)


def test_compiled_path_pads_every_call_to_one_static_shape(fake_compile):
    warp, decoder = toy_networks()
    motion_single, motion_multi = make_motion(7), make_motion(7, source_index=torch.tensor([0, 1, 1, 0, 1, 0, 0]))
    eager = WarpDecodeEngine(warp, decoder, batch_size=4, compile=False)
    engine = WarpDecodeEngine(warp, decoder, batch_size=4)
    assert engine.stats.compiled
    for source, motion in ((make_source(volumes(1)), motion_single), (make_source(volumes(2)), motion_multi)):
        fake_compile.clear()
        got = engine.render(source, motion).images
        assert got.shape == (7, 3, 32, 32)
        assert rel_l2(got, eager.render(source, motion).images) < 1e-6
        # Two calls (4 frames + 3 padded to 4: more than half a batch, so not an eager tail), both
        # with the same shapes and tensor kinds (the motion was made outside inference mode, the
        # padding inside): no recompile.
        f_s_batch = 1 if len(source) == 1 else 4
        signature = (((f_s_batch, 32, 16, 4, 4), True), ((4, NUM_KP, 3), True), ((4, NUM_KP, 3), True))
        assert fake_compile == [signature] * 2
    assert engine.stats.compile_seconds is not None


def test_compiled_engine_starts_each_clip_with_a_small_eager_batch(fake_compile):
    warp, decoder = toy_networks()
    source, motion = make_source(volumes(1)), make_motion(7)
    engine = WarpDecodeEngine(warp, decoder, batch_size=4, first_batch=2)
    for _ in range(2):  # every clip ramps, not only the first one
        fake_compile.clear()
        batches = list(engine.iter_render(source, motion))
        assert [(first, images.shape[0]) for first, images in batches] == [(0, 2), (2, 4), (6, 1)]
        # The first two frames and the last one (at most half a batch) came from the eager path:
        # the graph saw only the one full-size call.
        assert len(fake_compile) == 1 and fake_compile[0][1][0][0] == 4
        got = torch.cat([images for _, images in batches])
        assert rel_l2(got, unfused(warp, decoder, source, motion)) < 1e-6


def test_under_cuda_malloc_async_the_compiled_step_runs_without_graph_trees(monkeypatch):
    # ComfyUI's default allocator backend breaks torch's CUDA-graph trees: the engine compiles
    # plain Inductor code and hands out its outputs as they are (no graph pool to copy out of).
    modes = []

    def compile_(fn, **kwargs):
        modes.append(kwargs["mode"])
        return fn

    pretend_compile_is_available(monkeypatch, malloc_async=True)
    monkeypatch.setattr(torch, "compile", compile_)
    warp, decoder = toy_networks()
    eager = WarpDecodeEngine(warp, decoder, batch_size=4, compile=False)
    engine = WarpDecodeEngine(warp, decoder, batch_size=4)
    source, motion = make_source(volumes(1)), make_motion(9)
    for _ in range(2):
        got = engine.render(source, motion).images
        assert rel_l2(got, eager.render(source, motion).images) < 1e-6
    assert modes == ["default"] and engine.stats.graph_batches >= 2 and not engine._outputs_reused


@pytest.mark.parametrize("warmup", ["aot", "aot_cached"])
def test_under_cuda_malloc_async_aot_packages_are_not_used_and_the_engine_says_why(monkeypatch, caplog, warmup):
    monkeypatch.setattr(compilation, "_announced", set())
    pretend_compile_is_available(monkeypatch, malloc_async=True)
    with caplog.at_level(logging.WARNING, logger=warp_decode.__name__):
        engine = WarpDecodeEngine(*toy_networks(), batch_size=4, warmup=warmup)
    assert engine.warmup == engine.stats.warmup == "foreground" and not engine._graph_trees
    assert [r.getMessage() for r in caplog.records] == [
        "Ditto warp+decode: no AOT package (the cudaMallocAsync allocator cannot replay its CUDA graph)"]


@pytest.mark.parametrize("malloc_async", [False, True])
def test_under_cuda_malloc_async_a_background_compile_waits_for_the_first_clip(monkeypatch, caplog, malloc_async):
    # There a compile thread's GPU work keeps the LMDM from recording its windows during the first
    # clip (cuda_graphs.beside_captures): the worker's background compile becomes deferred.
    monkeypatch.setattr(compilation, "_announced", set())
    pretend_compile_is_available(monkeypatch, malloc_async)
    with caplog.at_level(logging.WARNING, logger=warp_decode.__name__):
        engine = WarpDecodeEngine(*toy_networks(), batch_size=4, warmup="background")
        WarpDecodeEngine(*toy_networks(), batch_size=4, warmup="background")  # announced once
    expected = "deferred" if malloc_async else "background"
    assert engine.warmup == engine.stats.warmup == expected
    assert len(caplog.records) == malloc_async and all("'deferred'" in r.getMessage() for r in caplog.records)


def test_cuda_malloc_async_is_read_from_the_allocator_backend_of_cuda_devices(monkeypatch):
    assert not compilation.uses_cuda_malloc_async(torch.device("cpu"))
    monkeypatch.setattr(torch.cuda.memory, "get_allocator_backend", lambda: "cudaMallocAsync")
    assert compilation.uses_cuda_malloc_async(torch.device("cuda", 0))
    assert not compilation.uses_cuda_malloc_async(torch.device("cpu"))
    monkeypatch.setattr(torch.cuda.memory, "get_allocator_backend", lambda: "native")
    assert not compilation.uses_cuda_malloc_async(torch.device("cuda", 0))


@pytest.fixture
def failing_compile(monkeypatch):
    """A machine whose ``torch.compile`` fails at the first call (no C++ compiler), announcements reset."""
    from torch._dynamo.exc import BackendCompilerFailed

    def compile_(fn, **kwargs):
        def call(*args):
            raise BackendCompilerFailed(compile_, RuntimeError("no C++ compiler"), None)

        return call

    pretend_compile_is_available(monkeypatch)
    monkeypatch.setattr(torch, "compile", compile_)
    monkeypatch.setattr(compilation, "_announced", set())


def test_compile_failure_falls_back_to_eager_and_says_why(failing_compile, caplog):
    warp, decoder = toy_networks()
    source, motion = make_source(volumes(1)), make_motion(3)
    engine = WarpDecodeEngine(warp, decoder, batch_size=2)
    with caplog.at_level(logging.WARNING, logger=warp_decode.__name__):
        got = engine.render(source, motion).images
    assert not engine.stats.compiled and "no C++ compiler" in engine.stats.reason_eager
    assert rel_l2(got, unfused(warp, decoder, source, motion)) < 1e-6
    assert sum("no C++ compiler" in r.getMessage() for r in caplog.records) == 1


class TritonlessWarp(ToyWarp):
    """A toy warp network with a depth-tap conv, on a machine whose Triton cannot build kernels:
    with the conv switched to the Triton kernel, every call fails as Triton fails there."""

    def __init__(self) -> None:
        super().__init__()
        self.taps = DepthTapConv3d(nn.Conv3d(1, 1, 1))  # only its switch matters here

    def forward(self, f_s: Tensor, kp_source: Tensor, kp_driving: Tensor) -> Tensor:
        if self.taps.use_triton:
            from triton.runtime.errors import OutOfResources

            raise OutOfResources(232448, 101376, "shared memory")
        return super().forward(f_s, kp_source, kp_driving)


@pytest.mark.reliability(area="Soak and faults", case="Triton cannot build or fit one of our kernels on this GPU",
                         behaviour="Warp+Decode goes back to PyTorch's ops and eager code, says why once, and the "
                                   "clip renders whole and right.")
def test_triton_failure_in_the_eager_first_batch_falls_back_to_pytorch(fake_compile, monkeypatch, caplog):
    pytest.importorskip("triton")
    monkeypatch.setattr(warp_decode, "triton_kernels_supported", lambda device, dtype: (True, ""))
    monkeypatch.setattr(compilation, "_announced", set())
    torch.manual_seed(0)
    warp, decoder = TritonlessWarp().eval(), ToyDecoder().eval()
    source, motion = make_source(volumes(1)), make_motion(7)
    engine = WarpDecodeEngine(warp, decoder, batch_size=4, first_batch=2)
    assert engine.stats.compiled and engine.stats.triton_kernels == 1 and warp.taps.use_triton
    with caplog.at_level(logging.WARNING, logger=warp_decode.__name__):
        got = engine.render(source, motion).images
    # The clip is whole and right; the engine went back to PyTorch's conv and eager code.
    assert rel_l2(got, unfused(warp, decoder, source, motion)) < 1e-6
    assert not warp.taps.use_triton and engine.stats.triton_kernels == 0
    assert not engine.stats.compiled and "OutOfResources" in engine.stats.reason_eager
    assert not fake_compile  # the graph was never run
    assert [r.getMessage() for r in caplog.records] == [
        f"Ditto warp+decode runs eagerly (no CUDA graphs): {engine.stats.reason_eager}"]


def test_triton_errors_count_as_compile_failures():
    triton_errors = pytest.importorskip("triton.runtime.errors")
    assert issubclass(triton_errors.OutOfResources, compilation.compile_failures())


def test_eager_fallback_is_announced_once(monkeypatch, caplog):
    monkeypatch.setattr(compilation, "_announced", set())
    with caplog.at_level(logging.WARNING, logger=warp_decode.__name__):
        for _ in range(2):
            engine = WarpDecodeEngine(*toy_networks(), batch_size=2)
            engine.render(make_source(volumes(1)), make_motion(3))
        WarpDecodeEngine(*toy_networks(), compile=False)
    assert not engine.stats.compiled and engine.stats.reason_eager == "compilation needs a CUDA device"
    assert [r.getMessage() for r in caplog.records] == [
        "Ditto warp+decode runs eagerly (no CUDA graphs): compilation needs a CUDA device"
    ]


def test_priming_runs_the_first_and_a_full_batch_eagerly_on_cuda_only_and_never_raises(monkeypatch, caplog):
    warp, decoder = toy_networks()
    engine = WarpDecodeEngine(warp, decoder, batch_size=8, compile=False)
    engine.prime()
    assert not engine._prime.started  # on a CPU there is nothing to load ahead
    engine._prime_eager(full_batch=True)  # what the thread runs, run here
    assert decoder.batch_sizes == [4, 8]  # the clip's first batch and a full one
    engine._prime_eager(full_batch=False)
    assert decoder.batch_sizes == [4, 8, 4]
    monkeypatch.setattr(engine, "_forward", lambda *args: (_ for _ in ()).throw(RuntimeError("boom")))
    with caplog.at_level(logging.INFO, logger=priming.__name__):
        engine._prime.start(lambda: engine._prime_eager(True), engine.device)  # as prime() does on CUDA
        engine._primed()
    assert "warp+decode: priming failed (RuntimeError: boom)" in caplog.text


def test_out_of_memory_halves_batch_and_renders_every_frame_in_order(caplog):
    warp, decoder = toy_networks()
    source, motion = make_source(volumes(1)), make_motion(7)
    expected = unfused(warp, decoder, source, motion)
    engine = WarpDecodeEngine(warp, OutOfMemoryAbove(decoder, limit=2), batch_size=8, compile=False)
    with caplog.at_level(logging.WARNING, logger=warp_decode.__name__):
        batches = list(engine.iter_render(source, motion))
    assert [start for start, _ in batches] == [0, 2, 4, 6]
    assert rel_l2(torch.cat([images for _, images in batches]), expected) < 1e-6
    assert engine.batch_size == engine.stats.batch_size == 2
    assert sum("retrying with batch size" in r.getMessage() for r in caplog.records) == 2  # 8 -> 4 -> 2


def test_out_of_memory_in_the_compiled_graph_resets_the_graph_state(fake_compile, monkeypatch):
    """A failed graph recording can leave torch's shared graph-tree manager inconsistent, so the
    compiled path resets it before the smaller batch is recorded; eager failures leave it alone."""
    resets: list[int] = []
    monkeypatch.setattr(warp_decode, "reset_compiled_state", lambda: resets.append(1))
    warp, decoder = toy_networks()
    source, motion = make_source(volumes(1)), make_motion(7)
    expected = unfused(warp, decoder, source, motion)
    engine = WarpDecodeEngine(warp, OutOfMemoryAbove(decoder, limit=2), batch_size=8, first_batch=4)
    assert engine.stats.compiled
    got = engine.render(source, motion).images
    assert rel_l2(got, expected) < 1e-6
    # The eager first batch (4 frames) fails: no reset. The batch size drops to 4, no larger than
    # the ramp, so the next attempt is compiled at 4 and fails: one reset. Compiled at 2 fits.
    assert engine.batch_size == 2 and len(resets) == 1
    resets.clear()
    engine = WarpDecodeEngine(warp, OutOfMemoryAbove(decoder, limit=2), batch_size=8, first_batch=0)
    got = engine.render(source, motion).images
    assert rel_l2(got, expected) < 1e-6
    # Compiled at 8 and at 4 failed (one reset after each), compiled at 2 fits.
    assert engine.batch_size == 2 and len(resets) == 2


def test_out_of_memory_at_batch_one_is_a_clear_error():
    warp, decoder = toy_networks()
    engine = WarpDecodeEngine(warp, OutOfMemoryAbove(decoder, limit=0), batch_size=4, compile=False)
    with pytest.raises(DittoError, match="single frame") as info:
        engine.render(make_source(volumes(1)), make_motion(3))
    assert isinstance(info.value.__cause__, torch.cuda.OutOfMemoryError)


def test_no_room_for_the_rendered_clip_is_a_clear_error(monkeypatch):
    """render() holds every frame: the allocation of that result fails before any rendering."""
    warp, decoder = toy_networks()
    source, motion = make_source(volumes(1)), make_motion(3)
    allocate = torch.empty

    def empty(*shape, **kwargs):
        if shape == (3, 3, 32, 32):
            raise torch.cuda.OutOfMemoryError("simulated: no room for the result")
        return allocate(*shape, **kwargs)

    monkeypatch.setattr(torch, "empty", empty)
    engine = WarpDecodeEngine(warp, decoder, batch_size=2, compile=False)
    with pytest.raises(DittoError, match=r"holding the 3 rendered frames .*free VRAM") as info:
        engine.render(source, motion)
    assert isinstance(info.value.__cause__, torch.cuda.OutOfMemoryError)


def test_progress_is_reported_per_batch_and_a_raising_callback_stops_rendering():
    warp, decoder = toy_networks()
    source, motion = make_source(volumes(1)), make_motion(5)
    calls: list[tuple[int, int]] = []
    engine = WarpDecodeEngine(warp, decoder, batch_size=2, compile=False)
    engine.render(source, motion, lambda done, total: calls.append((done, total)))
    assert calls == [(2, 5), (4, 5), (5, 5)]

    def cancel(done: int, total: int) -> None:
        raise Interrupted("cancelled by the user")

    decoder.batch_sizes.clear()
    with pytest.raises(Interrupted):
        WarpDecodeEngine(warp, decoder, batch_size=2, compile=False).render(source, motion, cancel)
    assert decoder.batch_sizes == [2]  # the first batch only


def test_half_precision_engine_keeps_keypoints_float32():
    warp, decoder = toy_networks()
    source, motion = make_source(volumes(1)), make_motion(3)
    expected = unfused(warp, decoder, source, motion)
    engine = WarpDecodeEngine(warp.to(torch.bfloat16), decoder.to(torch.bfloat16), batch_size=2, compile=False)
    got = engine.render(source, motion).images
    assert got.dtype == torch.bfloat16 and engine.dtype == torch.bfloat16
    assert set(warp.keypoint_dtypes[-2:]) == {torch.float32}
    assert rel_l2(got, expected) < 2e-2


def test_networks_on_different_dtypes_are_rejected():
    warp, decoder = toy_networks()
    with pytest.raises(InputError, match="share one device and dtype"):
        WarpDecodeEngine(warp, decoder.to(torch.bfloat16), compile=False)
    with pytest.raises(InputError, match="batch_size"):
        WarpDecodeEngine(*toy_networks(), batch_size=-1, compile=False)


def test_mismatched_motion_lengths_are_rejected():
    warp, decoder = toy_networks()
    motion = make_motion(4)
    motion.source_index = motion.source_index[:3]
    with pytest.raises(InputError, match="source_index has 3 frames"):
        WarpDecodeEngine(warp, decoder, compile=False).render(make_source(volumes(1)), motion)


def test_empty_motion_renders_no_frames():
    warp, decoder = toy_networks()
    motion = make_motion(0)
    got = WarpDecodeEngine(warp, decoder, compile=False).render(make_source(volumes(1)), motion)
    assert got.images.shape == (0, 3, 32, 32) and len(got) == 0


# ------------------------------------------------------------------------------- GPU


@pytest.fixture(scope="module")
def gpu_networks(official_ckpt_dir):
    """The fp32 seed-0 warp network and decoder on the GPU."""
    device = torch.device("cuda")
    return {name: load_network(name, official_ckpt_dir, device=device) for name in ("warp_network", "decoder")}


@pytest.mark.gpu
def test_compiled_engine_matches_eager_fp32(gpu_networks, load_case, tmp_path, monkeypatch):
    # Same fp32 arithmetic, but Inductor fuses the pointwise/norm steps into Triton kernels
    # with another reduction order and may run convs channels-last (another cuDNN algorithm):
    # rounding differs at the 1e-6 level per op. 1e-4 is the kit's parity criterion, 20x the
    # reference's own fp32-vs-fp64 noise, and far below the 1e-2 a real bug gives.
    warp, decoder = gpu_networks["warp_network"], gpu_networks["decoder"]
    case = load_case("warp_network")["inputs"]
    source = make_source(case["feature_3d"]).to("cuda")
    jitter = 0.02 * torch.randn(5, NUM_KP, 3, generator=torch.Generator().manual_seed(3))
    motion = MotionSequence(
        kp_source=case["kp_source"].expand(5, -1, -1).cuda(),
        kp_driving=(case["kp_driving"] + jitter).cuda(),
        source_index=torch.zeros(5, dtype=torch.int64, device="cuda"),
    )
    eager = WarpDecodeEngine(warp, decoder, batch_size=4, compile=False).render(source, motion).images
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))  # restored after the test
    engine = WarpDecodeEngine(warp, decoder, batch_size=4, compile=True, cache_dir=tmp_path)
    assert engine.stats.compiled, engine.stats.reason_eager
    for _ in range(3):  # compile, record the CUDA graph, replay it
        got = engine.render(source, motion).images
        assert rel_l2(got, eager) < 1e-4
    print(f"compiled vs eager fp32 rel-L2 {rel_l2(got, eager):.2e}, compile {engine.stats.compile_seconds:.1f} s")


CUDA_MALLOC_ASYNC_RUN = """
import json, sys
import torch
from ditto_core.models.checkpoints import load_network
from ditto_core.models.keypoints import MOTION_DIM
from ditto_core.models.lmdm import LMDM, WINDOW
from ditto_core.motion.lmdm_sampler import DDIMSampler
from ditto_core.render.warp_decode import WarpDecodeEngine
from tests.parity import rel_l2
from tests.test_warp_decode import make_motion, make_source

# Random volumes and keypoints, unlike the reference case's: cuDNN's TF32 convolutions (on by
# default) then differ between eager and compiled code by 3.8e-4 (H100); plain fp32 compares them.
torch.backends.cudnn.allow_tf32 = False
nets = [load_network(name, sys.argv[1], device="cuda") for name in ("warp_network", "decoder")]
source = make_source(torch.randn(1, 32, 16, 64, 64, generator=torch.Generator().manual_seed(0))).to("cuda")
motion = make_motion(11)
motion = type(motion)(*(t.cuda() for t in (motion.kp_source, motion.kp_driving, motion.source_index)))
eager = WarpDecodeEngine(*nets, batch_size=4, compile=False).render(source, motion).images
engine = WarpDecodeEngine(*nets, batch_size=4, compile=True, cache_dir=sys.argv[2])
errors = [rel_l2(engine.render(source, motion).images, eager) for _ in range(3)]
# The LMDM sampler's window graph (eager steps recorded there, its compile dropped) beside it.
lmdm = LMDM().cuda().eval().requires_grad_(False)
plain, recorded = DDIMSampler(lmdm, 5, cuda_graph=False), DDIMSampler(lmdm, 5, cuda_graph=True, compile=True)
gen = torch.Generator(device="cuda").manual_seed(0)
sampler_errors = []
for _ in range(3):  # record, then replay with new inputs
    inputs = (torch.randn(1, MOTION_DIM, device="cuda", generator=gen),
              torch.randn(1, WINDOW, 1103, device="cuda", generator=gen),
              torch.randn(1, WINDOW, MOTION_DIM, device="cuda", generator=gen),
              torch.randn(plain.noise_shape(1), device="cuda", generator=gen))
    sampler_errors.append(rel_l2(recorded.sample(*inputs), plain.sample(*inputs)))
print(json.dumps({"backend": torch.cuda.memory.get_allocator_backend(), "errors": errors,
                  "compiled": engine.stats.compiled, "graph_batches": engine.stats.graph_batches,
                  "sampler_errors": sampler_errors, "sampler_graphs": len(recorded._graphs),
                  "sampler_compiled": recorded.compile}))
"""


@pytest.mark.gpu
def test_compiled_engine_under_comfyuis_cuda_malloc_async_allocator(official_ckpt_dir, tmp_path):
    # ComfyUI starts with PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync, under which torch's
    # CUDA-graph trees raise at their first graph (seen in a real ComfyUI on an H100); the
    # allocator is chosen when CUDA starts, hence a process of its own, whose clean exit is
    # part of the check (a captured allocation freed wrongly aborts it there).
    env = {**os.environ, "PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", CUDA_MALLOC_ASYNC_RUN, str(official_ckpt_dir), str(tmp_path)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["backend"] == "cudaMallocAsync" and got["compiled"]
    assert got["graph_batches"] >= 6 and max(got["errors"]) < 1e-4, got  # recorded, then replayed
    # The sampler replays its recorded eager window (same kernels as the plain one) without its compile.
    assert got["sampler_graphs"] == 1 and not got["sampler_compiled"] and max(got["sampler_errors"]) < 1e-6, got


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, bound", [(torch.float16, 2e-2), (torch.bfloat16, 5e-2)])
def test_half_precision_error_vs_fp32(official_ckpt_dir, gpu_networks, load_case, dtype, bound, record_property):
    # Bounds catch a broken fast path (wrong casts give 1e-1 and worse); the measured values
    # are printed for the README.
    case = load_case("warp_network")["inputs"]
    args = (case["feature_3d"].cuda(), case["kp_source"].cuda(), case["kp_driving"].cuda())
    reference = WarpDecodeEngine(gpu_networks["warp_network"], gpu_networks["decoder"], batch_size=1,
                                 compile=False).render_batch(*args)
    half_networks = (load_network(name, official_ckpt_dir, device="cuda", dtype=dtype)
                     for name in ("warp_network", "decoder"))
    half = WarpDecodeEngine(*half_networks, batch_size=1, compile=False).render_batch(*args)
    error = rel_l2(half, reference)
    record_property(f"rel_l2_{str(dtype).removeprefix('torch.')}", error)
    print(f"{dtype} warp+decode vs fp32: rel-L2 {error:.2e}")
    assert half.dtype == dtype and error < bound


def _six_frame_cuda_clip(seed: int) -> tuple[SourceInfo, MotionSequence]:
    """One random 64x64 feature volume and six keypoint frames around it, on CUDA."""
    generator = torch.Generator().manual_seed(seed)
    source = make_source(torch.randn(1, 32, 16, 64, 64, generator=generator)).to("cuda")
    kp = torch.randn(1, NUM_KP, 3, generator=generator) * 0.3
    motion = MotionSequence(kp_source=kp.expand(6, -1, -1).cuda(),
                            kp_driving=(kp + 0.02 * torch.randn(6, NUM_KP, 3, generator=generator)).cuda(),
                            source_index=torch.zeros(6, dtype=torch.int64, device="cuda"))
    return source, motion


def _record_a_graph_on_this_thread() -> None:
    """Record and replay a small CUDA graph here, as the LMDM sampler does during the motion stage."""
    x = torch.randn(64, 64, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        y = (x @ x).relu() @ x
    graph.replay()
    assert rel_l2(y, (x @ x).relu() @ x) < 1e-5


@pytest.mark.gpu
def test_background_warmup_on_cuda_while_this_thread_captures_a_graph(gpu_networks, tmp_path, monkeypatch):
    """The real thing: Inductor compiles in the warm-up thread while this thread renders eagerly
    and records a CUDA graph (as the LMDM sampler does during the motion stage); both paths give
    the same frames."""
    warp, decoder = gpu_networks["warp_network"], gpu_networks["decoder"]
    source, motion = _six_frame_cuda_clip(seed=5)
    eager = WarpDecodeEngine(warp, decoder, batch_size=4, compile=False).render(source, motion).images
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    engine = WarpDecodeEngine(warp, decoder, batch_size=4, cache_dir=tmp_path, warmup="background")
    engine.start_warmup()
    warm = engine._warmups[(True, 4)]
    _record_a_graph_on_this_thread()
    got = engine.render(source, motion).images
    assert rel_l2(got, eager) < 1e-4
    assert warm.ready.wait(timeout=600) and warm.error is None
    got = engine.render(source, motion).images
    assert engine.stats.graph_batches >= 1 and rel_l2(got, eager) < 1e-4
    print(f"background warm-up {engine.stats.compile_seconds:.1f} s; eager {engine.stats.eager_batches} batches, "
          f"graph {engine.stats.graph_batches}")


@pytest.mark.gpu
def test_priming_beside_a_graph_capture_changes_no_frame(gpu_networks):
    """The CLI primes the eager path while the motion stage records the LMDM's CUDA graph on the
    main thread; the clip then renders exactly as without priming, after the priming ended."""
    warp, decoder = gpu_networks["warp_network"], gpu_networks["decoder"]
    source, motion = _six_frame_cuda_clip(seed=6)
    plain = WarpDecodeEngine(warp, decoder, batch_size=4, compile=False).render(source, motion).images
    engine = WarpDecodeEngine(warp, decoder, batch_size=4, compile_min_frames=10**6)  # a short clip: eager
    engine.prime()
    assert engine._prime.started
    _record_a_graph_on_this_thread()
    got = engine.render(source, motion).images
    assert not engine._prime._thread.is_alive() and engine.stats.graph_batches == 0
    assert rel_l2(got, plain) < 1e-6


@pytest.mark.gpu
@pytest.mark.parametrize("recompiling", [False, True], ids=["replaying", "recompiling"])
def test_a_graph_tree_records_while_other_threads_synchronise_and_record(tmp_path, monkeypatch, recompiling):
    """Under the native allocator the compiled engine runs from graph trees, which warm up and
    record at its first calls. Meanwhile one thread synchronises the device (the stage timer,
    ComfyUI's cache emptying) and another records graphs (an LMDM window): they take turns,
    nothing aborts, and every call gives the eager frames. ``recompiling``: the toy networks
    append to a list, so every call compiles anew and warms up again; otherwise the calls after
    the second replay, and torch's state says so."""
    from torch._dynamo.utils import counters

    device = torch.device("cuda")
    if cuda_graphs.uses_cuda_malloc_async(device):
        pytest.skip("the engine uses graph trees under PyTorch's native allocator only")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    compilation.reset_compiled_state()  # the step's earlier compiles in this process count towards Dynamo's limit
    warp, decoder = (network.to(device) for network in toy_networks())
    warp.record = decoder.record = recompiling
    engine = WarpDecodeEngine(warp, decoder, batch_size=4, cache_dir=tmp_path)
    assert engine._graph_trees
    motion = make_motion(4)
    args = engine._arguments(volumes(1, side=16).to(device), motion.kp_source, motion.kp_driving, None, 4)
    with torch.inference_mode():
        expected = engine._forward(*args)
    stop, errors, counts = threading.Event(), [], {"synchronised": 0, "recorded": 0}

    def synchronising() -> None:
        while not stop.is_set():
            cuda_graphs.device_synchronize(device)
            counts["synchronised"] += 1
            time.sleep(0.001)  # a turn has no queue: a loop with no pause would starve the render

    def recording() -> None:
        x, stream = torch.randn(64, 64, device=device), torch.cuda.Stream(device)
        while not stop.is_set():
            call = cuda_graphs.CapturedCall(lambda t: (t @ t).relu(), (x,), stream)
            call.capture()
            call.release()
            counts["recorded"] += 1
            time.sleep(0.001)

    def guarded(loop: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                loop()
            except BaseException as error:  # noqa: BLE001 - handed to the test thread
                errors.append(error)
        return run

    threads = [threading.Thread(target=guarded(loop)) for loop in (synchronising, recording)]
    for thread in threads:
        thread.start()
    outputs, graphs, replayed = [], [], []
    try:
        with torch.inference_mode():
            for _ in range(6):  # warm up, record, then replays (or compiles every time)
                outputs.append(engine._run_compiled(args).clone())
                graphs.append(counters["stats"]["unique_graphs"])
                replayed.append(compilation.graph_tree_replayed(device))
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
    assert not errors and counts["synchronised"] > 0 and counts["recorded"] > 0
    for output in outputs:
        assert rel_l2(output, expected) < 1e-4
    compiles = [later - earlier for earlier, later in zip(graphs, graphs[1:])]
    if recompiling:
        assert compiles == [1] * 5 and not any(replayed)
    else:
        assert compiles == [0] * 5 and replayed[:2] == [False, False] and all(replayed[2:])
        assert not engine._tree_calls.may_record(tuple(tuple(arg.shape) for arg in args))


# ------------------------------------------------------------------------- background warm-up


@pytest.fixture
def gated_compile(monkeypatch):
    """``torch.compile`` for the background mode, whose compiled function waits on ``gate``
    before its first call returns (a compile in progress) and counts the calls it serves."""
    gate, calls = threading.Event(), []

    def compile_(fn, **kwargs):
        assert kwargs == {"mode": "default", "dynamic": False, "recompile_limit": compilation.RECOMPILE_BUDGET}

        def compiled(*args):
            gate.wait(timeout=30)
            calls.append(threading.current_thread().name)
            return fn(*args)

        return compiled

    pretend_compile_is_available(monkeypatch)
    monkeypatch.setattr(torch, "compile", compile_)
    return gate, calls


def test_background_warmup_renders_eagerly_until_the_graph_is_ready(gated_compile):
    gate, calls = gated_compile
    warp, decoder = toy_networks()
    source, motion = make_source(volumes(1)), make_motion(9)
    expected = unfused(warp, decoder, source, motion)
    engine = WarpDecodeEngine(warp, decoder, batch_size=4, first_batch=2, warmup="background")
    engine.start_warmup(volume_shape=tuple(source.f_s.shape[1:]))
    # The compile is still running: the whole clip comes from eager code, nothing waited for it.
    got = engine.render(source, motion).images
    assert rel_l2(got, expected) < 1e-6
    # 2 (the ramp), 4, then the last 3 frames as 2 + 1 (computed as 2): only primed sizes eagerly.
    assert engine.stats.graph_batches == 0 and engine.stats.eager_batches == 4 and not calls
    gate.set()
    engine._warmups[(True, 4)].ready.wait(timeout=30)
    assert calls == ["ditto-engine-warmup"]  # the warm-up ran the graph once, in its own thread
    got = engine.render(source, motion).images
    assert rel_l2(got, expected) < 1e-6
    # Now the ramp batch is eager and the two full batches go through the graph, in this thread.
    assert engine.stats.graph_batches == 2 and calls[1:] == [threading.current_thread().name] * 2
    engine.start_warmup(volume_shape=tuple(source.f_s.shape[1:]))  # idempotent: no second compile
    assert len(engine._warmups) == 1


@pytest.mark.reliability(
    area="Soak and faults",
    case="the engine compiles (its first compiled batch, or a warm-up in the background) while another thread "
         "records a CUDA graph (the LMDM's window, a live avatar's warm-up), under PyTorch's native allocator",
    behaviour="the compile is marked: recordings on other threads are put off (they run eagerly) or wait until "
              "it ends, since Inductor times its kernels between device synchronises that would break them")
def test_a_recording_beside_a_compile_is_put_off_under_either_allocator(gated_compile, monkeypatch):
    """A first-ever compile times its kernels' configurations between device synchronises, which
    break a recording on another thread and abort the process. While the engine compiles (a
    background warm-up, a foreground first batch), recordings elsewhere are put off, under the
    native allocator too; its later calls compile nothing and hold nothing."""
    gate, calls = gated_compile
    monkeypatch.setattr(cuda_graphs, "uses_cuda_malloc_async", lambda device: False)

    def recording_allowed() -> bool:
        with cuda_graphs.recording_turn(torch.device("cuda")) as allowed:
            return allowed

    warp, decoder = toy_networks()
    source = make_source(volumes(1))
    engine = WarpDecodeEngine(warp, decoder, batch_size=4, first_batch=2, warmup="background")
    engine.start_warmup(volume_shape=tuple(source.f_s.shape[1:]))
    deadline = time.monotonic() + 30
    while cuda_graphs._running["compiling"] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not recording_allowed()  # the warm-up thread is compiling
    gate.set()
    assert engine._warmups[(True, 4)].ready.wait(timeout=30)
    assert recording_allowed() and cuda_graphs._running["compiling"] == 0

    inside = []
    step = engine._step
    engine._step = lambda *args: inside.append(cuda_graphs._running["compiling"]) or step(*args)
    engine.render(source, make_motion(9))  # two full batches through the compiled step
    assert inside == [0, 0]  # compiled already: nothing marked
    foreground = WarpDecodeEngine(warp, decoder, batch_size=4, first_batch=2, warmup="background")
    step = foreground._step
    foreground._step = lambda *args: inside.append(cuda_graphs._running["compiling"]) or step(*args)
    motion = make_motion(4)
    for _ in range(2):
        foreground._run_compiled(foreground._arguments(source.f_s, motion.kp_source, motion.kp_driving, None, 4))
    assert inside[2:] == [1, 0]  # an engine's first compiled call compiles, wherever it runs


class FakeGraphTrees:
    """Stands in for :func:`compilation.graph_tree_replayed` as torch's graph trees behave: on
    each thread a function's first two calls warm up and record, later ones replay, and a
    recompile (:meth:`restart`) starts over."""

    def __init__(self) -> None:
        self.calls: dict[int, int] = {}  # thread id -> compiled calls since the last restart

    def __call__(self, device: torch.device) -> bool:
        thread = threading.get_ident()
        self.calls[thread] = self.calls.get(thread, 0) + 1
        return self.calls[thread] > 2

    def restart(self) -> None:
        self.calls.clear()


@pytest.mark.reliability(
    area="Soak and faults",
    case="the engine's CUDA-graph trees warm up or record (the manager's first graph, a function's first calls at "
         "a shape, again after a recompile or a reset) while another thread synchronises the device or records a "
         "graph (a live avatar's warm-up beside a prompt in a ComfyUI started with --disable-cuda-malloc)",
    behaviour="a graph-tree call takes the recording turn until a call at its shape on its thread is seen to replay "
              "(torch's own state), so device-wide calls and recordings elsewhere wait for it; while another thread "
              "compiles, such a batch renders eagerly; replays take no turn")
def test_a_graph_tree_call_takes_the_recording_turn_until_it_replays(fake_compile, monkeypatch):
    """Graph trees warm up (synchronising the device) and record at a function's first calls at
    each shape, unseen by our turn-taking before: a device synchronise on another thread during
    such a recording aborts the process. How many calls that takes is torch's affair (a recompile
    starts over), so calls take the turn until one is seen to replay."""
    monkeypatch.setattr(cuda_graphs, "uses_cuda_malloc_async", lambda device: False)
    trees = FakeGraphTrees()
    monkeypatch.setattr(compilation, "graph_tree_replayed", trees)
    warp, decoder = toy_networks()
    source, motion = make_source(volumes(1)), make_motion(4)
    engine = WarpDecodeEngine(warp, decoder, batch_size=4, first_batch=2)
    args = engine._arguments(source.f_s, motion.kp_source, motion.kp_driving, None, 4)
    expected = engine._forward(*args)
    step = engine._step

    def device_wide() -> None:
        with cuda_graphs.between_recordings():
            pass

    def recording() -> None:
        with cuda_graphs.recording_turn(torch.device("cuda"), wait=True):
            pass

    def others_wait_for(caller: ThreadPoolExecutor) -> bool:
        """Whether a device-wide call and a recording started on other threads while ``caller``'s
        thread runs a compiled call wait for it to end."""
        inside, leave = threading.Event(), threading.Event()
        engine._step = lambda *a: inside.set() or leave.wait(10) and step(*a)
        result = caller.submit(engine._run_compiled, args)
        assert inside.wait(10)
        others = [threading.Thread(target=other) for other in (device_wide, recording)]
        for other in others:
            other.start()
        for other in others:
            other.join(0.2)
        waited = all(other.is_alive() for other in others)
        leave.set()
        assert rel_l2(result.result(10), expected) < 1e-6
        for other in others:
            other.join(10)
            assert not other.is_alive()
        return waited

    compiling, done = threading.Event(), threading.Event()

    def compile_elsewhere() -> None:
        with cuda_graphs.beside_captures(compiling=True):
            compiling.set()
            done.wait(10)

    with ThreadPoolExecutor(1) as one, ThreadPoolExecutor(1) as another:
        # One thread: a warm-up, a recording, the first replay (not yet seen), then replays.
        assert [others_wait_for(one) for _ in range(5)] == [True, True, True, False, False]
        assert engine.stats.compile_seconds is not None
        # A recompile after the replays began (a guard that failed): that call cannot be foreseen,
        # but the calls after it take the turn again until they replay.
        trees.restart()
        assert [others_wait_for(one) for _ in range(4)] == [False, True, True, False]
        # Another thread has a graph-tree manager of its own.
        assert others_wait_for(another)
        # After the trees were reset (an out-of-VRAM error), the next calls record again.
        compilation.reset_compiled_state()
        trees.restart()
        assert [others_wait_for(one) for _ in range(4)] == [True, True, True, False]

        engine._step = step
        fresh = WarpDecodeEngine(warp, decoder, batch_size=4, first_batch=2)
        compiler = threading.Thread(target=compile_elsewhere)
        compiler.start()
        try:
            assert compiling.wait(10)
            clip = make_motion(9)
            calls = len(fake_compile)
            got = one.submit(fresh.render, source, clip).result(30).images
            assert rel_l2(got, unfused(warp, decoder, source, clip)) < 1e-6
            # Its first calls may record, which cannot wait for the compile elsewhere: eager batches.
            assert fresh.stats.graph_batches == 0 and len(fake_compile) == calls
            one.submit(engine.render, source, clip).result(30)  # a warm engine replays beside the compile
            assert engine.stats.graph_batches == 2 and len(fake_compile) == calls + 2
        finally:
            done.set()
            compiler.join(10)
        one.submit(fresh.render, source, clip).result(30)
        assert fresh.stats.graph_batches == 2  # the compile elsewhere ended: the graph


def test_deferred_warmup_compiles_only_once_a_clip_is_rendered(gated_compile, monkeypatch):
    """The first clip renders eagerly with no compile started (it has the interpreter and the GPU
    to itself); its end starts the compile, and the next clip switches to the graph once ready."""
    monkeypatch.setattr(warp_decode, "DEFERRED_QUIET_S", 0.0)  # the quiet spell: the next test's
    gate, calls = gated_compile
    warp, decoder = toy_networks()
    source, motion = make_source(volumes(1)), make_motion(9)
    expected = unfused(warp, decoder, source, motion)
    engine = WarpDecodeEngine(warp, decoder, batch_size=4, first_batch=2, warmup="deferred")
    batches = engine.iter_render(source, motion)
    for _ in range(4):  # 2, 4, 2, 1
        next(batches)
        assert not engine._warmups  # no compile while the clip renders
    assert next(batches, None) is None  # the clip is out: now the compile starts
    assert list(engine._warmups) == [(True, 4)] and engine.stats.eager_batches == 4
    assert not engine.compiled_ready() and engine.stats.compiled_at is None
    got = engine.render(source, motion).images  # the compile still running: eager again
    assert rel_l2(got, expected) < 1e-6 and engine.stats.graph_batches == 0
    opened = time.time()
    gate.set()
    assert engine._warmups[(True, 4)].ready.wait(timeout=30) and engine.compiled_ready()
    assert opened <= engine.stats.compiled_at <= time.time()  # when it became ready, for the benchmark
    got = engine.render(source, motion).images
    assert rel_l2(got, expected) < 1e-6 and engine.stats.graph_batches == 2
    assert calls == ["ditto-engine-warmup", threading.current_thread().name, threading.current_thread().name]


def test_deferred_compile_waits_until_no_clip_has_rendered_for_the_quiet_spell(gated_compile, monkeypatch):
    """Clips queued back to back render eagerly and alone: the compile starts only once the engine
    has rendered nothing for DEFERRED_QUIET_S, counted again from the end of each clip."""
    monkeypatch.setattr(warp_decode, "DEFERRED_QUIET_S", 1.0)
    gate, calls = gated_compile
    gate.set()  # a compile, once started, is done at once
    started = []
    warm_up = WarpDecodeEngine._warm_up
    monkeypatch.setattr(WarpDecodeEngine, "_warm_up", lambda self, *a: started.append(time.monotonic())
                        or warm_up(self, *a))
    warp, decoder = toy_networks()
    source, motion = make_source(volumes(1)), make_motion(9)
    expected = unfused(warp, decoder, source, motion)
    engine = WarpDecodeEngine(warp, decoder, batch_size=4, first_batch=2, warmup="deferred")
    begins = []
    for _ in range(3):  # the next clip comes at once each time, as in a worker's queue
        begins.append(time.monotonic())
        assert rel_l2(engine.render(source, motion).images, expected) < 1e-6
    assert list(engine._warmups) == [(True, 4)]  # asked for at the first clip's end
    assert engine._warmups[(True, 4)].ready.wait(timeout=30)
    assert len(started) == 1 and started[0] >= begins[-1] + 1.0  # after the last clip, not beside one
    assert engine.stats.graph_batches == 0 and "ditto-engine-warmup" in calls
    assert rel_l2(engine.render(source, motion).images, expected) < 1e-6 and engine.stats.graph_batches == 2


def test_an_engine_dropped_during_the_quiet_spell_is_freed_and_never_compiled(gated_compile, monkeypatch):
    """Models unloaded after a clip: the deferred compile's thread, still waiting for its quiet spell,
    does not keep the engine (and its VRAM) alive, and compiles nothing once the spell is over."""
    monkeypatch.setattr(warp_decode, "DEFERRED_QUIET_S", 0.3)
    gate, calls = gated_compile
    gate.set()
    warp, decoder = toy_networks()
    source, motion = make_source(volumes(1)), make_motion(9)
    engine = WarpDecodeEngine(warp, decoder, batch_size=4, first_batch=2, warmup="deferred")
    before = set(threading.enumerate())
    engine.render(source, motion)
    (waiting,) = [t for t in set(threading.enumerate()) - before if t.name == "ditto-engine-warmup"]
    dropped, renders = weakref.ref(engine), engine._renders
    with renders.span():  # holds the spell open, however slowly this machine runs
        del engine
        gc.collect()
        assert dropped() is None and waiting.is_alive()
    waiting.join(10)
    assert not waiting.is_alive() and "ditto-engine-warmup" not in calls


def test_a_clip_records_how_long_its_render_waited_for_the_priming_run():
    warp, decoder = toy_networks()
    source, motion = make_source(volumes(1)), make_motion(5)
    engine = WarpDecodeEngine(warp, decoder, batch_size=4, first_batch=2, compile=False)
    gate = threading.Event()
    engine._prime.start(lambda: gate.wait(10), torch.device("cpu"))  # prime() itself runs on CUDA only
    opener = threading.Timer(0.5, gate.set)
    opener.start()
    engine.render(source, motion)
    assert engine.stats.waited_for_priming_s >= 0.2  # most of the 0.5 s (a busy machine starts it late)
    engine.render(source, motion)
    assert engine.stats.waited_for_priming_s < 0.2  # the run ended before this clip


def test_a_quiet_spell_waits_for_a_render_that_outlasts_it():
    renders = QuietSpells(quiet_s=0.05)
    quiet = threading.Event()
    with renders.span():
        waiter = threading.Thread(target=lambda: renders.wait_for_quiet() or quiet.set())
        waiter.start()
        assert not quiet.wait(0.3)  # six spells long, but a render runs
        ending = time.monotonic()
    assert quiet.wait(10)
    assert time.monotonic() - ending >= 0.05  # a spell counted from the render's end
    waiter.join(10)


def test_a_short_last_stretch_renders_eagerly_in_first_batch_pieces(gated_compile):
    """13 frames, batches of 8, first batch 2: 2 eager, 8 through the graph, and the 3 left (at
    most half a batch) eagerly as 2 + 1 instead of a padded graph batch of 8; the same frames."""
    gate, calls = gated_compile
    gate.set()
    warp, decoder = toy_networks()
    source, motion = make_source(volumes(1)), make_motion(13)
    engine = WarpDecodeEngine(warp, decoder, batch_size=8, first_batch=2, warmup="background")
    engine.start_warmup(volume_shape=tuple(source.f_s.shape[1:]))
    assert engine._warmups[(True, 8)].ready.wait(timeout=30)
    computed = []
    forward = engine._forward
    engine._forward = lambda f_s, kp_s, kp_d: computed.append(kp_d.shape[0]) or forward(f_s, kp_s, kp_d)
    pieces = [(first, images.shape[0]) for first, images in engine.iter_render(source, motion)]
    assert pieces == [(0, 2), (2, 8), (10, 2), (12, 1)]
    assert computed == [2, 2, 2]  # eagerly, the last frame's piece padded to the first batch's size
    assert engine.stats.graph_batches == 1 and engine.stats.eager_batches == 3
    assert rel_l2(engine.render(source, make_motion(13)).images, unfused(warp, decoder, source, motion)) < 1e-6
    longer = [images.shape[0] for _, images in engine.iter_render(source, make_motion(15))]
    assert longer == [2, 8, 5]  # more than half a batch left: the graph, padded


def test_an_eager_clip_computes_only_the_two_primed_batch_sizes():
    """No compile: 13 frames in batches of 8 with first batch 2 are 8, then the 5 left as 2 + 2 + 1,
    every eager call computing 2 or 8 frames (the sizes the priming runs), the frames unchanged."""
    warp, decoder = toy_networks()
    source, motion = make_source(volumes(1)), make_motion(13)
    engine = WarpDecodeEngine(warp, decoder, batch_size=8, first_batch=2, compile=False)
    computed = []
    forward = engine._forward
    engine._forward = lambda f_s, kp_s, kp_d: computed.append(kp_d.shape[0]) or forward(f_s, kp_s, kp_d)
    pieces = [(first, images.shape[0]) for first, images in engine.iter_render(source, motion)]
    assert pieces == [(0, 8), (8, 2), (10, 2), (12, 1)] and computed == [8, 2, 2, 2]
    assert rel_l2(engine.render(source, make_motion(13)).images, unfused(warp, decoder, source, motion)) < 1e-6
    video, own = make_source(volumes(13)), make_motion(13, torch.arange(13))  # one volume a frame
    assert rel_l2(engine.render(video, own).images, unfused(warp, decoder, video, own)) < 1e-6
    computed.clear()
    engine.first_batch = 0  # pieces off: the last stretch in one batch of its own size
    assert [images.shape[0] for _, images in engine.iter_render(source, motion)] == [8, 5] and computed == [8, 5]


def test_background_warmup_of_a_video_source_is_its_own_graph(gated_compile):
    gate, calls = gated_compile
    gate.set()
    warp, decoder = toy_networks()
    source = make_source(volumes(2))
    motion = make_motion(5, source_index=torch.tensor([0, 1, 1, 0, 1]))
    engine = WarpDecodeEngine(warp, decoder, batch_size=4, first_batch=0, warmup="background")
    engine.render(source, motion)  # starts the per-frame-volume compile on first need
    engine._warmups[(False, 4)].ready.wait(timeout=30)
    before = engine.stats.graph_batches
    got = engine.render(source, motion).images
    assert rel_l2(got, unfused(warp, decoder, source, motion)) < 1e-6
    assert (True, 4) not in engine._warmups and engine.stats.graph_batches - before == 2


def test_background_compile_failure_falls_back_to_eager_and_says_why(failing_compile, caplog):
    warp, decoder = toy_networks()
    source, motion = make_source(volumes(1)), make_motion(6)
    engine = WarpDecodeEngine(warp, decoder, batch_size=2, warmup="background")
    engine.start_warmup(volume_shape=tuple(source.f_s.shape[1:]))
    engine._warmups[(True, 2)].ready.wait(timeout=30)
    with caplog.at_level(logging.WARNING, logger=warp_decode.__name__):
        got = engine.render(source, motion).images
    assert rel_l2(got, unfused(warp, decoder, source, motion)) < 1e-6
    assert not engine.stats.compiled and "no C++ compiler" in engine.stats.reason_eager
    assert sum("no C++ compiler" in r.getMessage() for r in caplog.records) == 1


def test_unknown_warmup_mode_is_refused():
    with pytest.raises(InputError, match="warmup must be one of foreground, background, deferred"):
        WarpDecodeEngine(*toy_networks(), warmup="lazy")


def test_a_clip_shorter_than_compile_min_frames_never_waits_for_a_compile(fake_compile):
    warp, decoder = toy_networks()
    source = make_source(volumes(1))
    engine = WarpDecodeEngine(warp, decoder, batch_size=4, first_batch=0, compile_min_frames=8)
    short, long = make_motion(7), make_motion(9)
    got = engine.render(source, short).images
    assert rel_l2(got, unfused(warp, decoder, source, short)) < 1e-6
    assert not fake_compile and engine.stats.graph_batches == 0  # eager throughout: nothing compiled
    engine.render(source, long)
    assert len(fake_compile) == 3  # a long clip compiles; from then on short clips use the graph too
    engine.render(source, short)
    assert len(fake_compile) == 5


def test_background_warmup_shortens_gil_turns_only_while_it_runs(gated_compile):
    import sys

    gate, _ = gated_compile
    before = sys.getswitchinterval()
    engine = WarpDecodeEngine(*toy_networks(), batch_size=2, warmup="background")
    engine.start_warmup(volume_shape=(32, 16, 4, 4))
    for _ in range(100):  # the warm-up thread shortens the interval as it starts
        if sys.getswitchinterval() < before:
            break
        threading.Event().wait(0.01)
    assert sys.getswitchinterval() < before
    gate.set()
    engine._warmups[(True, 2)].ready.wait(timeout=30)
    for _ in range(100):  # the thread restores the interval right after setting ready
        if sys.getswitchinterval() == before:
            break
        threading.Event().wait(0.01)
    assert sys.getswitchinterval() == before
