"""register_avatar end to end on the example portrait: ONNX stub face models, the real
extractor networks (seed-0 weights), the cache, the bad-input paths and a GPU check."""
from __future__ import annotations

import time
import warnings
from dataclasses import replace
from types import SimpleNamespace

import cv2
import numpy as np
import pytest
import torch
from torch import nn

from ditto_core.errors import InputError, Interrupted
from ditto_core.models.checkpoints import load_network
from ditto_core.registration import AvatarCache, RegistrationOptions, load_aux_models, register_avatar, smooth_motion
from ditto_core.registration.crop import letterbox_transform, network_input, warp_frames
from ditto_core.registration.face_detector import Faces
from ditto_core.registration.registrar import select_face
from tests.parity import rel_l2
from tests.test_registration_stubs import (
    StubMesh, landmark106_model, landmark203_model, mesh_with_eyes, scrfd_model,
)

FACE_BOX = (475, 390, 1007, 951)  # the girl's face in portrait.jpg (1432 x 1432)
DET_SCALE = 512 / 1432
MOTION_NAMES = ("pitch", "yaw", "roll", "t", "exp", "scale", "kp")  # the motion extractor's output order


class Counting(nn.Module):
    """Wraps a network, counts its forward calls and keeps the last input and output."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner, self.calls = inner, 0

    def forward(self, x):
        self.calls += 1
        self.last_input, self.last_output = x, self.inner(x)
        return self.last_output


class TinyAppearance(nn.Module):
    def forward(self, x):  # (B, 3, 256, 256) -> (B, 32, 16, 64, 64)
        return nn.functional.avg_pool2d(x, 4).mean(1, keepdim=True).expand(-1, 512, -1, -1).reshape(-1, 32, 16, 64, 64)


class TinyMotion(nn.Module):
    def forward(self, x):  # the motion extractor's 7 outputs, derived from the mean colour
        m = x.mean((1, 2, 3))[:, None]
        return tuple(m.expand(-1, n) + i for i, n in enumerate((66, 66, 66, 3, 63, 1, 63)))


@pytest.fixture(scope="module")
def portrait(example_dir) -> np.ndarray:
    return cv2.cvtColor(cv2.imread(str(example_dir / "portrait.jpg")), cv2.COLOR_BGR2RGB)


@pytest.fixture(scope="module")
def extractors(official_ckpt_dir):
    return SimpleNamespace(
        appearance_extractor=Counting(load_network("appearance_extractor", official_ckpt_dir)),
        motion_extractor=Counting(load_network("motion_extractor", official_ckpt_dir)),
        identity="seed0",
    )


def _tiny_extractors(identity="tiny"):
    return SimpleNamespace(appearance_extractor=Counting(TinyAppearance()),
                           motion_extractor=Counting(TinyMotion()), identity=identity)


def _aux(tmp_path, faces=((tuple(c * DET_SCALE for c in FACE_BOX), 0.92, 32),), mesh=mesh_with_eyes(0.75),
         device="cpu"):
    root = tmp_path / "aux_models"
    root.mkdir(exist_ok=True)
    scrfd_model(root / "det_10g.onnx", faces)
    landmark106_model(root / "2d106det.onnx")
    landmark203_model(root / "landmark203.onnx")
    aux = load_aux_models(root, device, required=("face_detector", "landmark106", "landmark203"))
    return replace(aux, landmark478=StubMesh(mesh))


def test_still_portrait(tmp_path, portrait, extractors):
    aux = _aux(tmp_path)
    source = register_avatar(portrait, extractors, aux, device="cpu")
    assert source.is_image and len(source) == 1 and source.device.type == "cpu"
    assert source.frames.shape == (1, 1432, 1432, 3) and torch.equal(source.frames[0], torch.from_numpy(portrait))

    # The crop: upright (the stub face is), centred in the face box, 2.3x the landmark extent,
    # which the stubs make 0.9x the box's longer side (see test_registration_stubs).
    m = source.M_c2o[0].double().numpy()
    box = aux.face_detector(portrait).boxes[0]
    side = 2.3 * 0.9 * max(box[2] - box[0], box[3] - box[1])
    np.testing.assert_allclose(m[:2, :2], np.eye(2) * side / 512, rtol=1e-4, atol=1e-6)
    cx, cy = m[:2] @ [256, 256, 1]
    assert box[0] < cx < box[2] and box[1] < cy < box[3]

    # The networks saw the crop as Ditto builds it with OpenCV (warp, INTER_AREA to 256, /255) ...
    crop = cv2.warpAffine(portrait, np.linalg.inv(m)[:2], (512, 512), flags=cv2.INTER_LINEAR)
    expected = cv2.resize(crop, (256, 256), interpolation=cv2.INTER_AREA).astype(np.float32) / 255
    seen = extractors.appearance_extractor.last_input[0].permute(1, 2, 0).numpy()
    levels = np.abs(seen - expected) * 255  # see test_device_warp_matches_opencv for the tolerance
    assert levels.mean() < 0.05 and (levels > 1.01).mean() < 1e-3 and levels.max() <= 8.01
    assert torch.equal(extractors.motion_extractor.last_input, extractors.appearance_extractor.last_input)
    # ... and their outputs are what the SourceInfo holds.
    assert torch.equal(source.f_s, extractors.appearance_extractor.last_output)
    for name, value in zip(MOTION_NAMES, extractors.motion_extractor.last_output):
        assert torch.equal(getattr(source.motion, name), value.reshape(1, -1))
    assert source.f_s.shape == (1, 32, 16, 64, 64) and source.motion.kp.shape == (1, 63)
    assert source.motion.pitch.shape == (1, 66) and source.motion.scale.shape == (1, 1)
    np.testing.assert_allclose(source.eye_open.numpy(), [[0.75, 0.75]], rtol=1e-5)
    assert source.eye_ball.shape == (1, 6) and aux.landmark478.calls == 1
    assert source.M_c2o.dtype == torch.float32 and source.eye_open.dtype == torch.float32


def test_video_tracks_from_one_detection_and_smooths_motion(tmp_path, portrait):
    aux = _aux(tmp_path)
    detector = aux.face_detector
    detections = []
    aux = replace(aux, face_detector=lambda frame: detections.append(1) or detector(frame))
    frames = np.stack([portrait, np.roll(portrait, 12, axis=1), np.roll(portrait, -12, axis=0)])
    models, steps = _tiny_extractors(), []
    source = register_avatar(frames, models, aux, device="cpu", batch_size=2,
                             progress=lambda d, t: steps.append((d, t)))
    assert not source.is_image and len(source) == 3 and len(detections) == 1
    # The stub's 203 landmarks are a fixed point of the tracking crop: every frame gets frame 0's crop.
    torch.testing.assert_close(source.M_c2o[1:], source.M_c2o[:1].expand(2, -1, -1), atol=1e-3, rtol=1e-5)
    assert steps == [(1, 6), (2, 6), (3, 6), (5, 6), (6, 6)]  # 3 landmark frames, then 2 batches

    # Motion is the 13-wide mean filter of the per-frame motion (here: the mean of all 3 frames).
    with torch.no_grad():
        raw = models.motion_extractor(network_input(warp_frames(source.frames, source.M_c2o, 512)))
    for name, value in zip(MOTION_NAMES, raw):
        assert rel_l2(getattr(source.motion, name), value.reshape(3, -1).mean(0, keepdim=True).expand(3, -1)) < 1e-6
    assert rel_l2(source.f_s[1], source.f_s[0]) > 1e-3  # appearance is per frame, never smoothed
    assert len(smooth_motion(source.motion, 1)) == 3
    # The LMDM's sc condition is frame 0's keypoints as extracted, before the smoothing (as in
    # Ditto's registrar), and it survives the cache.
    kp0 = raw[MOTION_NAMES.index("kp")].reshape(3, -1)[:1]
    assert torch.equal(source.source_kp, kp0) and not torch.allclose(source.source_kp, source.motion.kp[:1])
    cache = AvatarCache(tmp_path / "cache")
    register_avatar(frames, models, aux, device="cpu", cache=cache)
    calls = models.motion_extractor.calls
    hit = register_avatar(frames, models, aux, device="cpu", cache=cache)
    assert models.motion_extractor.calls == calls, "the second registration must be a cache hit"
    assert torch.equal(hit.source_kp, kp0)


def test_no_face(tmp_path, portrait):
    aux = _aux(tmp_path, faces=[((100, 100, 200, 200), 0.2, 16)])  # below the score threshold
    with pytest.raises(InputError, match="No face was found in my_photo.png.*detect_face=False"):
        register_avatar(portrait, _tiny_extractors(), aux, device="cpu", name="my_photo.png")


def test_face_index_out_of_range(tmp_path, portrait):
    faces = [((20, 20, 120, 140), 0.9, 32), ((300, 100, 420, 240), 0.8, 32)]
    with pytest.raises(InputError, match="face_index 2 is out of range: 2 face"):
        register_avatar(portrait, _tiny_extractors(), _aux(tmp_path, faces=faces),
                        RegistrationOptions(face_index=2), device="cpu")


def test_face_selection_largest_or_left_to_right():
    boxes = np.array([[500, 0, 700, 200], [0, 0, 300, 300], [900, 0, 1000, 100]], np.float32)
    faces = Faces(boxes, np.ones(3, np.float32), np.zeros((3, 5, 2), np.float32))
    assert select_face(faces, None, "img").tolist() == boxes[1].tolist()
    assert [select_face(faces, i, "img")[0] for i in (0, 1)] == [0, 500]
    with pytest.warns(UserWarning, match="only 100 px across"):
        select_face(faces, 2, "img")


def test_invalid_options_are_input_errors(portrait):
    with pytest.raises(InputError, match="crop_scale must be a number between"):
        register_avatar(portrait, _tiny_extractors(), None, RegistrationOptions(crop_scale=0.0), device="cpu")
    with pytest.raises(InputError, match="smo_k_s"):
        RegistrationOptions(smo_k_s=0).validate()


@pytest.mark.parametrize("field, value, expected", [
    ("crop_scale", "2", "crop_scale must be a number between 1.0 and 5.0 .*got '2'"),
    ("crop_scale", True, "crop_scale must be a number"),
    ("crop_vx_ratio", False, "crop_vx_ratio must be a number"),
    ("crop_vy_ratio", float("nan"), "crop_vy_ratio must be a number"),
    ("crop_flag_do_rot", "abc", "crop_flag_do_rot must be True or False"),
    ("crop_flag_do_rot", None, "crop_flag_do_rot must be True or False"),
    ("smo_k_s", True, "smo_k_s must be a whole number from 1"),
    ("smo_k_s", 10**19, "smo_k_s must be a whole number from 1 .* to 1001"),
    ("max_size", 1024.0, "max_size must be a whole number"),
    ("face_index", True, "face_index must be None"),
])
def test_options_of_the_wrong_type_are_named(field, value, expected):
    with pytest.raises(InputError, match=expected):
        RegistrationOptions(**{field: value}).validate()


def test_no_detector_mode_without_any_aux_model(portrait, caplog):
    crop = portrait[300:1100, 350:1100]  # already roughly a face crop, not square
    empty = SimpleNamespace(face_detector=None, landmark106=None, landmark203=None, landmark478=None)
    with warnings.catch_warnings(), caplog.at_level("INFO", logger="ditto_core.registration.registrar"):
        warnings.simplefilter("error")  # the mode needs no face models: no warning about a missing one
        source = register_avatar(crop, _tiny_extractors(), empty, RegistrationOptions(detect_face=False), device="cpu")
    assert "neutral defaults" in caplog.text
    expected = np.linalg.inv(letterbox_transform(800, 750, 512))
    np.testing.assert_allclose(source.M_c2o[0].numpy(), expected, rtol=1e-6, atol=1e-4)
    assert torch.all(source.eye_ball == 0) and source.eye_open.shape == (1, 2)


def test_cache_hit_skips_every_model_and_misses_on_changes(tmp_path, portrait):
    cache = AvatarCache(tmp_path / "cache")
    aux = _aux(tmp_path)
    models = _tiny_extractors()
    first = register_avatar(portrait, models, aux, device="cpu", cache=cache)
    calls = (models.appearance_extractor.calls, aux.landmark478.calls)
    again = register_avatar(portrait, models, aux, device="cpu", cache=cache)
    assert (models.appearance_extractor.calls, aux.landmark478.calls) == calls
    assert again.cache_key == first.cache_key is not None and again.is_image
    for name in ("M_c2o", "f_s", "eye_open", "eye_ball"):
        assert torch.equal(getattr(again, name), getattr(first, name))
    assert torch.equal(again.motion.kp, first.motion.kp) and torch.equal(again.frames, first.frames)

    other_option = register_avatar(portrait, models, aux, RegistrationOptions(crop_scale=2.2), device="cpu",
                                   cache=cache)
    other_models = register_avatar(portrait, models, aux, device="cpu", cache=cache, model_identity="other weights")
    assert models.appearance_extractor.calls == calls[0] + 2
    assert len({first.cache_key, other_option.cache_key, other_models.cache_key}) == 3

    tensor_file = cache.paths(first.cache_key)[0]
    tensor_file.write_bytes(tensor_file.read_bytes()[:1000])  # truncated entry: warn, recompute, overwrite
    with pytest.warns(RuntimeWarning, match="damaged"):
        register_avatar(portrait, models, aux, device="cpu", cache=cache)
    assert models.appearance_extractor.calls == calls[0] + 3
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        register_avatar(portrait, models, aux, device="cpu", cache=cache)
    assert models.appearance_extractor.calls == calls[0] + 3


def test_cancel_leaves_no_cache_entry(tmp_path, portrait):
    cache = AvatarCache(tmp_path / "cache")

    def cancel(done, total):
        raise Interrupted("stopped by the user")

    with pytest.raises(Interrupted):
        register_avatar(portrait, _tiny_extractors(), _aux(tmp_path), device="cpu", cache=cache, progress=cancel)
    assert not cache.root.exists() or not any(cache.root.iterdir())


@pytest.mark.reliability(area="Files and processes", case="disk full while the avatar cache entry is written (injected "
                                                          "ENOSPC)",
                         behaviour="registration succeeds, warns once naming the cache folder and the space the entry "
                                   "needs; no entry or temporary is left")
def test_full_disk_costs_only_the_cache(tmp_path, portrait, monkeypatch):
    import errno
    from pathlib import Path

    cache = AvatarCache(tmp_path / "cache")
    real_write = Path.write_bytes

    def full(path, data):
        if path.name == "tensors.safetensors":
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(path, data)

    monkeypatch.setattr(Path, "write_bytes", full)
    expected = r"avatar cache .*out of disk space in .*cache.*needs [0-9.]+ [KM]iB"
    with pytest.warns(RuntimeWarning, match=expected) as record:
        source = register_avatar(portrait, _tiny_extractors(), _aux(tmp_path), device="cpu", cache=cache)
    assert source.f_s.shape[0] == 1 and len([w for w in record if "disk space" in str(w.message)]) == 1
    assert list(cache.root.iterdir()) == []


@pytest.mark.gpu
def test_gpu_registration_and_fast_cache_hit(tmp_path, portrait, official_ckpt_dir):
    device = torch.device("cuda")
    models = SimpleNamespace(
        appearance_extractor=load_network("appearance_extractor", official_ckpt_dir, device=device),
        motion_extractor=load_network("motion_extractor", official_ckpt_dir, device=device),
        identity="seed0",
    )
    aux, cache = _aux(tmp_path, device=device), AvatarCache(tmp_path / "cache")
    source = register_avatar(torch.from_numpy(portrait), models, aux, device=device, cache=cache)
    tensors = [source.frames, source.M_c2o, source.f_s, source.eye_open, source.eye_ball]
    assert all(t.device.type == "cuda" for t in tensors + list(source.motion.as_dict().values()))

    cache.load(source.cache_key, device)  # warm the page cache and the CUDA allocator
    timings = []
    for _ in range(5):
        start = time.perf_counter()
        tensors, _ = cache.load(source.cache_key, device)
        torch.cuda.synchronize()
        timings.append(time.perf_counter() - start)
    assert tensors["f_s"].device.type == "cuda"
    assert sorted(timings)[2] < 0.020, f"cache hit load took {sorted(timings)[2] * 1e3:.1f} ms"
    hit = register_avatar(torch.from_numpy(portrait), models, aux, device=device, cache=cache)
    assert torch.equal(hit.f_s, source.f_s) and hit.f_s.device.type == "cuda"
