"""Motion stitch: hand-checked pieces, and the vectorised stitch against a per-frame loop.

The loop (``_reference_stitch``) follows Ditto's MotionStitch frame by frame in float64 numpy
with dicts, the way the reference does, so every option combination is checked against an
independent formulation.
"""
import copy
import itertools
import math
import random

import numpy as np
import pytest
import torch

from ditto_core.errors import InputError
from ditto_core.models.stitch_network import StitchingNetwork
from ditto_core.motion import motion_stitch as ms
from ditto_core.motion.blinks import OPEN_MAX, OPEN_MIN, blink_schedule
from ditto_core.motion.motion_options import MotionOptions
from ditto_core.motion.motion_stitch import fade_alphas, stitch_motion
from tests.parity import rel_l2
from tests.test_conditions import random_source

EYE = [11, 13, 15, 16, 18]
LIP = [6, 12, 14, 17, 19, 20]
ANGLES = ("pitch", "yaw", "roll")


# ----------------------------------------------------------------------------- hand-checked


def test_fade_alphas_hand_checked():
    assert fade_alphas(10, 4, 0).tolist() == pytest.approx([0, 0.25, 0.5, 0.75, 1, 1, 1, 1, 1, 1])
    # fade-out covers fade_out + 1 frames and ends at exactly 0
    assert fade_alphas(10, 0, 3).tolist() == pytest.approx([1, 1, 1, 1, 1, 1, 1, 2 / 3, 1 / 3, 0])
    # overlap: the fade-out wins
    assert fade_alphas(5, 4, 3).tolist() == pytest.approx([0, 1, 2 / 3, 1 / 3, 0])
    # a fade-out longer than the video starts part-way down the ramp
    assert fade_alphas(3, 0, 5).tolist() == pytest.approx([0.4, 0.2, 0])


def test_blink_schedule_fixed_hand_checked():
    blink = list(range(15))
    got = blink_schedule(40, 15, 5).tolist()
    assert got == [0] * 5 + blink + [0] * 20  # next start 5+15+5 = 25 is not < 40-15
    got = blink_schedule(40, 15, (3, 4, 7)).tolist()
    assert got == [0] * 3 + blink + [0] * 4 + blink + [0] * 3  # starts 3, 22; last allowed < 25
    assert blink_schedule(40, 15, -1).tolist() == [0] * 40
    assert blink_schedule(10, 15, 2).tolist() == [0] * 10  # too short for any blink


def _sequential_schedule(num_frames, blink_len, start, end, gaps):
    """Ditto's while loop over blinks; ``gaps`` yields the open-eye runs after each blink."""
    idx = [0] * num_frames
    last = num_frames - max(end, blink_len)
    cur = start
    while cur < last:
        idx[cur:cur + blink_len] = list(range(blink_len))
        cur += blink_len + next(gaps)
    return idx


def _sequential_random_schedule(num_frames, blink_len, draws):
    """Random gaps consumed one by one in the documented order: start, end, then each gap."""
    draws = iter(draws.tolist())
    start, end = next(draws), next(draws)
    return _sequential_schedule(num_frames, blink_len, start, end, draws)


def _sequential_fixed_schedule(num_frames, blink_len, open_n):
    if open_n == -1:
        return [0] * num_frames
    cycle = [open_n] if isinstance(open_n, int) else list(open_n)
    gaps = (cycle[k % len(cycle)] for k in itertools.count(1))
    return _sequential_schedule(num_frames, blink_len, cycle[0], cycle[-1], gaps)


@pytest.mark.parametrize("num_frames", [50, 200, 1000, 3000])
def test_random_blinks_match_sequential_loop(num_frames):
    got = blink_schedule(num_frames, 15, 0, torch.Generator().manual_seed(7))
    draws = torch.randint(OPEN_MIN, OPEN_MAX + 1, (500,), generator=torch.Generator().manual_seed(7))
    assert got.tolist() == _sequential_random_schedule(num_frames, 15, draws)


def test_random_blinks_deterministic_and_seeded():
    a = blink_schedule(1000, 15, 0, torch.Generator().manual_seed(3))
    b = blink_schedule(1000, 15, 0, torch.Generator().manual_seed(3))
    c = blink_schedule(1000, 15, 0, torch.Generator().manual_seed(4))
    assert torch.equal(a, b) and not torch.equal(a, c)
    starts = torch.nonzero(a == 1).flatten() - 1
    assert len(starts) >= 8
    assert OPEN_MIN <= starts[0] <= OPEN_MAX
    assert (starts.diff() - 15).min() >= OPEN_MIN and (starts.diff() - 15).max() <= OPEN_MAX
    assert starts[-1] < 1000 - OPEN_MIN  # the video ends with open eyes


def test_gaze_fix_hand_checked():
    exp = torch.zeros(2, 63)
    pitch = torch.tensor([-5.0, 0.0])
    yaw = torch.tensor([10.0, -10.0])
    got = ms._fix_gaze(exp, pitch, yaw, torch.zeros(1), torch.zeros(1))
    # dx = 10 * 0.26 = 2.6 (turned: 0.0007 on kp 11 x, 0.001 on kp 15 x); dy = -5 * 0.28 = -1.4
    assert got[0, 33].item() == pytest.approx(2.6 * 0.0007)
    assert got[0, 45].item() == pytest.approx(2.6 * 0.001)
    assert got[0, 34].item() == pytest.approx(0.0014) and got[0, 46].item() == pytest.approx(0.0014)
    assert got[1, 33].item() == pytest.approx(-2.6 * 0.001)
    assert got[1, 45].item() == pytest.approx(-2.6 * 0.0007)
    untouched = [c for c in range(63) if c not in (33, 34, 45, 46)]
    assert got[:, untouched].abs().max() == 0


def _locked_expression(drive_eye, blink):
    """Row 0's expression after the mix and the lock: source 2, driving 1 (absolute), blink table ``blink``."""
    src = _neutral_source()
    src.motion.exp.fill_(2.0)
    table = None if blink is None else torch.full((1, 63), blink)
    opts = MotionOptions(use_d_keys=("exp",), relative_d=False, drive_eye=drive_eye, delta_eye_arr=table,
                         delta_eye_open_n=-1, flag_stitching=False)
    stitch = ms.StitchTable.of([ms.stitch_setup(src, opts, None, blink_span=1)])
    rows = stitch.rows(torch.zeros(1, dtype=torch.long), torch.zeros(1, dtype=torch.long))
    vectors = torch.zeros(1, 265)
    vectors[:, 202:] = 1.0
    return ms._driven(rows, vectors, vectors, stitch.scale_one)["exp"]


def test_expression_lock_hand_checked():
    as_kp = lambda e: e.reshape(21, 3)[:, 0].tolist()  # noqa: E731
    lips_only = [1.0 if k in LIP else 2.0 for k in range(21)]
    assert as_kp(_locked_expression(False, None)) == lips_only
    assert as_kp(_locked_expression(True, None)) == [1.0 if k in LIP + EYE else 2.0 for k in range(21)]
    with_blink = [1.0 if k in LIP else 2.5 if k in EYE else 2.0 for k in range(21)]
    assert as_kp(_locked_expression(True, 0.5)) == with_blink
    assert as_kp(_locked_expression(False, 0.5)) == lips_only  # eyes not driven: no blinks either


def _neutral_source():
    """One image frame with zero pose logits (0 degrees), unit scale, no t/exp."""
    src = random_source(1, is_image=True)
    m = src.motion
    for name in ("pitch", "yaw", "roll", "t", "exp"):
        getattr(m, name).zero_()
    m.scale.fill_(1.0)
    return src


def test_relative_and_absolute_translation_hand_checked():
    src = _neutral_source()
    vec = torch.zeros(2, 265)
    vec[:, 199:202] = torch.tensor([[0.1, 0.0, 0.0], [0.3, 0.2, 0.5]])
    opts = MotionOptions(use_d_keys=("t",), flag_stitching=False)
    kp = src.motion.kp.reshape(21, 3)
    rel = stitch_motion(vec, src, None, opts).kp_driving
    assert torch.allclose(rel[0], kp, atol=1e-6)  # frame 0 is the source itself
    assert torch.allclose(rel[1] - rel[0], torch.tensor([0.2, 0.2, 0.0]).expand(21, 3), atol=1e-6)  # no z shift
    absolute = stitch_motion(vec, src, None, MotionOptions(use_d_keys=("t",), relative_d=False, flag_stitching=False))
    assert torch.allclose(absolute.kp_driving[1], kp + torch.tensor([0.3, 0.2, 0.0]), atol=1e-6)


def test_pose_offset_and_gain_hand_checked():
    src = _neutral_source()
    src.motion.kp.zero_()
    src.motion.kp[0, :3] = torch.tensor([1.0, 0.0, 0.0])
    vec = torch.zeros(1, 265)
    base = dict(drive_eye=False, flag_stitching=False)
    # +60 degrees of yaw (the largest offset allowed) turns x towards -z
    c, s = 0.5, math.sqrt(3) / 2
    got = stitch_motion(vec, src, None, MotionOptions(delta_yaw=60.0, **base)).kp_driving[0, 0]
    assert torch.allclose(got, torch.tensor([c, 0.0, -s]), atol=1e-5)
    # the gain scales the offset angle: 30 degrees
    got = stitch_motion(vec, src, None, MotionOptions(delta_yaw=60.0, alpha_yaw=0.5, **base)).kp_driving[0, 0]
    assert torch.allclose(got, torch.tensor([s, 0.0, -c]), atol=1e-5)
    # a per-frame offset replaces the overall one on the frames it covers
    two = stitch_motion(torch.zeros(2, 265), src, None,
                        MotionOptions(delta_yaw=60.0, yaw_offsets=[0.0], **base)).kp_driving[:, 0]
    assert torch.allclose(two, torch.tensor([[1.0, 0.0, 0.0], [c, 0.0, -s]]), atol=1e-5)
    # without an offset the gain acts on the bin logits: gain 0 flattens them to 0 degrees
    peaked = torch.zeros(1, 265)
    peaked[0, 67 + 50] = 30.0  # yaw concentrated on bin 50 = 52.5 degrees
    turned = stitch_motion(peaked, src, None, MotionOptions(use_d_keys=("yaw",), relative_d=False, **base))
    flat = stitch_motion(peaked, src, None, MotionOptions(use_d_keys=("yaw",), relative_d=False, alpha_yaw=0.0, **base))
    rad = math.radians(52.5)
    assert torch.allclose(turned.kp_driving[0, 0], torch.tensor([math.cos(rad), 0.0, -math.sin(rad)]), atol=1e-4)
    assert torch.allclose(flat.kp_driving[0, 0], torch.tensor([1.0, 0.0, 0.0]), atol=1e-5)


def test_video_source_index_and_default_keys():
    src = random_source(3, is_image=False, seed=1)
    vec = torch.randn(8, 265, generator=torch.Generator().manual_seed(2))
    out = stitch_motion(vec, src, None, MotionOptions(flag_stitching=False))
    assert out.source_index.tolist() == [0, 1, 2, 2, 1, 0, 0, 1]
    # video default: only the expression is driven, so the pose and t are the looped source's
    from ditto_core.models.keypoints import posed_keypoints

    assert torch.allclose(out.kp_source, posed_keypoints(src.motion)[out.source_index], atol=1e-6)
    assert out.kp_driving.shape == (8, 21, 3) and out.kp_driving.dtype == torch.float32


def test_errors_are_actionable():
    src = random_source(1, is_image=True)
    with pytest.raises(InputError, match="flag_stitching"):
        stitch_motion(torch.zeros(3, 265), src, None, MotionOptions())
    with pytest.raises(InputError, match=r"\(frames, 265\)"):
        stitch_motion(torch.zeros(3, 264), src, None, MotionOptions(flag_stitching=False))


# ------------------------------------------------------------- per-frame reference loop


def _deg(v):
    v = np.asarray(v, dtype=np.float64).reshape(-1)
    if v.size == 1:
        return float(v[0])
    p = np.exp(v - v.max())
    return float((p / p.sum()) @ np.arange(66) * 3 - 97.5)


def _pose_kp(info):
    x, y, z = (math.radians(_deg(info[a])) for a in ANGLES)
    rx = np.array([[1, 0, 0], [0, math.cos(x), -math.sin(x)], [0, math.sin(x), math.cos(x)]])
    ry = np.array([[math.cos(y), 0, math.sin(y)], [0, 1, 0], [-math.sin(y), 0, math.cos(y)]])
    rz = np.array([[math.cos(z), -math.sin(z), 0], [math.sin(z), math.cos(z), 0], [0, 0, 1]])
    rot = (rz @ ry @ rx).T
    out = (info["kp"].reshape(21, 3) @ rot + info["exp"].reshape(21, 3)) * info["scale"].reshape(())
    out[:, :2] += info["t"][:2]
    return out


def _source_frames(src):
    m = {k: v.double().numpy() for k, v in src.motion.as_dict().items()}
    return [{k: v[j].copy() for k, v in m.items()} for j in range(len(src))]


def _driving_frame(v):
    v = v.astype(np.float64)
    return {"scale": v[0:1] + 1, "pitch": v[1:67], "yaw": v[67:133], "roll": v[133:199], "t": v[199:202], "exp": v[202:265]}


def _reference_stitch(vectors, src, net, opts, blink_rows, d0_vector=None):
    """Ditto's MotionStitch, one frame at a time (setup/set_Nd/__call__ semantics).

    ``d0_vector``: the relative-driving reference set from outside, as Ditto's online pipeline
    does (None: the first frame, as offline)."""
    is_image = src.is_image
    use = opts.use_d_keys if opts.use_d_keys is not None else (
        ("exp", "pitch", "yaw", "roll", "t") if is_image else ("exp",))
    drive_eye = is_image if opts.drive_eye is None else opts.drive_eye
    table = None if opts.delta_eye_arr is None else opts.delta_eye_arr.double().numpy()
    n_src, n_frames = len(src), len(vectors)

    a1 = np.zeros((21, 3))
    a1[LIP] = 1
    a2 = 0
    if drive_eye:
        if table is None:
            a1[EYE] = 1
        else:
            a2 = np.zeros((21, 3))
            a2[EYE] = 1
            a2 = a2.reshape(-1)
    a1 = a1.reshape(-1)
    fix_a1, fix_a2, fix_a3 = a1 * (1 - a2), (1 - a1) + a1 * a2, a2

    fade_alpha = {}
    if opts.fade_in > 0:
        for i in range(opts.fade_in):
            fade_alpha[i] = i / opts.fade_in
    if opts.fade_out > 0:
        ss, ee = n_frames - opts.fade_out - 1, n_frames - 1
        for i in range(ss, n_frames):
            fade_alpha[i] = max((ee - i) / (ee - ss), 0)

    sources = _source_frames(src)
    pose_s = (_deg(sources[0]["yaw"]), _deg(sources[0]["pitch"]))
    d0 = None if d0_vector is None else _driving_frame(np.asarray(d0_vector))
    fade_dst = None
    kp_s_all, kp_d_all, index = [], [], []
    for i in range(n_frames):
        lap, pos = divmod(i, n_src)
        j = pos if lap % 2 == 0 else n_src - pos - 1
        xs = copy.deepcopy(sources[j])
        xd = _driving_frame(vectors[i])

        if opts.relative_d and d0 is None:
            d0 = copy.deepcopy(xd)
        if opts.relative_d:
            w = use if isinstance(use, dict) else {}
            xd = {k: xs[k] + (v - d0[k]) * w.get(k, 1) for k, v in xd.items()}
        for k, v in xs.items():
            if k not in xd or k not in use:
                xd[k] = v
        if isinstance(use, dict) and not opts.relative_d:
            for k, w in use.items():
                xd[k] = xd[k] * w

        delta_eye = 0
        if drive_eye and table is not None:
            delta_eye = table[blink_rows[i]]
        xd["exp"] = xd["exp"] * fix_a1 + xs["exp"] * fix_a2 + delta_eye * fix_a3

        ctrl = {}
        for a in ANGLES:
            per = getattr(opts, f"{a}_offsets")
            if per is not None and i < len(per):
                ctrl[f"delta_{a}"] = float(per[i])
            elif getattr(opts, f"delta_{a}") != 0:
                ctrl[f"delta_{a}"] = getattr(opts, f"delta_{a}")
            if getattr(opts, f"alpha_{a}") != 1:
                ctrl[f"alpha_{a}"] = getattr(opts, f"alpha_{a}")
        for a in ANGLES:
            if f"delta_{a}" in ctrl:
                xd[a] = np.array([_deg(xd[a]) + ctrl[f"delta_{a}"]])
        for a in ANGLES:
            if f"alpha_{a}" in ctrl:
                xd[a] = xd[a] * ctrl[f"alpha_{a}"]

        if opts.fade_type == "d0" and fade_dst is None:
            fade_dst = copy.deepcopy(xd)
        if i in fade_alpha and opts.fade_type in ("d0", "s"):
            alpha = fade_alpha[i]
            dst = fade_dst if opts.fade_type == "d0" else xs
            for k in opts.fade_out_keys:
                mine, theirs = xd[k], dst[k]
                if k in ANGLES and (mine.size == 1 or theirs.size == 1):
                    # documented deviation: an angle in degrees never mixes with raw logits
                    mine, theirs = np.array([_deg(mine)]), np.array([_deg(theirs)])
                xd[k] = mine * alpha + theirs * (1 - alpha)

        if drive_eye:
            dx = (_deg(xd["yaw"]) - pose_s[0]) * 0.26
            dy = (_deg(xd["pitch"]) - pose_s[1]) * 0.28
            exp = xd["exp"].copy()
            if dx > 0:
                exp[33] += dx * 0.0007
                exp[45] += dx * 0.001
            else:
                exp[33] += dx * 0.001
                exp[45] += dx * 0.0007
            exp[34] += dy * -0.001
            exp[46] += dy * -0.001
            xd["exp"] = exp

        kp_s_all.append(_pose_kp(xs))
        kp_d_all.append(_pose_kp(xd))
        index.append(j)
    kp_s, kp_d = np.stack(kp_s_all), np.stack(kp_d_all)
    if opts.flag_stitching:
        # the network works row by row, so one batched call equals Ditto's per-frame calls
        with torch.no_grad():
            kp_d = net(torch.from_numpy(kp_s), torch.from_numpy(kp_d)).numpy()
    return kp_s, kp_d, index


def _random_table(rows):
    return 0.01 * torch.randn(rows, 63, generator=torch.Generator().manual_seed(rows))


_AXES = {
    "image": [True, False],
    "relative_d": [True, False],
    "use_d_keys": [None, ("exp", "yaw", "scale", "t"), {"exp": 0.7, "pitch": 1.3, "roll": 0.5, "t": 0.8}],
    "drive_eye": [None, True, False],
    "blinks": [None, -1, 4, (3, 7, 5), 0],
    "pose": ["none", "overall", "per_frame", "gain_only"],
    "fade": ["none", "d0", "s_pose", "d0_pose"],
    "flag_stitching": [True, False],
}


def _cases(count=48, seed=1234):
    rng = random.Random(seed)
    cases = []
    for i in range(count):
        # the first cycles walk every value of every axis; the rest are random mixes
        case = {k: v[i % len(v)] if i < 12 else rng.choice(v) for k, v in _AXES.items()}
        if case not in cases:
            cases.append(case)
    return cases


def _options(case, num_frames):
    kw = dict(relative_d=case["relative_d"], use_d_keys=case["use_d_keys"], drive_eye=case["drive_eye"],
              flag_stitching=case["flag_stitching"], seed=11)
    if case["blinks"] is not None:
        kw.update(delta_eye_arr=_random_table(6), delta_eye_open_n=case["blinks"])
    pose = case["pose"]
    if pose == "overall":
        kw.update(delta_pitch=4.0, delta_yaw=-7.5, alpha_roll=0.6)
    elif pose == "per_frame":
        kw.update(delta_yaw=3.0, yaw_offsets=[(-1) ** f * 2.0 for f in range(num_frames // 2)],
                  pitch_offsets=torch.linspace(-5, 5, num_frames + 3), alpha_yaw=0.8)
    elif pose == "gain_only":
        kw.update(alpha_pitch=0.7, alpha_yaw=1.2)
    fade = case["fade"]
    if fade != "none":
        keys = ("exp",) if fade == "d0" else ("exp", "pitch", "yaw", "t", "scale")
        kw.update(fade_type=fade[:2].rstrip("_"), fade_in=6, fade_out=9, fade_out_keys=keys)
    return MotionOptions(**kw)


@pytest.mark.parametrize("case", _cases(), ids=lambda c: "-".join(str(v).replace(" ", "") for v in c.values())[:80])
def test_vectorised_stitch_matches_per_frame_loop(case):
    num_frames = 230 if case["blinks"] == 0 else 40
    opts = _options(case, num_frames)
    src = random_source(1 if case["image"] else 7, is_image=case["image"], seed=5)
    g = torch.Generator().manual_seed(9)
    vectors = torch.randn(num_frames, 265, generator=g) * torch.cat(
        [torch.full((1,), 0.05), torch.full((198,), 2.0), torch.full((3,), 0.05), torch.full((63,), 0.02)])
    torch.manual_seed(0)
    net = StitchingNetwork()
    net64 = copy.deepcopy(net).double()

    got = stitch_motion(vectors, src, net, opts, generator=torch.Generator().manual_seed(21))

    drive_eye = src.is_image if opts.drive_eye is None else opts.drive_eye
    rows = [0] * num_frames
    if drive_eye and opts.delta_eye_arr is not None:
        if opts.delta_eye_open_n == 0:
            draws = torch.randint(OPEN_MIN, OPEN_MAX + 1, (500,), generator=torch.Generator().manual_seed(21))
            rows = _sequential_random_schedule(num_frames, 6, draws)
        else:
            rows = _sequential_fixed_schedule(num_frames, 6, opts.delta_eye_open_n)
        assert any(rows) or opts.delta_eye_open_n == -1, "the case should contain at least one blink"
    ref_s, ref_d, ref_index = _reference_stitch(vectors.numpy(), src, net64, opts, rows)

    assert got.source_index.tolist() == ref_index
    assert rel_l2(got.kp_source, torch.from_numpy(ref_s)) < 1e-6
    assert rel_l2(got.kp_driving, torch.from_numpy(ref_d)) < 1e-5


def test_real_stitching_network_from_checkpoint(official_ckpt_dir):
    from ditto_core.models.checkpoints import load_network

    net = load_network("stitch_network", official_ckpt_dir)
    src = random_source(1, is_image=True, seed=3)
    vectors = 0.3 * torch.randn(12, 265, generator=torch.Generator().manual_seed(4))
    plain = stitch_motion(vectors, src, None, MotionOptions(flag_stitching=False))
    stitched = stitch_motion(vectors, src, net, MotionOptions())
    with torch.no_grad():
        expected = net(plain.kp_source, plain.kp_driving)
    assert torch.equal(stitched.kp_source, plain.kp_source)
    assert rel_l2(stitched.kp_driving, expected) < 1e-6
    assert rel_l2(stitched.kp_driving, plain.kp_driving) > 1e-3  # the network really moved them


@pytest.mark.gpu
def test_cuda_matches_cpu_without_host_syncs():
    opts = MotionOptions(delta_eye_arr=_random_table(6), delta_eye_open_n=0, delta_yaw=3.0,
                         pitch_offsets=[1.0, -2.0, 4.0], alpha_roll=0.8, fade_type="s", fade_in=5,
                         fade_out=7, fade_out_keys=("exp", "yaw", "t"))
    src = random_source(1, is_image=True, seed=2)
    vectors = 0.5 * torch.randn(300, 265, generator=torch.Generator().manual_seed(3))
    torch.manual_seed(0)
    net = StitchingNetwork()
    expected = stitch_motion(vectors, src, net, opts, torch.Generator().manual_seed(5))

    src_gpu, net_gpu, vectors_gpu = src.to("cuda"), copy.deepcopy(net).cuda(), vectors.cuda()
    run = lambda: stitch_motion(vectors_gpu, src_gpu, net_gpu, opts, torch.Generator().manual_seed(5))  # noqa: E731
    run()  # first call loads kernels
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        got = run()
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert got.kp_driving.is_cuda and got.source_index.is_cuda
    assert rel_l2(got.kp_driving, expected.kp_driving) < 1e-5
    assert rel_l2(got.kp_source, expected.kp_source) < 1e-6
