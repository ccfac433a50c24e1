"""Compiled Warp+Decode: source features + keypoints -> 512x512 renders, in batches.

The warping network and the SPADE decoder run as one function over a fixed-size batch, so a
single CUDA graph (``torch.compile(mode="reduce-overhead")``) covers both; the last, shorter
batch is padded to that size rather than triggering a recompile. Where compilation is not
available (CPU, no Triton, some Windows installs) the same function runs eagerly, announced
once.
"""
from __future__ import annotations

import contextlib
import logging
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional

import torch
from torch import Tensor, nn

from ..motion.motion_sequence import MotionSequence
from ..progress import ProgressCallback, report
from ..registration.source_info import SourceInfo
from .rendered_frames import RenderedFrames

log = logging.getLogger(__name__)

# Peak activation memory of one frame through warp + decode, measured on an H200 (see README,
# "Performance"); used to size batches from free VRAM.
_BYTES_PER_FRAME = {torch.float32: 620 << 20, torch.float16: 330 << 20, torch.bfloat16: 330 << 20}
MAX_BATCH = 32
_announced_eager = False


def default_compile_cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "comfyui-ditto" / "inductor"


def compile_available(device: torch.device) -> tuple[bool, str]:
    """Whether ``torch.compile`` can build CUDA graphs here, and why not if it cannot."""
    if device.type != "cuda":
        return False, "compilation needs a CUDA device"
    try:
        import triton  # noqa: F401
    except ImportError:
        return False, "Triton is not installed"
    return True, ""


def auto_batch_size(device: torch.device, dtype: torch.dtype, fraction: float = 0.5) -> int:
    """Frames per batch that fit in ``fraction`` of the free VRAM (1 on CPU: no gain from more)."""
    if device.type != "cuda":
        return 1
    free, _ = torch.cuda.mem_get_info(device)
    return int(max(1, min(MAX_BATCH, fraction * free // _BYTES_PER_FRAME[dtype])))


@dataclass
class EngineStats:
    compiled: bool
    batch_size: int
    reason_eager: str = ""


class WarpDecodeEngine(nn.Module):
    """Fused warp + decode over batches of frames.

    Args:
        warp_network: ``(f_s (B,32,16,64,64), kp_source (B,21,3), kp_driving (B,21,3)) -> (B,256,64,64)``.
        decoder: ``(B,256,64,64) -> (B,3,512,512)`` in [0, 1].
        batch_size: frames per call; 0 picks one from free VRAM.
        compile: ``True`` compiles with CUDA graphs where possible (eager fallback, announced once),
            ``False`` always runs eagerly.
        cache_dir: where Inductor keeps compiled kernels across processes, so a second launch
            skips most of the compile time.
    """

    def __init__(
        self,
        warp_network: nn.Module,
        decoder: nn.Module,
        batch_size: int = 0,
        compile: bool = True,
        cache_dir: Optional[Path] = None,
    ) -> None:
        super().__init__()
        self.warp_network = warp_network
        self.decoder = decoder
        self.device = next(decoder.parameters()).device
        self.dtype = next(decoder.parameters()).dtype
        self.batch_size = batch_size or auto_batch_size(self.device, self.dtype)
        ok, why = compile_available(self.device) if compile else (False, "compile is off")
        self.stats = EngineStats(compiled=ok, batch_size=self.batch_size, reason_eager=why)
        self._step: Callable[[Tensor, Tensor, Tensor], Tensor] = self._forward
        if ok:
            os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_dir or default_compile_cache_dir()))
            self._step = torch.compile(self._forward, mode="reduce-overhead", dynamic=False)
        elif compile:
            _announce_eager(why)

    def _forward(self, f_s: Tensor, kp_source: Tensor, kp_driving: Tensor) -> Tensor:
        # Autocast keeps the grid arithmetic (grid_sample, softmax) in fp32 when the weights are
        # half precision: keypoint coordinates need more than fp16/bf16 resolution on a 64^3 grid.
        with _autocast(self.device, self.dtype):
            f_s = f_s.expand(kp_driving.shape[0], *f_s.shape[1:])
            return self.decoder(self.warp_network(f_s, kp_source, kp_driving))

    @torch.inference_mode()
    def render_batch(self, f_s: Tensor, kp_source: Tensor, kp_driving: Tensor) -> Tensor:
        """Render up to ``batch_size`` frames; returns (B,3,512,512) in the engine dtype.

        ``f_s`` is (B,32,16,64,64), or (1,32,16,64,64) for one source frame shared by all B.
        """
        n = kp_driving.shape[0]
        if n > self.batch_size:
            raise ValueError(f"batch of {n} frames exceeds the engine batch size {self.batch_size}")
        if self.stats.compiled and n < self.batch_size:  # one static shape -> one CUDA graph
            f_s, kp_source, kp_driving = (_pad(x, self.batch_size) if x.shape[0] == n else x
                                          for x in (f_s, kp_source, kp_driving))
        out = self._step(f_s.to(self.dtype), kp_source.to(self.dtype), kp_driving.to(self.dtype))
        # CUDA-graph outputs are overwritten by the next replay: hand out a copy.
        return out[:n].clone() if self.stats.compiled else out

    def iter_render(
        self, source: SourceInfo, motion: MotionSequence, progress: Optional[ProgressCallback] = None
    ) -> Iterator[tuple[int, Tensor]]:
        """Yield ``(first_frame_index, renders (b,3,512,512))`` batch by batch, in order."""
        total = len(motion)
        one_source = len(source) == 1
        start = 0
        while start < total:
            stop = min(start + self.batch_size, total)
            idx = motion.source_index[start:stop]
            f_s = source.f_s if one_source else source.f_s[idx]
            try:
                images = self.render_batch(f_s, motion.kp_source[start:stop], motion.kp_driving[start:stop])
            except torch.cuda.OutOfMemoryError:
                if self.batch_size == 1:
                    raise
                self._shrink_batch()
                continue
            yield start, images
            start = stop
            report(progress, stop, total)

    def render(
        self, source: SourceInfo, motion: MotionSequence, progress: Optional[ProgressCallback] = None
    ) -> RenderedFrames:
        """All frames at once (for the node graph; the CLI streams through :meth:`iter_render`)."""
        chunks = [images for _, images in self.iter_render(source, motion, progress)]
        images = torch.cat(chunks) if chunks else torch.empty(0, 3, 512, 512, device=self.device, dtype=self.dtype)
        return RenderedFrames(images=images, source_index=motion.source_index, fps=motion.fps)

    def _shrink_batch(self) -> None:
        torch.cuda.empty_cache()
        self.batch_size = max(1, self.batch_size // 2)
        self.stats.batch_size = self.batch_size
        warnings.warn(f"Ditto warp+decode ran out of VRAM; retrying with batch size {self.batch_size}")


def _pad(x: Tensor, size: int) -> Tensor:
    return torch.cat([x, x[-1:].expand(size - x.shape[0], *x.shape[1:])])


def _autocast(device: torch.device, dtype: torch.dtype):
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def _announce_eager(why: str) -> None:
    global _announced_eager
    if not _announced_eager:
        _announced_eager = True
        log.warning("Ditto warp+decode runs eagerly (no CUDA graphs): %s", why)
