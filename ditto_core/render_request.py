"""The render command's two halves as plain data: what it loads, and the one clip it makes.

:class:`RenderSettings` (the models, device, precision, batch size, avatar cache) decides the
pipeline; :class:`RenderRequest` (inputs, output, motion and encoder options) one clip on it.
The command line builds both from its flags; a warm worker (:mod:`ditto_core.worker`) receives
them as JSON, serves a request only when its own settings are the same, and runs it with
:meth:`RenderRequest.run` exactly as the command would in its own process.

Importing this module does not import PyTorch: a render handed to a worker never loads it.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

from .errors import InputError

if TYPE_CHECKING:
    from .pipeline import DittoPipeline
    from .progress import ProgressCallback

NEUTRAL_EMOTION = 4  # EMOTIONS.index("neutral")


@dataclass(frozen=True)
class RenderSettings:
    """What a render loads: equal settings give the same pipeline, whichever process holds it."""

    models: Optional[Path]  # official model folder, absolute; None with random_weights
    random_weights: bool = False  # smoke mode: random networks, no face models, stand-in HuBERT
    weights_seed: int = 0  # random networks' seed (0 unless random_weights)
    detect_face: bool = True  # False: portraits are face crops already; the face models are not needed
    device: Optional[str] = None  # "cpu", "cuda", "cuda:N"; None: CUDA when available
    precision: str = "fp32"  # image networks' precision name (ditto_core.precision)
    batch_size: int = 0  # frames per warp+decode batch; 0: from free VRAM
    cache_dir: Optional[Path] = None  # avatar cache, absolute; None: none (random weights)

    @classmethod
    def from_args(cls, args: Any) -> "RenderSettings":
        random_weights = bool(args.random_weights)
        models = None if random_weights else Path(args.models).absolute()
        cache_dir = args.cache_dir or (None if models is None else models / "cache")
        return cls(models=models, random_weights=random_weights, weights_seed=args.seed if random_weights else 0,
                   detect_face=not (random_weights or args.cropped), device=None if args.device is None else str(args.device),
                   precision=args.precision, batch_size=args.batch_size,
                   cache_dir=None if cache_dir is None else Path(cache_dir).absolute())

    def to_json(self) -> dict[str, Any]:
        return _to_json(self)

    @classmethod
    def from_json(cls, data: Any) -> "RenderSettings":
        return _from_json(cls, data, "settings")

    def build_pipeline(self, workdir: Path, **engine: Any) -> "DittoPipeline":
        """Load the models (random ones in ``workdir``); ``engine``: DittoPipeline's warm-up keywords."""
        from .model_files import check_model_files
        from .pipeline import DittoPipeline
        from .precision import network_dtype

        common = dict(device=self.device, dtype=network_dtype(self.precision), batch_size=self.batch_size, **engine)
        if self.random_weights:
            return DittoPipeline.random(workdir, seed=self.weights_seed, **common)
        check_model_files(self.models, self.detect_face)  # every missing file named, nothing loaded
        return DittoPipeline.from_model_dir(self.models, cache_dir=self.cache_dir, detect_face=self.detect_face,
                                            **common)


@dataclass(frozen=True)
class RenderRequest:
    """One clip: its files (absolute) and every option that is the clip's own."""

    image: Path  # portrait image or short video
    audio: Path  # speech track
    out: Path  # the MP4, written atomically
    steps: int = 25
    seed: int = 0  # the motion diffusion's noise
    emo: int = NEUTRAL_EMOTION  # emotion label (EMOTIONS)
    blinks: int = 0  # MotionOptions.delta_eye_open_n
    eye_lock: bool = False  # MotionOptions.eye_f0_mode
    lmdm_precision: str = "auto"
    lmdm_compile: bool = False
    crf: int = 18
    preset: Optional[str] = None  # None: video.writer.default_preset()
    encoders: Optional[int] = None  # None: the writer's default
    max_seconds: Optional[float] = None  # None: all of the speech

    @classmethod
    def from_args(cls, args: Any) -> "RenderRequest":
        return cls(image=Path(args.image).absolute(), audio=Path(args.audio).absolute(), out=Path(args.out).absolute(),
                   steps=args.steps, seed=args.seed, emo=args.emo, blinks=args.blinks, eye_lock=args.eye_lock,
                   lmdm_precision=args.lmdm_precision, lmdm_compile=args.lmdm_compile, crf=args.crf,
                   preset=args.preset, encoders=args.encoders, max_seconds=args.max_seconds)

    def to_json(self) -> dict[str, Any]:
        return _to_json(self)

    @classmethod
    def from_json(cls, data: Any) -> "RenderRequest":
        return _from_json(cls, data, "request")

    def run(self, pipeline: "DittoPipeline", detect_face: bool, progress: Optional["ProgressCallback"] = None,
            status: Optional[Callable[[str], None]] = None) -> Path:
        """Render the clip into :attr:`out` (nothing there unless it completes); returns it."""
        from .motion.motion_options import MotionOptions
        from .registration.options import RegistrationOptions

        motion = MotionOptions(steps=self.steps, seed=self.seed, emo=self.emo, eye_f0_mode=self.eye_lock,
                               delta_eye_open_n=self.blinks, sampler_precision=self.lmdm_precision,
                               sampler_compile=self.lmdm_compile)
        return pipeline.run(self.image, self.audio, self.out, RegistrationOptions(detect_face=detect_face), motion,
                            crf=self.crf, preset=self.preset, max_seconds=self.max_seconds, progress=progress,
                            status=status, encoders=self.encoders)


# -- JSON: paths as strings, every field checked by type on the way back ------------------------


def _to_json(value: Any) -> dict[str, Any]:
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(value).items()}


_KINDS = {"Path": (str,), "Optional[Path]": (str, type(None)), "bool": (bool,), "int": (int,), "str": (str,),
          "Optional[str]": (str, type(None)), "Optional[int]": (int, type(None)),
          "Optional[float]": (int, float, type(None))}


def _from_json(cls: type, data: Any, what: str):
    """``cls`` from :func:`_to_json`'s dict; a missing, unknown or mistyped field is refused by name."""
    if not isinstance(data, dict):
        raise InputError(f"{what}: expected a JSON object, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise InputError(f"{what}: unknown field(s) {', '.join(unknown)}")
    values = {}
    for name, field in fields.items():
        if name not in data:
            raise InputError(f"{what}: field {name} is missing")
        value, kinds = data[name], _KINDS[str(field.type)]
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            raise InputError(f"{what}: field {name} must be {field.type}, got {value!r}")
        if "Path" in str(field.type) and value is not None:
            if not os.path.isabs(value):
                raise InputError(f"{what}: field {name} must be an absolute path, got {value!r}")
            value = Path(value)
        values[name] = value
    return cls(**values)
