"""``MotionOptions``: every user-facing knob of the motion half of the pipeline.

One frozen object carries the choices of the "Eye Lock / Motion Options" node to the
condition builder, the LMDM sampler and the motion stitch. Defaults reproduce Ditto's offline
pipeline. Options are checked when the object is built, so a bad value fails at the node that
set it, with a message naming the option, its value and what is allowed.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional, Union

import torch
from torch import Tensor

from ..errors import InputError
from ..models.keypoints import NUM_KP
from ..precision import LMDM_PRECISION_CHOICES
from .option_values import EMOTIONS, MAX_SEED, MAX_STEPS, NUM_EMOTIONS

LMDM_WINDOW = 80
"""Frames per LMDM window: the released model's fixed sequence length."""

MAX_POSE_OFFSET = 60.0
"""Largest head-pose offset, in degrees either way: a still portrait cannot show a head turned
further than this convincingly (the node's sliders stop here too)."""

MAX_FILTER_WIDTH = 1001
"""Widest temporal mean filter, in frames (40 s at 25 fps): wider ones flatten any clip."""

MAX_FRAME_COUNT = 1_000_000
"""Largest frame count an option may name (over 11 hours at 25 fps): a bound, not a budget,
so a typo cannot overflow the integer types of the kernels that use it."""

MAX_POSE_GAIN = 10.0
"""Largest head-pose gain either way: beyond it the head spins through angles no face has."""

DRIVEN_KEYS = ("scale", "pitch", "yaw", "roll", "t", "exp")
"""Motion parts the driving sequence can supply (``kp`` always comes from the source)."""

IMAGE_DRIVEN_KEYS = ("exp", "pitch", "yaw", "roll", "t")
"""Default for a still portrait: expression and head pose follow the audio."""

VIDEO_DRIVEN_KEYS = ("exp",)
"""Default for a video source: only the expression is driven; the video keeps its own pose."""

Emotion = Union[int, Sequence[int], Sequence[Sequence[int]], Tensor]
PerFrame = Union[Sequence[float], Tensor]


@dataclass(frozen=True, eq=False)
class MotionOptions:
    """Options of condition building, LMDM sampling and motion stitching.

    Per-frame values follow Ditto's ``ctrl_info``: entry ``i`` applies to output frame ``i``
    and *replaces* the overall value there; frames past the end use the overall value.
    """

    # -- conditions --
    emo: Emotion = 4
    """Emotion: a label 0-7 (see :data:`EMOTIONS`; 4 is neutral), a blend of up to 7 labels
    ``(3, 4)``, per-frame label sets ``((4,), (3, 4), ...)`` looped over the frames, or an
    (m, 8) tensor of per-frame emotion probabilities used as is."""
    eye_f0_mode: bool = False
    """Condition every frame on the eye state of source frame 0 (video sources)."""

    # -- sampler --
    steps: int = 25
    """DDIM sampling steps."""
    seed: int = 0
    """Seed of the sampling noise and of random blinks."""
    overlap_v2: int = 10
    """Frames shared by consecutive 80-frame LMDM windows (blended across the seam)."""
    smo_k_d: int = 3
    """Temporal mean-filter width on the sampled pose/scale (1 disables it)."""
    fix_kp_cond: int = 0
    """Every this many windows, reset the keypoint condition to the source pose (0: never)."""
    sampler_precision: str = "auto"
    """Matrix-product precision of the LMDM: "fp32" (the reference's numbers), "tf32" or "bf16"
    (faster; errors in docs/PERFORMANCE.md), or "auto": fp32 beside fp32 image networks, tf32
    beside half-precision ones (:func:`~ditto_core.precision.lmdm_precision_for`)."""
    sampler_compile: bool = False
    """Run the LMDM steps through ``torch.compile`` (faster windows after a one-off compile)."""

    # -- stitch --
    use_d_keys: Optional[Union[Sequence[str], Mapping[str, float]]] = None
    """Motion parts taken from the driving sequence: names from :data:`DRIVEN_KEYS`, or a
    mapping name -> weight on the driving change. None: image -> expression and pose,
    video -> expression only."""
    relative_d: bool = True
    """Drive relative to the first generated frame (source + change) instead of absolutely."""
    drive_eye: Optional[bool] = None
    """Let the driving sequence (or the blink table) move the eyes. None: images yes, videos no."""
    delta_eye_arr: Optional[Tensor] = None
    """(K, 63) blink table: expression offsets for the K frames of one blink, row 0 = open
    (Ditto's config ships a 15-row table). None: eyes follow the LMDM output."""
    delta_eye_open_n: Union[int, Sequence[int]] = 0
    """Frames of open eyes between blinks: -1 never blink, 0 random 60-100, n > 0 fixed, or a
    sequence of gaps used in turn. Only used with a blink table."""
    delta_pitch: float = 0.0
    """Degrees added to the generated head pitch (overall; 0 leaves the pose as is)."""
    delta_yaw: float = 0.0
    delta_roll: float = 0.0
    pitch_offsets: Optional[PerFrame] = None
    """Per-frame pitch offsets in degrees, replacing ``delta_pitch`` on the frames they cover."""
    yaw_offsets: Optional[PerFrame] = None
    roll_offsets: Optional[PerFrame] = None
    alpha_pitch: float = 1.0
    """Gain on the head pitch after the offsets (1 leaves it unchanged)."""
    alpha_yaw: float = 1.0
    alpha_roll: float = 1.0
    fade_in: int = 0
    """Frames over which the motion fades in from the fade target (0: off)."""
    fade_out: int = 0
    """Frames over which the motion fades out to the fade target (0: off)."""
    fade_type: str = ""
    """Fade target: "" no fade, "d0" the first generated frame, "s" the source."""
    fade_out_keys: Sequence[str] = ("exp",)
    """Motion parts the fade acts on (names from :data:`DRIVEN_KEYS`)."""
    flag_stitching: bool = True
    """Run the stitching network on the driven keypoints."""

    def __post_init__(self) -> None:
        # Sequences become tuples/tensors once, so later stages never re-parse user input.
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731
        set_("emo", _normalise_emo(self.emo))
        if isinstance(self.use_d_keys, Mapping):
            set_("use_d_keys", dict(self.use_d_keys))
        elif _is_sequence(self.use_d_keys):
            set_("use_d_keys", tuple(self.use_d_keys))
        for name in ("delta_eye_open_n", "fade_out_keys"):
            if _is_sequence(getattr(self, name)):
                set_(name, tuple(getattr(self, name)))
        for name in ("pitch_offsets", "yaw_offsets", "roll_offsets", "delta_eye_arr"):
            value = getattr(self, name)
            if isinstance(value, Tensor) or _is_sequence(value) or hasattr(value, "__array__"):
                set_(name, _as_float_tensor(name, value))
        self.validate()

    # -- resolved defaults --

    def driven_keys(self, is_image: bool) -> dict[str, float]:
        """Driven motion parts with their weights, after the image/video default."""
        keys = self.use_d_keys
        if keys is None:
            keys = IMAGE_DRIVEN_KEYS if is_image else VIDEO_DRIVEN_KEYS
        if isinstance(keys, Mapping):
            return {k: float(w) for k, w in keys.items()}
        return {k: 1.0 for k in keys}

    def drives_eyes(self, is_image: bool) -> bool:
        """Whether eyes follow the driving motion / blink table, after the image/video default."""
        return is_image if self.drive_eye is None else self.drive_eye

    # -- validation --

    def validate(self) -> None:
        """Raise :class:`InputError` naming the first option out of range."""
        self._check_emo()
        for name in ("eye_f0_mode", "relative_d", "flag_stitching", "sampler_compile"):
            _check(name, getattr(self, name), isinstance(getattr(self, name), bool), "True or False")
        _check("drive_eye", self.drive_eye, self.drive_eye is None or isinstance(self.drive_eye, bool),
               "None (image: yes, video: no), True or False")
        _check_int("steps", self.steps, 1, MAX_STEPS)
        _check_int("seed", self.seed, 0, MAX_SEED)
        _check_int("overlap_v2", self.overlap_v2, 0, LMDM_WINDOW - 1)
        _check_int("smo_k_d", self.smo_k_d, 1, MAX_FILTER_WIDTH)
        _check_int("fix_kp_cond", self.fix_kp_cond, 0, None)
        _check("sampler_precision", self.sampler_precision, self.sampler_precision in LMDM_PRECISION_CHOICES,
               f"one of {', '.join(LMDM_PRECISION_CHOICES)}")
        self._check_use_d_keys()
        self._check_blinks()
        for axis in ("pitch", "yaw", "roll"):
            for name in (f"delta_{axis}", f"alpha_{axis}"):
                value = getattr(self, name)
                _check(name, value, _is_real(value) and math.isfinite(value), "a finite number")
            offset = getattr(self, f"delta_{axis}")
            _check(f"delta_{axis}", offset, abs(offset) <= MAX_POSE_OFFSET, _OFFSET_RANGE)
            gain = getattr(self, f"alpha_{axis}")
            _check(f"alpha_{axis}", gain, abs(gain) <= MAX_POSE_GAIN,
                   f"a gain between {-MAX_POSE_GAIN:g} and {MAX_POSE_GAIN:g} (1 leaves the pose as is)")
            self._check_per_frame(f"{axis}_offsets")
        _check_int("fade_in", self.fade_in, 0, MAX_FRAME_COUNT)
        _check_int("fade_out", self.fade_out, 0, MAX_FRAME_COUNT)
        _check("fade_type", self.fade_type, self.fade_type in ("", "d0", "s"),
               '"" (no fade), "d0" (fade to the first generated frame) or "s" (fade to the source)')
        keys = self.fade_out_keys
        _check("fade_out_keys", keys, isinstance(keys, tuple) and len(keys) > 0 and _names_from(keys, DRIVEN_KEYS),
               f"a non-empty sequence of names from {DRIVEN_KEYS}")
        if self.fade_type == "" and (self.fade_in > 0 or self.fade_out > 0):
            raise InputError(
                f"MotionOptions.fade_in={self.fade_in} / fade_out={self.fade_out} have no effect with "
                f'fade_type="": set fade_type to "d0" or "s", or set both fades to 0.'
            )

    def _check_emo(self) -> None:
        emo = self.emo
        allowed = (f"a label 0-{NUM_EMOTIONS - 1}, a blend of 1-{NUM_EMOTIONS - 1} labels, "
                   f"per-frame label sets, or an (m, {NUM_EMOTIONS}) tensor of probabilities")
        if isinstance(emo, Tensor):
            ok = emo.ndim == 2 and emo.shape[0] > 0 and emo.shape[1] == NUM_EMOTIONS and emo.is_floating_point()
            _check("emo", emo, ok, allowed)
            _check("emo", emo, bool(torch.isfinite(emo).all()), "finite probabilities")
        elif isinstance(emo, tuple) and emo and all(isinstance(e, int) for e in emo):
            _check("emo", emo, len(emo) < NUM_EMOTIONS and all(map(_is_label, emo)), allowed)
        elif isinstance(emo, tuple) and emo and all(isinstance(e, tuple) for e in emo):
            _check("emo", emo, all(e and all(map(_is_label, e)) for e in emo), allowed)
        else:
            _check("emo", emo, _is_label(emo), allowed)

    def _check_use_d_keys(self) -> None:
        keys = self.use_d_keys
        if keys is None:
            return
        allowed = f"None, or names from {DRIVEN_KEYS} (a sequence, or a mapping name -> finite weight)"
        ok = isinstance(keys, (tuple, dict)) and _names_from(keys, DRIVEN_KEYS)
        if ok and isinstance(keys, dict):
            ok = all(_is_real(w) and math.isfinite(w) for w in keys.values())
        _check("use_d_keys", keys, ok, allowed)

    def _check_blinks(self) -> None:
        n = self.delta_eye_open_n
        gaps = isinstance(n, tuple) and len(n) > 0 and all(_is_int(v) and 0 < v <= MAX_FRAME_COUNT for v in n)
        ok = (_is_int(n) and -1 <= n <= MAX_FRAME_COUNT) or gaps
        _check("delta_eye_open_n", n, ok, "-1 (no blinks), 0 (random 60-100 frames), an int > 0, or a sequence "
               f"of ints > 0 (frame counts up to {MAX_FRAME_COUNT})")
        table = self.delta_eye_arr
        if table is not None:
            ok = isinstance(table, Tensor) and table.ndim == 2 and table.shape[0] > 0
            ok = ok and table.shape[1] == 3 * NUM_KP
            _check("delta_eye_arr", table, ok,
                   f"None or a (K, {3 * NUM_KP}) tensor of per-frame expression offsets (one blink)")
            _check("delta_eye_arr", table, bool(torch.isfinite(table).all()), "finite values")

    def _check_per_frame(self, name: str) -> None:
        value = getattr(self, name)
        if value is None:
            return
        ok = isinstance(value, Tensor) and value.ndim == 1 and value.is_floating_point()
        _check(name, value, ok, "None or a 1-D sequence of degrees, one per output frame")
        _check(name, value, bool(torch.isfinite(value).all()), "finite degrees")
        _check(name, value, bool((value.abs() <= MAX_POSE_OFFSET).all()), _OFFSET_RANGE)


_OFFSET_RANGE = f"degrees between {-MAX_POSE_OFFSET:g} and {MAX_POSE_OFFSET:g}"


def _check(name: str, value: Any, ok: bool, allowed: str) -> None:
    if not ok:
        shown = repr(value)
        if isinstance(value, Tensor):
            shown = f"<{value.dtype} tensor of shape {tuple(value.shape)}>"
        raise InputError(f"MotionOptions.{name}={shown} is not allowed: expected {allowed}.")


def _check_int(name: str, value: Any, low: int, high: Optional[int]) -> None:
    ok = _is_int(value) and value >= low and (high is None or value <= high)
    allowed = f"an integer >= {low}" if high is None else f"an integer in [{low}, {high}]"
    _check(name, value, ok, allowed)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _names_from(keys: Any, allowed: Sequence[str]) -> bool:
    return all(isinstance(k, str) and k in allowed for k in keys)


def _is_label(value: Any) -> bool:
    return _is_int(value) and 0 <= value < NUM_EMOTIONS


def _is_sequence(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str)


def _as_float_tensor(name: str, values: Any) -> Tensor:
    try:
        return torch.as_tensor(values, dtype=torch.float32)
    except (TypeError, ValueError) as exc:
        raise InputError(f"MotionOptions.{name} could not be read as numbers ({exc}); pass floats.") from None


def _normalise_emo(emo: Any) -> Any:
    """Tuples of ints / tuples of tuples; tensors and numpy arrays as float32 tensors."""
    if isinstance(emo, Tensor):
        return emo.float() if emo.is_floating_point() else emo
    if hasattr(emo, "__array__"):
        return torch.as_tensor(emo).float()
    if _is_sequence(emo):
        return tuple(tuple(e) if _is_sequence(e) else e for e in emo)
    return emo
