"""Whether ``torch.compile`` can run here, what its failures look like, and saying so once.

Shared by the compiled stages (warp+decode, the LMDM sampler): each compiles only where Triton
and a CUDA device are present, falls back to eager code when compilation fails on a machine
(no C++ compiler, a broken Triton install), and announces the fallback once per process rather
than once per batch or per node run.
"""
from __future__ import annotations

import logging

import torch

__all__ = ["announce_once", "compile_available", "compile_failures", "uses_cuda_malloc_async", "reset_compiled_state"]

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


def uses_cuda_malloc_async(device: torch.device) -> bool:
    """Whether ``device`` allocates through PyTorch's ``cudaMallocAsync`` backend, which ComfyUI
    selects by default (``PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync``, unless started with
    ``--disable-cuda-malloc``). Compiled code cannot use CUDA graphs there: ``torch.compile``'s
    graph trees (``mode="reduce-overhead"``) check their pool through an allocator call that
    backend lacks (the first graph raises, and every later call fails; a real ComfyUI on an H100),
    and Inductor's kernels recorded into a ``torch.cuda.graph`` of ours failed to launch (an
    H200). Eager code records and replays there as usual.
    """
    return device.type == "cuda" and torch.cuda.memory.get_allocator_backend() == "cudaMallocAsync"


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
