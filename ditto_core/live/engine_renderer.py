"""Warp+decode of a live round's frames: batches that mix streams, through a ladder of engines."""
from __future__ import annotations

import statistics
import time
from typing import Mapping, Optional

import torch
from torch import Tensor

from ..cuda_graphs import device_synchronize
from ..registration.source_info import SourceInfo
from ..render.putback import paste_back
from ..render.warp_decode import WarpDecodeEngine
from ..video.colour import rgb_to_yuv420p
from .output_frames import scaled, to_host
from .stream_state import H264_OUTPUTS, RenderJob

BATCH_LADDER = (5, 10, 20, 40)
"""Compiled warp+decode batch sizes; a round's frames are split among them (:func:`cheapest_batches`)."""

_TIMED_REPLAYS = 3  # per ladder size at the warm-up; the median is the size's cost


def cheapest_batches(frames: int, costs: Mapping[int, float]) -> list[int]:
    """The engine sizes, largest first, whose batches render ``frames`` frames in the least time.

    ``costs`` holds each size's time for one batch. A compiled batch costs its whole size
    whatever it holds (a CUDA graph has one static shape), so 25 frames on the 40-frame graph
    pay for 40, where a 20-frame batch and a 5-frame one pay for 25 at a slightly higher cost a
    frame. The last batch may hold fewer frames than its size where that is still cheaper.
    """
    if frames < 1 or not costs:
        raise ValueError(f"cheapest_batches: need frames >= 1 and at least one size, got {frames}, {dict(costs)}")
    sizes = sorted(costs, reverse=True)
    best, choice = [0.0] * (frames + 1), [0] * (frames + 1)
    for left in range(1, frames + 1):
        # Ties go to the larger size (listed first): fewer batches for the same time.
        best[left], choice[left] = min((costs[s] + best[max(0, left - s)], -s) for s in sizes)
        choice[left] = -choice[left]
    plan, left = [], frames
    while left > 0:
        plan.append(choice[left])
        left -= choice[left]
    return sorted(plan, reverse=True)


class EngineRenderer:
    """Warp+decode of a round's frames in cross-stream batches, then put-back and scaling per stream."""

    def __init__(self, models, compile: bool, batch_ladder: tuple[int, ...] = BATCH_LADDER) -> None:
        self.models = models
        self.compile = compile
        self.ladder = tuple(sorted(batch_ladder))
        self._engines: dict[int, WarpDecodeEngine] = {}
        # Seconds a batch of each ladder size takes, measured at the warm-up of compiled engines
        # on CUDA; None: each batch goes through the smallest size that holds the frames left.
        self.batch_costs: Optional[dict[int, float]] = None

    def engine(self, frames: int) -> WarpDecodeEngine:
        """The engine for a batch of ``frames``: the smallest compiled size that holds them."""
        size = next((b for b in self.ladder if b >= frames), self.ladder[-1])
        if size not in self._engines:
            self._engines[size] = WarpDecodeEngine(
                self.models.warp_network, self.models.decoder, batch_size=size, compile=self.compile
            )
        return self._engines[size]

    def warm_up(self, source: SourceInfo, per_frame_volumes: bool = True) -> None:
        """Compile (or load from the compile cache) every ladder size before streams arrive: the form
        with one feature volume shared by the batch (an image avatar's streams), and, with
        ``per_frame_volumes``, the one with a volume per frame (a video avatar, or several avatars
        in one round). A form left out compiles when a round first needs it."""
        with torch.inference_mode():
            kp = source.motion.kp[:1].reshape(1, -1, 3).to(self.models.device, torch.float32)
            for size in self.ladder:
                engine = self.engine(size)
                kp_batch = kp.expand(size, -1, -1)
                forms = [source.f_s[:1]]
                if per_frame_volumes:
                    forms.append(source.f_s[:1].expand(size, *source.f_s.shape[1:]))
                for volumes in forms:
                    # Three times: torch.compile's CUDA graphs run eagerly at a graph's first call and
                    # are recorded at its second, which must happen here, not while streams are
                    # served; the third replays, after which the engine's calls on this thread take
                    # no recording turn (WarpDecodeEngine._run_compiled).
                    for _ in range(3):
                        engine.render_batch(volumes, kp_batch, kp_batch)
            if self.compile and self.models.device.type == "cuda":
                self.batch_costs = {size: self._timed(size, source.f_s[:1], kp) for size in self.ladder}

    def _timed(self, size: int, volume: Tensor, kp: Tensor) -> float:
        """Median seconds of one batch of ``size`` on its (recorded) engine, alone on the device."""
        engine, kp_batch, times = self.engine(size), kp.expand(size, -1, -1), []
        for _ in range(_TIMED_REPLAYS):
            device_synchronize(self.models.device)
            start = time.perf_counter()
            engine.render_batch(volume, kp_batch, kp_batch)
            device_synchronize(self.models.device)
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    def batches(self, frames: int) -> list[int]:
        """The ladder sizes a round of ``frames`` frames is rendered in, in order."""
        if self.batch_costs is not None:
            return cheapest_batches(frames, self.batch_costs)
        plan = []
        while frames > 0:
            plan.append(self.engine(frames).batch_size)
            frames -= plan[-1]
        return plan

    def render(self, jobs: list[RenderJob]) -> list[Tensor]:
        f_s, kp_s, kp_d = [], [], []
        # One avatar's single volume (however many streams show it) is expanded inside the graph.
        shared = len({j.stream.source.f_s.data_ptr() for j in jobs}) == 1 and len(jobs[0].stream.source) == 1
        for job in jobs:
            source, motion = job.stream.source, job.motion
            if not shared:
                f_s.append(source.f_s.index_select(0, motion.source_index))
            kp_s.append(motion.kp_source)
            kp_d.append(motion.kp_driving)
        kp_s, kp_d = torch.cat(kp_s), torch.cat(kp_d)
        volumes = jobs[0].stream.source.f_s[:1] if shared else torch.cat(f_s)
        total, start, renders = kp_d.shape[0], 0, []
        for size in self.batches(total):
            stop = min(total, start + size)
            rows = volumes if shared else volumes[start:stop]
            renders.append(self.engine(size).render_batch(rows, kp_s[start:stop], kp_d[start:stop]))
            start = stop
        renders = torch.cat(renders)
        out, start = [], 0
        for job in jobs:
            source, k = job.stream.source, job.motion.kp_driving.shape[0]
            frames = paste_back(source.frames, renders[start : start + k], source.M_c2o,
                                source_index=job.motion.source_index)
            start += k
            frames = scaled(frames, job.stream.frame_size)
            if job.stream.config.output in H264_OUTPUTS:  # half the bytes to the host, no swscale there
                frames = rgb_to_yuv420p(frames)
            out.append(frames)
        return to_host(out)
