"""Stand-ins shared by the live tests: a light pipeline, a deterministic sampler, a recording renderer.

The live runtime needs from a pipeline only its device, the stitching network, the LMDM's
condition width, HuBERT and the blink table; the LMDM itself is replaced by
:class:`ProjectionSampler` (a fixed linear map of the window's conditions plus half its
reference frame, so every condition channel and the carried reference frame reach the motion),
and warp+decode by :class:`RecordingRenderer`, which keeps each job's keypoints.
"""
from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ditto_core.audio.hubert import HUBERT_ONNX_NAME, HubertFeatureExtractor
from ditto_core.audio.hubert_stub import write_stub_hubert
from ditto_core.models.ditto_models import DittoModels
from ditto_core.models.keypoints import MOTION_DIM
from ditto_core.models.lmdm import WINDOW
from ditto_core.models.stitch_network import StitchingNetwork
from ditto_core.pipeline import DittoPipeline
from ditto_core.registration.aux_models import AuxModels

COND_DIM = 1103


class _CondWidth(nn.Module):
    """Only what the runtime reads from an LMDM: the condition width."""

    def __init__(self) -> None:
        super().__init__()
        self.cond_projection = nn.Linear(COND_DIM, 1)


def light_pipeline(workdir: Path, blink_table=None, seed: int = 0) -> DittoPipeline:
    torch.manual_seed(seed)
    models = DittoModels(
        appearance_extractor=None, motion_extractor=None, warp_network=None, decoder=None,
        stitch_network=StitchingNetwork().eval(), lmdm=_CondWidth(), device=torch.device("cpu"),
        dtype=torch.float32, blink_table=blink_table,
    )
    hubert = HubertFeatureExtractor(write_stub_hubert(Path(workdir) / HUBERT_ONNX_NAME, seed=seed))
    return DittoPipeline(models, AuxModels(), hubert, compile=False)


def projection(seed: int = 3) -> np.ndarray:
    """(C, 265) float64 projection of :class:`ProjectionSampler`."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((COND_DIM, MOTION_DIM)) / np.sqrt(COND_DIM)


class ProjectionSampler:
    """A window sampler whose window is ``cond @ P + 0.5 * kp_cond`` (any batch); counts batch sizes."""

    steps = 2

    def __init__(self, seed: int = 3) -> None:
        self.weight = torch.from_numpy(projection(seed)).float()
        self.batches: list[int] = []

    def noise_shape(self, batch: int) -> tuple[int, int, int, int]:
        return (self.steps - 1, batch, WINDOW, MOTION_DIM)

    def sample(self, kp_cond, aud_cond, x_T, noise):
        assert x_T.shape == (kp_cond.shape[0], WINDOW, MOTION_DIM) and noise.shape == self.noise_shape(kp_cond.shape[0])
        self.batches.append(kp_cond.shape[0])
        return aud_cond @ self.weight + 0.5 * kp_cond[:, None, :]


class RecordingRenderer:
    """Frames of a fixed colour; records every job's motion per stream id. ``delay`` slows it down."""

    def __init__(self, size: tuple[int, int] = (24, 32), delay: float = 0.0) -> None:
        self.size = size
        self.delay = delay
        self.motions: dict[int, list] = {}
        self.calls: list[int] = []  # frames of each render call
        self.lock = threading.Lock()

    def render(self, jobs):
        import time

        if self.delay:
            time.sleep(self.delay)
        self.calls.append(sum(job.motion.kp_driving.shape[0] for job in jobs))
        out = []
        for job in jobs:
            with self.lock:
                self.motions.setdefault(job.stream.id, []).append((job.first_frame, job.motion))
            k = job.motion.kp_driving.shape[0]
            out.append(torch.full((k, *self.size, 3), 7 * (job.first_frame % 30), dtype=torch.uint8))
        return out
