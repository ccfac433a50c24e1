"""What every Ditto node needs from ComfyUI at run time: progress, interruption, stage timing.

``ditto_core`` reports long work through one callback type (``ditto_core.progress``); here it
is mapped onto ComfyUI's progress bar and interrupt flag, so the Cancel button stops a node
between two chunks of work (ComfyUI's ``InterruptProcessingException`` propagates unchanged).
Each node also reports how long its stage took and at how many frames per second; the web
extension shows that under the node.
"""
from __future__ import annotations

import dataclasses
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterator, Optional

import comfy.model_management
import comfy.utils
import torch

from ditto_core.cuda_graphs import device_synchronize
from ditto_core.gc_pauses import CollectorPauses, freeze_live_objects
from ditto_core.progress import ProgressCallback

if TYPE_CHECKING:
    from ditto_core.render.warp_decode import EngineStats

STATS_KEY = "ditto_stats"
"""UI-output key of a node's timing record (read by ``web/ditto.js`` and found in ``/history``)."""


def check_interrupted() -> None:
    """Raise ComfyUI's interrupt exception if the user pressed Cancel."""
    comfy.model_management.throw_exception_if_processing_interrupted()


def comfy_progress(total: int = 1) -> ProgressCallback:
    """A ``ditto_core`` progress callback that drives this node's ComfyUI progress bar.

    Called from the executing thread between chunks of work, it checks the interrupt flag
    first, so a cancelled run stops before the next chunk and nothing after it is written.
    """
    bar = comfy.utils.ProgressBar(max(1, total))

    def callback(done: int, total: int) -> None:
        check_interrupted()
        bar.update_absolute(done, max(1, total))

    return callback


def staged_progress(stages: int) -> Callable[[int], ProgressCallback]:
    """One ComfyUI progress bar over ``stages`` consecutive pieces of work (the all-in-one
    node): ``staged_progress(n)(i)`` is the callback of stage ``i``, filling its 1/n of the bar."""
    scale = 1000
    bar = comfy.utils.ProgressBar(stages * scale)

    def stage(index: int) -> ProgressCallback:
        def callback(done: int, total: int) -> None:
            check_interrupted()
            bar.update_absolute(index * scale + (scale * done) // max(1, total), stages * scale)

        return callback

    return stage


@dataclass
class StageTime:
    """Wall time of one node's work; ``seconds`` is set when the timed block ends, ``collector``
    holds the interpreter's garbage collections meanwhile (any thread's)."""

    stage: str
    seconds: float = 0.0
    collector: CollectorPauses = dataclasses.field(default_factory=CollectorPauses)
    started_at: float = 0.0  # the epoch time the timed block began (benchmarks place it among ComfyUI's messages)
    reserved_gib: Optional[float] = None  # the CUDA allocator's reserved memory then (ComfyUI may have emptied it)

    def ui(self, frames: Optional[int] = None, engine: Optional["EngineStats"] = None,
           stages: Optional[dict[str, float]] = None) -> dict[str, list[dict]]:
        """The node's UI output: ``{"ditto_stats": [{stage, seconds, frames, fps, engine, stages}]}``
        (``engine``: what the warp+decode engine did so far; ``stages``: seconds of each pipeline
        stage this node ran, with the collector's pauses (:meth:`CollectorPauses.stages`); both
        for API clients and benchmarks)."""
        record: dict = {"stage": self.stage, "seconds": round(self.seconds, 4), "started_at": round(self.started_at, 4)}
        if self.reserved_gib is not None:
            record["reserved_gib_at_start"] = round(self.reserved_gib, 3)
        if frames is not None:
            record["frames"] = int(frames)
            record["fps"] = round(frames / self.seconds, 2) if self.seconds > 0 else None
        if engine is not None:
            record["engine"] = dataclasses.asdict(engine)
        if stages is not None:
            every = {**stages, **self.collector.stages()}
            record["stages"] = {name: round(seconds, 4) for name, seconds in every.items()}
        return {STATS_KEY: [record]}


@contextmanager
def timed_stage(stage: str, device: Optional[torch.device] = None) -> Iterator[StageTime]:
    """Time a node's work. On CUDA the device is synchronised once at the end, so the time
    covers the kernels the node queued rather than just their launch. A block that ends without
    an error freezes the live objects for a while (:func:`~ditto_core.gc_pauses.freeze_live_objects`)."""
    timer = StageTime(stage, started_at=time.time())
    if device is not None and device.type == "cuda":
        timer.reserved_gib = torch.cuda.memory_reserved(device) / 2**30
    with timer.collector:
        start = time.perf_counter()
        yield timer
        if device is not None and device.type == "cuda":
            device_synchronize(device)
        timer.seconds = time.perf_counter() - start
    # ComfyUI's full collection after the prompt then skips what is alive now. Not after a
    # failure: the collection frees what the error's traceback held (a failed batch's VRAM).
    freeze_live_objects()
