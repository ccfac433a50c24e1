"""Whether ``torch.compile`` can run here, what its failures look like, and saying so once.

Shared by the compiled stages (warp+decode, the LMDM sampler): each compiles only where Triton
and a CUDA device are present, falls back to eager code when compilation fails on a machine
(no C++ compiler, a broken Triton install), and announces the fallback once per process rather
than once per batch or per node run.
"""
from __future__ import annotations

import contextlib
import logging
import threading
from collections import defaultdict
from typing import Any, Callable, Hashable, Iterator

import torch

__all__ = ["announce_once", "compile_available", "compile_failures", "compile_function", "RECOMPILE_BUDGET",
           "uses_cuda_malloc_async", "reset_compiled_state",
           "GraphTreeCalls", "graph_tree_replayed", "graph_tree_thread",
           "release_graph_tree_thread_locals"]

log = logging.getLogger(__name__)

_announced: set[str] = set()
_resets = 0  # reset_compiled_state() calls: graph trees record anew after each

RECOMPILE_BUDGET = 64
"""Compiled entries a function compiled by this pack may gather (torch's default: 8).

Dynamo keeps a function's compiled entries on its code object, shared by every ``torch.compile``
of that function: every LMDM sampler's step (of any model or precision) and every warp+decode
engine's step (any batch size, volume form or dtype) add to one list each, and once 8 are there a
new shape runs eagerly for the rest of the process, with one log line from torch. A warmed live
runtime alone holds 8 engine entries (4 ladder sizes, 2 volume forms) and 5 sampler ones (batches
1-16); an offline render or another precision in the same process (ComfyUI) goes past the limit.
What the pack compiles is bounded by design (the sampler's batches are powers of two up to the
runtime's streams, the engines a fixed ladder plus the offline batch, per dtype and grad mode)."""


def compile_function(fn: Callable[..., Any], **options: Any) -> Callable[..., Any]:
    """``torch.compile(fn, **options)`` with room for :data:`RECOMPILE_BUDGET` compiled entries.

    A torch whose ``torch.compile`` takes no ``recompile_limit`` (2.13 takes one) has one limit for
    every compiled function of the process: it is raised to the budget (never lowered)."""
    try:
        return torch.compile(fn, recompile_limit=RECOMPILE_BUDGET, **options)
    except TypeError as error:
        if "recompile_limit" not in str(error):
            raise
    from torch._dynamo import config

    limit = config.recompile_limit
    if limit < RECOMPILE_BUDGET:
        log.info("Ditto: torch._dynamo.config.recompile_limit raised from %d to %d (this torch has no "
                 "per-function limit; the pack's compiled steps gather one entry per shape)", limit, RECOMPILE_BUDGET)
        config.recompile_limit = RECOMPILE_BUDGET
    return torch.compile(fn, **options)


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

    global _resets
    torch._dynamo.reset()
    _resets += 1


class GraphTreeCalls:
    """Which calls of one ``mode="reduce-overhead"`` function may record a CUDA graph.

    Torch's graph trees keep a manager per thread and device, which records a first graph as it
    is made; a function's first calls at each input shape run eagerly (its warm-up, which
    synchronises the device) and then record, and a recompile (a new shape, a guard that failed)
    or a replay whose checks fail starts over. How many calls that takes is torch's own affair
    (a count of two failed a GPU test whose calls recompiled), so none is assumed: a call may
    record until the last call at the same key on the same thread was seen to replay
    (:func:`graph_tree_replayed`), and again after :func:`reset_compiled_state`.
    """

    def __init__(self) -> None:
        self._local = threading.local()  # .resets: _resets when .replayed was started; .replayed: {key: bool}

    def may_record(self, key: Hashable) -> bool:
        return not self._replayed().get(key, False)

    def done(self, key: Hashable, device: torch.device) -> None:
        """Note how a call at ``key`` on ``device`` that just ran on this thread ended."""
        self._replayed()[key] = graph_tree_replayed(device)

    def _replayed(self) -> dict:
        local = self._local
        if getattr(local, "resets", None) != _resets:
            local.resets, local.replayed = _resets, {}
        return local.replayed


def graph_tree_replayed(device: torch.device) -> bool:
    """Whether this thread's CUDA-graph-tree manager on ``device`` ended its last call replaying
    recorded graphs only (no warm-up, no recording); False where torch does not say."""
    if device.type != "cuda":
        return False
    try:
        from torch._inductor import cudagraph_trees

        index = device.index if device.index is not None else torch.cuda.current_device()
        manager = cudagraph_trees.get_manager(index, create_if_none_exists=False)
        return manager is not None and manager.path_state == cudagraph_trees.ExecutionState.EXECUTION
    except Exception:  # noqa: BLE001 - torch's internals moved: every call then takes the turn, which is safe
        return False


_GRAPH_TREE_THREAD_LOCALS = ("tree_manager_containers", "tree_manager_locks")
"""What torch's CUDA-graph trees keep in a thread's C++ thread-local storage (Python objects)."""


@contextlib.contextmanager
def graph_tree_thread(device: torch.device) -> Iterator[None]:
    """Run the block as a thread of ours that calls compiled functions on ``device``.

    On entry the thread gets the graph-tree state torch gives its own threads: before torch 2.13
    a ``torch.compile(mode="reduce-overhead")`` callable asserts in a Python thread torch did not
    create (pytorch/pytorch#123177, fixed by #184357); these are the containers the fix creates
    lazily. On leaving, torch's thread-local objects for graph trees are dropped while the thread
    still holds the GIL. Left to the thread's C++ exit, their destructor takes the GIL after the
    Python thread has ended (a ``join`` returns before it runs); if the interpreter has begun to
    finalize by then, the thread is stopped inside that destructor and the process aborts
    ("terminate called without an active exception": a live server stopped with Ctrl-C under
    load). A torch without ``torch._C._remove_obj_from_tls`` (2.9 has none, 2.13 has it) cannot
    drop them; there the commands that own their process still end without the interpreter's
    teardown (:mod:`.process_exit`). Off CUDA nothing compiled records graphs: nothing is set up,
    and Inductor is not imported.
    """
    if device.type != "cuda":
        yield
        return
    try:
        from torch._inductor import cudagraph_trees
    except ImportError:  # a torch without Inductor: nothing is compiled
        yield
        return
    local = cudagraph_trees.local  # a threading.local: this thread's view
    if not hasattr(local, "tree_manager_containers"):
        local.tree_manager_containers = {}
        local.tree_manager_locks = defaultdict(threading.Lock)
        for key in _GRAPH_TREE_THREAD_LOCALS:
            torch._C._stash_obj_in_tls(key, getattr(local, key))
    try:
        yield
    finally:
        release_graph_tree_thread_locals()


def release_graph_tree_thread_locals() -> None:
    """Drop this thread's C++ thread-local objects of torch's graph trees now, under the GIL
    (see :func:`graph_tree_thread`); nothing where this torch cannot."""
    remove = getattr(torch._C, "_remove_obj_from_tls", None)
    if remove is None:
        return
    for key in _GRAPH_TREE_THREAD_LOCALS:
        if torch._C._is_key_in_tls(key):
            remove(key)


def announce_once(log: logging.Logger, message: str) -> None:
    """Log ``message`` as a warning the first time this process sees it."""
    if message not in _announced:
        _announced.add(message)
        log.warning(message)
