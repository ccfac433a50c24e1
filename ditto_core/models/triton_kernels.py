"""Where the warp network's Triton kernels of ours run, and the switch that turns them on.

Three layers have one: the occlusion-mask conv (:class:`~.depth_tap_conv.DepthTapConv3d`,
kernel in :mod:`.slice_conv_triton`), the dense motion's hourglass input and the feature warp
(:class:`~.dense_motion.DenseMotionNetwork` and :class:`~.warp_network.WarpingNetwork`, kernels
in :mod:`.volume_sampling_triton`). Each such module has a ``use_triton`` flag, off by default;
with it on, it runs its kernel for CUDA half-precision inputs and PyTorch's ops otherwise. The
compiled warp+decode engine switches them on together where :func:`triton_kernels_supported`.

Each kernel is launched from a :func:`triton_operator` (``torch.library.triton_op``) through
:func:`traceable`: ``torch.export`` and ``make_fx`` see only the dispatcher, not a raw kernel
launch, so without the operator an AOTInductor package could not contain the kernels; Inductor
still sees inside the operator and launches the same kernel with the same arguments.
"""
from __future__ import annotations

import importlib.util
from typing import Any, Callable

import torch
from torch import Tensor, nn

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


def triton_operator(name: str) -> Callable[[Callable[..., Tensor]], Callable[..., Tensor]]:
    """Decorator: ``fn`` as the functional operator ``ditto::<name>`` where this torch has
    ``torch.library.triton_op`` (2.6 and later), ``fn`` itself otherwise (``torch.compile``
    traces raw launches; only export needs the operator)."""
    def register(fn: Callable[..., Tensor]) -> Callable[..., Tensor]:
        triton_op = getattr(torch.library, "triton_op", None)
        return fn if triton_op is None else triton_op(f"ditto::{name}", fn, mutates_args=())
    return register


def traceable(kernel: Any) -> Any:
    """``kernel`` launchable inside a :func:`triton_operator` so tracing records the launch
    (``torch.library.wrap_triton``); in eager code the launch is the kernel's own."""
    wrap = getattr(torch.library, "wrap_triton", None)
    return kernel if wrap is None else wrap(kernel)
