"""What a batch worker holds and does: one pipeline on one device, kept warm across jobs.

A :class:`JobRunner` is built once per worker (a local process or a Ray actor): the models
are loaded and the engine's compiled graphs recorded by its first job, then every later job
only loads its inputs, registers its avatar (a hit in the shared avatar cache after the first
time), samples the motion and renders. Workers call :meth:`JobRunner.call`, which turns an
error the user can act on into a message instead of a crash: a job that fails that way is
not retried, only one whose worker died is.
"""
from __future__ import annotations

import hashlib
import logging
import os
import socket
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch
from torch import Tensor

from ..audio.loading import load_audio
from ..errors import DittoError, InputError
from ..motion.motion_sequence import MotionSequence
from ..registration.cache import AvatarCache
from ..registration.image_io import load_source
from ..registration.source_info import SourceInfo
from .jobs import Job, write_sidecar

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PipelineSettings:
    """The pipeline every worker builds: shared by all jobs of a batch (plain, picklable data)."""

    cache_dir: Path  # avatar cache shared by the workers (on a cluster: a shared folder)
    models: Optional[Path] = None  # official model files; None with random_weights
    random_weights: bool = False  # smoke mode: random networks, no face detection (see the render CLI)
    seed: int = 0  # random weights' seed
    precision: str = "fp32"
    batch_size: int = 0  # frames per warp+decode batch (0: from free VRAM)
    compile: bool = True

    def identity(self) -> str:
        """Fingerprint of what the settings make of a job: the model files and the precision."""
        if self.random_weights:
            models = f"random-seed-{self.seed}"
        else:
            from ..model_files import AUX_FILES, check_model_files, find_aux_file, find_hubert, find_network_file
            from ..models.checkpoints import NETWORKS, file_identity

            check_model_files(self.models)  # names every missing file before any job is read
            files = [find_network_file(n, self.models) for n in NETWORKS]
            files += [find_aux_file(n, self.models) for n in AUX_FILES] + [find_hubert(self.models)]
            models = hashlib.sha256("|".join(file_identity(f) for f in files).encode()).hexdigest()
        return f"{models}|{self.precision}"


@dataclass
class ClipPlan:
    """The motion of one clip, computed once and rendered in frame ranges by several workers."""

    kp_source: Tensor  # (T, 21, 3) float32, CPU
    kp_driving: Tensor  # (T, 21, 3) float32, CPU
    source_index: Tensor  # (T,) int64, CPU
    fps: float

    def __len__(self) -> int:
        return self.kp_driving.shape[0]

    def motion(self, start: int, stop: int, device: torch.device) -> MotionSequence:
        """Frames [start, stop) as a MotionSequence on ``device``."""
        return MotionSequence(self.kp_source[start:stop].to(device), self.kp_driving[start:stop].to(device),
                              self.source_index[start:stop].to(device), fps=self.fps)


def clip_audio(job: Job) -> tuple[Tensor, int]:
    """The job's speech, cut to ``max_seconds``: ``(waveform (C, samples) float32, sample rate)``."""
    return load_audio(job.audio, job.max_seconds)


def pick_device(index: int) -> torch.device:
    """The ``index``-th GPU of this process (round robin), or the CPU without one."""
    if torch.cuda.is_available():
        return torch.device("cuda", index % torch.cuda.device_count())
    return torch.device("cpu")


class JobRunner:
    """One warm pipeline on one device; runs jobs one at a time."""

    def __init__(self, settings: PipelineSettings, device: torch.device | str) -> None:
        from ..pipeline import DittoPipeline
        from ..precision import network_dtype

        self.settings = settings
        self.device = torch.device(device)
        common = dict(device=self.device, dtype=network_dtype(settings.precision), batch_size=settings.batch_size,
                      compile=settings.compile)
        if settings.random_weights:
            # The stand-in HuBERT file lives as long as the runner.
            self._workdir = tempfile.TemporaryDirectory(prefix="ditto_batch_")
            self.pipeline = DittoPipeline.random(Path(self._workdir.name), seed=settings.seed, **common)
            self.pipeline.cache = AvatarCache(settings.cache_dir)
        else:
            self.pipeline = DittoPipeline.from_model_dir(settings.models, cache_dir=settings.cache_dir, **common)

    def describe(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "host": socket.gethostname(), "device": str(self.device)}

    def call(self, method: str, *args) -> tuple[str, Any]:
        """``("ok", result)`` or ``("error", message)``: what workers send back to the driver."""
        try:
            return "ok", getattr(self, method)(*args)
        except DittoError as error:
            return "error", str(error)
        except Exception as error:  # a bug or a library failure: the job fails, the worker lives on
            log.error("batch job failed:\n%s", traceback.format_exc())
            return "error", f"{type(error).__name__}: {error}"

    # -- one job, one worker ------------------------------------------------------------------

    def run_job(self, job: Job) -> dict[str, Any]:
        """Render ``job`` into its output, then record it in the sidecar; returns the timings."""
        start = time.perf_counter()
        waveform, rate = clip_audio(job)
        source, plan = self._prepare(job, waveform, rate)
        self.pipeline.render_video(source, plan.motion(0, len(plan), self.device), job.output,
                                   audio=(waveform, rate), crf=job.crf, preset=job.preset)
        seconds = time.perf_counter() - start
        record = {"frames": len(plan), "seconds": seconds, "stage_seconds": dict(self.pipeline.times.seconds),
                  **self.describe()}
        write_sidecar(job, record)
        return record

    # -- one clip, several workers ------------------------------------------------------------

    def plan_clip(self, job: Job) -> ClipPlan:
        """Register the avatar (filling the shared cache) and sample the whole clip's motion."""
        return self._prepare(job, *clip_audio(job))[1]

    def render_range(self, job: Job, plan: ClipPlan, start: int, stop: int, segment: Path) -> dict[str, Any]:
        """Render frames [start, stop) of ``plan`` and encode them as the segment file ``segment``."""
        from ..video.encoder import encode_segment
        from ..video.encoder_settings import EncoderSettings

        began = time.perf_counter()
        source = self._register(job)
        height, width = source.frames.shape[1:3]
        settings = EncoderSettings(width=width, height=height, fps=plan.fps, crf=job.crf, preset=job.preset)
        frames = self.pipeline.iter_frames(source, plan.motion(start, stop, self.device))
        encode_segment(segment, frames, settings, first_frame=start)
        return {"frames": stop - start, "seconds": time.perf_counter() - began, **self.describe()}

    # -- shared steps -------------------------------------------------------------------------

    def _register(self, job: Job) -> SourceInfo:
        frames, is_image = load_source(job.source)
        options = job.registration_options(detect_face=not self.settings.random_weights)
        return self.pipeline.register(frames, options, is_image=is_image, name=str(job.source))

    def _prepare(self, job: Job, waveform: Tensor, rate: int) -> tuple[SourceInfo, ClipPlan]:
        """The avatar and the clip's motion (cut to ``max_frames``)."""
        self.pipeline.times.seconds.clear()
        source = self._register(job)
        features = self.pipeline.audio_features(waveform, rate, name=str(job.audio))
        motion = self.pipeline.motion(source, features, job.motion_options())
        del features
        frames = len(motion) if job.max_frames is None else min(len(motion), job.max_frames)
        if frames == 0:
            raise InputError(f"{job.audio}: the speech gives no video frames; use a longer audio file")
        plan = ClipPlan(motion.kp_source[:frames].cpu(), motion.kp_driving[:frames].cpu(),
                        motion.source_index[:frames].cpu(), motion.fps)
        return source, plan
