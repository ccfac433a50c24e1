"""Whether ``torch.compile`` can run here, what its failures look like, and saying so once.

Shared by the compiled stages (warp+decode, the LMDM sampler): each compiles only where Triton
and a CUDA device are present, falls back to eager code when compilation fails on a machine
(no C++ compiler, a broken Triton install), and announces the fallback once per process rather
than once per batch or per node run.
"""
from __future__ import annotations

import logging

import torch

__all__ = ["announce_once", "compile_available", "compile_failures", "graph_trees_usable", "reset_compiled_state"]

_announced: set[str] = set()


def compile_available(device: torch.device) -> tuple[bool, str]:
    """Whether ``torch.compile`` can build CUDA graphs here, and why not if it cannot."""
    if device.type != "cuda":
        return False, "compilation needs a CUDA device"
    try:
        import triton  # noqa: F401
    except ImportError:
        return False, "Triton is not installed"
    return True, ""


def graph_trees_usable(device: torch.device) -> bool:
    """Whether ``torch.compile``'s CUDA-graph trees (``mode="reduce-overhead"``) work on ``device``.

    They check their memory pool through an allocator call that PyTorch's ``cudaMallocAsync``
    backend does not have, and ComfyUI selects that backend by default
    (``PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync``, unless ``--disable-cuda-malloc``): the
    first graph's warm-up raises, and the process's tree manager fails every later call. Plain
    ``torch.cuda.graph`` recordings work with either backend.
    """
    return device.type != "cuda" or torch.cuda.memory.get_allocator_backend() != "cudaMallocAsync"


def compile_failures() -> tuple[type[BaseException], ...]:
    """Errors that mean "this machine cannot compile" (no C++ compiler, Triton failure, ...):
    Inductor's, and Triton's own, which a Triton kernel of ours raises directly when it is
    launched outside a compiled graph or first tuned inside one (a kernel that does not build,
    or does not fit the GPU's shared memory).

    Called only while an exception is being handled, so eager-only use never imports Dynamo.
    """
    from torch._dynamo.exc import BackendCompilerFailed

    return (BackendCompilerFailed, *_triton_failures())


def _triton_failures() -> tuple[type[BaseException], ...]:
    try:
        from triton.errors import TritonError  # the base of all of them in recent Triton releases
    except ImportError:
        pass
    else:
        return (TritonError,)
    try:
        from triton.compiler.errors import CompilationError
        from triton.runtime.errors import OutOfResources
    except ImportError:
        return ()
    return (CompilationError, OutOfResources)


def reset_compiled_state() -> None:
    """Forget every compiled graph and CUDA-graph tree of this process.

    For after an out-of-VRAM error inside a ``mode="reduce-overhead"`` call: torch keeps one
    CUDA-graph tree manager per device, shared by every such function in the process, and an
    allocation failing while it warms up or records a graph leaves that manager half-updated;
    the next compiled call anywhere in the process then fails an internal assertion (seen on an
    H200 with torch 2.11, in the next test's engine). Every compiled function recompiles on its
    next call, from the on-disk cache where its shapes were compiled before.
    """
    import torch._dynamo

    torch._dynamo.reset()


def announce_once(log: logging.Logger, message: str) -> None:
    """Log ``message`` as a warning the first time this process sees it."""
    if message not in _announced:
        _announced.add(message)
        log.warning(message)
