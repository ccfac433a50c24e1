"""The stock-equivalent render path: the reference's way of running, rebuilt from our modules.

One frame per call under fp16 autocast, a numpy round trip between warp and decode (and after
decode), OpenCV put-back on the CPU, an imageio-style writer encoding on the caller's thread,
each stage in its own thread linked by queues as in the reference's offline pipeline.
"""
from __future__ import annotations

import contextlib
import queue
import threading
import time
from pathlib import Path
from typing import Callable, Iterable, Optional

import av
import numpy as np
import torch
from torch import nn

from ditto_core.audio.audio_features import FPS
from ditto_core.render.putback import default_mask, paste_back_cv2

from .bench_common import count_frames
from .scene import Scene, Settings


class FrameByFrameWriter:
    """What imageio's writer amounts to for the stock path: one frame per call, encoded inline."""

    def __init__(self, path: Path, width: int, height: int, crf: int, preset: str) -> None:
        self.container = av.open(str(path), mode="w")
        self.stream = self.container.add_stream("libx264", rate=FPS)
        self.stream.width, self.stream.height, self.stream.pix_fmt = width, height, "yuv420p"
        self.stream.options = {"crf": str(crf), "preset": preset}

    def write(self, frame_rgb: np.ndarray) -> None:
        for packet in self.stream.encode(av.VideoFrame.from_ndarray(frame_rgb, format="rgb24")):
            self.container.mux(packet)

    def close(self) -> None:
        for packet in self.stream.encode(None):
            self.container.mux(packet)
        self.container.close()


class StockPath:
    """The reference's per-frame render, built from our modules (fp32 weights, fp16 autocast)."""

    def __init__(self, nets: tuple[nn.Module, nn.Module], scene: Scene, device: torch.device) -> None:
        self.warp_network, self.decoder = nets
        self.device = device
        self.f_s = scene.source.f_s.float().cpu().numpy()
        self.kp_source = scene.motion.kp_source.cpu().numpy()
        self.kp_driving = scene.motion.kp_driving.cpu().numpy()
        self.frame = scene.frame[0].cpu().numpy()
        self.M_c2o = scene.M_c2o[0].cpu().numpy()
        self.mask = default_mask(scene.source.f_s.shape[-1] * 8, torch.device("cpu")).numpy()

    def _autocast(self) -> contextlib.AbstractContextManager:
        # The reference autocasts on CUDA only; CPU runs (--quick) stay fp32.
        return torch.autocast(self.device.type, dtype=torch.float16, enabled=self.device.type == "cuda")

    @torch.no_grad()
    def warp(self, i: int) -> np.ndarray:
        with self._autocast():
            args = (self.f_s, self.kp_source[i : i + 1], self.kp_driving[i : i + 1])
            feature = self.warp_network(*(torch.from_numpy(a).to(self.device) for a in args))
        return feature.float().cpu().numpy()

    @torch.no_grad()
    def decode(self, feature: np.ndarray) -> np.ndarray:
        with self._autocast():
            image = self.decoder(torch.from_numpy(feature).to(self.device))
        return np.transpose(image.float().cpu().numpy()[0], (1, 2, 0)).clip(0, 1) * 255

    def put_back(self, render: np.ndarray) -> np.ndarray:
        return paste_back_cv2(self.frame, render, self.M_c2o, self.mask)


def run_threaded(items: Iterable[object], stages: list[Callable[[object], object]]) -> None:
    """Each stage in its own thread, linked by bounded queues, as the reference's offline pipeline."""
    links: list[queue.Queue] = [queue.Queue(maxsize=100) for _ in stages]
    errors: list[BaseException] = []

    def work(stage: Callable[[object], object], inbox: queue.Queue, outbox: Optional[queue.Queue]) -> None:
        while (item := inbox.get()) is not None:
            if errors:
                continue  # drain so upstream threads never block on a full queue
            try:
                result = stage(item)
            except BaseException as error:  # handed to the caller after the join
                errors.append(error)
                continue
            if outbox is not None:
                outbox.put(result)
        if outbox is not None:
            outbox.put(None)

    threads = [
        threading.Thread(target=work, args=(stage, links[i], links[i + 1] if i + 1 < len(stages) else None))
        for i, stage in enumerate(stages)
    ]
    for thread in threads:
        thread.start()
    for item in items:
        links[0].put(item)
    links[0].put(None)
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def run_stock(stock: StockPath, settings: Settings, path: Path) -> dict:
    frames = len(stock.kp_driving)
    stamps: list[float] = []
    start = time.perf_counter()
    writer = FrameByFrameWriter(path, settings.width, settings.height, settings.crf, settings.preset)

    def write(frame: np.ndarray) -> None:
        writer.write(frame)
        if not stamps:
            stamps.append(time.perf_counter())

    run_threaded(range(frames), [stock.warp, stock.decode, stock.put_back, write])
    writer.close()
    elapsed = time.perf_counter() - start
    return {"frames": frames, "delivered_fps": frames / elapsed, "first_frame_ms": 1000 * (stamps[0] - start),
            "mp4_frames": count_frames(path)}
