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

A live runtime stitches the chunks of all its streams in one batch, so the work is split in
two. :func:`stitch_setup` derives, once per stream (or clip), everything that depends only on
its source and options: the source's motion and posed keypoints per source frame, the blink
schedule, the pose offsets, and every option as a tensor (masks, weights, flags).
:class:`StitchTable` stacks the setups of several streams. The per-frame math then runs on
rows, each naming its stream's slot in the table and its frame number: options become per-row
selections instead of Python branches, so rows of streams with different sources and options
go through the same kernels, with no host synchronisation. :func:`stitch_motion` (a clip, or
one stream's chunk) is a table of one setup; :func:`stitch_chunks` is a round of several
streams' chunks. Fades need a whole clip and are applied by :func:`stitch_motion` only.
"""
from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import InputError
from ..models.keypoints import (
    EYE_KP,
    LIP_KP,
    MOTION_COLUMNS,
    MOTION_DIM,
    NUM_BINS,
    NUM_KP,
    bins_to_degrees,
    posed_keypoints,
    transform_keypoint,
)
from ..registration.source_info import SourceInfo
from .blinks import blink_schedule
from .conditions import mirror_index
from .motion_options import MotionOptions
from .motion_sequence import MotionSequence


_ANGLES = ("pitch", "yaw", "roll")
_POSE = slice(MOTION_COLUMNS["pitch"].start, MOTION_COLUMNS["roll"].stop)
"""The three angles' bin logits in a packed motion vector, pitch, yaw, roll in turn."""
_SOURCE_KP = slice(MOTION_DIM, MOTION_DIM + 3 * NUM_KP)
"""A source row's canonical keypoints, after its motion in the packed layout."""
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

_FLOATS = {"weight": MOTION_DIM, "gain": 3, "offset": 3, "source_pose": 2}
"""A setup's float options: the mix weight of every motion column, the pose gains and overall
offsets (pitch, yaw, roll), and the pitch and yaw of source frame 0 in degrees (the gaze fix's)."""
_FLAGS = {"take": MOTION_DIM, "relative": 1, "has_offset": 3, "drive_eye": 1, "stitching": 1}
"""A setup's switches: the motion columns that follow the driving motion (driven parts, and of
the expression only the entries the lock lets through), relative driving, which angles have an
overall offset, the gaze fix, the stitching network."""
_INTS = {"source_start": 1, "source_count": 1, "blink_start": 1, "blink_span": 1, "pose_start": 3,
         "pose_length": 3}
"""Where a stream's variable-length parts start in a table's pools, and their lengths."""


def _packed(layout: dict[str, int], values: dict[str, Tensor], device: torch.device) -> Tensor:
    """``values`` (one per name of ``layout``, as wide as it says) in one vector on ``device``."""
    return torch.cat([values[name].to(device, non_blocking=True).reshape(width) for name, width in layout.items()])


def _unpacked(rows: Tensor, layout: dict[str, int]) -> dict[str, Tensor]:
    """(N, width of ``layout``) -> each name's (N, width) columns, as views."""
    return dict(zip(layout, rows.split(list(layout.values()), dim=-1)))


def _starts(sizes: list[int], first: int = 0) -> list[int]:
    """Where pieces of ``sizes`` laid one after another begin, the first at ``first``."""
    return list(itertools.accumulate(sizes, initial=first))[:-1]


def _pose_logits(packed: Tensor) -> Tensor:
    """(N, 265+) packed motion -> (N, 3, 66) pitch, yaw and roll bin logits, a view."""
    return packed[:, _POSE].unflatten(1, (len(_ANGLES), NUM_BINS))


@dataclass
class _Angle:
    """Head angles of T frames (one per frame, or pitch, yaw, roll per frame: ``shape`` (T,) or
    (T, 3)), each in whichever form Ditto holds it at this stage."""

    logits: Tensor  # (*shape, 66) bin logits: the value where not in_degrees
    degrees: Tensor  # shape: angle in degrees: the value where in_degrees
    in_degrees: Tensor  # shape, bool

    @classmethod
    def from_logits(cls, logits: Tensor) -> "_Angle":
        shape = logits.shape[:-1]
        return cls(logits, logits.new_zeros(shape), torch.zeros(shape, dtype=torch.bool, device=logits.device))

    def resolved(self) -> Tensor:
        """Degrees, of the angles' shape."""
        return torch.where(self.in_degrees, self.degrees, bins_to_degrees(self.logits))

    @classmethod
    def controlled(cls, logits: Tensor, offset: Tensor, has_offset: Tensor, gain: Tensor) -> "_Angle":
        """Pose control of generated logits: angles with an offset switch to ``degrees + offset``,
        then everything is scaled by ``gain`` (logits or degrees, whichever the angle holds)."""
        degrees = (bins_to_degrees(logits) + offset) * gain
        return cls(logits * gain[..., None], degrees, has_offset)

    def blended(self, target: "_Angle", alpha: Tensor) -> "_Angle":
        """``alpha * self + (1 - alpha) * target`` of one angle, alpha (T,); in logits only when
        both sides are logits."""
        both_logits = ~(self.in_degrees | target.in_degrees)
        logits = self.logits * alpha[:, None] + target.logits * (1 - alpha[:, None])
        degrees = self.resolved() * alpha + target.resolved() * (1 - alpha)
        return _Angle(logits, degrees, ~both_logits)

    def row(self, i: int) -> "_Angle":
        """Frame ``i`` repeated over all frames."""
        return _Angle(*(t[i].expand_as(t) for t in (self.logits, self.degrees, self.in_degrees)))

    def axis(self, i: int) -> "_Angle":
        """Angle ``i`` (0 pitch, 1 yaw, 2 roll) of (T, 3) angles, as views."""
        return _Angle(self.logits[:, i], self.degrees[:, i], self.in_degrees[:, i])

    def with_axis(self, i: int, angle: "_Angle") -> "_Angle":
        """These (T, 3) angles with angle ``i`` replaced."""
        out = _Angle(self.logits.clone(), self.degrees.clone(), self.in_degrees.clone())
        out.logits[:, i], out.degrees[:, i], out.in_degrees[:, i] = angle.logits, angle.degrees, angle.in_degrees
        return out


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


def _kp_mask(keypoints: tuple[int, ...]) -> Tensor:
    """(63,) bool on the host: the x, y, z entries of ``keypoints`` in a flattened (21, 3) array."""
    mask = torch.zeros(NUM_KP, 3, dtype=torch.bool)
    mask[list(keypoints)] = True
    return mask.flatten()


def _follow_mask(drive_eye: bool, blinks: bool) -> Tensor:
    """(63,) bool: the expression entries that follow the driving motion. Lips always; the eyes
    when they are driven and no blink table replays over the source's eyes."""
    follow = _kp_mask(LIP_KP)
    return follow | _kp_mask(EYE_KP) if drive_eye and not blinks else follow


def _flags(options: MotionOptions, weights: dict[str, float], drive_eye: bool, blinks: bool) -> dict[str, Tensor]:
    """The :data:`_FLAGS` of a setup, on the host."""
    take = torch.zeros(MOTION_DIM, dtype=torch.bool)
    for key in weights:
        take[MOTION_COLUMNS[key]] = True
    take[MOTION_COLUMNS["exp"]] &= _follow_mask(drive_eye, blinks)
    return {
        "take": take,
        "relative": torch.tensor(options.relative_d),
        "has_offset": torch.tensor([getattr(options, f"delta_{axis}") != 0 for axis in _ANGLES]),
        "drive_eye": torch.tensor(drive_eye),
        "stitching": torch.tensor(options.flag_stitching),
    }


def _column_weights(weights: dict[str, float]) -> Tensor:
    """(265,) float32: each driven part's weight over its columns (1 where nothing is driven)."""
    out = torch.ones(MOTION_DIM)
    for key, weight in weights.items():
        out[MOTION_COLUMNS[key]] = weight
    return out


def _blinks(
    options: MotionOptions, blinks: bool, span: int, generator: Optional[torch.Generator], device: torch.device
) -> tuple[Tensor, Tensor]:
    """(span,) int64 blink-table row of every schedule frame, and the (K, 265) float32 table as
    offsets of packed motion (eye entries of the expression only). Without blinks, one zero row."""
    table = options.delta_eye_arr
    if not blinks:
        return torch.zeros(1, dtype=torch.long, device=device), torch.zeros(1, MOTION_DIM, device=device)
    if generator is None:
        generator = torch.Generator().manual_seed(options.seed)
    rows = blink_schedule(span, table.shape[0], options.delta_eye_open_n, generator, device)
    eye = _kp_mask(EYE_KP).to(device, non_blocking=True)
    offsets = torch.zeros(table.shape[0], MOTION_DIM, device=device)
    offsets[:, MOTION_COLUMNS["exp"]] = torch.where(eye, table.to(device, torch.float32, non_blocking=True), 0.0)
    return rows, offsets


@dataclass(frozen=True)
class StitchSetup:
    """What the stitch of one stream (or clip) needs from its source and options, made once.

    Made by :func:`stitch_setup`; rows of frames are stitched with it through a
    :class:`StitchTable`.
    """

    # Each source frame's motion in the packed layout (scale as it is, not - 1), so that the mix is
    # one op over all parts, then its canonical keypoints: (N, 328) float32.
    source: Tensor
    posed: Tensor  # (N, 21, 3) float32: posed source keypoints (x_s) of each source frame
    floats: Tensor  # (width of _FLOATS,) float32
    flags: Tensor  # (width of _FLAGS,) bool
    blink_rows: Tensor  # (span,) int64: blink-table row of each frame of the schedule, repeated
    blink_table: Tensor  # (K, 265) float32 blink offsets of packed motion
    pose_offsets: tuple[Tensor, Tensor, Tensor]  # per-frame offsets in degrees of pitch, yaw, roll, (L,) each
    stitching: bool


def stitch_setup(
    source: SourceInfo,
    options: MotionOptions,
    stitch_net: Optional[nn.Module],
    blink_span: int,
    generator: Optional[torch.Generator] = None,
) -> StitchSetup:
    """One stream's (or clip's) :class:`StitchSetup`, on the source's device.

    Args:
        source, stitch_net, options: as for :func:`stitch_motion` (fades are not part of a setup).
        blink_span: frames the blink schedule is laid out over (a stream's repeats it).
        generator: draws the random blink gaps (default: a CPU generator seeded with ``options.seed``).
    """
    if options.flag_stitching and stitch_net is None:
        raise InputError(
            "MotionOptions.flag_stitching is True but no stitching network was given: load "
            "stitch_network.pth with the other models, or set flag_stitching=False."
        )
    device = source.device
    motion = source.motion.map(lambda x: x.to(device, torch.float32))
    weights = options.driven_keys(source.is_image)
    drive_eye = options.drives_eyes(source.is_image)
    blinks = drive_eye and options.delta_eye_arr is not None
    blink_rows, blink_table = _blinks(options, blinks, blink_span, generator, device)
    floats = {
        "weight": _column_weights(weights),
        "gain": torch.tensor([float(getattr(options, f"alpha_{axis}")) for axis in _ANGLES]),
        "offset": torch.tensor([float(getattr(options, f"delta_{axis}")) for axis in _ANGLES]),
        # the gaze fix measures the head turn from source frame 0
        "source_pose": torch.cat([bins_to_degrees(motion.pitch[:1]), bins_to_degrees(motion.yaw[:1])]),
    }
    empty = torch.zeros(0)
    per_frame = (getattr(options, f"{axis}_offsets") for axis in _ANGLES)
    return StitchSetup(
        source=torch.cat([*(getattr(motion, name) for name in MOTION_COLUMNS), motion.kp], dim=1),
        posed=posed_keypoints(motion),
        floats=_packed(_FLOATS, floats, device),
        flags=_packed(_FLAGS, _flags(options, weights, drive_eye, blinks), device),
        blink_rows=blink_rows,
        blink_table=blink_table,
        pose_offsets=tuple((empty if p is None else p).to(device, torch.float32, non_blocking=True) for p in per_frame),
        stitching=options.flag_stitching,
    )


@dataclass(frozen=True)
class StitchTable:
    """The setups of several streams stacked: rows of any of them are stitched in one call.

    A stream's setup is the table's row ``slot`` (its position in :meth:`of`'s list); its
    variable-length parts (source frames, blink schedule and table, per-frame pose offsets)
    lie one after another in pools, found through ``ints``.
    """

    source: Tensor  # (sum N, 328) the setups' ``source`` rows
    posed: Tensor  # (sum N, 21, 3)
    floats: Tensor  # (S, width of _FLOATS) float32
    flags: Tensor  # (S, width of _FLAGS) bool
    ints: Tensor  # (S, width of _INTS) int64
    blink_rows: Tensor  # (sum span,) int64: rows of ``blink_table`` (each setup's shifted to its table)
    blink_table: Tensor  # (sum K, 265) float32
    pose_offsets: Tensor  # (1 + sum L,) float32: a spare 0 first, read (and discarded) where no offset is given
    scale_one: Tensor  # (265,) float32: 1 in the scale column: packed motion holds scale - 1
    stitching: tuple[bool, ...]  # per setup: whether it runs the stitching network

    @classmethod
    def of(cls, setups: Sequence[StitchSetup]) -> "StitchTable":
        device = setups[0].source.device
        counts = [s.source.shape[0] for s in setups]
        spans = [s.blink_rows.shape[0] for s in setups]
        tables = _starts([s.blink_table.shape[0] for s in setups])
        lengths = [p.shape[0] for s in setups for p in s.pose_offsets]  # three per setup
        # An axis without per-frame offsets reads the spare 0 (and discards it).
        pose = [start if length else 0 for start, length in zip(_starts(lengths, first=1), lengths)]
        ints = [[*heads, *pose[3 * k : 3 * k + 3], *lengths[3 * k : 3 * k + 3]]
                for k, heads in enumerate(zip(_starts(counts), counts, _starts(spans), spans))]
        scale_one = torch.zeros(MOTION_DIM)
        scale_one[MOTION_COLUMNS["scale"]] = 1.0
        return cls(
            source=torch.cat([s.source for s in setups]),
            posed=torch.cat([s.posed for s in setups]),
            floats=torch.stack([s.floats for s in setups]),
            flags=torch.stack([s.flags for s in setups]),
            # Made on the host (sizes are known there) and copied once.
            ints=torch.tensor(ints, dtype=torch.long).to(device, non_blocking=True),
            blink_rows=torch.cat([s.blink_rows + start for s, start in zip(setups, tables)]),
            blink_table=torch.cat([s.blink_table for s in setups]),
            pose_offsets=torch.cat([torch.zeros(1, device=device), *(p for s in setups for p in s.pose_offsets)]),
            scale_one=scale_one.to(device, non_blocking=True),
            stitching=tuple(s.stitching for s in setups),
        )

    def rows(self, slots: Tensor, frames: Tensor) -> "_Rows":
        """What rows of streams ``slots`` (N,) at output frames ``frames`` (N,) need, gathered."""
        ints = _unpacked(self.ints[slots], _INTS)
        floats = _unpacked(self.floats[slots], _FLOATS)
        flags = _unpacked(self.flags[slots], _FLAGS)
        index = mirror_index(frames, ints["source_count"][:, 0])
        source_row = ints["source_start"][:, 0] + index
        blink = self.blink_table[self.blink_rows[ints["blink_start"][:, 0] + frames % ints["blink_span"][:, 0]]]
        # Per-frame offsets win on the frames they cover; elsewhere the overall offset.
        frame, length = frames[:, None], ints["pose_length"]  # (N, 1), (N, 3)
        covered = frame < length
        offset = self.pose_offsets[ints["pose_start"] + torch.minimum(frame, length - 1).clamp(min=0)]
        offset = torch.where(covered, offset, floats["offset"])
        return _Rows(
            source=self.source[source_row], kp_source=self.posed[source_row], source_index=index, blink=blink,
            offset=offset, has_offset=flags["has_offset"] | covered, floats=floats, flags=flags,
        )


@dataclass
class _Rows:
    """N rows of a :class:`StitchTable`: each frame's share of its stream's setup."""

    source: Tensor  # (N, 328) the source frame shown
    kp_source: Tensor  # (N, 21, 3) its posed keypoints
    source_index: Tensor  # (N,) int64 its index in its source
    blink: Tensor  # (N, 265) blink offset of packed motion
    offset: Tensor  # (N, 3) pose offsets in degrees
    has_offset: Tensor  # (N, 3) bool
    floats: dict[str, Tensor]  # _FLOATS, (N, width) each
    flags: dict[str, Tensor]  # _FLAGS, (N, width) each


Part = Tensor | _Angle
"""A motion part of T frames: (T, d) tensor (scale, t, exp) or the head angles (T, 3)."""


def _driven(rows: _Rows, vectors: Tensor, references: Tensor, scale_one: Tensor) -> dict[str, Part]:
    """Steps 1 to 3 for every row: the mix, the expression lock and the pose control.

    ``vectors``, ``references``: (N, 265) float32 motion of each row and the motion its relative
    driving is measured from. Returns ``scale`` (N, 1), ``t`` (N, 3), ``exp`` (N, 63) and ``pose``.
    """
    source = rows.source[:, :MOTION_DIM]
    driving, reference = vectors + scale_one, references + scale_one
    weight = rows.floats["weight"]
    mixed = torch.where(rows.flags["relative"], source + (driving - reference) * weight, driving * weight)
    # The lock is part of "take": a locked expression entry stays the source's, as an undriven part does.
    mixed = torch.where(rows.flags["take"], mixed, source) + rows.blink
    state: dict[str, Part] = {key: mixed[:, MOTION_COLUMNS[key]] for key in ("scale", "t", "exp")}
    state["pose"] = _Angle.controlled(_pose_logits(mixed), rows.offset, rows.has_offset, rows.floats["gain"])
    return state


def _faded(state: dict[str, Part], rows: _Rows, options: MotionOptions) -> dict[str, Part]:
    """Step 4 over a whole clip: the fade toward its first generated frame or the source."""
    if options.fade_type == "d0":
        target = {k: v.row(0) if isinstance(v, _Angle) else v[:1].expand_as(v) for k, v in state.items()}
    else:
        source = rows.source
        target = {key: source[:, MOTION_COLUMNS[key]] for key in ("scale", "t", "exp")}
        target["pose"] = _Angle.from_logits(_pose_logits(source))
    num_frames = rows.source.shape[0]
    alpha = fade_alphas(num_frames, options.fade_in, options.fade_out, rows.source.device)
    state = dict(state)
    for key in options.fade_out_keys:
        if key in _ANGLES:
            i = _ANGLES.index(key)
            state["pose"] = state["pose"].with_axis(i, state["pose"].axis(i).blended(target["pose"].axis(i), alpha))
        else:
            state[key] = state[key] * alpha[:, None] + target[key] * (1 - alpha[:, None])
    return state


def _fix_gaze(exp: Tensor, pitch: Tensor, yaw: Tensor, pitch_s: Tensor, yaw_s: Tensor) -> Tensor:
    """Shift the eye keypoints with the head-pose change from the source (degrees, (T,); the
    source's (1,) or one per row) so the eyes keep looking where the source's did instead of
    turning with the head."""
    dx = (yaw - yaw_s) * _GAZE_YAW_GAIN
    dy = (pitch - pitch_s) * _GAZE_PITCH_GAIN
    turned = dx > 0
    x_gains = (torch.where(turned, _GAZE_X_SMALL, _GAZE_X_BIG), torch.where(turned, _GAZE_X_BIG, _GAZE_X_SMALL))
    exp = exp.clone()
    for kp, x_gain in zip(_GAZE_KP, x_gains):
        exp[:, 3 * kp : 3 * kp + 2] += torch.stack([dx * x_gain, dy * _GAZE_Y], dim=-1)
    return exp


def _keypoints(rows: _Rows, state: dict[str, Part], stitch_net: Optional[nn.Module],
               stitching: tuple[bool, ...]) -> Tensor:
    """Steps 5 and 6 for every row: the gaze fix, posing and the stitching network: (N, 21, 3)."""
    pitch, yaw, roll = state["pose"].resolved().unbind(1)
    pitch_s, yaw_s = rows.floats["source_pose"].unbind(1)
    exp = torch.where(rows.flags["drive_eye"], _fix_gaze(state["exp"], pitch, yaw, pitch_s, yaw_s), state["exp"])
    kp_driving = transform_keypoint(rows.source[:, _SOURCE_KP], exp, state["scale"], state["t"], pitch, yaw, roll)
    if not any(stitching):
        return kp_driving
    dtype = next(stitch_net.parameters()).dtype
    stitched = stitch_net(rows.kp_source.to(dtype), kp_driving.to(dtype)).to(torch.float32)
    return stitched if all(stitching) else torch.where(rows.flags["stitching"][:, :, None], stitched, kp_driving)


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
    chunked = frames is not None
    if chunked and options.fade_type:
        raise InputError(
            f"MotionOptions.fade_type={options.fade_type!r}: fades are stitched over a whole clip at once, not "
            'chunk by chunk (a stream does not even know its length); use fade_type="" for streaming.'
        )
    num_frames = motion_vectors.shape[0]
    span = STREAM_BLINK_FRAMES if chunked and length is None else length or num_frames
    table = StitchTable.of([stitch_setup(source, options, stitch_net, span, generator)])
    device = source.device
    frames = torch.arange(num_frames, device=device) if frames is None else frames.to(device)
    vectors = motion_vectors.to(device, torch.float32)
    reference = vectors[:1] if reference is None else reference.reshape(1, MOTION_DIM).to(device, torch.float32)
    rows = table.rows(torch.zeros_like(frames), frames)
    state = _driven(rows, vectors, reference.expand(num_frames, -1), table.scale_one)
    if options.fade_type:
        state = _faded(state, rows, options)
    kp_driving = _keypoints(rows, state, stitch_net, table.stitching)
    return MotionSequence(kp_source=rows.kp_source, kp_driving=kp_driving, source_index=rows.source_index)


@dataclass(frozen=True)
class StitchChunk:
    """Consecutive frames of one stream, for :func:`stitch_chunks`."""

    slot: int  # the stream's setup in the table
    first_frame: int  # output frame number of the first row
    vectors: Tensor  # (k, 265) motion vectors of the frames
    reference: Tensor  # (265,) the stream's relative-driving reference (its first generated frame)


def chunk_inputs(table: StitchTable, chunks: Sequence[StitchChunk], rows: int) -> tuple[Tensor, Tensor, Tensor]:
    """The rows of a round's chunks, as :func:`stitch_rows` takes them, padded to ``rows`` rows.

    Returns (2, rows) int64 slots and frame numbers, and (rows, 265) float32 motion vectors and
    references. Padding rows (a graph replays one row count for rounds of several sizes) are
    frame 0 of slot 0 with zero motion: stitched like any row, then dropped.
    """
    sizes = [chunk.vectors.shape[0] for chunk in chunks]
    pad = rows - sum(sizes)
    owners = [n for n, size in enumerate(sizes) for _ in range(size)] + [0] * pad
    slots = [chunks[n].slot for n in owners[: rows - pad]] + [0] * pad
    frames = [chunk.first_frame + i for chunk, size in zip(chunks, sizes) for i in range(size)] + [0] * pad
    # Made on the host, where the frame numbers are, and copied in one go: no per-chunk arange.
    index = torch.tensor([slots, frames, owners], dtype=torch.long).to(table.ints.device, non_blocking=True)
    vectors = F.pad(torch.cat([chunk.vectors for chunk in chunks]).to(torch.float32), (0, 0, 0, pad))
    references = torch.stack([chunk.reference for chunk in chunks]).to(torch.float32)[index[2]]
    return index[:2], vectors, references


def stitch_rows(
    table: StitchTable, stitch_net: Optional[nn.Module], index: Tensor, vectors: Tensor, references: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """Every row of :func:`chunk_inputs`: (rows, 21, 3) ``kp_source`` and ``kp_driving``, (rows,) source index.

    Fixed shapes and no host synchronisation: a CUDA graph can record it.
    """
    rows = table.rows(*index)
    kp_driving = _keypoints(rows, _driven(rows, vectors, references, table.scale_one), stitch_net, table.stitching)
    return rows.kp_source, kp_driving, rows.source_index


def split_chunks(stitched: tuple[Tensor, Tensor, Tensor], sizes: Sequence[int]) -> list[MotionSequence]:
    """:func:`stitch_rows`' rows back into one sequence per chunk (padding rows dropped)."""
    parts = (t.split([*sizes, t.shape[0] - sum(sizes)])[:-1] for t in stitched)
    return [MotionSequence(kp_source=s, kp_driving=d, source_index=i) for s, d, i in zip(*parts)]


def stitch_chunks(table: StitchTable, chunks: Sequence[StitchChunk], stitch_net: Optional[nn.Module],
                  rows: Optional[int] = None) -> list[MotionSequence]:
    """The chunks of several streams (a live round) stitched as one batch: one sequence per chunk.

    Each chunk's frames get what :func:`stitch_motion` with ``frames`` and ``reference`` gives
    them (a stream's blink schedule is its setup's, repeated), through kernels whose number does
    not depend on how many streams there are. ``rows``: pad the batch to that many rows (None:
    the chunks' frames).
    """
    sizes = [chunk.vectors.shape[0] for chunk in chunks]
    if not sizes:
        return []
    inputs = chunk_inputs(table, chunks, sum(sizes) if rows is None else rows)
    return split_chunks(stitch_rows(table, stitch_net, *inputs), sizes)
