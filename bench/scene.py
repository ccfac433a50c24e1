"""The benchmark scene shared by the render benchmarks, and where the example inputs are found.

The example portrait letterboxed into a 1080x1920 frame (a synthetic frame if the example data
is not found), one 512x512 face crop pasted at 55 % of the frame height with a 4 degree tilt,
keypoints oscillating at 1-4 Hz around a fixed pose, a random feature volume; the warp network
and decoder with seed-0 random weights.
"""
from __future__ import annotations

import contextlib
import copy
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import cv2
import numpy as np
import torch
from torch import Tensor, nn

from ditto_core.audio.audio_features import FPS
from ditto_core.models.ditto_models import random_ditto_models
from ditto_core.models.keypoints import NUM_KP, MotionInfo
from ditto_core.motion.motion_sequence import MotionSequence
from ditto_core.registration.source_info import SourceInfo
from ditto_core.render.warp_decode import WarpDecodeEngine

REPO = Path(__file__).resolve().parents[1]
PORTRAIT_CANDIDATES = tuple(
    Path(root) / "data" / "ditto_example" / "portrait.jpg"
    for root in (*filter(None, [os.environ.get("DITTO_SHARED")]), REPO.parent / "shared", REPO / "shared")
)
"""Where the example portrait may be: ``$DITTO_SHARED``, then ``shared/`` beside or inside the checkout."""
SPEECH_CANDIDATES = tuple(path.with_name("speech_24k_mono.wav") for path in PORTRAIT_CANDIDATES)


@dataclass
class Settings:
    device: torch.device
    frames: int
    height: int
    width: int
    side: int  # feature volume side; renders are 8 * side
    batch: int  # 0: the engine's automatic choice
    precisions: tuple[str, ...]
    compile: bool
    reps: int
    preset: str
    crf: int

    @property
    def render_size(self) -> int:
        return 8 * self.side


@dataclass
class Scene:
    """A cached avatar (one still frame) and 10 s of motion, on the device."""

    frame: Tensor  # (1, H, W, 3) uint8
    M_c2o: Tensor  # (1, 3, 3) float32: render pixels -> frame pixels
    source: SourceInfo
    motion: MotionSequence


@contextlib.contextmanager
def strict_fp32() -> Iterator[None]:
    """TF32 off for the fp32 reference renders, restored afterwards (speed runs use defaults)."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def load_frame(height: int, width: int) -> tuple[np.ndarray, str]:
    """The example portrait letterboxed into (height, width) RGB, or a synthetic frame."""
    for path in PORTRAIT_CANDIDATES:
        image = cv2.imread(str(path), cv2.IMREAD_COLOR)
        if image is not None:
            side = min(height, width)
            image = cv2.resize(cv2.cvtColor(image, cv2.COLOR_BGR2RGB), (side, side), interpolation=cv2.INTER_AREA)
            frame = np.zeros((height, width, 3), np.uint8)
            top, left = (height - side) // 2, (width - side) // 2
            frame[top : top + side, left : left + side] = image
            return frame, str(path)
    ys, xs = np.mgrid[0:height, 0:width]
    noise = np.random.default_rng(0).integers(0, 32, (height, width, 3))
    frame = np.stack([xs * 255 // width, ys * 255 // height, (xs + ys) % 256], -1) + noise
    return np.clip(frame, 0, 255).astype(np.uint8), "synthetic"


def crop_to_frame(render_size: int, height: int, width: int) -> np.ndarray:
    """(3, 3) affine placing the render as a face crop: 55 % of the frame height, tilted 4 degrees."""
    centre = (render_size - 1) / 2
    affine = cv2.getRotationMatrix2D((centre, centre), 4.0, 0.55 * height / render_size)
    affine[:, 2] += np.array([(width - 1) / 2, (height - 1) / 2]) - centre
    return np.vstack([affine, [0.0, 0.0, 1.0]]).astype(np.float32)


def speech_like_motion(frames: int, device: torch.device, seed: int = 0) -> MotionSequence:
    """Keypoints near a fixed source pose, each oscillating at 1-4 Hz by a few percent."""
    g = torch.Generator().manual_seed(seed)
    base = torch.rand(NUM_KP, 3, generator=g) - 0.5
    freq = 1 + 3 * torch.rand(NUM_KP, 3, generator=g)
    phase = 2 * math.pi * torch.rand(NUM_KP, 3, generator=g)
    t = torch.arange(frames, dtype=torch.float32)[:, None, None] / FPS
    driving = base + 0.03 * torch.sin(2 * math.pi * freq * t + phase)
    return MotionSequence(
        kp_source=base.expand(frames, NUM_KP, 3).contiguous().to(device),
        kp_driving=driving.to(device),
        source_index=torch.zeros(frames, dtype=torch.int64, device=device),
        fps=FPS,
    )


def make_scene(settings: Settings) -> tuple[Scene, str]:
    frame, origin = load_frame(settings.height, settings.width)
    device = settings.device
    f_s = torch.randn(1, 32, 16, settings.side, settings.side, generator=torch.Generator().manual_seed(1))
    zeros = lambda *shape: torch.zeros(1, *shape, device=device)  # noqa: E731
    M_c2o = torch.from_numpy(crop_to_frame(settings.render_size, settings.height, settings.width))[None]
    source = SourceInfo(
        frames=torch.from_numpy(frame)[None].to(device), M_c2o=M_c2o.to(device), f_s=f_s.to(device),
        motion=MotionInfo(zeros(1), zeros(66), zeros(66), zeros(66), zeros(3), zeros(63), zeros(63)),
        eye_open=zeros(2), eye_ball=zeros(6), is_image=True,
    )
    scene = Scene(source.frames, source.M_c2o, source, speech_like_motion(settings.frames, device))
    return scene, origin


def render_networks(device: torch.device, dtype: torch.dtype) -> tuple[nn.Module, nn.Module]:
    """Warp network and decoder with seed-0 random weights (inference rewrites applied)."""
    models = random_ditto_models("cpu", torch.float32, seed=0)
    return models.warp_network.to(device, dtype), models.decoder.to(device, dtype)


def channels_last_copies(nets: tuple[nn.Module, nn.Module]) -> tuple[nn.Module, ...]:
    """Copies whose conv weights are NHWC / NDHWC: does cuDNN's preferred layout pay in eager mode?

    (The compiled path needs no such copy: Inductor picks conv layouts itself.)
    """
    copies = tuple(copy.deepcopy(net) for net in nets)
    for net in copies:
        for param in net.parameters():
            layout = {4: torch.channels_last, 5: torch.channels_last_3d}.get(param.dim())
            if layout is not None:
                param.data = param.data.contiguous(memory_format=layout)
    return copies


def reference_renders(nets: tuple[nn.Module, nn.Module], scene: Scene, frames: int) -> Tensor:
    """Strict-fp32 eager renders of the first frames: the yardstick for every fast path."""
    motion = scene.motion
    with strict_fp32():
        engine = WarpDecodeEngine(*nets, batch_size=frames, compile=False)
        return engine.render_batch(scene.source.f_s, motion.kp_source[:frames], motion.kp_driving[:frames])
