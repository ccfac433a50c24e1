"""The headless end-to-end API: portrait + speech -> MP4.

The CLI and the all-in-one ComfyUI node call :class:`DittoPipeline`; the stage nodes call the
same stage methods one at a time. Rendering streams: warp+decode, put-back and encoding run
batch by batch, so host and GPU memory stay flat whatever the clip length.
"""
from __future__ import annotations

import logging
import math
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterator, Optional

import torch
from torch import Tensor

from .audio.audio_features import SAMPLE_RATE, AudioFeatures
from .audio.hubert import HUBERT_ONNX_NAME, HubertFeatureExtractor
from .audio.loading import load_audio, to_mono_16k
from .errors import InputError, MissingModelError
from .models.checkpoints import HF_REPO, NETWORKS, find_network_file
from .models.ditto_models import DittoModels, load_ditto_models, random_ditto_models
from .models.official_config import CONFIG_DIR, CONFIG_FILE, find_config
from .motion.conditions import build_conditions, build_kp_condition
from .motion.lmdm_sampler import DDIMSampler, generate_motion
from .motion.motion_options import MotionOptions
from .motion.motion_sequence import MotionSequence
from .motion.motion_stitch import stitch_motion
from .progress import ProgressCallback
from .registration.aux_models import AUX_FILES, AuxModels, aux_candidate_dirs, find_aux_file, load_aux_models
from .registration.cache import AvatarCache
from .registration.image_io import load_source
from .registration.options import RegistrationOptions
from .registration.registrar import register_avatar
from .registration.source_info import SourceInfo
from .render.putback import paste_back
from .render.warp_decode import WarpDecodeEngine
from .video.writer import VideoWriter

log = logging.getLogger(__name__)
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def check_model_files(model_dir: Path, detect_face: bool = True) -> None:
    """Raise one :class:`MissingModelError` listing every file a render needs and lacks."""
    missing = [f"{spec.official_file} -> {model_dir}/" for name, spec in NETWORKS.items()
               if find_network_file(name, model_dir) is None]
    aux_needed = [AUX_FILES[n] for n in AUX_FILES if detect_face and find_aux_file(n, model_dir) is None]
    if find_hubert(model_dir) is None:
        aux_needed.append(HUBERT_ONNX_NAME)
    missing += [f"{name} -> {model_dir}/aux_models/" for name in aux_needed]
    if missing:
        lines = "\n  ".join(missing)
        optional = ""
        if find_config(model_dir) is None:
            optional = (f"Optional, for Ditto's procedural blinks: {CONFIG_FILE} -> {model_dir}/{CONFIG_DIR}/ "
                        f"(from {CONFIG_DIR}/ on HuggingFace).\n")
        raise MissingModelError(
            f"Ditto needs these model files, which are not in {model_dir.resolve()}:\n  {lines}\n{optional}"
            f"Download them from HuggingFace {HF_REPO} (the .pth files from ditto_pytorch/models/, the others "
            f"from ditto_pytorch/aux_models/). Inside ComfyUI the folder is ComfyUI/models/ditto/. To try "
            f"the pipeline without them, add --random-weights."
        )


def find_hubert(model_dir: Path) -> Optional[Path]:
    """HuBERT sits with the face models: ``aux_models/`` in either download layout."""
    for folder in aux_candidate_dirs(model_dir):
        if (folder / HUBERT_ONNX_NAME).is_file():
            return folder / HUBERT_ONNX_NAME
    return None


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


@dataclass
class StageTimes:
    """Wall-clock seconds per stage of the last run (GPU work synchronised at stage ends)."""

    seconds: dict[str, float] = field(default_factory=dict)

    def record(self, stage: str, start: float, device: torch.device) -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        self.seconds[stage] = time.perf_counter() - start


class DittoPipeline:
    """All loaded models plus the per-run state worth keeping (CUDA graphs, compiled engine).

    Build it with :meth:`from_model_dir` (official files) or :meth:`random` (smoke test).
    """

    def __init__(
        self,
        models: DittoModels,
        aux: AuxModels,
        hubert: HubertFeatureExtractor,
        cache: Optional[AvatarCache] = None,
        compile: bool = True,
        batch_size: int = 0,
        model_dir: Optional[Path] = None,
    ) -> None:
        self.models = models
        self.aux = aux
        self.hubert = hubert
        self.cache = cache
        self.compile = compile
        self.batch_size = batch_size
        self.model_dir = model_dir  # where face models missing from ``aux`` are loaded from on demand
        self.times = StageTimes()
        self._samplers: dict[tuple[int, str, bool], DDIMSampler] = {}
        self._engines: dict[tuple[int, bool], WarpDecodeEngine] = {}

    @property
    def device(self) -> torch.device:
        return self.models.device

    @classmethod
    def from_model_dir(
        cls,
        model_dir: Path | str,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
        cache_dir: Optional[Path] = None,
        detect_face: bool = True,
        **kwargs,
    ) -> "DittoPipeline":
        """Load the official networks, face models and HuBERT from ``model_dir``.

        Every missing file is reported before anything heavy is loaded.
        """
        device = torch.device(device) if device is not None else default_device()
        model_dir = Path(model_dir)
        check_model_files(model_dir, detect_face)
        aux = load_aux_models(model_dir, device, required=AUX_FILES if detect_face else ())
        hubert = HubertFeatureExtractor(find_hubert(model_dir), device)
        models = load_ditto_models(model_dir, device, dtype)
        cache = AvatarCache(cache_dir) if cache_dir is not None else None
        return cls(models, aux, hubert, cache, model_dir=model_dir, **kwargs)

    @classmethod
    def random(
        cls, workdir: Path, device: torch.device | str | None = None, dtype: torch.dtype = torch.float32,
        seed: int = 0, **kwargs,
    ) -> "DittoPipeline":
        """Random networks, no face models, and a stand-in HuBERT written to ``workdir``.

        Every stage runs exactly as with real weights; only the numbers are meaningless.
        """
        from .audio.hubert_stub import write_stub_hubert

        device = torch.device(device) if device is not None else default_device()
        models = random_ditto_models(device, dtype, seed)
        hubert = HubertFeatureExtractor(write_stub_hubert(Path(workdir) / "hubert_stub.onnx", seed=seed), device)
        return cls(models, AuxModels(), hubert, None, **kwargs)

    # -- stages -----------------------------------------------------------------------------

    def register(
        self, frames_rgb, options: Optional[RegistrationOptions] = None, is_image: Optional[bool] = None,
        name: str = "source image", progress: Optional[ProgressCallback] = None, use_cache: bool = True,
    ) -> SourceInfo:
        start = time.perf_counter()
        source = register_avatar(
            frames_rgb, self.models, self.face_models(options), options, device=self.device,
            dtype=self.models.dtype, cache=self.cache if use_cache else None, progress=progress, is_image=is_image,
            name=name,
        )
        self.times.record("register", start, self.device)
        return source

    def audio_features(
        self, waveform: Tensor, sample_rate: int, name: str = "audio", progress: Optional[ProgressCallback] = None
    ) -> AudioFeatures:
        start = time.perf_counter()
        features = self.hubert(to_mono_16k(waveform, sample_rate, name=name), SAMPLE_RATE, progress=progress)
        self.times.record("audio_features", start, self.device)
        return features

    def sampler(self, steps: int, precision: str = "fp32", compile: bool = False) -> DDIMSampler:
        """One sampler per setting, kept so its captured CUDA graphs (and compiled steps) are reused."""
        key = (steps, precision, compile)
        if key not in self._samplers:
            self._samplers[key] = DDIMSampler(self.models.lmdm, steps=steps, precision=precision, compile=compile)
        return self._samplers[key]

    def motion(
        self, source: SourceInfo, audio: AudioFeatures, options: MotionOptions,
        progress: Optional[ProgressCallback] = None,
    ) -> MotionSequence:
        start = time.perf_counter()
        options = self._with_blink_table(options)
        cond = build_conditions(audio, source, options, self.models.cond_dim)
        generator = torch.Generator(self.device).manual_seed(options.seed)
        sampler = self.sampler(options.steps, options.sampler_precision, options.sampler_compile)
        vectors = generate_motion(
            sampler, build_kp_condition(source)[0], cond, overlap=options.overlap_v2,
            smoothing=options.smo_k_d, fix_kp_cond=options.fix_kp_cond, generator=generator, progress=progress,
        )
        motion = stitch_motion(vectors, source, self.models.stitch_network, options)
        self.times.record("motion", start, self.device)
        return motion

    def _with_blink_table(self, options: MotionOptions) -> MotionOptions:
        """``options`` with the models' blink table filled in, as Ditto does with its config.

        As in Ditto, the table is used with blinks off too (``delta_eye_open_n == -1``): every
        frame then shows its open row, so the eyes stay the source's. Left as they are when the
        options bring their own table or no table was loaded.
        """
        table = self.models.blink_table
        if table is None or options.delta_eye_arr is not None:
            return options
        return replace(options, delta_eye_arr=table)

    def face_models(self, options: Optional[RegistrationOptions]) -> AuxModels:
        """The face models, with the detection set loaded on first need.

        A pipeline built for the no-detector mode holds only what it found; face detection needs
        all four files, and this load names every one that is missing and where it goes.
        """
        detect = (options or RegistrationOptions()).detect_face
        if detect and self.model_dir is not None and any(getattr(self.aux, name) is None for name in AUX_FILES):
            self.aux = load_aux_models(self.model_dir, self.device, required=AUX_FILES)
        return self.aux

    def engine(self, batch_size: Optional[int] = None, compile: Optional[bool] = None) -> WarpDecodeEngine:
        """The warp+decode engine for these settings (default: the pipeline's), kept with its graphs."""
        key = (self.batch_size if batch_size is None else batch_size, self.compile if compile is None else compile)
        if key not in self._engines:
            self._engines[key] = WarpDecodeEngine(
                self.models.warp_network, self.models.decoder, batch_size=key[0], compile=key[1]
            )
        return self._engines[key]

    def render_video(
        self, source: SourceInfo, motion: MotionSequence, out_path: Path | str,
        audio: Optional[tuple[Tensor, int]] = None, crf: int = 18, preset: str = "medium",
        progress: Optional[ProgressCallback] = None,
    ) -> Path:
        """Warp+decode, paste back and encode, batch by batch; the MP4 appears only on success."""
        start = time.perf_counter()
        height, width = source.frames.shape[1:3]
        with VideoWriter(out_path, width=width, height=height, fps=motion.fps, crf=crf, preset=preset,
                         audio=audio) as writer:
            for frames in self.iter_frames(source, motion, progress):
                writer.write(frames)
        self.times.record("render_video", start, self.device)
        return Path(out_path)

    def iter_frames(
        self, source: SourceInfo, motion: MotionSequence, progress: Optional[ProgressCallback] = None
    ) -> Iterator[Tensor]:
        """The finished video frames batch by batch, in order: (n, H, W, 3) uint8 on the device."""
        for first, renders in self.engine().iter_render(source, motion, progress):
            index = motion.source_index[first:first + renders.shape[0]]
            yield paste_back(source.frames, renders, source.M_c2o, source_index=index)

    # -- everything -------------------------------------------------------------------------

    def run(
        self, source_path: Path | str, audio_path: Path | str, out_path: Path | str,
        registration: Optional[RegistrationOptions] = None, motion_options: Optional[MotionOptions] = None,
        crf: int = 18, preset: str = "medium", max_seconds: Optional[float] = None,
        progress: Optional[ProgressCallback] = None,
    ) -> Path:
        frames, is_image = load_source(source_path)
        waveform, rate = load_audio(audio_path)
        if max_seconds is not None:
            if not max_seconds > 0:
                raise InputError(f"max_seconds must be positive, got {max_seconds}.")
            waveform = waveform[:, : max(1, int(max_seconds * rate))]
        source = self.register(frames, registration, is_image=is_image, name=str(source_path))
        features = self.audio_features(waveform, rate, name=str(audio_path))
        motion = self.motion(source, features, motion_options or MotionOptions())
        del features  # (frames, 1024) on the device: the render's memory must not grow with the clip
        return self.render_video(source, motion, out_path, audio=(waveform, rate), crf=crf, preset=preset,
                                 progress=progress)


def render_cli(args) -> Path:
    """``python -m ditto_core render``: build the pipeline from CLI arguments and run it."""
    dtype = DTYPES[args.precision]
    registration = RegistrationOptions(detect_face=not args.random_weights)
    motion_options = MotionOptions(steps=args.steps, seed=args.seed, emo=args.emo, eye_f0_mode=args.eye_lock,
                                   delta_eye_open_n=args.blinks, sampler_precision=args.lmdm_precision,
                                   sampler_compile=args.lmdm_compile)
    common = dict(device=args.device, dtype=dtype, batch_size=args.batch_size)
    with tempfile.TemporaryDirectory(prefix="ditto_") as workdir:
        if args.random_weights:
            log.warning("random weights: every stage runs, but the video shows noise, not a face")
            pipeline = DittoPipeline.random(Path(workdir), seed=args.seed, **common)
        else:
            cache_dir = args.cache_dir or Path(args.models) / "cache"
            pipeline = DittoPipeline.from_model_dir(args.models, cache_dir=cache_dir, **common)
        out = pipeline.run(args.image, args.audio, args.out, registration, motion_options, crf=args.crf,
                           preset=args.preset, max_seconds=args.max_seconds, progress=_terminal_progress())
    for stage, seconds in pipeline.times.seconds.items():
        print(f"{stage:>15}: {seconds:7.2f} s")
    return out


def _terminal_progress() -> ProgressCallback:
    last = [-1]

    def show(done: int, total: int) -> None:
        percent = math.floor(100 * done / max(total, 1))
        if percent != last[0]:
            last[0] = percent
            print(f"\rrendering {done}/{total} frames ({percent}%)", end="\n" if done >= total else "", flush=True)

    return show
