"""DDIM sampling of the LMDM, from one 80-frame window to a whole motion sequence.

:class:`DDIMSampler` runs the fixed-schedule DDIM loop (eta = 1, classifier-free guidance
weight 2) over one window. On CUDA it records the whole window (condition encoding plus every
step) into a CUDA graph on first use and replays it afterwards: the per-window work is a few
thousand small kernels at batch 1, so launch overhead, not arithmetic, is what graphs remove.
A sampler may record the prologue and one step instead (:mod:`.lmdm_step_graph`), a
fraction of the recording, as every pipeline's do.

:func:`generate_motion` stitches windows into a sequence the way Ditto's offline pipeline
does: windows start every ``80 - overlap`` frames, each new window is linearly cross-faded
into the previous one over ``overlap`` frames, the frame before the overlap becomes the next
window's reference frame, and pose channels are smoothed with a short moving average.

All randomness comes from one ``torch.Generator``; the per-step noise is drawn once per
sequence and shared by every window, as the reference does.

Precision: ``fp32`` (TF32 off) is the reference's arithmetic. ``tf32`` and ``bf16`` are faster
modes for the matrix products only: LayerNorm, softmax statistics, the residual stream and the
DDIM update stay float32 in every mode. Each mode's error against fp32 is measured by
``bench/bench_lmdm.py`` and stated in docs/PERFORMANCE.md.
"""
from __future__ import annotations

import copy
import logging
import math
import threading
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from typing import Any, Callable, Iterator, Optional, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..compilation import (
    announce_once, compile_available, compile_failures, compile_function, uses_cuda_malloc_async,
)
from ..cuda_graphs import CapturedCall, beside_captures, recording_turn
from ..cuda_streams import owned_stream
from ..errors import InputError
from ..models.keypoints import MOTION_DIM
from ..models.lmdm import (
    DIFFUSION_STEPS, LMDM, WINDOW, LMDMCondition, LMDMTimeCondition, RotaryAttention, cosine_alphas_cumprod,
)
from ..precision import LMDM_PRECISIONS
from ..progress import ProgressCallback, report
from .lmdm_step_graph import StepGraphs

log = logging.getLogger(__name__)

__all__ = [
    "GRAPH_SPANS",
    "DDIMSampler",
    "WindowSampler",
    "cosine_alphas_cumprod",
    "ddim_time_pairs",
    "append_window",
    "check_schedule",
    "generate_motion",
    "iter_motion",
    "next_kp_cond",
    "sample_window",
]

POSE_DIMS = 202
"""Leading motion channels that are smoothed: scale, the three pose-bin logit sets and t."""

GRAPH_SPANS = ("window", "step")
"""What a sampler's CUDA graph holds: the whole window (the fastest replay; a live runtime's, which
samples a window every 5 frames of every stream) or its prologue and one step replayed per step (a
fraction of the recording, which a clip's first window waits for; a pipeline's, :mod:`.lmdm_step_graph`)."""



def ddim_time_pairs(steps: int, num_train_steps: int = DIFFUSION_STEPS) -> list[tuple[int, int]]:
    """``[(t, t_next), ...]`` from ``(999, ...)`` down to ``(..., -1)`` for ``steps`` DDIM steps.

    The float32 ``linspace`` truncated toward zero is kept as is: it decides which timesteps
    the released model is queried at (e.g. 39, not 40).
    """
    if not 1 <= steps <= num_train_steps:
        raise InputError(f"sampling steps must be between 1 and {num_train_steps}, got {steps}.")
    times = torch.linspace(-1, num_train_steps - 1, steps=steps + 1).int().tolist()[::-1]
    return list(zip(times[:-1], times[1:]))


def _randn(shape: tuple[int, ...], generator: Optional[torch.Generator], device: torch.device) -> Tensor:
    """Standard normal float32 drawn on the generator's device, then moved to ``device``."""
    source = generator.device if generator is not None else device
    return torch.randn(shape, generator=generator, device=source, dtype=torch.float32).to(device)


def _check_shape(name: str, tensor: Tensor, expected: tuple[int, ...], hint: str) -> None:
    if tuple(tensor.shape) != expected:
        raise InputError(f"{name} has shape {tuple(tensor.shape)}; expected {expected} ({hint}).")


class WindowSampler(Protocol):
    """What :func:`generate_motion` needs from a window sampler."""

    steps: int

    def sample(self, kp_cond: Tensor, aud_cond: Tensor, x_T: Tensor, noise: Tensor) -> Tensor: ...


class DDIMSampler:
    """DDIM (eta = 1) with guidance weight 2 over one 80-frame LMDM window.

    Args:
        lmdm: the network (its device decides where sampling runs).
        steps: number of DDIM steps (25 is Ditto's fast setting, 50 its default).
        cuda_graph: on CUDA, record the window once per input shape and replay it after.
        graph_span: one of :data:`GRAPH_SPANS`: what that recording holds.
        precision: one of :data:`~ditto_core.precision.LMDM_PRECISIONS`; ``fp32`` reproduces the reference.
        compile: run each guided step through ``torch.compile`` (fewer, fused kernels; the
            first window pays the compilation). Combined with ``cuda_graph`` the compiled step
            is recorded into the window's graph like the eager one, except under the
            ``cudaMallocAsync`` allocator (ComfyUI's default), where compiled kernels cannot be
            recorded and the eager step is. Only on CUDA with Triton; elsewhere, or where
            compilation fails, the eager step runs, announced once.

    Call :meth:`sample` with injected ``x_T`` and ``noise`` (see :meth:`noise_shape`), or use
    :func:`sample_window` to draw them from a generator. Build the sampler after moving the
    network to its device; recorded graphs keep reading its weights in place, so loading new
    weights with ``load_state_dict`` is fine but moving the network is not. ``bf16`` samples
    with a copy of the matrix weights made here: build a new sampler after loading weights.
    """

    def __init__(
        self, lmdm: LMDM, steps: int = 25, cuda_graph: bool = True, precision: str = "fp32", compile: bool = False,
        graph_span: str = "window",
    ) -> None:
        if precision not in LMDM_PRECISIONS:
            raise InputError(f"LMDM precision must be one of {', '.join(LMDM_PRECISIONS)}, got {precision!r}.")
        if graph_span not in GRAPH_SPANS:
            raise InputError(f"LMDM graph span must be one of {', '.join(GRAPH_SPANS)}, got {graph_span!r}.")
        pairs = ddim_time_pairs(steps, lmdm.alphas_cumprod.shape[0])
        self.lmdm = lmdm
        self.steps = steps
        self.cuda_graph = cuda_graph
        self.graph_span = graph_span
        self.precision = precision
        self._net = _bf16_matmul_copy(lmdm) if precision == "bf16" else lmdm
        device = lmdm.alphas_cumprod.device
        self.compile = False
        self._guided_step = self._net.guided_step
        if compile:
            ok, why = compile_available(device)
            if ok and cuda_graph and uses_cuda_malloc_async(device):
                # Compiled kernels cannot be recorded into a graph there; at a window's few hundred
                # small launches the graph is worth more than the compile.
                ok, why = False, "the cudaMallocAsync allocator (ComfyUI's default) cannot record compiled steps"
            if ok:
                self.compile = True
                self._guided_step = compile_function(self._net.guided_step, dynamic=False)
            else:
                _announce_uncompiled(why)
        alpha = lmdm.alphas_cumprod.detach().float().cpu()  # once, at setup: host floats below
        t, t_next = (torch.tensor(col) for col in zip(*pairs))
        a, a_next = alpha[t[:-1]], alpha[t_next[:-1]]
        sigma = ((1 - a / a_next) * (1 - a_next) / (1 - a)).sqrt()
        # Python floats: constants baked into the step loop (and into a captured graph).
        self.alpha_next_sqrt: tuple[float, ...] = tuple(a_next.sqrt().tolist())
        # 1 - ᾱ' - σ² is >= 0 in exact arithmetic but cancels to ~0 where ᾱ is tiny (the first
        # step); at 3 steps float32 rounds it below zero and the square root would be NaN.
        self.c: tuple[float, ...] = tuple((1 - a_next - sigma**2).clamp_min(0).sqrt().tolist())
        self.sigma: tuple[float, ...] = tuple(sigma.tolist())
        # The same per step on the device, for a recorded step that reads its step there (the last
        # step's update, which a window does not use, gets zeros).
        self._update_rows = torch.tensor([col + (0.0,) for col in (self.alpha_next_sqrt, self.c, self.sigma)],
                                         dtype=torch.float32, device=device)
        self.timesteps = t.to(device)  # (steps,) int64: the model's t at each step
        self._graphs: dict[tuple, CapturedCall | StepGraphs] = {}
        self._capture_stream: Optional[torch.cuda.Stream] = None
        self._ran_eagerly = threading.local()
        self._compiled_batches: set[int] = set()  # window batch sizes the compiled step has run at

    def _eager_keys(self) -> set[tuple]:
        """The graph keys this thread sampled eagerly because their recording was put off."""
        if not hasattr(self._ran_eagerly, "keys"):
            self._ran_eagerly.keys = set()
        return self._ran_eagerly.keys

    def noise_shape(self, batch: int) -> tuple[int, int, int, int]:
        """Shape of the per-step noise :meth:`sample` expects: (steps - 1, batch, 80, 265)."""
        return (self.steps - 1, batch, WINDOW, MOTION_DIM)

    @torch.no_grad()
    def sample(self, kp_cond: Tensor, aud_cond: Tensor, x_T: Tensor, noise: Tensor) -> Tensor:
        """Denoise one window.

        Args:
            kp_cond: (B, 265) reference motion frame.
            aud_cond: (B, 80, C) per-frame conditions.
            x_T: (B, 80, 265) float32 starting noise.
            noise: :meth:`noise_shape` float32 noise added after every step but the last.

        Returns:
            (B, 80, 265) float32 clean window on the network's device.
        """
        b = kp_cond.shape[0]
        _check_shape("x_T", x_T, (b, WINDOW, MOTION_DIM), "one noise window per row of kp_cond")
        _check_shape("noise", noise, self.noise_shape(b), "one noise window per step but the last")
        dtype = self.lmdm.null_cond_embed.dtype
        inputs = (kp_cond.to(dtype), aud_cond.to(dtype), x_T.float(), noise.float())
        if not (self.cuda_graph and x_T.is_cuda):
            return self._run(*inputs)
        key = (tuple(aud_cond.shape), x_T.device)
        captured = self._graphs.get(key)
        if captured is None:
            ran_eagerly = self._eager_keys()
            with recording_turn(x_T.device) as allowed:
                if not allowed:  # recorded at a later window (see beside_captures)
                    result = self._run(*inputs)
                    ran_eagerly.add(key)
                    return result
                if self._capture_stream is None:  # this sampler's graphs: one cuBLAS workspace of their own
                    self._capture_stream = owned_stream(self, x_T.device)
                if self.graph_span == "step":
                    captured = StepGraphs(self._prologue_tensors, self._recorded_step, self.steps, inputs,
                                          self._capture_stream)
                else:
                    captured = CapturedCall(self._run, inputs, self._capture_stream)
                # A window this thread already ran eagerly did the set-up the recording's warm-up
                # is for; the warm-up would be one more eager window (a new process's first clip).
                result = captured.capture(warm_up=key not in ran_eagerly)
            self._graphs[key] = captured
            return result
        return captured.replay(inputs).clone()  # the next replay overwrites the graph's output

    def next_x(self, i: int | Tensor, x_start: Tensor, pred_noise: Tensor, noise: Tensor) -> Tensor:
        """The DDIM update after step ``i`` (not the last): ``x_start·√ᾱ' + c·ε + σ·noise``.

        ``i``: a Python int (the constants baked in), or a one-element int64 tensor on the device
        (a recorded step's; the same float32 products and sums)."""
        if isinstance(i, int):
            alpha_next_sqrt, c, sigma = self.alpha_next_sqrt[i], self.c[i], self.sigma[i]
        else:
            alpha_next_sqrt, c, sigma = self._update_rows.index_select(1, i)
        return x_start * alpha_next_sqrt + c * pred_noise + sigma * noise

    def prologue(self, kp_cond: Tensor, aud_cond: Tensor) -> tuple[LMDMCondition, LMDMTimeCondition]:
        """What every step of a window reads: the guidance condition (2B rows) and every step's
        time condition, computed in one batch of steps x 2B rows and stacked by step."""
        condition = self._net.encode_guidance(kp_cond, aud_cond)
        every_t = self.timesteps.repeat_interleave(2 * kp_cond.shape[0])  # conditional + null rows per step
        tiled = replace(condition, hidden=condition.hidden.repeat(self.steps, 1))
        return condition, self._net.time_condition(every_t, tiled).stacked_steps(self.steps)

    def _run(self, kp_cond: Tensor, aud_cond: Tensor, x: Tensor, noise: Tensor) -> Tensor:
        """The eager loop; nothing in it reads device values back to the host."""
        return self._guarded(x.shape[0], lambda: self._loop(kp_cond, aud_cond, x, noise))

    def _guarded(self, batch: int, work: Callable[[], Any]) -> Any:
        """``work()`` in the sampler's matmul precision.

        The first run at each batch size of a compiled sampler compiles, which synchronises the
        device: it is marked (cuda_graphs.beside_captures), so recordings on other threads wait
        or are put off. A compile that fails leaves the sampler eager, announced once."""
        compiling = self.compile and batch not in self._compiled_batches
        marked = beside_captures(compiling=True) if compiling else nullcontext()
        with _matmul_precision(self.precision, self.timesteps.device), marked:
            try:
                result = work()
                if compiling:
                    self._compiled_batches.add(batch)
                return result
            except compile_failures() as error:
                if not self.compile:
                    raise
                # Compilation happens on the first (warm-up) run, before any graph is recorded.
                self.compile, self._guided_step = False, self._net.guided_step
                _announce_uncompiled(f"compilation failed ({type(error).__name__}: {error})")
                return work()

    def _loop(self, kp_cond: Tensor, aud_cond: Tensor, x: Tensor, noise: Tensor) -> Tensor:
        b = x.shape[0]
        condition, times = self.prologue(kp_cond, aud_cond)

        def step(i: int, x: Tensor) -> tuple[Tensor, Tensor]:
            return self._guided_step(x, self.timesteps[i].expand(b), condition, times.step(i))

        for i in range(self.steps - 1):
            pred_noise, x_start = step(i, x)
            x = self.next_x(i, x_start, pred_noise, noise[i])
        return step(self.steps - 1, x)[1]

    # -- a window as a recorded prologue and a recorded step (graph_span="step") ---------------

    def _prologue_tensors(self, kp_cond: Tensor, aud_cond: Tensor) -> tuple[Tensor, ...]:
        """:meth:`prologue` in the sampler's precision, as the flat tuple a recording returns."""
        with _matmul_precision(self.precision, kp_cond.device):
            condition, times = self.prologue(kp_cond, aud_cond)
        return (condition.frame_term, condition.hidden, condition.keys, condition.values, *condition.tables,
                times.modulations, times.keys, times.values)

    def _recorded_step(self, x: Tensor, noise: Tensor, index: Tensor, shared: tuple[Tensor, ...]) -> Tensor:
        """Step ``index`` ((1,) int64 on the device) of the window whose :meth:`_prologue_tensors`
        are ``shared``, as the loop computes it: x becomes the next step's x and the index
        advances, in place; returns the step's x0. ``noise``: (steps, B, 80, 265), a row a step."""
        condition = LMDMCondition(*shared[:4], tables=(shared[4], shared[5]))
        times = LMDMTimeCondition(*shared[6:])
        b = x.shape[0]

        def work() -> Tensor:
            t = self.timesteps.index_select(0, index).expand(b)
            pred_noise, x_start = self._guided_step(x, t, condition, times.step(index))
            x.copy_(self.next_x(index, x_start, pred_noise, noise.index_select(0, index).squeeze(0)))
            index.add_(1)
            return x_start

        return self._guarded(b, work)


def _announce_uncompiled(why: str) -> None:
    announce_once(log, f"Ditto LMDM sampler runs without torch.compile: {why}")


@contextmanager
def _matmul_precision(precision: str, device: torch.device) -> Iterator[None]:
    """Matrix products in ``precision`` while the block runs (and in anything it records).

    The TF32 switch is process-wide, so it is set for the block only and restored after; a
    CUDA graph recorded inside keeps the kernels chosen at recording time.
    """
    if precision == "bf16":
        with torch.autocast(device.type, dtype=torch.bfloat16):
            yield
        return
    matmul = torch.backends.cuda.matmul
    # torch >= 2.9 has a per-backend precision setting; reading the legacy flag after someone
    # used it raises, so only the legacy flag is touched where the new one does not exist.
    name = "fp32_precision" if hasattr(matmul, "fp32_precision") else "allow_tf32"
    saved = getattr(matmul, name)
    tf32 = precision == "tf32"
    setattr(matmul, name, ("tf32" if tf32 else "ieee") if name == "fp32_precision" else tf32)
    try:
        yield
    finally:
        setattr(matmul, name, saved)


def _bf16_matmul_copy(lmdm: LMDM) -> LMDM:
    """A copy of ``lmdm`` whose matrix weights (every ``F.linear`` operand) are bfloat16.

    Under bf16 autocast these are used as they are instead of being cast again at every step;
    everything else (LayerNorm, embeddings, buffers) stays float32, and autocast keeps the
    operations that need it in float32.
    """
    shadow = copy.deepcopy(lmdm)
    with torch.no_grad():
        for module in shadow.modules():
            for param in module.parameters(recurse=False):
                if isinstance(module, (nn.Linear, RotaryAttention)):
                    param.data = param.data.to(torch.bfloat16)
    return shadow


def sample_window(
    lmdm: LMDM,
    kp_cond: Tensor,
    aud_cond: Tensor,
    steps: int = 25,
    generator: Optional[torch.Generator] = None,
    x_T: Optional[Tensor] = None,
    noise: Optional[Tensor] = None,
) -> Tensor:
    """One eager DDIM window, (B, 80, 265); ``x_T`` / ``noise`` are drawn when not given.

    Draw order (noise first, then x_T) follows the reference, so one seed gives one result.
    """
    sampler = DDIMSampler(lmdm, steps, cuda_graph=False)
    b, device = kp_cond.shape[0], kp_cond.device
    if noise is None:
        noise = _randn(sampler.noise_shape(b), generator, device)
    if x_T is None:
        x_T = _randn((b, WINDOW, MOTION_DIM), generator, device)
    return sampler.sample(kp_cond, aud_cond, x_T, noise)


def _smooth_poses(
    dst: Tensor, src: Tensor, start: int, stop: int, length: int, kernel: int, copy_rest: bool = False
) -> None:
    """Rows ``[start, stop)`` of ``dst`` (frames, 265) get the centred moving average of the pose
    channels of ``src`` over ``2 * (kernel // 2) + 1`` frames among frames ``[0, length)``.

    Windows are cut at the sequence ends and averaged over the frames they keep; every average
    reads ``src`` as it was before the call, so ``dst`` may be ``src`` (in place). ``copy_rest``:
    the other channels of those rows are copied from ``src`` too. ``kernel <= 1`` disables smoothing.
    """
    if stop <= start:
        return
    if copy_rest:
        dst[start:stop] = src[start:stop]
    half = kernel // 2
    if kernel <= 1:
        return
    lo, hi = max(0, start - half), min(length, stop + half)
    segment = src[lo:hi, :POSE_DIMS].T.unsqueeze(0)  # (1, channels, frames) for 1-D pooling
    mean = F.avg_pool1d(segment, 2 * half + 1, stride=1, padding=half, count_include_pad=False)
    dst[start:stop, :POSE_DIMS] = mean[0, :, start - lo : stop - lo].T


def _smooth_poses_(seq: Tensor, start: int, stop: int, length: int, kernel: int) -> None:
    """In place: :func:`_smooth_poses` of ``seq`` onto itself."""
    _smooth_poses(seq, seq, start, stop, length, kernel)


def append_window(seq: Tensor, end: int, pred: Tensor, hop: int, fuse: int, smoothing: int) -> int:
    """Join one sampled window onto the motion so far, in place, as Ditto's ``Audio2Motion`` does.

    Args:
        seq: (frames, 265) float32 buffer; rows ``[0, end)`` hold the motion so far and
            ``end + hop`` rows (``WINDOW`` for the first window) must fit.
        end: rows of ``seq`` filled; 0 for the first window, which is copied whole.
        pred: (80, 265) the new window.
        hop: new frames a window adds (``80 - overlap``).
        fuse: frames cross-faded across the seam: the last ``fuse`` rows of the motion so far
            blend linearly (weights ``i / fuse``) into ``pred[80 - hop - fuse : 80 - hop]``.
            The offline schedule fuses the whole overlap; Ditto's online mode only
            ``min(overlap, hop)`` frames, right before the new ones.
        smoothing: pose moving-average width, applied to the seam ``[new_end - hop - fuse,
            new_end - hop + 1)`` (the whole window for the first one).

    Returns:
        The new ``end``: ``end + hop``, or ``WINDOW`` for the first window.
    """
    if end == 0:
        seq[:WINDOW] = pred
        _smooth_poses_(seq, 0, WINDOW, WINDOW, smoothing)
        return WINDOW
    keep = WINDOW - hop  # the window's frames that overlap the motion so far
    if fuse:
        fade_in = (torch.arange(fuse, device=seq.device, dtype=torch.float32) / fuse)[:, None]
        seq[end - fuse : end] = seq[end - fuse : end] * (1 - fade_in) + pred[keep - fuse : keep] * fade_in
    new_end = end + hop
    seq[end:new_end] = pred[keep:]
    _smooth_poses_(seq, new_end - hop - fuse, new_end - hop + 1, new_end, smoothing)
    return new_end


def next_kp_cond(
    seq: Tensor, end: int, overlap: int, windows_done: int, kp_source: Tensor,
    fix_kp_cond: int = 0, fix_kp_cond_dims: Optional[tuple[int, int]] = None,
) -> Tensor:
    """Keypoint condition of the next window: (1, 265), a new tensor.

    The frame just before the next window starts (``seq[end - overlap - 1]``), or every
    ``fix_kp_cond`` windows the source motion ``kp_source`` (1, 265) again, keeping channels
    ``fix_kp_cond_dims`` of that frame.
    """
    kept = seq[end - overlap - 1][None].clone()
    if not (fix_kp_cond and windows_done % fix_kp_cond == 0):
        return kept
    kp_cond = kp_source.clone()
    if fix_kp_cond_dims is not None:
        lo, hi = fix_kp_cond_dims
        kp_cond[:, lo:hi] = kept[:, lo:hi]
    return kp_cond


def check_schedule(overlap: int, fix_kp_cond: int) -> None:
    """Refuse window schedules the sliding window cannot run."""
    if not 0 <= overlap < WINDOW:
        raise InputError(f"overlap must be between 0 and {WINDOW - 1} frames, got {overlap}.")
    if fix_kp_cond < 0:
        raise InputError(f"fix_kp_cond must be 0 (off) or a positive window count, got {fix_kp_cond}.")


@torch.no_grad()
def generate_motion(sampler: WindowSampler, kp_source: Tensor, cond: Tensor, **schedule: Any) -> Tensor:
    """Motion vectors for every frame of a condition sequence: (T, 265) float32 on ``cond``'s device.

    Runs :func:`iter_motion` to the end; arguments as there.
    """
    for _, motion in iter_motion(sampler, kp_source, cond, **schedule):
        pass
    return motion


@torch.no_grad()
def iter_motion(
    sampler: WindowSampler,
    kp_source: Tensor,
    cond: Tensor,
    *,
    overlap: int = 10,
    smoothing: int = 3,
    fix_kp_cond: int = 0,
    fix_kp_cond_dims: Optional[tuple[int, int]] = None,
    generator: Optional[torch.Generator] = None,
    progress: Optional[ProgressCallback] = None,
) -> Iterator[tuple[int, Tensor]]:
    """Motion vectors for every frame of a condition sequence, window by window.

    Yields ``(ready, motion)`` after each window: ``motion`` is the (T, 265) float32 result
    buffer on ``cond``'s device (the same tensor every time) whose rows ``[0, ready)`` already
    hold their final values, since the next window only cross-fades and smooths frames after
    them. A renderer can start on those rows while later windows are sampled; the last item
    has ``ready == T``.

    Args:
        sampler: a :class:`DDIMSampler` (reuse it across calls to keep its CUDA graphs).
        kp_source: (265,) packed motion of the source portrait, the first reference frame.
        cond: (T, C) per-frame conditions, T >= 1.
        overlap: frames each window shares with the previous one (cross-fade length), 0..79.
        smoothing: moving-average width for the pose channels (<= 1: off).
        fix_kp_cond: if > 0, every ``fix_kp_cond``-th window's successor is conditioned on the
            source motion again instead of the previous window (limits drift).
        fix_kp_cond_dims: ``(start, stop)`` channels that keep following the previous window
            on those resets.
        generator: source of all randomness (noise is drawn on its device).
        progress: ``progress(windows_done, windows_total)``; may raise to cancel.
    """
    if cond.ndim != 2 or cond.shape[0] < 1:
        raise InputError(f"cond has shape {tuple(cond.shape)}; expected (frames, channels) with at least one frame.")
    _check_shape("kp_source", kp_source, (MOTION_DIM,), "the packed motion vector of the source")
    check_schedule(overlap, fix_kp_cond)

    device, frames = cond.device, cond.shape[0]
    hop = WINDOW - overlap
    windows = math.ceil(frames / hop)
    length = (windows - 1) * hop + WINDOW
    # The last window is padded by repeating the last condition frame.
    cond = torch.cat((cond, cond[-1:].expand(length - frames, -1)))
    noise = _randn((sampler.steps - 1, 1, WINDOW, MOTION_DIM), generator, device)
    x_T = _randn((windows, 1, WINDOW, MOTION_DIM), generator, device)

    joined = torch.empty(length, MOTION_DIM, device=device, dtype=torch.float32)  # windows joined, unsmoothed
    motion = torch.empty(frames, MOTION_DIM, device=device, dtype=torch.float32)
    kp_source = kp_source.to(device=device, dtype=torch.float32)[None]
    kp_cond, end, ready = kp_source, 0, 0
    for w in range(windows):
        s = w * hop
        pred = sampler.sample(kp_cond, cond[None, s : s + WINDOW], x_T[w], noise)[0]
        end = append_window(joined, end, pred, hop, overlap, smoothing)
        kp_cond = next_kp_cond(joined, end, overlap, w + 1, kp_source, fix_kp_cond, fix_kp_cond_dims)
        # The next window rewrites joined rows from end - overlap on; the final smoothing of a
        # row reads kernel // 2 rows on either side of it.
        settled = frames if w == windows - 1 else min(frames, max(0, end - overlap - smoothing // 2))
        if settled > ready:
            _smooth_poses(motion, joined, ready, settled, frames, smoothing, copy_rest=True)
            ready = settled
            yield ready, motion
        report(progress, w + 1, windows)
