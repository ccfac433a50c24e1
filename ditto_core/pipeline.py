"""The headless end-to-end API: portrait + speech -> MP4.

``python -m ditto_core render`` (``__main__.py``) and the all-in-one ComfyUI node call
:class:`DittoPipeline`; the stage nodes call the same stage methods one at a time. Rendering
streams: warp+decode, put-back and encoding run batch by batch, so host and GPU memory stay flat
whatever the clip length.
"""
from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Hashable, Iterator, Optional, TypeVar

import torch
from torch import Tensor

from .audio.audio_features import SAMPLE_RATE, AudioFeatures
from .audio.hubert import HubertFeatureExtractor
from .audio.loading import load_audio, to_mono_16k
from .cuda_graphs import beside_captures, device_synchronize
from .errors import InputError
from .model_files import AUX_FILES, CONFIG_DIR, CONFIG_FILE, check_model_files, find_hubert
from .models.ditto_models import DittoModels, load_ditto_models, random_ditto_models
from .motion.conditions import build_conditions, build_kp_condition
from .motion.lmdm_sampler import DDIMSampler, generate_motion, iter_motion
from .motion.motion_ahead import start_motion_ahead
from .motion.motion_options import MotionOptions
from .motion.motion_sequence import MotionSequence
from .motion.motion_stitch import stitch_motion
from .precision import lmdm_precision_for
from .progress import ProgressCallback
from .registration.aux_models import AuxModels, DeferredAuxModels
from .registration.cache import AvatarCache
from .registration.image_io import load_source
from .registration.options import RegistrationOptions
from .registration.registrar import register_avatar
from .registration.source_info import SourceInfo
from .render.putback import paste_back
from .render.warp_decode import WarpDecodeEngine
from .video.writer import VideoWriter

log = logging.getLogger(__name__)

ONE_CLIP_COMPILE_MIN_FRAMES = 6500
"""Frames (260 s of video) below which a process that renders one clip (the CLI) does not compile
the warp+decode graph: even from a warm cache the compile costs about as much as it saves on a
clip this long (measured on an H100 against the eager path with the decoder's kernels,
docs/TIME_TO_VIDEO_LOG.md, session 41). A cached AOT package of the graph (the engine's ``warmup="aot_cached"``,
which ``render --aot`` uses) is no compile: it serves every clip."""


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


@dataclass
class StageTimes:
    """Wall-clock seconds per stage of the last run (GPU work synchronised at stage ends)."""

    seconds: dict[str, float] = field(default_factory=dict)

    def record(self, stage: str, start: float, device: torch.device) -> None:
        if device.type == "cuda":
            device_synchronize(device)
        self.seconds[stage] = time.perf_counter() - start


KEPT_SETTINGS = 4
"""Samplers and engines a pipeline keeps, the most recently used: each holds CUDA graphs (a
device memory pool and host-side state), so a long session trying many step counts or batch
sizes must not keep one per value it ever used."""

_Kept = TypeVar("_Kept")


def _most_recent(kept: OrderedDict, key: Hashable, build: Callable[[], _Kept]) -> _Kept:
    """``kept[key]``, built on first use; the least recently used beyond KEPT_SETTINGS are dropped."""
    if key in kept:
        kept.move_to_end(key)
    else:
        kept[key] = build()
        while len(kept) > KEPT_SETTINGS:
            kept.popitem(last=False)
    return kept[key]


class DittoPipeline:
    """All loaded models plus the per-run state worth keeping (CUDA graphs, compiled engine).

    Build it with :meth:`from_model_dir` (official files) or :meth:`random` (smoke test).
    """

    def __init__(
        self,
        models: DittoModels,
        aux: AuxModels | DeferredAuxModels,
        hubert: HubertFeatureExtractor,
        cache: Optional[AvatarCache] = None,
        compile: bool = True,
        batch_size: int = 0,
        model_dir: Optional[Path] = None,
        warmup: str = "foreground",
        compile_min_frames: int = 0,
        motion_ahead: bool = False,
        lmdm_graph_span: str = "step",
    ) -> None:
        self.models = models
        self.aux = aux
        self.hubert = hubert
        self.cache = cache
        self.compile = compile
        self.batch_size = batch_size
        self.model_dir = model_dir  # where face models missing from ``aux`` are loaded from on demand
        self.warmup = warmup  # how the warp+decode graph is compiled (WarpDecodeEngine's ``warmup``)
        self.compile_min_frames = compile_min_frames  # shorter clips render eagerly until a graph exists
        # Whether clips rendered through motion_for_render start rendering on the first motion
        # window. Off by default: on the H200 it did not pay (bench/measurements/2026-12-02-h200-s9:
        # the render slows by what the motion saves, and a new process compiles slower).
        self.motion_ahead = motion_ahead
        # What the LMDM samplers record (lmdm_sampler.GRAPH_SPANS). Recording the prologue and
        # one step costs a fraction of recording the whole window, which a clip's first window
        # (the CLI's, a ComfyUI launch's first prompt) waits for, and replays a window only
        # slightly slower (docs/TIME_TO_VIDEO_LOG.md, sessions 50-51, has both). The live runtime keeps whole windows.
        self.lmdm_graph_span = lmdm_graph_span
        self.times = StageTimes()
        self.load_times = StageTimes()  # seconds per model group, filled by from_model_dir
        self._samplers: OrderedDict[tuple[int, str, bool], DDIMSampler] = OrderedDict()
        self._engines: OrderedDict[tuple[int, bool], WarpDecodeEngine] = OrderedDict()

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
        loading = StageTimes()
        start = time.perf_counter()
        # A new process's CUDA context is made at the first synchronize: its own line, not the next stage's.
        loading.record("cuda_start", start, device)
        start = time.perf_counter()
        aux = DeferredAuxModels(model_dir, device, required=AUX_FILES if detect_face else ())
        loading.record("face_models", start, device)
        start = time.perf_counter()
        hubert = HubertFeatureExtractor(find_hubert(model_dir), device)
        loading.record("hubert", start, device)
        start = time.perf_counter()
        models = load_ditto_models(model_dir, device, dtype)
        loading.record("networks", start, device)
        cache = AvatarCache(cache_dir) if cache_dir is not None else None
        pipeline = cls(models, aux, hubert, cache, model_dir=model_dir, **kwargs)
        pipeline.load_times = loading
        return pipeline

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
        stub = write_stub_hubert(Path(workdir) / "hubert_stub.onnx", seed=seed)
        hubert = HubertFeatureExtractor(stub, device, backend="onnxruntime")  # the stub is no HuBERT
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
        return _most_recent(self._samplers, (steps, precision, compile), lambda: DDIMSampler(
            self.models.lmdm, steps=steps, precision=precision, compile=compile, graph_span=self.lmdm_graph_span))

    def motion(
        self, source: SourceInfo, audio: AudioFeatures, options: MotionOptions,
        progress: Optional[ProgressCallback] = None,
    ) -> MotionSequence:
        start = time.perf_counter()
        options, sampler, kp_cond, cond, schedule = self._motion_inputs(source, audio, options)
        vectors = generate_motion(sampler, kp_cond, cond, progress=progress, **schedule)
        motion = stitch_motion(vectors, source, self.models.stitch_network, options)
        self.times.record("motion", start, self.device)
        return motion

    @contextlib.contextmanager
    def motion_for_render(
        self, source: SourceInfo, audio: AudioFeatures, options: MotionOptions,
        progress: Optional[ProgressCallback] = None,
    ) -> Iterator[MotionSequence]:
        """The clip's motion, for a render inside the ``with`` block.

        With ``motion_ahead`` (never with fades, which need the whole clip), the motion is
        generated on a worker while the block renders
        (:mod:`~ditto_core.motion.motion_ahead`): the render starts after the first window
        instead of the last, with the same frames. The worker is stopped when the block ends.
        Stage times: ``motion`` is the worker's wall time, ``motion_wait`` what the render
        waited for it. Otherwise this is :meth:`motion` (``progress`` follows its windows).
        """
        if not self.motion_ahead or options.fade_type:
            motion = self.motion(source, audio, options, progress)
            del audio  # the caller may drop its features: this frame must not keep them for the render
            yield motion
            return
        options, sampler, kp_cond, cond, schedule = self._motion_inputs(source, audio, options)
        del audio
        rows = functools.partial(iter_motion, sampler, kp_cond, cond, **schedule)
        # Under cudaMallocAsync a window graph recorded on the worker would count the render's
        # allocations as its own (each later free warns): the render is marked as work beside
        # recordings, so the worker's windows stay eager while it runs.
        with beside_captures():
            motion = start_motion_ahead(rows, cond.shape[0], source, self.models.stitch_network, options)
            try:
                yield motion
            finally:
                motion.close()  # joins the worker, which sets its seconds
                self.times.seconds["motion"] = motion.seconds
                self.times.seconds["motion_wait"] = motion.waited_seconds

    def _motion_inputs(self, source: SourceInfo, audio: AudioFeatures, options: MotionOptions):
        """What the window chain needs: the options with the blink table, the sampler, the first
        keypoint condition, the (T, C) conditions and the schedule's keyword arguments."""
        options = self.with_blink_table(options)
        cond = build_conditions(audio, source, options, self.models.cond_dim)
        precision = lmdm_precision_for(options.sampler_precision, self.models.dtype)
        sampler = self.sampler(options.steps, precision, options.sampler_compile)
        schedule = dict(overlap=options.overlap_v2, smoothing=options.smo_k_d, fix_kp_cond=options.fix_kp_cond,
                        generator=torch.Generator(self.device).manual_seed(options.seed))
        return options, sampler, build_kp_condition(source)[0], cond, schedule

    def with_blink_table(self, options: MotionOptions) -> MotionOptions:
        """``options`` with the models' blink table filled in, as Ditto does with its config.

        As in Ditto, the table is used with blinks off too (``delta_eye_open_n == -1``): every
        frame then shows its open row, so the eyes stay the source's. Left as they are when the
        options bring their own table or no table was loaded.
        """
        table = self.models.blink_table
        if options.delta_eye_arr is not None:
            return options
        if table is None:
            if options.delta_eye_open_n != -1:  # said only when blinks were asked for
                folder = self.model_dir / CONFIG_DIR / CONFIG_FILE if self.model_dir else f"{CONFIG_DIR}/{CONFIG_FILE}"
                log.info("Procedural blinks need Ditto's config %s (HuggingFace folder %s/); without it the eyes "
                         "follow the generated motion.", folder, CONFIG_DIR)
            return options
        return replace(options, delta_eye_arr=table)

    def face_models(self, options: Optional[RegistrationOptions]) -> AuxModels | DeferredAuxModels:
        """The face models, with the detection set loaded on first need.

        A pipeline built for the no-detector mode holds only what it found; face detection needs
        all four files, and this load names every one that is missing and where it goes.
        """
        detect = (options or RegistrationOptions()).detect_face
        if detect and self.model_dir is not None and not all(self.aux.found(name) for name in AUX_FILES):
            self.aux = DeferredAuxModels(self.model_dir, self.device, required=AUX_FILES)
        return self.aux

    def engine(self, batch_size: Optional[int] = None, compile: Optional[bool] = None) -> WarpDecodeEngine:
        """The warp+decode engine for these settings (default: the pipeline's), kept with its graphs."""
        key = (self.batch_size if batch_size is None else batch_size, self.compile if compile is None else compile)
        return _most_recent(self._engines, key, lambda: WarpDecodeEngine(
            self.models.warp_network, self.models.decoder, batch_size=key[0], compile=key[1], warmup=self.warmup,
            compile_min_frames=self.compile_min_frames))

    def start_warmup(self, prime: str = "first") -> None:
        """Get the default engine ready in the background while the first clip is prepared.

        Called when the models load. ``warmup="background"``: the graph for an image source
        compiles, overlapping what comes before the first render, which runs eagerly until it is
        ready. Otherwise (``"deferred"`` compiles after the first clip) the eager path is run once
        on zeros (:meth:`WarpDecodeEngine.prime`):
        a new process's first batches then find the CUDA libraries loaded and their kernels
        chosen. ``prime``: ``"first"`` (the first batch's shape only), ``"full"`` (a full batch's
        too: less first-use work left to the render, but more GPU work beside the audio features and
        the motion, and a longer wait for it at the first batch; docs/TIME_TO_VIDEO_LOG.md, sessions 57-58)
        or ``"off"``.
        """
        if prime not in ("full", "first", "off"):
            raise InputError(f'start_warmup: prime must be "full", "first" or "off", got {prime!r}')
        engine = self.engine()
        if engine.warmup != "deferred":
            engine.start_warmup()
        if prime != "off" and engine.warmup != "background":
            engine.prime(full_batch=prime == "full")

    def render_video(
        self, source: SourceInfo, motion: MotionSequence, out_path: Path | str,
        audio: Optional[tuple[Tensor, int]] = None, crf: int = 18, preset: Optional[str] = None,
        progress: Optional[ProgressCallback] = None, encoders: Optional[int] = None,
        metadata: Optional[dict[str, str]] = None,
    ) -> Path:
        """Warp+decode, paste back and encode, batch by batch; the MP4 appears only on success.
        ``metadata``: the MP4's container tags (see :class:`VideoWriter`)."""
        start = time.perf_counter()
        height, width = source.frames.shape[1:3]
        with VideoWriter(out_path, width=width, height=height, fps=motion.fps, crf=crf, preset=preset,
                         audio=audio, encoders=encoders, expected_frames=len(motion), metadata=metadata) as writer:
            for frames in self.iter_frames(source, motion, progress):
                writer.write(frames)
            self.times.record("render", start, self.device)  # every frame handed to the encoder
            # Of which waiting for the eager path's priming run, held back by the encoders, and how long
            # they waited for the GPU (see VideoWriter).
            self.times.seconds["render_waited_for_priming"] = self.engine().stats.waited_for_priming_s
            self.times.seconds["render_waited_for_encoders"] = writer.waited_for_encoders
            self.times.seconds["render_encoders_waited_for_gpu"] = writer.encoders_waited_for_gpu
            finalize = time.perf_counter()
        self.times.record("finalize_mp4", finalize, self.device)  # encoder drained, file renamed into place
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
        crf: int = 18, preset: Optional[str] = None, max_seconds: Optional[float] = None,
        progress: Optional[ProgressCallback] = None, status: Optional[Callable[[str], None]] = None,
        encoders: Optional[int] = None,
    ) -> Path:
        """Every stage at once. ``progress`` follows the render frame by frame; ``status`` is told
        each stage's name as it starts (the CLI prints them)."""
        announce = status or (lambda stage: None)
        announce("reading the portrait and the speech")
        if max_seconds is not None and not max_seconds > 0:
            raise InputError(f"max_seconds must be positive, got {max_seconds}.")
        frames, is_image = load_source(source_path)
        waveform, rate = load_audio(audio_path, max_seconds)
        announce("registering the avatar")
        source = self.register(frames, registration, is_image=is_image, name=str(source_path))
        announce("computing the audio features")
        features = self.audio_features(waveform, rate, name=str(audio_path))
        announce("generating the motion")
        with self.motion_for_render(source, features, motion_options or MotionOptions()) as motion:
            del features  # (frames, 1024) on the device: the render's memory must not grow with the clip
            announce("rendering")
            return self.render_video(source, motion, out_path, audio=(waveform, rate), crf=crf, preset=preset,
                                     progress=progress, encoders=encoders)
