"""Every user-facing option of avatar registration, validated in one place."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Optional

from ..errors import InputError

MAX_SMOOTHING = 1001
"""Widest mean filter over a video source's frames (40 s at 25 fps): wider flattens any clip."""

MAX_SOURCE_SIDE = 8192
"""Largest ``max_size`` accepted: beyond it the 512 face crop gains nothing and memory explodes."""


@dataclass(frozen=True)
class RegistrationOptions:
    """How a portrait (or video) becomes a :class:`~ditto_core.registration.source_info.SourceInfo`.

    The crop options are Ditto's: the face crop is ``crop_scale`` times the landmark extent,
    shifted by ``crop_vx_ratio``/``crop_vy_ratio`` of its size along the face axes (negative
    ``vy`` = more forehead) and rotated upright when ``crop_flag_do_rot``.
    """

    crop_scale: float = 2.3
    crop_vx_ratio: float = 0.0
    crop_vy_ratio: float = -0.125
    crop_flag_do_rot: bool = True
    smo_k_s: int = 13
    """Temporal mean-filter width for a video source's motion (1 = off; even values act as k + 1)."""
    max_size: int = 1920
    """Frames whose longer side exceeds this are downscaled first (dimensions are kept even)."""
    face_index: Optional[int] = None
    """None: the largest face. An int picks among several faces numbered left to right from 0."""
    detect_face: bool = True
    """False: the image already is a face crop; it is used whole (letter-boxed to 512x512)."""

    def validate(self) -> "RegistrationOptions":
        """Return ``self`` or raise :class:`InputError` naming the bad option and its valid range."""
        _check(_is_real(self.crop_scale) and 1.0 <= self.crop_scale <= 5.0,
               f"crop_scale must be a number between 1.0 and 5.0 (Ditto uses 2.3), got {self.crop_scale!r}")
        for name in ("crop_vx_ratio", "crop_vy_ratio"):
            value = getattr(self, name)
            _check(_is_real(value) and -1.0 <= value <= 1.0,
                   f"{name} must be a number between -1.0 and 1.0 (a fraction of the crop size), got {value!r}")
        _check(isinstance(self.crop_flag_do_rot, bool),
               f"crop_flag_do_rot must be True or False (rotate the crop upright), got {self.crop_flag_do_rot!r}")
        _check(_is_int(self.smo_k_s) and 1 <= self.smo_k_s <= MAX_SMOOTHING,
               f"smo_k_s must be a whole number from 1 (no smoothing) to {MAX_SMOOTHING}, got {self.smo_k_s!r}")
        _check(_is_int(self.max_size) and 256 <= self.max_size <= MAX_SOURCE_SIDE,
               f"max_size must be a whole number of pixels between 256 and {MAX_SOURCE_SIDE}, got {self.max_size!r}")
        _check(self.face_index is None or (_is_int(self.face_index) and self.face_index >= 0),
               f"face_index must be None (largest face) or a face number >= 0, got {self.face_index!r}")
        return self

    def fingerprint(self) -> dict[str, Any]:
        """The options as plain JSON values: all of them change the result, so all key the cache."""
        return asdict(self)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    # NaN fails every comparison, so the range checks also refuse it.
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise InputError(f"Invalid registration option: {message}.")
