"""Motion generated ahead of the render: warp+decode starts on the first window's frames while
the LMDM samples the later windows.

Offline, a clip's motion is a chain of 80-frame windows, each conditioned on the one before;
the renderer needs only the frames of its next batch. :func:`start_motion_ahead` runs the
window chain (:func:`~ditto_core.motion.lmdm_sampler.iter_motion`) and stitches each window's
settled frames on a worker thread (on CUDA, on a high-priority stream of its own: its kernels
are small and must not queue behind the render's) and returns at once a :class:`MotionAhead`,
a :class:`MotionSequence` of the clip's length whose rows fill in window by window. The rows
equal those of the whole-clip path: the windows are the same, the final smoothing reads the
same frames, and the stitch lays blinks out over the whole clip (``stitch_motion``'s
``length``).

The engine calls :meth:`MotionAhead.wait_rows` before each batch: it blocks until the batch's
rows are final and makes the caller's CUDA stream wait for the worker's writes, so nothing
syncs the host. A failure in the worker is raised there, in the rendering thread;
:meth:`MotionAhead.close` stops the worker (a cancelled or failed render) and waits for it.
"""
from __future__ import annotations

import contextlib
import functools
import threading
import time
from typing import Callable, Iterator, Optional

import torch
from torch import Tensor, nn

from ..cuda_streams import owned_stream
from ..gil_turns import short_gil_turns
from ..models.keypoints import NUM_KP
from ..registration.source_info import SourceInfo
from .motion_options import MotionOptions
from .motion_sequence import MotionSequence
from .motion_stitch import stitch_motion

MotionRows = Callable[[], Iterator[tuple[int, Tensor]]]
"""Starts a window chain: yields ``(ready, vectors)``, rows ``[0, ready)`` of the (T, 265)
buffer ``vectors`` final (:func:`~ditto_core.motion.lmdm_sampler.iter_motion`)."""


class MotionAhead(MotionSequence):
    """A clip's motion whose rows are still being generated; see the module docstring.

    ``seconds``: the worker's wall time once it has finished; ``waited_seconds``: how long
    :meth:`wait_rows` callers were blocked in all (the part of the motion the render did not hide).
    """

    def __init__(self, frames: int, device: torch.device, fps: float = 25.0) -> None:
        super().__init__(
            kp_source=torch.empty(frames, NUM_KP, 3, device=device),
            kp_driving=torch.empty(frames, NUM_KP, 3, device=device),
            source_index=torch.zeros(frames, dtype=torch.long, device=device),
            fps=fps,
        )
        self.seconds: Optional[float] = None
        self.waited_seconds = 0.0
        self._changed = threading.Condition()
        self._ready = 0
        self._published: list[tuple[int, Optional[torch.cuda.Event]]] = []  # (rows ready, their writes done)
        self._error: Optional[BaseException] = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    @property
    def ready(self) -> int:
        """Rows final so far."""
        return self._ready

    def wait_rows(self, stop: int) -> None:
        began = time.perf_counter()
        with self._changed:
            while self._ready < stop and self._error is None:
                self._changed.wait()
            if self._error is not None:
                raise self._error
            event = next(event for rows, event in self._published if rows >= stop)
        self.waited_seconds += time.perf_counter() - began
        if event is not None:
            torch.cuda.current_stream(self.kp_driving.device).wait_event(event)

    def close(self) -> None:
        """Stop the worker after its current window and wait for it (nothing to do once it finished)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> "MotionAhead":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # -- the worker ---------------------------------------------------------------------------

    def _start(self, rows: MotionRows, source: SourceInfo, stitch_net: Optional[nn.Module],
               options: MotionOptions) -> None:
        device = self.kp_driving.device
        stream = _worker_stream(device) if device.type == "cuda" else None
        if stream is not None:
            stream.wait_stream(torch.cuda.current_stream(device))  # the conditions and the avatar are made there
        self._thread = threading.Thread(target=self._work, args=(rows, source, stitch_net, options, stream),
                                        name="ditto-motion-ahead", daemon=True)
        self._thread.start()

    def _work(self, rows: MotionRows, source: SourceInfo, stitch_net: Optional[nn.Module], options: MotionOptions,
              stream: Optional[torch.cuda.Stream]) -> None:
        began = time.perf_counter()
        on_stream = torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()
        try:
            # Short GIL turns: the rendering thread's ops must not wait out this thread's Python.
            with on_stream, torch.inference_mode(), short_gil_turns():
                done = 0
                for ready, vectors in rows():
                    if self._stop.is_set():
                        return
                    frames = torch.arange(done, ready, device=vectors.device)
                    part = stitch_motion(vectors[done:ready], source, stitch_net, options, frames=frames,
                                         reference=vectors[0], length=len(self))
                    self.kp_source[done:ready] = part.kp_source
                    self.kp_driving[done:ready] = part.kp_driving
                    self.source_index[done:ready] = part.source_index
                    self._publish(ready, stream)
                    done = ready
        except BaseException as error:  # handed to the rendering thread, which raises it
            with self._changed:
                self._error = error
                self._changed.notify_all()
        finally:
            self.seconds = time.perf_counter() - began

    def _publish(self, ready: int, stream: Optional[torch.cuda.Stream]) -> None:
        event = None
        if stream is not None:
            event = torch.cuda.Event()
            event.record(stream)
        with self._changed:
            self._published.append((ready, event))
            self._ready = ready
            self._changed.notify_all()


@functools.cache
def _worker_stream(device: torch.device) -> torch.cuda.Stream:
    """The device's one high-priority stream for motion workers. One for the process, not one per
    clip: cuBLAS keeps a workspace (32 MiB on Hopper) for every stream a handle ever ran on, so
    a new stream per clip held another workspace per clip, up to PyTorch's pool of 32 streams."""
    return owned_stream(None, device, priority=-1)


def start_motion_ahead(
    rows: MotionRows, frames: int, source: SourceInfo, stitch_net: Optional[nn.Module], options: MotionOptions,
    fps: float = 25.0,
) -> MotionAhead:
    """Start generating a ``frames``-long clip's motion on a worker; returns its :class:`MotionAhead` at once.

    ``rows`` starts the window chain (called on the worker, on its stream); ``source``,
    ``stitch_net`` and ``options`` are those of
    :func:`~ditto_core.motion.motion_stitch.stitch_motion`, whose fades need the whole clip
    (``options.fade_type`` must be empty). Close the result (or use it as a context manager)
    when the render ends, however it ends.
    """
    motion = MotionAhead(frames, source.device, fps)
    motion._start(rows, source, stitch_net, options)
    return motion
