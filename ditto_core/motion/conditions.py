"""Per-frame conditions of the LMDM: what the motion diffusion is told about every frame.

Each output frame gets one row ``[audio | emotion | eye openness | eye-ball direction | source
keypoints]`` (1024 + 8 + 2 + 6 + 63 = 1103 wide for the released HuBERT model), and the first
window additionally gets the source's own motion as its keypoint condition.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

import torch
from torch import Tensor

from ..audio.audio_features import AudioFeatures
from ..errors import CheckpointError, InputError
from ..models.keypoints import NUM_KP, pack_motion
from ..registration.source_info import SourceInfo
from .motion_options import NUM_EMOTIONS, Emotion, MotionOptions

EMOTION_PEAK = 8.0
"""Logit given to the chosen emotion labels before the softmax (the others get 0)."""

EYE_OPEN_DIM = 2
EYE_BALL_DIM = 6


@dataclass(frozen=True)
class ConditionBlocks:
    """Which optional blocks follow the audio features in a condition row (all, for v0.4)."""

    emo: bool = True
    eye_open: bool = True
    eye_ball: bool = True
    sc: bool = True

    def width(self, audio_dim: int) -> int:
        """Total condition width for ``audio_dim``-wide audio features."""
        return audio_dim + sum(
            dim for used, dim in (
                (self.emo, NUM_EMOTIONS),
                (self.eye_open, EYE_OPEN_DIM),
                (self.eye_ball, EYE_BALL_DIM),
                (self.sc, 3 * NUM_KP),
            ) if used
        )


def mirror_index(frame: Tensor, size: int) -> Tensor:
    """Ping-pong a frame counter through ``size`` source frames: 0..n-1, n-1..0, 0..

    ``frame``: int64 tensor of output frame numbers (>= 0); returns source frame numbers of the
    same shape. A looping video source plays forwards then backwards, so it never jumps.
    """
    lap, pos = frame // size, frame % size
    return torch.where(lap % 2 == 0, pos, size - 1 - pos)


def soften_emotion(labels: Union[int, tuple[int, ...]]) -> Tensor:
    """Label(s) -> (8,) float32 probabilities: softmax of EMOTION_PEAK on the chosen labels.

    A one-hot would be out of distribution: the model was trained on soft emotion estimates.
    """
    logits = torch.zeros(NUM_EMOTIONS, dtype=torch.float32)
    logits[list(labels) if isinstance(labels, tuple) else labels] = EMOTION_PEAK
    return torch.softmax(logits, dim=0)


def emotion_table(emo: Emotion) -> Tensor:
    """Validated ``MotionOptions.emo`` -> (m, 8) float32 rows, looped over the output frames.

    A label or a blend of labels gives one row; per-frame label sets give one softened row per
    entry; a probability tensor is used as is.
    """
    if isinstance(emo, Tensor):
        return emo.to(torch.float32)
    if isinstance(emo, tuple) and isinstance(emo[0], tuple):
        return torch.stack([soften_emotion(labels) for labels in emo])
    return soften_emotion(emo)[None]


def build_conditions(
    audio: AudioFeatures,
    source: SourceInfo,
    options: MotionOptions,
    cond_dim: int,
    blocks: ConditionBlocks = ConditionBlocks(),
    first_frame: int = 0,
) -> Tensor:
    """Condition rows of every output frame: (T, cond_dim) float32 on the source's device.

    Args:
        audio: (T, 1024) audio features, one row per output frame.
        source: registered avatar; its eye measurements and frame-0 keypoints are used.
        options: ``emo`` and ``eye_f0_mode`` are read.
        cond_dim: condition width of the LMDM checkpoint (``cond_projection.weight.shape[1]``).
        blocks: which blocks the checkpoint was trained with.
        first_frame: output frame number of row 0 (a streamed window starts mid-stream; Ditto's
            online mode starts at a negative number for its silent lead-in, whose rows take
            frame 0's emotion and eyes).

    Emotion rows loop over the frames (frame i uses row ``i % m``). Eye rows of a video source
    follow the same mirror loop as the rendered frames; an image source, or ``eye_f0_mode``,
    uses frame 0 throughout.
    """
    feats = audio.features
    if feats.ndim != 2 or feats.shape[0] == 0:
        raise InputError(
            f"audio features have shape {tuple(feats.shape)}; expected (frames, channels) with at least "
            f"one frame. Encode at least 40 ms of speech."
        )
    width = blocks.width(feats.shape[1])
    if width != cond_dim:
        raise CheckpointError(
            f"the LMDM checkpoint expects {cond_dim}-wide conditions, but {feats.shape[1]}-wide audio "
            f"features with {blocks} make {width}. Use lmdm_v0.4_hubert.pth with HuBERT (1024-wide) features."
        )
    device = source.device
    num_frames = feats.shape[0]
    frames = torch.arange(first_frame, first_frame + num_frames, device=device).clamp_(min=0)
    parts = [feats.to(device, torch.float32)]
    if blocks.emo:
        # non_blocking: a blocking copy from pageable host memory would synchronise the stream
        table = emotion_table(options.emo).to(device, non_blocking=True)
        parts.append(table[frames % table.shape[0]])
    for used, values in ((blocks.eye_open, source.eye_open), (blocks.eye_ball, source.eye_ball)):
        if used:
            values = values.to(device, torch.float32)
            if values.shape[0] == 1 or options.eye_f0_mode:
                parts.append(values[:1].expand(num_frames, -1))
            else:
                parts.append(values[mirror_index(frames, values.shape[0])])
    if blocks.sc:
        parts.append(source.source_kp.to(device, torch.float32).expand(num_frames, -1))
    return torch.cat(parts, dim=1)


def build_kp_condition(source: SourceInfo) -> Tensor:
    """Keypoint condition of the first LMDM window: (1, 265) float32 on the source's device.

    The source's frame-0 motion (after the video smoothing) packed like the LMDM output, so
    the first window continues from the source pose. Later windows are conditioned on the
    last kept frame of the previous one; with ``fix_kp_cond = n > 0`` the sampler returns to
    this vector every n windows.
    """
    return pack_motion(source.motion.map(lambda x: x[:1].to(torch.float32)))
