import math

import pytest
import torch

from ditto_core.models import keypoints as K
from tests.parity import rel_l2


def _info(d: dict) -> K.MotionInfo:
    return K.MotionInfo(**{k: d[k] for k in ("scale", "pitch", "yaw", "roll", "t", "exp", "kp")})


def test_reference_keypoint_math(load_case):
    case = load_case("keypoint_math")
    for i, raw in enumerate(case["inputs"]["infos"]):
        info = _info(raw)
        degrees = torch.stack([K.bins_to_degrees(getattr(info, a)) for a in ("pitch", "yaw", "roll")], -1)
        assert rel_l2(degrees, case["outputs"]["pitch_yaw_roll_degree"][i].reshape(degrees.shape)) < 1e-5
        assert rel_l2(K.posed_keypoints(info), case["outputs"]["transform_keypoint"][i]) < 1e-5
        ref_vec = case["outputs"]["motion_vec_265"][i]
        assert rel_l2(K.pack_motion(info)[0], ref_vec) < 1e-6


def test_pack_unpack_round_trip():
    g = torch.Generator().manual_seed(0)
    vec = torch.randn(5, K.MOTION_DIM, generator=g)
    kp = torch.randn(1, 63, generator=g)
    info = K.unpack_motion(vec, kp)
    assert info.pitch.shape == (5, 66) and info.kp.shape == (5, 63)
    assert torch.allclose(K.pack_motion(info), vec, atol=1e-6)
    with pytest.raises(ValueError, match="265"):
        K.unpack_motion(vec[:, :-1], kp)


def test_rotation_matrix_hand_checked():
    zero = torch.zeros(1)
    # 90 degrees of yaw maps the row vector x=(1,0,0) onto -z (right-multiplied, transposed Ry).
    r = K.rotation_matrix(zero, torch.full((1,), 90.0), zero)[0]
    assert torch.allclose(torch.tensor([1.0, 0, 0]) @ r, torch.tensor([0.0, 0, -1]), atol=1e-6)
    # Rotations are orthonormal whatever the angles.
    g = torch.Generator().manual_seed(1)
    a = torch.rand(3, 7, generator=g) * 180 - 90
    rot = K.rotation_matrix(*a)
    assert torch.allclose(rot @ rot.transpose(-1, -2), torch.eye(3).expand(7, 3, 3), atol=1e-5)


def test_bins_to_degrees_peaked_logits():
    logits = torch.full((2, 66), -1e4)
    logits[0, 0] = 0  # first bin centre
    logits[1, 40] = 0
    assert torch.allclose(K.bins_to_degrees(logits), torch.tensor([-97.5, 40 * 3 - 97.5]))


def test_transform_keypoint_identity_pose():
    kp = torch.arange(63.0).reshape(1, 63) / 63
    out = K.transform_keypoint(kp, torch.zeros(1, 63), torch.full((1, 1), 2.0), torch.tensor([[0.1, 0.2, 5.0]]),
                               torch.zeros(1), torch.zeros(1), torch.zeros(1))
    expect = kp.reshape(1, 21, 3) * 2
    expect[..., 0] += 0.1
    expect[..., 1] += 0.2  # z translation is ignored
    assert torch.allclose(out, expect)
    assert not math.isnan(out.sum().item())
