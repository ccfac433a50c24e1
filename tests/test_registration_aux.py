"""Face-model wrappers on ONNX stubs with known outputs: preprocessing, anchor decoding, NMS,
landmark de-normalisation, loading and the errors for missing or wrong files."""
from __future__ import annotations

import math
import shutil
from types import SimpleNamespace

import cv2
import numpy as np
import pytest

from ditto_core.errors import CheckpointError, MissingModelError
from ditto_core.registration.aux_models import AUX_FILES, load_aux_models
from ditto_core.registration.eye_info import NUM_MESH_POINTS
from ditto_core.registration.face_detector import FaceDetector, nms
from ditto_core.registration.landmark106 import Landmark106
from ditto_core.registration.landmark203 import Landmark203
from ditto_core.registration.landmark478 import Landmark478
from ditto_core.registration.onnx_session import create_session
from tests.test_registration_stubs import (
    canonical_face, landmark106_model, landmark106_output, landmark203_model, landmark203_output, scrfd_model,
)


def _detector(tmp_path, faces, kps=None) -> FaceDetector:
    path = scrfd_model(tmp_path / "det_10g.onnx", faces, kps)
    return FaceDetector(create_session(path, "cpu", "det"), path)


def test_nms_inclusive_pixel_iou():
    boxes = np.array([[0, 0, 9, 9], [1, 1, 10, 10], [20, 20, 29, 29], [0, 5, 9, 14]], np.float32)
    scores = np.array([0.9, 0.8, 0.7, 0.85], np.float32)
    # B overlaps A with IoU 81/119 > 0.4 (gone); D overlaps A with 50/150 <= 0.4 (kept).
    assert nms(boxes, scores, 0.4).tolist() == [0, 3, 2]


def test_detector_preprocess_letterbox_blob(tmp_path):
    det = _detector(tmp_path, [])
    image = np.random.default_rng(0).integers(0, 256, (600, 1000, 3), dtype=np.uint8)
    blob, scale = det.preprocess(image)
    assert blob.shape == (1, 3, 512, 512) and blob.dtype == np.float32
    assert scale == 307 / 600  # width fills 512, height int(512 * 0.6) = 307
    canvas = np.zeros((512, 512, 3), np.uint8)
    canvas[:307] = cv2.resize(image, (512, 307))
    expected = cv2.dnn.blobFromImage(canvas, 1 / 128, (512, 512), (127.5, 127.5, 127.5), swapRB=True)
    np.testing.assert_array_equal(blob, expected)
    assert np.all(blob[0, :, 307:] == -127.5 / 128)  # padding is black


def test_detector_decodes_anchors_thresholds_and_suppresses(tmp_path):
    kps = np.array([[110, 90, 150, 92, 130, 120, 115, 150, 145, 150], [0] * 10, [0] * 10, [0] * 10], float)
    kps[1:] = np.tile([300, 300], 5)
    faces = [
        ((100, 50, 250, 230), 0.9, 32),  # the face
        ((105, 55, 255, 225), 0.7, 16),  # duplicate of it (IoU ~0.9): suppressed
        ((280, 260, 330, 300), 0.6, 8),  # a second, small face
        ((400, 10, 450, 60), 0.3, 8),  # below the 0.5 score threshold
    ]
    det = _detector(tmp_path, faces, kps)
    found = det(np.zeros((600, 1000, 3), np.uint8))
    scale = 307 / 600
    assert len(found) == 2
    np.testing.assert_allclose(found.scores, [0.9, 0.6], rtol=1e-6)
    np.testing.assert_allclose(found.boxes, np.array([faces[0][0], faces[2][0]]) / scale, rtol=1e-5)
    np.testing.assert_allclose(found.keypoints[0], kps[0].reshape(5, 2) / scale, rtol=1e-5)
    np.testing.assert_allclose(found.sizes, [180 / scale, 50 / scale], rtol=1e-5)


def test_detector_rejects_models_with_other_outputs(tmp_path):
    path = landmark106_model(tmp_path / "det_10g.onnx")
    with pytest.raises(CheckpointError, match="det_10g.onnx is not the SCRFD"):
        FaceDetector(create_session(path, "cpu", "det"), path)


def test_landmark106_blob_and_mapping_back(tmp_path):
    path = landmark106_model(tmp_path / "2d106det.onnx")
    lmk = Landmark106(create_session(path, "cpu", "lmk106"), path)
    crop = np.zeros((192, 192, 3), np.uint8)
    crop[..., 0], crop[..., 2] = 10, 200
    blob = lmk.blob(crop)
    assert blob.shape == (1, 3, 192, 192) and blob[0, 0, 0, 0] == 200 and blob[0, 2, 0, 0] == 10  # raw BGR
    points = lmk(np.zeros((480, 640, 3), np.uint8), np.array([200, 100, 400, 340]))
    # centre (300, 220); zoom 192 / (240 * 1.5); a unit of [-1, 1] crop space is 96 / zoom = 180 px
    expected = landmark106_output().reshape(106, 2) * 180 + (300, 220)
    np.testing.assert_allclose(points, expected, atol=1e-3)


@pytest.mark.parametrize("tilt_deg", [0.0, 30.0])
def test_landmark203_crop_from_guide_and_mapping_back(tmp_path, tilt_deg):
    path = landmark203_model(tmp_path / "landmark203.onnx")
    lmk = Landmark203(create_session(path, "cpu", "lmk203"), path)
    a = math.radians(tilt_deg)
    rot = np.array([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]])
    guide = canonical_face(203) * 100 @ rot.T + (320, 240)  # a face 200 px across, tilted
    points = lmk(np.zeros((480, 640, 3), np.uint8), guide)
    # crop side 200 * 1.5 = 300 px, centre moved 0.1 * 300 up the face axis; crop x/y axes = the face axes
    ux, uy = rot[:, 0], rot[:, 1]
    center = np.array([320, 240]) - 30 * uy
    out = landmark203_output().reshape(203, 2) - 0.5
    np.testing.assert_allclose(points, center + 300 * (out[:, :1] * ux + out[:, 1:] * uy), atol=1e-3)


def test_landmark203_blob_is_rgb_unit_range(tmp_path):
    path = landmark203_model(tmp_path / "landmark203.onnx")
    lmk = Landmark203(create_session(path, "cpu", "lmk203"), path)
    crop = np.zeros((224, 224, 3), np.uint8)
    crop[..., 0] = 255
    blob = lmk.blob(crop)
    assert blob.dtype == np.float32 and blob[0, 0].min() == 1.0 and blob[0, 1:].max() == 0.0


def test_landmark203_wrong_output_size_is_a_checkpoint_error(tmp_path):
    path = landmark203_model(tmp_path / "landmark203.onnx", output=np.zeros((1, 212)))
    lmk = Landmark203(create_session(path, "cpu", "lmk203"), path)
    with pytest.raises(CheckpointError, match="expected 406"):
        lmk(np.zeros((480, 640, 3), np.uint8), canonical_face(203) * 100 + 300)


def test_mediapipe_result_conversion():
    mesh = np.random.default_rng(0).random((NUM_MESH_POINTS, 3)).astype(np.float32)
    result = SimpleNamespace(face_landmarks=[[SimpleNamespace(x=x, y=y, z=z) for x, y, z in mesh]])
    np.testing.assert_array_equal(Landmark478.landmarks_from_result(result), mesh)
    assert Landmark478.landmarks_from_result(SimpleNamespace(face_landmarks=[])) is None


def test_mediapipe_bad_task_file(tmp_path):
    bad = tmp_path / "face_landmarker.task"
    bad.write_bytes(b"not a task bundle")
    with pytest.raises(CheckpointError, match="face_landmarker.task could not be loaded"):
        Landmark478(bad)


def _stub_aux_dir(root):
    root.mkdir(parents=True, exist_ok=True)
    scrfd_model(root / "det_10g.onnx", [((100, 50, 250, 230), 0.9, 32)])
    landmark106_model(root / "2d106det.onnx")
    landmark203_model(root / "landmark203.onnx")
    return root


def test_load_aux_models_reports_every_missing_file(tmp_path):
    with pytest.raises(MissingModelError) as err:
        load_aux_models(tmp_path)
    message = str(err.value)
    for file in AUX_FILES.values():
        assert file in message
    assert "digital-avatar/ditto-talkinghead" in message and "ditto_pytorch/aux_models/" in message

    _stub_aux_dir(tmp_path / "ditto_pytorch" / "aux_models")  # the HuggingFace layout is found too
    with pytest.raises(MissingModelError) as err:
        load_aux_models(tmp_path)
    assert "face_landmarker.task" in str(err.value) and "det_10g.onnx" not in str(err.value)


def test_load_aux_models_partial_set_and_identity(tmp_path):
    root = _stub_aux_dir(tmp_path / "aux")
    aux = load_aux_models(root, "cpu", required=("face_detector", "landmark106", "landmark203"))
    assert isinstance(aux.face_detector, FaceDetector) and aux.landmark478 is None
    assert len(aux.face_detector(np.zeros((512, 512, 3), np.uint8))) == 1
    none_required = load_aux_models(tmp_path / "empty_dir_is_fine", "cpu", required=())
    assert none_required.face_detector is None and none_required.identity != aux.identity

    shutil.copy(root / "2d106det.onnx", root / "landmark203.onnx")  # a different file under the name
    with pytest.raises(CheckpointError, match="landmark203.onnx is not the 203-point"):
        load_aux_models(root, "cpu", required=())


def test_unreadable_onnx_is_a_checkpoint_error(tmp_path):
    root = _stub_aux_dir(tmp_path)
    data = (root / "det_10g.onnx").read_bytes()
    (root / "det_10g.onnx").write_bytes(data[: len(data) // 3])  # truncated download
    with pytest.raises(CheckpointError, match="det_10g.onnx could not be loaded"):
        load_aux_models(root, "cpu", required=())
