import dataclasses
import re

import numpy as np
import pytest
import torch

from ditto_core.errors import InputError
from ditto_core.motion.motion_options import MotionOptions


def test_defaults_match_ditto_offline():
    o = MotionOptions()
    assert (o.emo, o.steps, o.overlap_v2, o.smo_k_d, o.fix_kp_cond, o.seed) == (4, 25, 10, 3, 0, 0)
    assert (o.relative_d, o.flag_stitching, o.eye_f0_mode, o.drive_eye) == (True, True, False, None)
    assert (o.delta_eye_open_n, o.fade_type, o.fade_out_keys) == (0, "", ("exp",))
    assert o.delta_eye_arr is None


def test_image_and_video_defaults():
    o = MotionOptions()
    assert o.driven_keys(is_image=True) == {k: 1.0 for k in ("exp", "pitch", "yaw", "roll", "t")}
    assert o.driven_keys(is_image=False) == {"exp": 1.0}
    assert o.drives_eyes(is_image=True) and not o.drives_eyes(is_image=False)
    assert not MotionOptions(drive_eye=False).drives_eyes(is_image=True)
    assert MotionOptions(drive_eye=True).drives_eyes(is_image=False)
    assert MotionOptions(use_d_keys=["exp", "t"]).driven_keys(True) == {"exp": 1.0, "t": 1.0}
    assert MotionOptions(use_d_keys={"exp": 0.5}).driven_keys(False) == {"exp": 0.5}


def test_inputs_are_normalised():
    o = MotionOptions(emo=[[1], [2, 3]], delta_eye_open_n=[70, 80], fade_type="s", fade_out_keys=["exp", "yaw"],
                      yaw_offsets=[1.0, 2.5], delta_eye_arr=[[0.0] * 63] * 3)
    assert o.emo == ((1,), (2, 3))
    assert o.delta_eye_open_n == (70, 80)
    assert o.fade_out_keys == ("exp", "yaw")
    assert torch.equal(o.yaw_offsets, torch.tensor([1.0, 2.5]))
    assert o.delta_eye_arr.shape == (3, 63) and o.delta_eye_arr.dtype == torch.float32
    # Ditto's config stores the blink table as a float32 numpy array
    o = MotionOptions(delta_eye_arr=np.zeros((15, 63), np.float32), pitch_offsets=np.arange(3))
    assert o.delta_eye_arr.shape == (15, 63) and o.pitch_offsets.tolist() == [0.0, 1.0, 2.0]


def test_frozen_and_replace_revalidates():
    o = MotionOptions()
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.steps = 10
    with pytest.raises(InputError, match="MotionOptions.steps=0"):
        dataclasses.replace(o, steps=0)


@pytest.mark.parametrize(
    "field, value, expected",
    [
        ("emo", 8, "a label 0-7"),
        ("emo", -1, "a label 0-7"),
        ("emo", True, "a label 0-7"),
        ("emo", [0, 1, 2, 3, 4, 5, 6, 7], "a blend of 1-7 labels"),
        ("emo", [[0], []], "per-frame label sets"),
        ("emo", torch.rand(4, 7), r"tensor of shape \(4, 7\)>.*\(m, 8\)"),
        ("emo", torch.full((2, 8), float("nan")), "finite probabilities"),
        ("emo", "happy", "a label 0-7"),
        ("eye_f0_mode", 1, "True or False"),
        ("drive_eye", "yes", "None"),
        ("steps", 0, r"\[1, 1000\]"),
        ("steps", 1001, r"\[1, 1000\]"),
        ("steps", 2.5, r"\[1, 1000\]"),
        ("seed", -1, r"\[0, "),
        ("overlap_v2", 80, r"\[0, 79\]"),
        ("smo_k_d", 0, r"\[1, 1001\]"),
        ("smo_k_d", 10**19, r"\[1, 1001\]"),
        ("fix_kp_cond", -2, ">= 0"),
        ("use_d_keys", ("exp", "kp"), "names from"),
        ("use_d_keys", "exp", "names from"),
        ("use_d_keys", {"exp": float("nan")}, "finite weight"),
        ("use_d_keys", 5, "names from"),
        ("use_d_keys", [["exp"]], "names from"),
        ("use_d_keys", {1: 1.0}, "names from"),
        ("delta_eye_open_n", -2, "-1 \\(no blinks\\)"),
        ("delta_eye_open_n", [70, 0], "sequence of ints > 0"),
        ("delta_eye_open_n", 10**19, "frame counts up to 1000000"),
        ("delta_eye_open_n", [70, 10**19], "frame counts up to 1000000"),
        ("delta_eye_arr", torch.zeros(15, 62), r"shape \(15, 62\)>.*\(K, 63\)"),
        ("delta_pitch", float("inf"), "a finite number"),
        ("alpha_yaw", None, "a finite number"),
        ("alpha_pitch", 1e19, "a gain between -10 and 10"),
        ("alpha_roll", True, "a finite number"),
        ("roll_offsets", torch.zeros(3, 2), "1-D sequence of degrees"),
        ("pitch_offsets", [0.0, float("nan")], "finite degrees"),
        ("fade_in", -1, r"\[0, 1000000\]"),
        ("fade_out", 10**30, r"\[0, 1000000\]"),
        ("fade_type", "source", '"d0"'),
        ("fade_out_keys", ("exp", "kp"), "names from"),
        ("fade_out_keys", (), "non-empty"),
        ("fade_out_keys", [["exp"]], "names from"),
    ],
)
def test_bad_options_name_option_value_and_range(field, value, expected):
    with pytest.raises(InputError, match=f"MotionOptions.{field}=") as info:
        MotionOptions(**{field: value})
    assert re.search(expected, str(info.value)), str(info.value)


def test_fade_without_fade_type_is_rejected():
    with pytest.raises(InputError, match='fade_type=""'):
        MotionOptions(fade_in=10)
    assert MotionOptions(fade_in=10, fade_out=5, fade_type="d0").fade_in == 10
