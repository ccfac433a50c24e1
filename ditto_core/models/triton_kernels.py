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

The operators are registered on first need, by :func:`register_triton_operators` before any
trace: ``triton_op`` looks for the kernels a function launches with Inductor's code, whose
import pulls in Dynamo (seconds of a new process), while an eager render launches the same
kernels directly and never needs the dispatcher.
"""
from __future__ import annotations

import contextlib
import importlib.util
import sys
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


class TritonOperator:
    """A kernel launch ``fn``, called directly until :meth:`register` makes it the functional
    operator ``ditto::<name>`` (where this torch has ``torch.library.triton_op``: 2.6 and
    later); from then on every call, eager or traced, goes through the operator."""

    def __init__(self, name: str, fn: Callable[..., Tensor]) -> None:
        self.name = name
        self.__doc__ = fn.__doc__
        self._fn = fn
        self._op: Callable[..., Tensor] | None = None

    def __call__(self, *args: Any) -> Tensor:
        if self._op is not None:
            return self._op(*args)
        with _direct_launches():
            return self._fn(*args)

    def register(self) -> None:
        triton_op = getattr(torch.library, "triton_op", None)
        if self._op is None and triton_op is not None:
            self._op = triton_op(f"ditto::{self.name}", self._fn, mutates_args=())


_OPERATORS: list[TritonOperator] = []


def _direct_launches() -> contextlib.AbstractContextManager:
    """Outside a trace, :func:`traceable` kernels launch as Triton's own, as inside a registered
    operator: the tracing wrapper's eager path dispatches every launch through a higher-order
    operator instead (slower, and seconds more for a new process)."""
    try:
        from torch._library.triton import set_wrap_triton_enabled
    except ImportError:  # a torch without the switch launches through the wrapper: slower, same numbers
        return contextlib.nullcontext()
    return set_wrap_triton_enabled(False)


def triton_operator(name: str) -> Callable[[Callable[..., Tensor]], TritonOperator]:
    """Decorator: ``fn`` as a :class:`TritonOperator` named ``name``, registered at once where
    Dynamo is already imported (registering then costs nothing), else by
    :func:`register_triton_operators`."""
    def wrap(fn: Callable[..., Tensor]) -> TritonOperator:
        operator = TritonOperator(name, fn)
        _OPERATORS.append(operator)
        if "torch._dynamo" in sys.modules:
            operator.register()
        return operator
    return wrap


def register_triton_operators() -> None:
    """Register every kernel launch of ours as its operator; call before tracing a network
    that may run them (``torch.compile``, ``torch.export``), so every traced graph holds the
    operators whichever process traced it. Without Triton there is nothing to register."""
    if importlib.util.find_spec("triton") is None:
        return
    from . import slice_conv_triton, volume_sampling_triton  # noqa: F401  (their operators join _OPERATORS)

    for operator in _OPERATORS:
        operator.register()


def traceable(kernel: Any) -> Any:
    """``kernel`` launchable inside a :func:`triton_operator` so tracing records the launch
    (``torch.library.wrap_triton``); in eager code the launch is the kernel's own."""
    wrap = getattr(torch.library, "wrap_triton", None)
    return kernel if wrap is None else wrap(kernel)
