"""Motion stitch: LMDM motion vectors + avatar -> per-frame source/driving keypoints.

Turns the sampled (T, 265) motion into the keypoint pairs the warp network animates, with
every user control applied, all frames at once on the device. Per frame, in Ditto's order:

1. mix: driven parts follow the generated motion, relative to its first frame by default;
   the rest (always the canonical keypoints) stay the source's;
2. expression lock: lips always follow the audio; the eyes follow it, or replay a blink
   table over the source's eyes, or stay the source's;
3. head-pose control: offsets in degrees and gains;
4. fade toward the first generated frame or the source;
5. gaze fix: eye keypoints compensate the head-pose change;
6. posing (``transform_keypoint``) and the stitching network.

Head angles are bin logits until a pose offset turns them into degrees, and gains and fades
act on whichever form the angle is in, as in Ditto (a gain on logits sharpens the pose
distribution rather than scaling the angle); an overall offset of exactly 0 counts as no
offset. Where Ditto would blend an angle in degrees with one still in logits (a fade of pose
keys to the source under a pose offset) it mixes incompatible quantities; here both sides are
converted to degrees first.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

import torch
from torch import Tensor, nn

from ..errors import InputError
from ..models.keypoints import (
    EYE_KP,
    LIP_KP,
    MOTION_DIM,
    NUM_KP,
    MotionInfo,
    bins_to_degrees,
    posed_keypoints,
    transform_keypoint,
    unpack_motion,
)
from ..registration.source_info import SourceInfo
from .blinks import blink_schedule
from .conditions import mirror_index
from .motion_options import MotionOptions
from .motion_sequence import MotionSequence


_ANGLES = ("pitch", "yaw", "roll")
_GAZE_YAW_GAIN = 0.26
_GAZE_PITCH_GAIN = 0.28
_GAZE_KP = (11, 15)
"""The two eye keypoints the gaze fix shifts (their x and y)."""
_GAZE_X_BIG, _GAZE_X_SMALL = 1e-3, 7e-4
"""x shift per scaled degree of yaw change; the two eyes get the two gains, swapped with the
turn direction, because a turned face foreshortens one eye more than the other."""
_GAZE_Y = -1e-3

STREAM_BLINK_FRAMES = 3000
"""Frames of the blink schedule of a stream, repeated: Ditto's length when none is given."""


@dataclass
class _Angle:
    """One head angle of T frames, in whichever form Ditto holds it at this stage."""

    logits: Tensor  # (T, 66) bin logits: the value where not in_degrees
    degrees: Tensor  # (T,) angle in degrees: the value where in_degrees
    in_degrees: Tensor  # (T,) bool

    @classmethod
    def from_logits(cls, logits: Tensor) -> "_Angle":
        n = logits.shape[0]
        return cls(logits, logits.new_zeros(n), torch.zeros(n, dtype=torch.bool, device=logits.device))

    def resolved(self) -> Tensor:
        """(T,) degrees."""
        return torch.where(self.in_degrees, self.degrees, bins_to_degrees(self.logits))

    @classmethod
    def controlled(cls, logits: Tensor, offset: Tensor, has_offset: Tensor, gain: float) -> "_Angle":
        """Pose control of generated logits: frames with an offset switch to ``degrees + offset``,
        then everything is scaled by ``gain`` (logits or degrees, whichever the frame holds)."""
        degrees = (bins_to_degrees(logits) + offset) * gain
        return cls(logits * gain, degrees, has_offset)

    def blended(self, target: "_Angle", alpha: Tensor) -> "_Angle":
        """``alpha * self + (1 - alpha) * target``; in logits only when both sides are logits."""
        both_logits = ~(self.in_degrees | target.in_degrees)
        logits = self.logits * alpha[:, None] + target.logits * (1 - alpha[:, None])
        degrees = self.resolved() * alpha + target.resolved() * (1 - alpha)
        return _Angle(logits, degrees, ~both_logits)

    def row(self, i: int) -> "_Angle":
        """Frame ``i`` repeated over all frames."""
        n = self.logits.shape[0]
        return _Angle(self.logits[i].expand(n, -1), self.degrees[i].expand(n), self.in_degrees[i].expand(n))


Part = Union[Tensor, _Angle]
"""A motion part of T frames: (T, d) tensor (scale, t, exp) or a head angle."""


def fade_alphas(
    num_frames: int, fade_in: int, fade_out: int, device: Optional[torch.device | str] = None
) -> Tensor:
    """(num_frames,) float32 weight of the driven motion against the fade target (1: no fade).

    Frame i < fade_in gets i / fade_in. The last ``fade_out + 1`` frames ramp from 1 down to
    exactly 0 on the final frame (the fade-out wins where the two overlap).
    """
    i = torch.arange(num_frames, device=device, dtype=torch.float32)
    alpha = torch.ones_like(i)
    if fade_in > 0:
        alpha = torch.where(i < fade_in, i / fade_in, alpha)
    if fade_out > 0:
        alpha = torch.where(i >= num_frames - fade_out - 1, (num_frames - 1 - i) / fade_out, alpha)
    return alpha


def _pose_offsets(options: MotionOptions, axis: str, frames: Tensor) -> tuple[Tensor, Tensor]:
    """Offsets of one angle (T,) float32 and whether one is given (T,) bool at output frame
    numbers ``frames`` (T,); per-frame values win on the frames they cover."""
    overall, per_frame = getattr(options, f"delta_{axis}"), getattr(options, f"{axis}_offsets")
    offsets = torch.full(frames.shape, float(overall), device=frames.device)
    given = torch.full(frames.shape, overall != 0, device=frames.device)
    if per_frame is not None:
        per_frame = per_frame.to(frames.device, torch.float32, non_blocking=True)
        covered = frames < per_frame.shape[0]
        offsets = torch.where(covered, per_frame[frames.clamp(max=per_frame.shape[0] - 1)], offsets)
        given = given | covered
    return offsets, given


def _kp_mask(keypoints: tuple[int, ...], device: torch.device) -> Tensor:
    """(63,) bool: the x, y, z entries of ``keypoints`` in a flattened (21, 3) array."""
    mask = torch.zeros(NUM_KP, 3, dtype=torch.bool)
    mask[list(keypoints)] = True
    # Built on the host: indexing a device tensor with a list would copy the list with a stream sync.
    return mask.flatten().to(device, non_blocking=True)


def _mix(
    source: MotionInfo, driving: MotionInfo, weights: dict[str, float], reference: Optional[MotionInfo]
) -> dict[str, Tensor]:
    """Driven parts from ``driving`` (relative to the one-frame ``reference`` unless it is None),
    the rest from ``source``."""
    mixed = {}
    for key in ("scale", *_ANGLES, "t", "exp"):
        s, d = getattr(source, key), getattr(driving, key)
        if key not in weights:
            mixed[key] = s
        elif reference is not None:
            mixed[key] = s + (d - getattr(reference, key)) * weights[key]
        else:
            mixed[key] = d * weights[key]
    return mixed


def _lock_expression(driven: Tensor, source: Tensor, drive_eye: bool, blink: Optional[Tensor]) -> Tensor:
    """(T, 63) expression: lips driven; eyes driven, source + blink offsets, or source."""
    device = driven.device
    follow = _kp_mask(LIP_KP, device)
    if drive_eye and blink is None:
        follow = follow | _kp_mask(EYE_KP, device)
    exp = torch.where(follow, driven, source)
    if drive_eye and blink is not None:
        exp = exp + torch.where(_kp_mask(EYE_KP, device), blink, 0.0)
    return exp


def _fix_gaze(exp: Tensor, pitch: Tensor, yaw: Tensor, pitch_s: Tensor, yaw_s: Tensor) -> Tensor:
    """Shift the eye keypoints with the head-pose change from the source (degrees, (T,))
    so the eyes keep looking where the source's did instead of turning with the head."""
    dx = (yaw - yaw_s) * _GAZE_YAW_GAIN
    dy = (pitch - pitch_s) * _GAZE_PITCH_GAIN
    turned = dx > 0
    x_gains = (torch.where(turned, _GAZE_X_SMALL, _GAZE_X_BIG), torch.where(turned, _GAZE_X_BIG, _GAZE_X_SMALL))
    exp = exp.clone()
    for kp, x_gain in zip(_GAZE_KP, x_gains):
        exp[:, 3 * kp : 3 * kp + 2] += torch.stack([dx * x_gain, dy * _GAZE_Y], dim=-1)
    return exp


def _blend(part: Part, target: Part, alpha: Tensor) -> Part:
    if isinstance(part, _Angle):
        return part.blended(target, alpha)
    return part * alpha[:, None] + target * (1 - alpha[:, None])


def _check_vectors(motion_vectors: Tensor) -> None:
    if motion_vectors.ndim != 2 or motion_vectors.shape[1] != MOTION_DIM or motion_vectors.shape[0] == 0:
        raise InputError(
            f"motion vectors have shape {tuple(motion_vectors.shape)}; expected (frames, {MOTION_DIM}) "
            f"with at least one frame, as produced by the LMDM sampler."
        )


def stitch_motion(
    motion_vectors: Tensor,
    source: SourceInfo,
    stitch_net: Optional[nn.Module],
    options: MotionOptions,
    generator: Optional[torch.Generator] = None,
    frames: Optional[Tensor] = None,
    reference: Optional[Tensor] = None,
    length: Optional[int] = None,
) -> MotionSequence:
    """Per-frame keypoints for warping, all T frames at once on the source's device.

    Args:
        motion_vectors: (T, 265) sampled motion (any float dtype; computed in float32).
        source: registered avatar; frame i uses source frame ``mirror_index(i, len(source))``.
        stitch_net: ``(kp_source (B, 21, 3), kp_driving (B, 21, 3)) -> (B, 21, 3)``; required
            when ``options.flag_stitching``.
        options: motion options (the stitch part).
        generator: draws the random blink gaps (``delta_eye_open_n == 0``); default: a CPU
            generator seeded with ``options.seed``.
        frames: (T,) int64 output frame numbers of the rows, for a stream stitched chunk by
            chunk (None: ``0 .. T-1``, a whole clip). A stream's length is unknown, so its
            blink schedule is laid out over :data:`STREAM_BLINK_FRAMES` frames and repeated,
            as Ditto does when it is not told the length; fades need the length and are refused.
        reference: (265,) motion vector that relative driving is measured from (None: row 0,
            the first generated frame); a stream passes its first frame to every chunk.
        length: with ``frames``, the frame count of the whole clip the rows belong to: a clip
            stitched chunk by chunk as its motion is sampled. Blinks are then laid out over the
            clip as for a whole-clip call, so the chunks join into exactly that result (leave
            ``generator`` None: each call then draws the same gaps from ``options.seed``).

    Returns:
        MotionSequence with (T, 21, 3) float32 ``kp_source`` / ``kp_driving`` and the
        (T,) source frame index.
    """
    _check_vectors(motion_vectors)
    if options.flag_stitching and stitch_net is None:
        raise InputError(
            "MotionOptions.flag_stitching is True but no stitching network was given: load "
            "stitch_network.pth with the other models, or set flag_stitching=False."
        )
    device = source.device
    num_frames = motion_vectors.shape[0]
    chunked = frames is not None
    streamed = chunked and length is None
    if chunked and options.fade_type:
        raise InputError(
            f"MotionOptions.fade_type={options.fade_type!r}: fades are stitched over a whole clip at once, not "
            'chunk by chunk (a stream does not even know its length); use fade_type="" for streaming.'
        )
    frames = torch.arange(num_frames, device=device) if frames is None else frames.to(device)
    index = mirror_index(frames, len(source))
    source_motion = source.motion.map(lambda x: x.to(device, torch.float32))
    per_frame_source = source_motion.map(lambda x: x[index])
    driving = unpack_motion(motion_vectors.to(device, torch.float32), per_frame_source.kp)
    d0 = None
    if options.relative_d:
        ref = motion_vectors[:1] if reference is None else reference.reshape(1, MOTION_DIM)
        d0 = unpack_motion(ref.to(device, torch.float32), per_frame_source.kp[:1])

    # 1. relative / absolute driving of the chosen parts
    mixed = _mix(per_frame_source, driving, options.driven_keys(source.is_image), d0)

    # 2. which expression entries follow the audio
    drive_eye = options.drives_eyes(source.is_image)
    blink = None
    if drive_eye and options.delta_eye_arr is not None:
        table = options.delta_eye_arr.to(device, torch.float32, non_blocking=True)
        if generator is None:
            generator = torch.Generator().manual_seed(options.seed)
        span = STREAM_BLINK_FRAMES if streamed else length or num_frames
        rows = blink_schedule(span, table.shape[0], options.delta_eye_open_n, generator, device)
        blink = table[rows[frames % span]]
    state: dict[str, Part] = {
        "scale": mixed["scale"],
        "t": mixed["t"],
        "exp": _lock_expression(mixed["exp"], per_frame_source.exp, drive_eye, blink),
    }

    # 3. head-pose offsets and gains
    for axis in _ANGLES:
        offsets, given = _pose_offsets(options, axis, frames)
        state[axis] = _Angle.controlled(mixed[axis], offsets, given, float(getattr(options, f"alpha_{axis}")))

    # 4. fade toward the first generated frame or the source
    if options.fade_type:
        if options.fade_type == "d0":
            target = {k: v.row(0) if isinstance(v, _Angle) else v[:1].expand_as(v) for k, v in state.items()}
        else:
            target = {k: getattr(per_frame_source, k) for k in ("scale", "t", "exp")}
            target.update({axis: _Angle.from_logits(getattr(per_frame_source, axis)) for axis in _ANGLES})
        alpha = fade_alphas(num_frames, options.fade_in, options.fade_out, device)
        for key in options.fade_out_keys:
            state[key] = _blend(state[key], target[key], alpha)

    # 5. gaze fix, relative to the pose of source frame 0
    pitch, yaw, roll = (state[axis].resolved() for axis in _ANGLES)
    exp = state["exp"]
    if drive_eye:
        pitch_s, yaw_s = bins_to_degrees(source_motion.pitch[:1]), bins_to_degrees(source_motion.yaw[:1])
        exp = _fix_gaze(exp, pitch, yaw, pitch_s, yaw_s)

    # 6. posing and stitching
    kp_source = posed_keypoints(source_motion)[index]
    kp_driving = transform_keypoint(per_frame_source.kp, exp, state["scale"], state["t"], pitch, yaw, roll)
    if options.flag_stitching:
        dtype = next(stitch_net.parameters()).dtype
        kp_driving = stitch_net(kp_source.to(dtype), kp_driving.to(dtype)).to(torch.float32)
    return MotionSequence(kp_source=kp_source, kp_driving=kp_driving, source_index=index)
