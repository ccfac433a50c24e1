"""Compiled Warp+Decode: source features + keypoints -> 512x512 renders, in batches.

The warping network and the SPADE decoder run as one function over a fixed-size batch, so a
single CUDA graph (``torch.compile(mode="reduce-overhead")``) covers both. Every call the
compiled function sees has the same shapes: the last, shorter batch is padded to the batch
size, and frames of a multi-frame source are gathered (and padded) outside the graph, so one
clip compiles once. Where compilation is not available (CPU, no Triton, some Windows installs)
or fails, the same function runs eagerly, announced once. Where it compiles, the warp network's
mask conv and its two trilinear samplings also run as Triton kernels of ours
(:mod:`ditto_core.models.triton_kernels`), and eager batches (a new process's first clip, while
the compile loads) run the decoder's norms and modulations as kernels of ours too
(:mod:`ditto_core.models.spade_norm_triton`).

Ways to get the compiled graph (``warmup``):

* ``"foreground"``: the first full batch compiles it (``mode="reduce-overhead"``: CUDA graphs;
  under the ``cudaMallocAsync`` allocator, ComfyUI's default, which torch's graph trees do not
  support, plain Inductor kernels), the caller waiting; right for a process that renders many
  clips, and for latency at batch 1.
* ``"background"``: a thread compiles it (plain Inductor kernels, no CUDA graphs: at a full
  batch the GPU, not kernel launches, is the limit) while the clip renders eagerly; batches
  switch to the graph once it is ready. A new process then delivers frames at once instead of
  after the compile, and a clip too short to repay a compile never waits for one.
  :meth:`WarpDecodeEngine.start_warmup` starts it early (when the models load). Under the
  ``cudaMallocAsync`` allocator it becomes ``"deferred"``: there no CUDA graph may be recorded
  while another thread's GPU work runs, so the first clip's LMDM windows would run unrecorded
  beside the compile.
* ``"deferred"``: as ``"background"``, but the compile starts when a clip has been rendered, not
  before: the first clip of a process renders eagerly with the GPU and the interpreter to itself
  (no compile thread competing for either), and the compile runs while the process waits for its
  next clip (ComfyUI between prompts), whose batches switch to the graph once it is ready. It
  starts only once no clip has rendered for ``DEFERRED_QUIET_S`` (:mod:`~ditto_core.quiet_spells`): clips
  queued back to back render eagerly instead of beside it. Where VRAM cannot hold a compile's
  batch beside a render, it runs as the first clip ends instead.
* ``"aot"``: the graph comes from an AOTInductor package in the user cache
  (:mod:`.aot_package`), built on first need (the caller waiting) and loaded in milliseconds by
  every later process; on CUDA it is replayed from a CUDA graph. ``"aot_cached"`` uses a package
  only where one is cached already and otherwise behaves as ``"foreground"``; the shapes it found
  no package for are listed in :attr:`WarpDecodeEngine.aot_missing` (the CLI builds them in
  another process once the clip is written). Where a package cannot be built or loaded, the
  engine falls back to ``"foreground"``, announced once.

Precision is the networks' own: the engine runs them in the dtype of their weights and hands
them float32 keypoints; the warp network keeps its sampling grids in float32 by itself. No
autocast: it would push the dense-motion blend (a ``bmm`` of keypoint offsets) to half
precision, which is exactly what must stay float32.
"""
from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Optional

import torch
from torch import Tensor, nn

from ..aot_packages import AotUnavailable, PackageCache
from ..compilation import (GraphTreeCalls, announce_once, compile_available, compile_failures, compile_function,
                           reset_compiled_state, uses_cuda_malloc_async)
from ..cuda_graphs import beside_captures, between_recordings, device_synchronize, recording_turn
from ..errors import DittoError, InputError
from ..models.keypoints import NUM_KP
from ..models.triton_kernels import register_triton_operators, triton_kernels_supported, use_triton_kernels_
from ..motion.motion_sequence import MotionSequence
from ..priming import Priming, background_gpu_work
from ..quiet_spells import QuietSpells
from ..progress import ProgressCallback, report
from ..user_cache import user_cache_dir
from ..registration.source_info import SourceInfo
from .aot_package import PackagedStep, load_step, warp_decode_step
from .rendered_frames import RenderedFrames

log = logging.getLogger(__name__)

# Peak activation memory of one frame through warp + decode at 64x64 features; used to size
# batches from free VRAM. Measured by bench/bench_render.py ("peak_bytes_per_frame") on an
# H200: 274 MiB in fp16 and bf16 (bench/measurements/2026-11-29-h200), 242 MiB after the decoder's
# sub-pixel rewrites (2026-11-30), 234 MiB fp16 after the mask-conv and shortcut rewrites
# (2026-11-30-h200-s3), used here with a margin for allocator fragmentation; fp32 is not
# measured yet and keeps a conservative estimate.
_BYTES_PER_FRAME = {torch.float32: 620 << 20, torch.float16: 310 << 20, torch.bfloat16: 310 << 20}
MAX_BATCH = 32
WARMUP_MODES = ("foreground", "background", "deferred", "aot", "aot_cached")
_THREAD_WARMUPS = ("background", "deferred")  # the modes whose compile runs in a thread of its own
# "deferred": how long no clip may have rendered before the compile starts. Longer than the gap
# between clips queued back to back (the next job's audio features and motion: tenths of a second).
DEFERRED_QUIET_S = 2.0
# Ditto's feature volume per source frame: (channels, depth, height, width).
VOLUME_SHAPE = (32, 16, 64, 64)
# The decoder's output side is this multiple of the feature volume's side (64 -> 512).
_DECODER_UPSCALE = 8


def default_compile_cache_dir() -> Path:
    """Per-user folder for Inductor's compiled graphs and kernels (survives reboots, unlike /tmp)."""
    return user_cache_dir("inductor")


def auto_batch_size(device: torch.device, dtype: torch.dtype, fraction: float = 0.5) -> int:
    """Frames per batch that fit in ``fraction`` of the free VRAM (1 on CPU: no gain from more)."""
    if device.type != "cuda":
        return 1
    free, _ = torch.cuda.mem_get_info(device)
    return int(max(1, min(MAX_BATCH, fraction * free // _BYTES_PER_FRAME[dtype])))


def use_compile_cache(cache_dir: Optional[Path] = None) -> None:
    """Point Inductor's on-disk caches (FX graphs, AOT graphs, Triton kernels) at a folder.

    With these caches warm, a second process skips code generation and kernel compilation and
    pays only tracing and graph capture. The setting is process-wide (an environment variable
    Inductor reads on every compile): an explicit ``cache_dir`` wins, otherwise
    :func:`default_compile_cache_dir` is used unless the user, or an earlier compile in this
    process, already chose a folder.
    """
    if cache_dir is not None:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(Path(cache_dir).resolve())
    elif "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
        try:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(default_compile_cache_dir())
        except DittoError as error:  # a cache folder of another user's: Inductor's own default serves
            announce_once(log, f"Ditto: Inductor keeps its compiled kernels in its own default folder ({error})")


@dataclass
class EngineStats:
    """What the engine decided and measured; surfaced in logs and the benchmark."""

    compiled: bool  # the CUDA-graph path is active
    batch_size: int  # frames per call now (halved after each out-of-memory retry)
    reason_eager: str = ""  # why the eager path runs, when it does
    compile_seconds: Optional[float] = None  # first compiled call: tracing + Inductor (or its cache)
    compiled_at: Optional[float] = None  # when that call returned (time.time()): was it ready for a request?
    triton_kernels: int = 0  # warp-network layers running Triton kernels of ours (0: PyTorch's ops; why below)
    reason_pytorch: str = ""
    warmup: str = "foreground"  # how the graph is compiled (see WARMUP_MODES)
    eager_batches: int = 0  # batches rendered without the graph (ramp, or while it compiled)
    graph_batches: int = 0  # batches rendered through the graph
    aot_seconds: Optional[float] = None  # "aot" modes: the first package found and loaded (or built) in
    aot_built: bool = False  # whether this engine built a package (none was cached)
    waited_for_priming_s: float = 0.0  # how long the last clip's render waited for prime()'s run


@dataclass
class _Warmup:
    """A background compile of one graph shape: done when ``ready`` is set, failed if ``error``."""

    ready: threading.Event = field(default_factory=threading.Event)
    error: Optional[BaseException] = None


class WarpDecodeEngine(nn.Module):
    """Fused warp + decode over batches of frames.

    Args:
        warp_network: ``(f_s (B,32,16,64,64), kp_source (B,21,3), kp_driving (B,21,3)) -> (B,256,64,64)``.
        decoder: ``(B,256,64,64) -> (B,3,512,512)`` in [0, 1].
            Both on one device, in one dtype (float32, float16 or bfloat16): the engine's.
        batch_size: frames per call; 0 picks one from free VRAM.
        compile: ``True`` compiles with CUDA graphs where possible (eager fallback, announced once),
            ``False`` always runs eagerly.
        cache_dir: where Inductor keeps compiled kernels across processes (see
            :func:`use_compile_cache`); ``None`` uses :func:`default_compile_cache_dir`.
        first_batch: frames in the first batch of every clip when compiled, run eagerly: the
            first frames reach the encoder after a few frames' work instead of a whole graph
            batch's (time to first frame), and the graph takes over from the next batch. A
            clip's last stretch of at most half a batch is rendered eagerly in pieces of this
            size too (0: neither).
        warmup: one of :data:`WARMUP_MODES` (see the module docstring).
        compile_min_frames: a clip shorter than this renders eagerly unless its graph is
            already compiled: for a one-clip process, a compile costs more than it saves on a
            short clip (see docs/TIME_TO_VIDEO_LOG.md, session 41). 0: every clip may compile. A cached AOT
            package is no compile: it serves clips of any length.
        aot_cache: where the ``"aot"`` modes keep packages (default: the user cache's ``aot``).
    """

    def __init__(
        self,
        warp_network: nn.Module,
        decoder: nn.Module,
        batch_size: int = 0,
        compile: bool = True,
        cache_dir: Optional[Path] = None,
        first_batch: int = 4,
        warmup: str = "foreground",
        compile_min_frames: int = 0,
        aot_cache: Optional[PackageCache] = None,
    ) -> None:
        super().__init__()
        if warmup not in WARMUP_MODES:
            raise InputError(f"WarpDecodeEngine: warmup must be one of {', '.join(WARMUP_MODES)}, got {warmup!r}")
        self.warp_network = warp_network
        self.decoder = decoder
        self.device, self.dtype = _common_placement(warp_network, decoder)
        if batch_size < 0:
            raise InputError(f"WarpDecodeEngine: batch_size must be >= 0 (0 = automatic), got {batch_size}")
        self.batch_size = batch_size or auto_batch_size(self.device, self.dtype)
        self.first_batch = first_batch
        ok, why = compile_available(self.device) if compile else (False, "compile is off")
        if ok and warmup == "background" and uses_cuda_malloc_async(self.device):
            # There a compile thread's GPU work keeps the LMDM sampler from recording (see
            # cuda_graphs.beside_captures), so the first clip's windows ran eagerly beside the
            # compile's interpreter traffic: the clip took several times as long.
            announce_once(log, "Ditto warp+decode: under the cudaMallocAsync allocator the compile "
                               "starts after the first clip (warmup 'deferred' instead of 'background')")
            warmup = "deferred"
        self.warmup = warmup
        self.compile_min_frames = compile_min_frames
        self.stats = EngineStats(compiled=ok, batch_size=self.batch_size, reason_eager=why, warmup=warmup)
        self._step: Optional[Callable[[Tensor, Tensor, Tensor], Tensor]] = None
        self._warmups: dict[tuple[bool, int], _Warmup] = {}  # (one shared volume, batch size) -> its compile
        self._prime = Priming("warp+decode")  # see prime()
        self._renders = QuietSpells(DEFERRED_QUIET_S)  # the clips rendering: "deferred" waits for a pause
        self._tree_calls = GraphTreeCalls()  # which compiled calls may record (graph trees)
        self.aot_cache = aot_cache or PackageCache()
        self._packages: dict[tuple[int, tuple[int, ...]], Optional[PackagedStep]] = {}  # (batch, f_s shape) ->
        self.aot_missing: list[tuple[int, ...]] = []  # "aot_cached": f_s shapes that found no package
        # Our Triton kernels go with compilation: a machine that cannot compile Triton kernels
        # (or a user who turned compiling off) gets the plain PyTorch path throughout.
        triton_ok, self.stats.reason_pytorch = triton_kernels_supported(self.device, self.dtype) if ok else (False, why)
        switched = use_triton_kernels_(warp_network, triton_ok)  # off too: another engine may have set it
        use_triton_kernels_(decoder, triton_ok)  # its kernels run in eager batches only
        self.stats.triton_kernels = switched if triton_ok else 0
        if ok:
            use_compile_cache(cache_dir)
            if self._aot and uses_cuda_malloc_async(self.device):  # a package replays from a CUDA graph
                self._fall_back_from_aot("the cudaMallocAsync allocator cannot replay its CUDA graph")
            else:
                self._step = self._run_package if self._aot else self._compiled(warmup)
        elif compile:
            _announce_eager(why)

    def _forward(self, f_s: Tensor, kp_source: Tensor, kp_driving: Tensor) -> Tensor:
        """(1 or B, 32, 16, H, W) engine dtype, (B, 21, 3) x2 float32 -> (B, 3, 8H, 8W) engine dtype."""
        return warp_decode_step(self.warp_network, self.decoder, f_s, kp_source, kp_driving)

    def _compiled(self, warmup: str) -> Callable[[Tensor, Tensor, Tensor], Tensor]:
        """The compiled step, made on its first call: ``torch.compile`` imports Dynamo (seconds
        of a new process), which a clip rendered eagerly never needs."""
        mode = "reduce-overhead" if self._graph_trees else "default"
        compiled: Optional[Callable[[Tensor, Tensor, Tensor], Tensor]] = None

        def step(f_s: Tensor, kp_source: Tensor, kp_driving: Tensor) -> Tensor:
            nonlocal compiled
            if compiled is None:
                register_triton_operators()
                compiled = compile_function(self._forward, mode=mode, dynamic=False)
            return compiled(f_s, kp_source, kp_driving)
        return step

    @property
    def _graph_trees(self) -> bool:
        """Whether the compiled step runs from torch's CUDA-graph trees: ``"foreground"``, unless the
        process allocates through ``cudaMallocAsync`` (ComfyUI's default: see
        :func:`uses_cuda_malloc_async`); there it runs as plain Inductor kernels, as in ``"background"``."""
        return self.warmup == "foreground" and not uses_cuda_malloc_async(self.device)

    @property
    def _aot(self) -> bool:
        return self.warmup in ("aot", "aot_cached")

    @property
    def _outputs_reused(self) -> bool:
        """Whether the next graph call overwrites this one's output (CUDA graphs)."""
        return self._graph_trees or (self._aot and self.device.type == "cuda")

    @torch.inference_mode()
    def render_batch(self, f_s: Tensor, kp_source: Tensor, kp_driving: Tensor) -> Tensor:
        """Render ``n <= batch_size`` frames; returns (n, 3, 512, 512) in the engine dtype.

        ``f_s`` is (n, 32, 16, 64, 64), or (1, 32, 16, 64, 64) for one source frame shared by
        all n; ``kp_source`` and ``kp_driving`` are (n, 21, 3), any float dtype.
        """
        n = kp_driving.shape[0]
        if not 1 <= n <= self.batch_size:
            raise InputError(f"render_batch: got {n} frames; pass 1 to {self.batch_size} (the engine batch size)")
        if f_s.shape[0] not in (1, n):
            raise InputError(
                f"render_batch: f_s holds {f_s.shape[0]} volumes for {n} frames; pass one per frame or one shared"
            )
        self._primed()
        graph = self._graph_ready(shared_volume=f_s.shape[0] == 1, volume_shape=tuple(f_s.shape[1:]))
        return self._render(f_s, kp_source, kp_driving, eager=not graph)

    def _render(
        self, f_s: Tensor, kp_source: Tensor, kp_driving: Tensor, index: Optional[Tensor] = None, eager: bool = False,
        eager_size: int = 0,
    ) -> Tensor:
        """Render n frames; ``index`` (n,) picks each frame's volume from ``f_s`` (all source frames).
        ``eager_size``: eager code computes at least this many (the last frame repeated)."""
        n = kp_driving.shape[0]
        compiled = self.stats.compiled and not eager
        # The compiled path always sees batch_size frames: one static shape, one graph.
        args = self._arguments(f_s, kp_source, kp_driving, index, self.batch_size if compiled else max(n, eager_size))
        if compiled:
            try:
                out = self._run_compiled(args)
                if out is not None:
                    self.stats.graph_batches += 1
                    # CUDA-graph outputs live in a pool that the next replay overwrites: hand out a copy.
                    return out[:n].clone() if self._outputs_reused else out[:n]
            except compile_failures() as error:
                self._disable_compile(f"compilation failed ({type(error).__name__}: {error})")
            except torch.cuda.OutOfMemoryError:
                # The caller retries with a smaller batch: a new graph, recorded by a graph-tree
                # manager that this failure may have left half-updated (see reset_compiled_state).
                if self.warmup == "foreground":
                    reset_compiled_state()
                raise
        self.stats.eager_batches += 1
        if not compiled and self.stats.triton_kernels:  # eager batches launch the Triton kernels themselves
            try:
                return self._forward(*args)[:n]
            except compile_failures() as error:
                self._disable_compile(f"a Triton kernel failed ({type(error).__name__}: {error})")
        return self._forward(*args)[:n]

    def _arguments(
        self, f_s: Tensor, kp_source: Tensor, kp_driving: Tensor, index: Optional[Tensor], size: int
    ) -> tuple[Tensor, Tensor, Tensor]:
        """The network's inputs for ``size`` frames (real rows, then the last one repeated)."""
        if index is not None:
            rows = _pad(index, size)
        elif f_s.shape[0] == 1:  # one volume shared by every frame: expanded inside the graph
            rows = torch.zeros(1, dtype=torch.long, device=f_s.device)
        else:
            rows = _pad(torch.arange(kp_driving.shape[0], device=f_s.device), size)
        # Every argument is a fresh tensor made here: a caller's tensor (or a view of it) and one
        # made under inference mode carry different dispatch keys, and Dynamo would recompile
        # the graph for each kind it sees.
        f_s = f_s.index_select(0, rows)
        return (f_s.to(self.device, self.dtype), _pad_keypoints(kp_source, size, self.device),
                _pad_keypoints(kp_driving, size, self.device))

    # -- background compile --------------------------------------------------------------

    def start_warmup(self, shared_volume: bool = True, volume_shape: tuple[int, ...] = VOLUME_SHAPE) -> None:
        """Compile the graph for the current batch size in a background thread (``"background"`` and
        ``"deferred"`` only).

        ``shared_volume``: the graph for an image source (one feature volume for every frame);
        ``False``: for a video source (one volume per frame). Idempotent per shape. Where VRAM
        cannot hold the warm-up's batch beside a rendering one, the compile runs here instead.
        """
        if self._aot and self.stats.compiled:
            self._package_ready(shared_volume, volume_shape)  # a cached package loads in the caller's time
            return
        key = (shared_volume, self.batch_size)
        if not self.stats.compiled or self.warmup not in _THREAD_WARMUPS or key in self._warmups:
            return
        warm = self._warmups[key] = _Warmup()
        if self._room_for_two_batches():
            # The thread holds the engine only weakly until its compile starts: an engine dropped
            # meanwhile (models unloaded during a deferred compile's quiet spell) is freed, not compiled.
            quiet = self._renders if self.warmup == "deferred" else None
            threading.Thread(target=_warm_up_in_background,
                             args=(weakref.ref(self), quiet, warm, shared_volume, volume_shape),
                             daemon=True, name="ditto-engine-warmup").start()
        else:
            self._warm_up(warm, shared_volume, volume_shape)

    def prime(self, full_batch: bool = False) -> None:
        """Run the eager step once on zeros, on a thread of its own, while the caller prepares the clip
        (:class:`~ditto_core.priming.Priming`).

        Our Triton kernels load from their cache there too. It runs at the shapes a clip's eager
        batches use: the first batch, and with ``full_batch`` a full one (more of the first-use
        work done ahead, and more GPU work that the motion stage's graph recording waits for).
        The first render waits for it, so two batches never hold VRAM at once; without room for
        two batches nothing is primed. CUDA only, once per engine.
        """
        if self.device.type != "cuda" or self._prime.started or not self._room_for_two_batches():
            return
        self._prime.start(lambda: self._prime_eager(full_batch), self.device)

    def _prime_eager(self, full_batch: bool) -> None:
        f_s = torch.zeros(1, *VOLUME_SHAPE, device=self.device, dtype=self.dtype)
        first = min(self.first_batch, self.batch_size)
        for size in sorted({first, self.batch_size} if full_batch else {first}):
            kp = torch.zeros(size, NUM_KP, 3, device=self.device)
            self._forward(*self._arguments(f_s, kp, kp, None, size))

    def _primed(self) -> float:
        """Wait for :meth:`prime`'s run, if one was started; the seconds waited."""
        return self._prime.wait()

    def _room_for_two_batches(self) -> bool:
        if self.device.type != "cuda":
            return True
        free, _ = torch.cuda.mem_get_info(self.device)
        return free > 2 * self.batch_size * _BYTES_PER_FRAME[self.dtype]

    def _warm_up(self, warm: _Warmup, shared_volume: bool, volume_shape: tuple[int, ...]) -> None:
        """Run the compiled function once on zeros of the graph's shapes (any thread)."""
        size = self.batch_size
        try:
            with torch.inference_mode():
                f_s = torch.zeros(1 if shared_volume else size, *volume_shape, device=self.device, dtype=self.dtype)
                kp = torch.zeros(size, NUM_KP, 3, device=self.device)
                self._run_compiled(self._arguments(f_s, kp, kp, None, size), compiling=True)
        except BaseException as error:  # handed to the rendering thread, which falls back to eager code
            warm.error = error
        finally:
            warm.ready.set()

    def _graph_ready(
        self, shared_volume: bool, volume_shape: tuple[int, ...] = VOLUME_SHAPE, frames: Optional[int] = None
    ) -> bool:
        """Whether batches of a ``frames``-long clip may use the graph now; starts its background
        compile for sources of ``volume_shape`` when needed (a clip shorter than
        ``compile_min_frames`` starts none)."""
        if self._aot and self.stats.compiled and self._package_ready(shared_volume, volume_shape):
            return True
        if frames is not None and frames < self.compile_min_frames and not self._compiled_before(shared_volume):
            return False
        if self.warmup == "foreground":
            return self.stats.compiled
        if self.warmup == "background":
            self.start_warmup(shared_volume, volume_shape)
        warm = self._warmups.get((shared_volume, self.batch_size))
        if warm is None or not warm.ready.is_set():
            return False
        if warm.error is not None:
            error, warm.error = warm.error, None
            self._disable_compile(f"compilation failed ({type(error).__name__}: {error})")
        return self.stats.compiled

    def _package_ready(self, shared_volume: bool, volume_shape: tuple[int, ...]) -> bool:
        """Whether the AOT package of this shape is loaded, loading (or building) it on first
        need; where there is none to use, the engine goes on as ``"foreground"``."""
        volume = (1 if shared_volume else self.batch_size, *volume_shape)
        key = (self.batch_size, volume)
        if key in self._packages:
            return self._packages[key] is not None
        start, builds = time.perf_counter(), self.aot_cache.builds
        try:
            package = load_step(self.aot_cache, self.warp_network, self.decoder, volume, self.batch_size,
                                self.stats.triton_kernels, build=self.warmup == "aot")
        except AotUnavailable as error:
            package, why = None, f"{error}; torch.compile is used instead"
        else:
            why = ""
        self._packages[key] = package
        if package is None:
            if not why:
                self.aot_missing.append(volume)
                log.info("Ditto warp+decode: no AOT package cached for volume %s at batch %d", volume, self.batch_size)
            self._fall_back_from_aot(why)
            return False
        seconds = time.perf_counter() - start
        if self.stats.aot_seconds is None:
            self.stats.aot_seconds, self.stats.aot_built = seconds, self.aot_cache.builds > builds
        log.info("Ditto warp+decode: AOT package for volume %s at batch %d ready in %.2f s", volume,
                 self.batch_size, seconds)
        return True

    def _run_package(self, f_s: Tensor, kp_source: Tensor, kp_driving: Tensor) -> Tensor:
        return self._packages[(kp_driving.shape[0], tuple(f_s.shape))](f_s, kp_source, kp_driving)

    def _fall_back_from_aot(self, why: str) -> None:
        """Go on as ``"foreground"`` (today's torch.compile path); ``why`` is announced once."""
        if why:
            announce_once(log, f"Ditto warp+decode: no AOT package ({why})")
        self.warmup = self.stats.warmup = "foreground"
        self._step = self._compiled("foreground")

    def compiled_ready(self, shared_volume: bool = True) -> bool:
        """Whether an image source's (``shared_volume``) or a video source's batches run compiled
        now, waiting for no compile."""
        if not self.stats.compiled:
            return False
        if self._aot:
            return any(package is not None for package in self._packages.values())
        if self.warmup in _THREAD_WARMUPS:
            warm = self._warmups.get((shared_volume, self.batch_size))
            return warm is not None and warm.ready.is_set() and warm.error is None
        return self._compiled_before(shared_volume)

    def will_compile(self, frames: int) -> bool:
        """Whether rendering a ``frames``-long clip now makes the caller wait for a compile."""
        return (self.stats.compiled and self.warmup == "foreground" and self.stats.compile_seconds is None
                and not frames < self.compile_min_frames)

    def _compiled_before(self, shared_volume: bool) -> bool:
        """Whether this engine has a graph of this shape or is building it (foreground: any graph)."""
        if self.warmup == "foreground":
            return self.stats.graph_batches > 0
        warm = self._warmups.get((shared_volume, self.batch_size))
        return warm is not None

    def _run_compiled(self, args: tuple[Tensor, Tensor, Tensor], compiling: bool = False) -> Optional[Tensor]:
        """One call of the compiled step; ``compiling``: it compiles a new shape (a warm-up), as the
        first call does. A compile synchronises the device (cuda_graphs.beside_captures).

        None: the call could not take a recording turn now (graph trees, another thread compiling);
        the caller renders the batch eagerly."""
        first = self.stats.compile_seconds is None
        start = time.perf_counter()
        # Every call is a new step for CUDA-graph trees: the previous outputs were copied out.
        torch.compiler.cudagraph_mark_step_begin()
        marked = beside_captures(compiling=True) if first or compiling else contextlib.nullcontext()
        if self._graph_trees:
            # A device synchronise or a recording started on another thread would break a graph
            # trees' warm-up or recording, so a call that may do either takes the recording turn
            # (the first for its whole compile); once calls replay they take none, so a warm
            # engine never waits for another engine's compile.
            shapes = tuple(tuple(arg.shape) for arg in args)
            may_record = self._tree_calls.may_record(shapes)
            with recording_turn(self.device) if may_record else contextlib.nullcontext(True) as allowed:
                if not allowed:
                    return None
                with marked:
                    out = self._step(*args)
            self._tree_calls.done(shapes, self.device)
        else:
            with marked:
                out = self._step(*args)
        if first:
            if out.is_cuda:
                device_synchronize(out.device)  # once per engine, to time the compile honestly
            self.stats.compile_seconds, self.stats.compiled_at = time.perf_counter() - start, time.time()
            log.info("Ditto warp+decode compiled in %.1f s (batch %d)", self.stats.compile_seconds, self.batch_size)
        return out

    @torch.inference_mode()
    def iter_render(
        self, source: SourceInfo, motion: MotionSequence, progress: Optional[ProgressCallback] = None
    ) -> Iterator[tuple[int, Tensor]]:
        """Yield ``(first_frame_index, renders (b, 3, 512, 512))`` batch by batch, in order.

        ``progress(done, total)`` is called after each batch has been consumed; raising from it
        stops rendering. Out of VRAM, the batch size is halved and the batch retried.
        """
        _check_motion(source, motion)
        self.stats.waited_for_priming_s = self._primed()
        total = len(motion)
        f_s = source.f_s.to(self.device, self.dtype)
        shared_volume = len(source) == 1
        start = 0
        with self._renders.span():  # ends when the clip does, or the caller drops it
            while start < total:
                # Decided per attempt: after an out-of-VRAM retry the batch may be no larger than the ramp.
                graph = self._graph_ready(shared_volume=shared_volume, volume_shape=tuple(f_s.shape[1:]), frames=total)
                pieces = 0 < self.first_batch < self.batch_size
                first = start == 0 and self.stats.compiled and pieces
                # A last stretch of at most half a batch is rendered eagerly, first-batch-sized piece
                # by piece: the graph would compute a whole batch for it, and the encoder gets the
                # clip's last frames piece by piece instead of all at once after the last batch.
                tail = graph and not first and self.stats.compiled and pieces and total - start <= self.batch_size // 2
                # An eager clip's last stretch, shorter than a batch, goes in such pieces too. Each
                # piece is padded to the first batch's size: an eager batch only ever has two sizes (the
                # first's, which the priming ran, and a full one), since a new size costs its first call
                # cuDNN's plans and our mask conv's tuning (docs/TIME_TO_VIDEO_LOG.md, session 29).
                short = not graph and pieces and total - start < self.batch_size
                piece = first or tail or short
                rows = slice(start, min(start + (self.first_batch if piece else self.batch_size), total))
                motion.wait_rows(rows.stop)  # motion may still be being generated (rows read only from here on)
                index = None if shared_volume else motion.source_index[rows].to(self.device)
                try:
                    images = self._render(
                        f_s, motion.kp_source[rows].to(self.device, torch.float32),
                        motion.kp_driving[rows].to(self.device, torch.float32), index, eager=first or tail or not graph,
                        eager_size=self.first_batch if piece else 0,
                    )
                except torch.cuda.OutOfMemoryError as error:
                    if self.batch_size == 1:
                        raise DittoError(
                            "Ditto warp+decode ran out of GPU memory rendering a single frame; free VRAM "
                            "(unload other models) or render in fp16/bf16"
                        ) from error
                    # The traceback pins the failed batch's tensors: free them outside this block.
                    images = None
                if images is None:
                    self._shrink_batch()
                    continue
                yield start, images
                start = rows.stop
                report(progress, start, total)
        if self.warmup == "deferred":  # the clip is out: compile while the caller waits for the next
            self.start_warmup(shared_volume, tuple(f_s.shape[1:]))

    def render(
        self, source: SourceInfo, motion: MotionSequence, progress: Optional[ProgressCallback] = None
    ) -> RenderedFrames:
        """All frames at once (for the node graph; the CLI streams through :meth:`iter_render`).

        The result is allocated before the first batch and filled in place: joining the batches
        at the end would need the whole clip twice, at the moment VRAM is fullest.
        """
        h, w = (_DECODER_UPSCALE * s for s in source.f_s.shape[-2:])
        try:
            images = torch.empty(len(motion), 3, h, w, device=self.device, dtype=self.dtype)
        except torch.cuda.OutOfMemoryError as error:
            size_mib = len(motion) * 3 * h * w * self.dtype.itemsize / 2**20
            raise DittoError(
                f"Ditto warp+decode ran out of GPU memory holding the {len(motion)} rendered frames "
                f"({size_mib:.0f} MiB); free VRAM (unload other models), render in fp16/bf16, or use the "
                "all-in-one Ditto Talking Head node (or the CLI), which streams batches straight into the MP4"
            ) from error
        for first, chunk in self.iter_render(source, motion, progress):
            images[first : first + chunk.shape[0]] = chunk
        return RenderedFrames(images=images, source_index=motion.source_index, fps=motion.fps)

    def _shrink_batch(self) -> None:
        with between_recordings():
            torch.cuda.empty_cache()
        self.batch_size = max(1, self.batch_size // 2)
        self.stats.batch_size = self.batch_size
        log.warning("Ditto warp+decode ran out of VRAM; retrying with batch size %d", self.batch_size)

    def _disable_compile(self, why: str) -> None:
        self.stats.compiled, self.stats.reason_eager, self._step = False, why, None
        if self.stats.triton_kernels:  # the failure may be Triton's own
            use_triton_kernels_(self.warp_network, False)
            use_triton_kernels_(self.decoder, False)
            self.stats.triton_kernels, self.stats.reason_pytorch = 0, why
        _announce_eager(why)


def _warm_up_in_background(
    engine_ref: "weakref.ref[WarpDecodeEngine]", quiet: Optional[QuietSpells], warm: _Warmup, shared_volume: bool,
    volume_shape: tuple[int, ...],
) -> None:
    """A background compile's thread; ``quiet`` (``"deferred"``): the engine's renders, a pause in
    which it waits for first."""
    if quiet is not None:
        quiet.wait_for_quiet()
    engine = engine_ref()
    if engine is None:  # dropped while it waited
        return
    with background_gpu_work():
        engine._warm_up(warm, shared_volume, volume_shape)


def _common_placement(warp_network: nn.Module, decoder: nn.Module) -> tuple[torch.device, torch.dtype]:
    """The one (device, dtype) of both networks' weights; an error if they disagree."""
    placements = {(p.device, p.dtype) for module in (warp_network, decoder) for p in module.parameters()}
    if len(placements) != 1:
        found = sorted(f"{device}/{dtype}" for device, dtype in placements) or ["no parameters"]
        raise InputError(
            f"WarpDecodeEngine: warp network and decoder must share one device and dtype, found {found}; "
            "load them together (load_ditto_models) or move both with .to(device, dtype)"
        )
    return placements.pop()


def _check_motion(source: SourceInfo, motion: MotionSequence) -> None:
    """Shape checks only: reading ``source_index`` values would stall the GPU."""
    total = len(motion)
    for name, tensor in (("kp_source", motion.kp_source), ("source_index", motion.source_index)):
        if tensor.shape[0] != total:
            raise InputError(
                f"MotionSequence: {name} has {tensor.shape[0]} frames but kp_driving has {total}; "
                "build both from the same motion run"
            )
    if source.f_s.dim() != 5:
        raise InputError(f"SourceInfo: f_s must be (N, 32, 16, H, W), got {tuple(source.f_s.shape)}")


def _pad(x: Tensor, size: int) -> Tensor:
    """A new tensor: ``x`` with its last row repeated up to ``size`` rows (real rows keep padding finite)."""
    return torch.cat([x, x[-1:].expand(size - x.shape[0], *x.shape[1:])])


def _pad_keypoints(kp: Tensor, size: int, device: torch.device) -> Tensor:
    # Float32 whatever the engine dtype: half precision would move keypoints by up to 1/8 voxel.
    return _pad(kp.to(device, torch.float32), size)


def _announce_eager(why: str) -> None:
    announce_once(log, f"Ditto warp+decode runs eagerly (no CUDA graphs): {why}")
