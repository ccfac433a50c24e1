import math

import pytest
import torch

from ditto_core.audio.audio_features import AudioFeatures
from ditto_core.errors import CheckpointError, InputError
from ditto_core.models.keypoints import MotionInfo
from ditto_core.motion.conditions import (
    ConditionBlocks,
    build_conditions,
    build_kp_condition,
    emotion_table,
    mirror_index,
    soften_emotion,
)
from ditto_core.motion.motion_options import MotionOptions
from ditto_core.registration.source_info import SourceInfo

COND_DIM = 1103


def random_source(num_frames: int, is_image: bool, seed: int = 0) -> SourceInfo:
    """A SourceInfo with random motion and eye measurements (tiny stand-ins for frames and f_s)."""
    g = torch.Generator().manual_seed(seed)
    randn = lambda *shape: torch.randn(*shape, generator=g)  # noqa: E731
    n = num_frames
    motion = MotionInfo(
        scale=1.4 + 0.1 * randn(n, 1),
        pitch=2 * randn(n, 66),
        yaw=2 * randn(n, 66),
        roll=2 * randn(n, 66),
        t=0.05 * randn(n, 3),
        exp=0.02 * randn(n, 63),
        kp=0.3 * randn(n, 63),
    )
    return SourceInfo(
        frames=torch.zeros(n, 4, 4, 3, dtype=torch.uint8),
        M_c2o=torch.eye(3).expand(n, 3, 3).clone(),
        f_s=torch.zeros(n, 1),
        motion=motion,
        eye_open=torch.rand(n, 2, generator=g),
        eye_ball=0.1 * randn(n, 6),
        is_image=is_image,
    )


def _audio(num_frames: int) -> AudioFeatures:
    feats = torch.arange(num_frames * 1024, dtype=torch.float32).reshape(num_frames, 1024)
    return AudioFeatures(features=feats, duration_s=num_frames / 25)


def test_mirror_index_hand_checked():
    got = mirror_index(torch.arange(9), 3)
    assert got.tolist() == [0, 1, 2, 2, 1, 0, 0, 1, 2]
    assert mirror_index(torch.arange(4), 1).tolist() == [0, 0, 0, 0]


def test_emotion_softening_hand_checked():
    e8 = math.exp(8)
    one = soften_emotion(4)
    assert one.dtype == torch.float32
    assert one[4].item() == pytest.approx(e8 / (e8 + 7), rel=1e-6)
    assert one[0].item() == pytest.approx(1 / (e8 + 7), rel=1e-6)
    blend = soften_emotion((3, 4))
    assert blend[3].item() == pytest.approx(e8 / (2 * e8 + 6), rel=1e-6)
    assert blend[4].item() == blend[3].item()
    assert blend[7].item() == pytest.approx(1 / (2 * e8 + 6), rel=1e-6)


def test_emotion_table_forms():
    assert emotion_table(MotionOptions(emo=2).emo).shape == (1, 8)
    per_frame = emotion_table(MotionOptions(emo=[[0], [1, 2]]).emo)
    assert per_frame.shape == (2, 8)
    assert torch.equal(per_frame[1], soften_emotion((1, 2)))
    raw = torch.rand(5, 8)
    assert torch.equal(emotion_table(MotionOptions(emo=raw).emo), raw)


def test_condition_layout_and_order():
    source = random_source(1, is_image=True)
    cond = build_conditions(_audio(6), source, MotionOptions(emo=5), COND_DIM)
    assert cond.shape == (6, COND_DIM) and cond.dtype == torch.float32
    assert torch.equal(cond[:, :1024], _audio(6).features)
    e8 = math.exp(8)
    expected_emo = torch.full((8,), 1 / (e8 + 7))
    expected_emo[5] = e8 / (e8 + 7)
    assert torch.allclose(cond[:, 1024:1032], expected_emo.expand(6, 8), rtol=1e-6)
    assert torch.equal(cond[:, 1032:1034], source.eye_open.expand(6, 2))
    assert torch.equal(cond[:, 1034:1040], source.eye_ball.expand(6, 6))
    assert torch.equal(cond[:, 1040:], source.motion.kp[:1].expand(6, 63))


def test_video_eyes_follow_the_mirror_loop():
    source = random_source(3, is_image=False)
    cond = build_conditions(_audio(8), source, MotionOptions(), COND_DIM)
    rows = [0, 1, 2, 2, 1, 0, 0, 1]
    assert torch.equal(cond[:, 1032:1034], source.eye_open[rows])
    assert torch.equal(cond[:, 1034:1040], source.eye_ball[rows])
    # sc is frame 0's canonical keypoints for every frame, not the looped frame's
    assert torch.equal(cond[:, 1040:], source.motion.kp[[0] * 8])


def test_eye_f0_mode_locks_eyes_to_frame_zero():
    source = random_source(3, is_image=False)
    cond = build_conditions(_audio(5), source, MotionOptions(eye_f0_mode=True), COND_DIM)
    assert torch.equal(cond[:, 1032:1034], source.eye_open[[0] * 5])
    assert torch.equal(cond[:, 1034:1040], source.eye_ball[[0] * 5])


def test_per_frame_emotions_loop_without_mirroring():
    source = random_source(1, is_image=True)
    cond = build_conditions(_audio(5), source, MotionOptions(emo=[[0], [1, 2]]), COND_DIM)
    first, second = soften_emotion(0), soften_emotion((1, 2))
    expected = torch.stack([first, second, first, second, first])
    assert torch.equal(cond[:, 1024:1032], expected)
    raw = torch.rand(3, 8)
    cond = build_conditions(_audio(4), source, MotionOptions(emo=raw), COND_DIM)
    assert torch.equal(cond[:, 1024:1032], raw[[0, 1, 2, 0]])


def test_blocks_can_be_left_out():
    blocks = ConditionBlocks(emo=False, eye_ball=False)
    assert blocks.width(1024) == 1024 + 2 + 63
    source = random_source(1, is_image=True)
    cond = build_conditions(_audio(2), source, MotionOptions(), 1024 + 2 + 63, blocks)
    assert torch.equal(cond[:, 1024:1026], source.eye_open.expand(2, 2))
    assert torch.equal(cond[:, 1026:], source.motion.kp[:1].expand(2, 63))


def test_width_mismatch_names_both_widths():
    source = random_source(1, is_image=True)
    with pytest.raises(CheckpointError, match=r"1059.*1103"):
        build_conditions(_audio(2), source, MotionOptions(), 1059)
    short = AudioFeatures(features=torch.zeros(2, 768), duration_s=0.08)
    with pytest.raises(CheckpointError, match="768"):
        build_conditions(short, source, MotionOptions(), COND_DIM)


def test_bad_audio_features_rejected():
    source = random_source(1, is_image=True)
    with pytest.raises(InputError, match="audio features"):
        build_conditions(AudioFeatures(torch.zeros(0, 1024), 0.0), source, MotionOptions(), COND_DIM)
    with pytest.raises(InputError, match="audio features"):
        build_conditions(AudioFeatures(torch.zeros(1024), 0.04), source, MotionOptions(), COND_DIM)


def test_kp_condition_is_packed_frame_zero():
    source = random_source(4, is_image=False)
    m = source.motion
    expected = torch.cat([m.scale[:1] - 1, m.pitch[:1], m.yaw[:1], m.roll[:1], m.t[:1], m.exp[:1]], dim=1)
    got = build_kp_condition(source)
    assert got.shape == (1, 265)
    assert torch.equal(got, expected)


@pytest.mark.gpu
def test_cuda_conditions_match_cpu_without_host_syncs():
    source = random_source(5, is_image=False)
    options = MotionOptions(emo=[[1], [2, 3], [4]])
    expected = build_conditions(_audio(90), source, options, COND_DIM)
    source_gpu, audio_gpu = source.to("cuda"), AudioFeatures(_audio(90).features.cuda(), 3.6)
    build_conditions(audio_gpu, source_gpu, options, COND_DIM)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        got = build_conditions(audio_gpu, source_gpu, options, COND_DIM)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert got.is_cuda and torch.equal(got.cpu(), expected)
