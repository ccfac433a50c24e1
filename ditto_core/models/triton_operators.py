"""Our Triton kernel launches as ``torch.library`` operators, registered only when a trace needs them.

Each kernel is launched from a :func:`triton_operator` (``torch.library.triton_op``) through
:func:`traceable`: ``torch.export`` and ``make_fx`` see only the dispatcher, not a raw kernel
launch, so without the operator an AOTInductor package could not contain the kernels; Inductor
still sees inside the operator and launches the same kernel with the same arguments.

The operators are registered on first need, before any trace
(:func:`~.triton_kernels.register_triton_operators`): ``triton_op`` looks for the kernels a
function launches with Inductor's code, whose import pulls in Dynamo (seconds of a new
process), while an eager render launches the same kernels directly and never needs the
dispatcher.
"""
from __future__ import annotations

import contextlib
import sys
from typing import Any, Callable

import torch
from torch import Tensor

from ..triton_launch import launch_device

__all__ = ["TritonOperator", "register_defined_operators", "traceable", "triton_operator"]


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
        if torch.compiler.is_compiling():  # a trace records the operator, or (not registered first) the launch
            return (self._op or self._fn)(*args)
        with launch_device(next(a for a in args if isinstance(a, Tensor))):
            if self._op is not None:
                return self._op(*args)
            with _direct_launches():
                return self._fn(*args)

    def register(self) -> None:
        triton_op = getattr(torch.library, "triton_op", None)
        if self._op is None and triton_op is not None:
            self._op = triton_op(f"ditto::{self.name}", self._fn, mutates_args=())


_OPERATORS: list[TritonOperator] = []


try:
    from torch._library.triton import is_wrap_triton_enabled, set_wrap_triton_enabled
except ImportError:  # a torch without the switch launches through the wrapper: slower, same numbers
    is_wrap_triton_enabled = set_wrap_triton_enabled = None


def _direct_launches() -> contextlib.AbstractContextManager:
    """Outside a trace, :func:`traceable` kernels launch as Triton's own, as inside a registered
    operator: the tracing wrapper's eager path dispatches every launch through a higher-order
    operator instead (slower, and seconds more for a new process)."""
    return contextlib.nullcontext() if set_wrap_triton_enabled is None else set_wrap_triton_enabled(False)


def triton_operator(name: str) -> Callable[[Callable[..., Tensor]], TritonOperator]:
    """Decorator: ``fn`` as a :class:`TritonOperator` named ``name``, registered at once where
    Dynamo is already imported (registering then costs nothing), else by
    :func:`register_defined_operators`."""
    def wrap(fn: Callable[..., Tensor]) -> TritonOperator:
        operator = TritonOperator(name, fn)
        _OPERATORS.append(operator)
        if "torch._dynamo" in sys.modules:
            operator.register()
        return operator
    return wrap


def traceable(kernel: Any) -> Any:
    """``kernel`` launchable inside a :func:`triton_operator` so tracing records the launch
    (``torch.library.wrap_triton``); in eager code the launch is the kernel's own.

    Where wrapping is switched off (:func:`_direct_launches`, a registered operator's eager
    call) ``wrap_triton`` would hand back the kernel itself, but only after importing the
    tracing wrapper's module, which pulls in part of Dynamo (0.4 s of a new process's first
    eager batch on the H200): the kernel is returned without asking it.
    """
    wrap = getattr(torch.library, "wrap_triton", None)
    if wrap is None or (is_wrap_triton_enabled is not None and not is_wrap_triton_enabled()):
        return kernel
    return wrap(kernel)


def register_defined_operators() -> None:
    """Register every :class:`TritonOperator` defined so far (those of imported modules)."""
    for operator in _OPERATORS:
        operator.register()
