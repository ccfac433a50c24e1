"""Where the warp network's Triton kernels of ours run, and the switch that turns them on.

These layers have one: the occlusion-mask conv (:class:`~.depth_tap_conv.DepthTapConv3d`,
kernel in :mod:`.slice_conv_triton`), the dense motion's hourglass input and the feature warp
(:class:`~.dense_motion.DenseMotionNetwork` and :class:`~.warp_network.WarpingNetwork`, kernels
in :mod:`.volume_sampling_triton`), the hourglass encoder's down blocks
(:class:`~.blocks.DownBlock`, eager batches only, :mod:`.down_pool_triton`) and the decoder's
residual blocks (eager batches only, :mod:`.spade_norm_triton`). Each such module has a
``use_triton`` flag, off by default; with it on, it runs its kernel for CUDA half-precision
inputs and PyTorch's ops otherwise. The warp+decode engine switches them on together where
:func:`triton_kernels_supported`.

The kernels a trace may hold (the first three layers') are launched from an operator
(:mod:`.triton_operators`); :func:`register_triton_operators` registers them all before a trace.
The eager-only ones are plain launches: a trace keeps PyTorch's ops there.
"""
from __future__ import annotations

import importlib.util

import torch
from torch import Tensor, nn

from .triton_operators import register_defined_operators

HALF_DTYPES = (torch.float16, torch.bfloat16)


def triton_kernels_supported(device: torch.device, dtype: torch.dtype) -> tuple[bool, str]:
    """Whether the kernels can run for tensors on ``device`` in ``dtype``, and why not if not."""
    if device.type != "cuda":
        return False, "the Triton kernels need a CUDA device"
    if dtype not in HALF_DTYPES:
        return False, "the Triton kernels run in half precision (float32 keeps PyTorch's full-precision ops)"
    if importlib.util.find_spec("triton") is None:
        return False, "Triton is not installed"
    if torch.cuda.get_device_capability(device) < (8, 0):
        return False, "the Triton kernels' bfloat16 and tile shapes need an Ampere or newer GPU"
    return True, ""


def use_triton_kernels_(module: nn.Module, enabled: bool) -> int:
    """Set ``use_triton`` on every layer inside ``module`` that has a Triton kernel; returns how
    many there are. Turn it on only where :func:`triton_kernels_supported`."""
    layers = [m for m in module.modules() if hasattr(m, "use_triton")]
    for layer in layers:
        layer.use_triton = enabled
    return len(layers)


def runs_triton(enabled: bool, x: Tensor) -> bool:
    """Whether a layer whose ``use_triton`` is ``enabled`` runs its kernel on input ``x``."""
    return enabled and x.is_cuda and x.dtype in HALF_DTYPES


def runs_eager_triton(enabled: bool, x: Tensor) -> bool:
    """:func:`runs_triton` for an eager-only kernel (a plain launch, no operator): outside a trace
    only, which keeps PyTorch's ops there."""
    return runs_triton(enabled, x) and not torch.compiler.is_compiling()


def register_triton_operators() -> None:
    """Register every kernel launch of ours as its operator; call before tracing a network
    that may run them (``torch.compile``, ``torch.export``), so every traced graph holds the
    operators whichever process traced it. Without Triton there is nothing to register."""
    if importlib.util.find_spec("triton") is None:
        return
    from . import slice_conv_triton, volume_sampling_triton  # noqa: F401  (defining their operators)

    register_defined_operators()
