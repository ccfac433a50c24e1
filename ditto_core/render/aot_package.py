"""The warp+decode step as an AOTInductor package (see :mod:`ditto_core.aot_packages`).

One package per input shape: the batch size, the dtype, and the source volume -- one shared by
every frame, ``(1, 32, 16, 64, 64)``, or one per frame, ``(B, 32, 16, 64, 64)``. Its key holds
those, the machine and versions, whether our Triton kernels are in it, and a digest of the
networks' architecture and of the model code. The weights are not in it: the loaded package
runs on the engine's own parameters, so a package built from random weights serves the
official checkpoint too (same architecture, same key), unless Inductor baked a tensor whose
value differs (see :mod:`ditto_core.aot_packages`).

On CUDA each loaded package is replayed from a CUDA graph captured at its first call: AOTI
allocates through PyTorch's caching allocator on the current stream, so a capture records its
kernels like any PyTorch code; the package is loaded single-threaded (no events or locks
around a run, which a capture cannot contain). The graph's output is overwritten by the next
replay, so callers copy it, as for ``torch.compile``'s CUDA graphs.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

import torch
from torch import Tensor, nn

from ..aot_packages import PackageCache, PackageKey, architecture_digest, build_package, environment_key, \
    load_with_constants
from ..cuda_graphs import CapturedCall
from ..cuda_streams import owned_stream
from ..models.keypoints import NUM_KP
from ..models.triton_kernels import register_triton_operators

PACKAGE_NAME = "warp_decode"
_MODEL_CODE = Path(__file__).resolve().parents[1] / "models"


def warp_decode_step(warp_network: nn.Module, decoder: nn.Module, f_s: Tensor, kp_source: Tensor,
                     kp_driving: Tensor) -> Tensor:
    """(1 or B, 32, 16, H, W) volumes, (B, 21, 3) x2 float32 keypoints -> (B, 3, 8H, 8W)."""
    f_s = f_s.expand(kp_driving.shape[0], *f_s.shape[1:])
    return decoder(warp_network(f_s, kp_source, kp_driving))


class _Step(nn.Module):
    """What is exported: the two networks under the names the package's constants take."""

    def __init__(self, warp_network: nn.Module, decoder: nn.Module) -> None:
        super().__init__()
        self.warp_network, self.decoder = warp_network, decoder

    def forward(self, f_s: Tensor, kp_source: Tensor, kp_driving: Tensor) -> Tensor:
        return warp_decode_step(self.warp_network, self.decoder, f_s, kp_source, kp_driving)


def package_key(warp_network: nn.Module, decoder: nn.Module, volume: tuple[int, ...], batch_size: int,
                triton_kernels: int) -> PackageKey:
    """The key of the package for ``volume`` (the f_s shape the step sees: its first size, 1 or
    ``batch_size``, tells a shared volume from per-frame ones) at ``batch_size``."""
    (device, dtype), = {(p.device, p.dtype) for p in warp_network.parameters()}
    code = [Path(__file__), *_MODEL_CODE.glob("*.py")]
    parts = {**environment_key(device), "dtype": dtype, "batch_size": batch_size, "volume": volume,
             "triton_kernels": triton_kernels, "architecture": architecture_digest(_Step(warp_network, decoder), code)}
    return PackageKey.of(PACKAGE_NAME, parts)


class PackagedStep:
    """A loaded package of the step for one input shape; on CUDA replayed from a CUDA graph."""

    def __init__(self, run: Callable[..., Tensor], graphed: bool) -> None:
        self._run, self.graphed = run, graphed
        self._graph: Optional[CapturedCall] = None

    def __call__(self, f_s: Tensor, kp_source: Tensor, kp_driving: Tensor) -> Tensor:
        if not self.graphed:
            return self._run(f_s, kp_source, kp_driving)
        if self._graph is None:
            self._graph = CapturedCall(self._run, (f_s, kp_source, kp_driving), owned_stream(self, f_s.device))
            return self._graph.capture()
        return self._graph.replay((f_s, kp_source, kp_driving))


def example_inputs(volume: tuple[int, ...], batch_size: int, device: torch.device, dtype: torch.dtype
                   ) -> tuple[Tensor, Tensor, Tensor]:
    """Zeros of the step's input shapes (export needs shapes only)."""
    kp = torch.zeros(batch_size, NUM_KP, 3, device=device)
    return torch.zeros(volume, device=device, dtype=dtype), kp, kp.clone()


def load_step(cache: PackageCache, warp_network: nn.Module, decoder: nn.Module, volume: tuple[int, ...],
              batch_size: int, triton_kernels: int, build: bool) -> Optional[PackagedStep]:
    """The packaged step for ``volume`` at ``batch_size`` from ``cache``; built there first if
    missing and ``build``, else None. Raises :class:`~ditto_core.aot_packages.AotUnavailable`
    when a build fails."""
    key = package_key(warp_network, decoder, volume, batch_size, triton_kernels)
    if not build and not cache.entry(key).exists():
        # Nothing to load: the run renders as without packages, and registering our operators
        # would import Inductor and Dynamo (seconds of a new process) for nothing.
        return None
    register_triton_operators()  # the export traces them (and loading imports Inductor anyway)
    step = _Step(warp_network, decoder)
    (device, dtype), = {(p.device, p.dtype) for p in warp_network.parameters()}
    graphed = device.type == "cuda"

    def make(path: Path) -> dict:
        return build_package(step, example_inputs(volume, batch_size, device, dtype), path, single_threaded=graphed)

    def load(path: Path, manifest: dict) -> PackagedStep:
        return PackagedStep(load_with_constants(path, manifest, step, device, single_threaded=graphed), graphed)

    return cache.load(key, load, make if build else None)
