"""Helpers for the video tests: frames that carry their own index, and reading an MP4 back."""
from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import torch

BLOCK = 16  # watermark block side: survives x264 at any CRF the tests use
BITS = 12


def watermarked(first: int, count: int, height: int = 64, width: int = 128) -> torch.Tensor:
    """(count, height, width, 3) uint8 frames first..first+count-1, each showing its index as
    BITS black/white 16x16 blocks (row-major from the top left) over a colour ramp."""
    per_row = width // BLOCK
    assert per_row * (height // BLOCK) >= BITS, "frame too small for the watermark"
    ys = torch.linspace(40, 200, height)[:, None].expand(height, width)
    xs = torch.linspace(200, 40, width)[None, :].expand(height, width)
    frames = torch.stack([xs, ys, (xs + ys) / 2], dim=-1).expand(count, height, width, 3).clone()
    for n in range(count):
        index = first + n
        for bit in range(BITS):
            row, col = divmod(bit, per_row)
            value = 255.0 if (index >> bit) & 1 else 0.0
            frames[n, row * BLOCK : (row + 1) * BLOCK, col * BLOCK : (col + 1) * BLOCK] = value
    return frames.round().to(torch.uint8)


def read_index(frame: np.ndarray) -> int:
    """The index a decoded (H, W, 3) RGB frame of :func:`watermarked` shows."""
    per_row = frame.shape[1] // BLOCK
    index = 0
    for bit in range(BITS):
        row, col = divmod(bit, per_row)
        block = frame[row * BLOCK + 4 : (row + 1) * BLOCK - 4, col * BLOCK + 4 : (col + 1) * BLOCK - 4]
        index |= int(block.mean() > 128) << bit
    return index


def decoded_indices(path: Path) -> list[int]:
    with av.open(str(path)) as container:
        return [read_index(frame.to_ndarray(format="rgb24")) for frame in container.decode(video=0)]


def durations(path: Path) -> dict:
    """Seconds of video and of audio (decoded samples) in an MP4."""
    with av.open(str(path)) as container:
        video = container.streams.video[0]
        result = {"video": float(video.duration * video.time_base)}
        if container.streams.audio:
            audio = container.streams.audio[0]
            result["audio"] = sum(f.samples for f in container.decode(audio=0)) / audio.rate
    return result


def tone(seconds: float, rate: int = 48000) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.2 * np.sin(2 * np.pi * 330 * t)).astype(np.float32)
