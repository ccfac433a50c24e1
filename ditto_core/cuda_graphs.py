"""A function recorded once as a CUDA graph at fixed input shapes, then replayed with new inputs.

Replaying a graph launches a whole recorded function (a window of LMDM sampling, a HuBERT
forward, a packaged warp+decode step) for the cost of one launch, where eagerly each of its
hundreds of kernels costs a Python-side launch. The recorded function reads its inputs from
static buffers and writes its outputs into memory the graph owns: :meth:`CapturedCall.replay`
copies new inputs in and returns those outputs, which the next replay overwrites.
"""
from __future__ import annotations

import contextlib
import gc
import threading
import warnings
from typing import Any, Callable, Iterator, Optional

import torch
from torch import Tensor

from .compilation import uses_cuda_malloc_async
from .cuda_streams import side_stream

_recordings = 0  # recording_turn() blocks that were given the turn
# Blocks running now, on any thread: "side", beside_captures(); "compiling", beside_captures(compiling=True);
# "device_wide", between_recordings().
_running = {"side": 0, "compiling": 0, "device_wide": 0}
_turns = threading.Condition()
# Recordings' outputs (and graphs) released while a recording ran: freed when none runs (CapturedCall.release).
_released_mid_recording: list[tuple[list[Tensor], Any]] = []
# Per thread: .side / .compiling, its beside_captures() blocks; .recording, its recording turns; .device_wide, its
# between_recordings() blocks; .wait, whether its recordings wait for their turn (recordings_wait())
# rather than being put off.
_this_thread = threading.local()


def _mine(name: str) -> int:
    return getattr(_this_thread, name, 0)


@contextlib.contextmanager
def beside_captures(compiling: bool = False) -> Iterator[None]:
    """Mark the block as GPU work beside recordings (a priming run, a compile's warm-up, a render
    beside the worker that generates its motion).

    PyTorch's native allocator tells a recording's allocations from other streams' and leaves
    other threads alone. Its ``cudaMallocAsync`` backend (ComfyUI's default) keeps one flag for
    the whole process instead: whatever another thread allocates while a graph is being recorded
    is counted as the recording's, and freeing it later prints a warning per tensor ("Attempting
    uncaptured free of a captured allocation"; a real ComfyUI's first prompt printed dozens, the
    LMDM window recorded beside the warp+decode priming). So the two take turns: a recording is
    put off (or waits) while such a block runs elsewhere (:func:`recording_turn`), and a block
    starting during another thread's recording waits for its end (one recording: milliseconds).

    ``compiling``: the block compiles (a compiled engine's first run). Inductor times candidate
    configurations of its kernels between device synchronises, code of PyTorch's that cannot take
    :func:`between_recordings`' turn, so under either allocator recordings on other threads are
    put off (or wait) while it runs.
    """
    with _outside_recordings("compiling" if compiling else "side"):
        yield


@contextlib.contextmanager
def between_recordings() -> Iterator[None]:
    """Mark the block as touching the whole device (a device synchronize, emptying the allocator's
    cache): it starts once other threads' recordings have ended, and none starts until it ends.

    Under either allocator a recording fails if anything synchronises the whole device meanwhile
    ("operation not permitted when stream is capturing"), and the process then aborts: session 43
    saw it when an LMDM window recorded on a priming thread met the stage timer's synchronize on
    the main thread. Recordings on other threads are real (a live runtime warming up while a
    workflow renders offline, an AOT package's graph), and every device-wide call of ours goes
    through this block (:func:`device_synchronize`). Calls made outside this package (another
    node's ``empty_cache``) cannot take the turn.
    """
    with _outside_recordings("device_wide"):
        yield


@contextlib.contextmanager
def _outside_recordings(kind: str) -> Iterator[None]:
    """A block of ``kind`` (a key of ``_running``), counted for the process and for this thread,
    started once other threads' recordings have ended."""
    with _turns:
        _turns.wait_for(lambda: _recordings == _mine("recording"))
        _running[kind] += 1
    setattr(_this_thread, kind, _mine(kind) + 1)
    try:
        yield
    finally:
        setattr(_this_thread, kind, _mine(kind) - 1)
        with _turns:
            _running[kind] -= 1
            _turns.notify_all()


def device_synchronize(device: torch.device) -> None:
    """``torch.cuda.synchronize(device)`` between recordings (:func:`between_recordings`)."""
    with between_recordings():
        torch.cuda.synchronize(device)


@contextlib.contextmanager
def recordings_wait() -> Iterator[None]:
    """In the block, this thread's :func:`recording_turn` waits for other threads' background work
    to end instead of putting the recording off: for a warm-up whose job is to record (a live
    runtime's, before streams are served)."""
    before, _this_thread.wait = getattr(_this_thread, "wait", False), True
    try:
        yield
    finally:
        _this_thread.wait = before


@contextlib.contextmanager
def recording_turn(device: torch.device, wait: Optional[bool] = None) -> Iterator[bool]:
    """Yields whether a graph may be recorded on ``device`` now; until the block ends no
    :func:`beside_captures` block, :func:`between_recordings` block or other recording starts on
    another thread, and the block first waits for those of the latter two running elsewhere
    (``torch.cuda.graph`` itself synchronises the device and empties the cache as it starts a
    recording, which would break one running on another thread). Yes under the native
    allocator, but while a compiling :func:`beside_captures` block runs on another thread. Under
    ``cudaMallocAsync``: while any :func:`beside_captures` block runs on another thread, no (the
    caller runs eagerly and asks again later), or with ``wait`` (default: within
    :func:`recordings_wait`) yes once it has ended."""
    global _recordings
    native = not uses_cuda_malloc_async(device)
    wait = getattr(_this_thread, "wait", False) if wait is None else wait

    def side_work_done() -> bool:
        return _running["compiling"] == _mine("compiling") and (native or _running["side"] == _mine("side"))

    with _turns:
        _turns.wait_for(lambda: _running["device_wide"] == _mine("device_wide") and _recordings == _mine("recording")
                        and (side_work_done() or not wait))
        allowed = side_work_done()
        _recordings += allowed
    _this_thread.recording = _mine("recording") + allowed
    try:
        yield allowed
    finally:
        if allowed:
            _this_thread.recording -= 1
            with _turns:
                _recordings -= 1
                _turns.notify_all()
                parked = [] if _recordings else _released_mid_recording[:]
                if parked:
                    _released_mid_recording.clear()
            for outputs, _graph in parked:  # the graphs go with the list
                _free(outputs)


@contextlib.contextmanager
def _collector_held() -> Iterator[None]:
    """No automatic garbage collection while the block records.

    A collection frees whatever unreachable cycles hold, and recent PyTorch no longer collects as
    a recording starts: an owner of graphs dropped in a cycle (a sampler of an earlier setting)
    was freed in the middle of another recording, and under ``cudaMallocAsync`` freeing its
    recording's memory there aborted the process (session 50, a GPU test). Collections wait until
    the recording ends, milliseconds; :class:`CapturedCall` also drops its function once recorded,
    so that its owners are freed when dropped, not by a later collection, and a recording released
    while another is made is freed after it (:meth:`CapturedCall.release`).
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _tensors(value: Any) -> list[Tensor]:
    if isinstance(value, Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in _tensors(item)]
    return []


def _free(tensors: list[Tensor]) -> None:
    """Empty ``tensors`` in place (``set_()``), their memory back to the allocator, its warnings silenced."""
    with warnings.catch_warnings(), torch.inference_mode():
        warnings.simplefilter("ignore")
        for tensor in tensors:
            tensor.set_()


def _cloned(value: Any) -> Any:
    """``value`` with every tensor in it (nested in tuples and lists) copied."""
    if isinstance(value, Tensor):
        return value.clone()
    if isinstance(value, (tuple, list)):
        return type(value)(_cloned(item) for item in value)
    return value


class CapturedCall:
    """``run`` recorded over static copies of ``inputs`` (CUDA tensors of the shapes every replay uses).

    Call :meth:`capture` once, then :meth:`replay`. ``stream`` is the owner's capture stream:
    the recordings run on it (and nothing else should). cuBLAS gives every (thread, stream) pair a
    workspace, and a graph keeps using the one it was recorded with, so graphs recorded on one
    stream share a workspace: right for the graphs of one owner (replayed one after another),
    wrong for two owners whose graphs run at once on two streams (a live stream's HuBERT and
    LMDM windows), which would overwrite each other's. One capture stream per owner keeps them
    apart. The capture is thread-local: another thread using the device meanwhile (an engine's
    background compile, a live runtime's other worker) stays out of the recording.
    """

    def __init__(self, run: Callable[..., Any], inputs: tuple[Tensor, ...], stream: torch.cuda.Stream) -> None:
        self.inputs = tuple(t.clone() for t in inputs)
        self.graph = torch.cuda.CUDAGraph()
        self.outputs: Optional[Any] = None
        self._run: Optional[Callable[..., Any]] = run  # until recorded (see capture)
        self._stream = stream

    def capture(self, warm_up: bool = True) -> Any:
        """Warm up, record, and return the warm-up's result (a correct eager answer); under
        ``cudaMallocAsync`` the recording is also replayed once (see the comment there).

        The warm-up runs outside the recording, so that what libraries set up lazily on first
        use (cuBLAS handles, attention kernels) exists before it and is not recorded. It runs
        on a side stream, never on the capture stream: cuBLAS would make the capture stream's
        workspace there, in the ordinary memory pool, and the graph would keep writing to it
        after a later recording clears the workspaces and the pool hands that memory out again
        (an illegal address on the H200). Made inside the first recording instead, the
        workspace lives in the graph's own pool for as long as the graph.

        ``warm_up=False``: this thread has already run ``run`` eagerly at these shapes, on a
        stream other than the capture stream (a window run while the recording was put off, see
        :func:`recording_turn`), so that set-up exists; the warm-up would be one more eager call.
        The answer is then a copy of the recording's first replay.
        """
        device = self.inputs[0].device
        result = self.warm_up() if warm_up else None
        with recording_turn(device, wait=True), _collector_held(), torch.cuda.graph(
                self.graph, stream=self._stream, capture_error_mode="thread_local"):
            self.outputs = self._run(*self.inputs)
        # Replays need only the graph; kept, the function (a bound method of the owner that keeps
        # this object) would leave owner and recording to the garbage collector (_collector_held).
        self._run = None
        if not warm_up or uses_cuda_malloc_async(device):
            # Under cudaMallocAsync the memory the recording allocated (its outputs) is a CUDA
            # graph allocation, which exists only once the graph has run: freed before that (an
            # owner dropped after one recorded call, as a pipeline unloaded after a one-window
            # clip) cudaFreeAsync fails and PyTorch aborts the process. One replay makes it real.
            self.graph.replay()
        return result if warm_up else _cloned(self.outputs)

    def warm_up(self) -> Any:
        """One eager call on a side stream (see :meth:`capture`, before which it is called), its
        result usable on the caller's stream."""
        device = self.inputs[0].device
        caller, side = torch.cuda.current_stream(device), side_stream(device)
        side.wait_stream(caller)
        with torch.cuda.stream(side):
            result = self._run(*self.inputs)
        caller.wait_stream(side)
        for tensor in _tensors(result):
            tensor.record_stream(caller)  # made on the side stream, used on the caller's
        return result

    def release(self) -> None:
        """Free the recording's outputs now (the graph goes with this object), or, while a graph
        is being recorded on any thread, once no recording runs: under ``cudaMallocAsync``
        freeing a recording's memory inside another recording aborts the process (an owner
        dropped on one thread while a live runtime's warm-up records on another, or freed by a
        collection; see :func:`_collector_held`). The graph is kept until then too.

        Under ``cudaMallocAsync`` freeing memory a recording allocated warns once per tensor
        ("Attempting uncaptured free of a captured allocation"): printed straight to stderr when
        the free comes from Python dropping its last reference, a Python warning (silenced here)
        when it happens inside a tensor method, as ``set_()`` does.
        """
        outputs, self.outputs = _tensors(self.outputs), None
        with _turns:
            if _recordings:
                _released_mid_recording.append((outputs, getattr(self, "graph", None)))
                return
        _free(outputs)

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:  # at interpreter exit torch may already be torn down: nothing left to free
            pass

    def replay(self, inputs: Optional[tuple[Tensor, ...]] = None) -> Any:
        """Copy ``inputs`` (same shapes as at capture; None: the static buffers as they are) and replay.

        The copies run in inference mode: buffers made in it (a recording on a worker thread that
        runs in it, as the motion ahead of a render does) refuse in-place writes outside it, and
        the same sampler may then be called outside it (the serial motion of a later clip).
        """
        if inputs is not None:
            with torch.inference_mode():
                for static, value in zip(self.inputs, inputs):
                    static.copy_(value)
        self.graph.replay()
        return self.outputs
