"""Stand-ins for the face models, shared by the registration tests (no real weights exist here).

ONNX stubs carry the official input/output names and shapes and return fixed predictions,
so the wrappers' real pre/post-processing runs on known numbers. Landmark layouts are
synthetic upright faces built so that only the points Ditto's crop math reads matter.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ditto_core.registration.crop import crop_transform, transform_points

DET_STRIDES = (8, 16, 32)
DET_INPUT = 512


def constant_onnx(
    path: Path, input_name: str, input_shape: Sequence, outputs: Sequence[tuple[str, np.ndarray]]
) -> Path:
    """An ONNX model whose outputs are fixed arrays; it still consumes its (shape-checked) input."""
    nodes = [
        helper.make_node("ReduceMean", [input_name], ["mean"], keepdims=0),
        helper.make_node("Mul", ["mean", "zero"], ["nothing"]),
    ]
    inits = [numpy_helper.from_array(np.zeros((), np.float32), "zero")]
    value_infos = []
    for name, value in outputs:
        inits.append(numpy_helper.from_array(value.astype(np.float32), f"{name}_value"))
        nodes.append(helper.make_node("Add", [f"{name}_value", "nothing"], [name]))
        value_infos.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(value.shape)))
    graph = helper.make_graph(
        nodes, "stub", [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, list(input_shape))],
        value_infos, initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def scrfd_outputs(
    faces: Sequence[tuple[Sequence[float], float, int]], kps: Optional[np.ndarray] = None
) -> list[np.ndarray]:
    """SCRFD raw outputs (scores x3, box distances x3, keypoints x3; strides 8/16/32) holding
    ``faces``: (box x1 y1 x2 y2 in 512-input pixels, score, stride). Each face sits on the
    first anchor of the cell containing its box centre; keypoints default to the box centre."""
    counts = {s: (DET_INPUT // s) ** 2 * 2 for s in DET_STRIDES}
    scores = {s: np.zeros((counts[s], 1)) for s in DET_STRIDES}
    dists = {s: np.zeros((counts[s], 4)) for s in DET_STRIDES}
    points = {s: np.zeros((counts[s], 10)) for s in DET_STRIDES}
    for n, (box, score, stride) in enumerate(faces):
        x1, y1, x2, y2 = box
        cells = DET_INPUT // stride
        cx, cy = int((x1 + x2) / 2 // stride), int((y1 + y2) / 2 // stride)
        anchor = (cy * cells + cx) * 2
        ax, ay = cx * stride, cy * stride
        scores[stride][anchor] = score
        dists[stride][anchor] = np.array([ax - x1, ay - y1, x2 - ax, y2 - ay]) / stride
        face_kps = kps[n] if kps is not None else np.tile([(x1 + x2) / 2, (y1 + y2) / 2], 5)
        points[stride][anchor] = (np.asarray(face_kps).reshape(5, 2) - [ax, ay]).reshape(-1) / stride
    return [d[s] for d in (scores, dists, points) for s in DET_STRIDES]


def scrfd_model(path: Path, faces, kps=None) -> Path:
    names = ["448", "471", "494", "451", "474", "497", "454", "477", "500"]  # det_10g's output names
    return constant_onnx(path, "input.1", [1, 3, DET_INPUT, DET_INPUT], list(zip(names, scrfd_outputs(faces, kps))))


# Indices the crop math reads (see ditto_core/registration/crop.py), per layout:
# (left eye points, right eye points, lip points, four free indices for the extreme points).
LAYOUTS = {
    106: ((33, 35, 40, 39), (87, 89, 94, 93), (52, 61), (0, 1, 2, 3)),
    203: ((0, 6, 12, 18), (24, 30, 36, 42), (48, 66), (100, 101, 102, 103)),
}
EYE_Y, LIP_Y = -0.2, 0.45


def canonical_face(num_points: int) -> np.ndarray:
    """An upright face in [-1, 1]^2: eye centres (+-0.35, -0.2), lip centre (0, 0.45), the
    bounding box exactly [-1, 1]^2 (four extreme points), everything else on a 0.9 circle."""
    left, right, lips, extremes = LAYOUTS[num_points]
    angles = np.linspace(0, 2 * np.pi, num_points, endpoint=False)
    pts = 0.9 * np.stack([np.cos(angles), np.sin(angles)], -1)
    spread = np.array([[-0.1, 0], [0, -0.05], [0.1, 0], [0, 0.05]])
    pts[list(left)] = np.array([-0.35, EYE_Y]) + spread
    pts[list(right)] = np.array([0.35, EYE_Y]) + spread
    pts[list(lips)] = [[-0.2, LIP_Y], [0.2, LIP_Y]]
    pts[list(extremes)] = [[1, 0], [0, 1], [-1, 0], [0, -1]]
    return pts


def landmark106_output() -> np.ndarray:
    """(1, 212) in [-1, 1] crop coordinates: the canonical face at 0.6 of the crop's half-size."""
    return (canonical_face(106) * 0.6).reshape(1, -1)


def landmark203_output() -> np.ndarray:
    """(1, 406) in [0, 1] crop coordinates, chosen as the fixed point of Ditto's tracking crop
    (scale 1.5, vy -0.1): re-cropping around these points reproduces them exactly."""
    return ((0.5, 0.6) + canonical_face(203) / 3).reshape(1, -1)


def landmark106_model(path: Path, output: Optional[np.ndarray] = None) -> Path:
    output = landmark106_output() if output is None else output
    return constant_onnx(path, "data", [1, 3, 192, 192], [("fc1", output)])


def landmark203_model(path: Path, output: Optional[np.ndarray] = None) -> Path:
    output = landmark203_output() if output is None else output
    # The official model returns three tensors; the 203 landmarks are the third.
    extras = [("feat_a", np.zeros((1, 214))), ("feat_b", np.zeros((1, 262)))]
    return constant_onnx(path, "input", [1, 3, 224, 224], [*extras, ("landmarks", output)])


def mesh_with_eyes(eye_open: float = 0.75) -> np.ndarray:
    """(478, 3) mesh whose eyes are 0.1 wide with lid gaps summing to ``eye_open * 0.1``;
    the left iris sits (0.01, 0.005) off its eye centre, the right one is centred."""
    mesh = np.zeros((478, 3), np.float32)
    for outer, inner, lids, iris, x in (
        (33, 133, ((145, 159), (144, 160), (153, 158)), 468, 0.3),
        (263, 362, ((374, 386), (373, 387), (380, 385)), 473, 0.7),
    ):
        sign = 1 if x < 0.5 else -1  # outer corners face away from the nose
        mesh[outer] = (x - sign * 0.05, 0.4, 0)
        mesh[inner] = (x + sign * 0.05, 0.4, 0)
        for (low, up), share in zip(lids, (0.4, 0.3, 0.3)):
            mesh[low] = (x, 0.4 + share * eye_open * 0.05, 0)
            mesh[up] = (x, 0.4 - share * eye_open * 0.05, 0)
        mesh[iris] = (x + (0.01 if x < 0.5 else 0), 0.4 + (0.005 if x < 0.5 else 0), 0)
    return mesh


class StubMesh:
    """A ``landmark478`` stand-in: a fixed mesh for every crop (None = no face), counting calls."""

    def __init__(self, mesh: Optional[np.ndarray]):
        self.mesh, self.calls = mesh, 0

    def __call__(self, image: np.ndarray) -> Optional[np.ndarray]:
        assert image.shape == (512, 512, 3) and image.dtype == np.uint8
        self.calls += 1
        return self.mesh


def test_canonical_face_axes_and_extent():
    for k in (106, 203):
        axes = crop_transform(canonical_face(k)[None], 2, 1.0)[0]
        # upright: the crop maps the face to [0, 2]^2 without rotation, centred on the box
        np.testing.assert_allclose(axes[:2, :2], np.eye(2), atol=1e-12)
        corners = transform_points(np.array([[-1.0, -1.0], [1.0, 1.0]]), axes)
        np.testing.assert_allclose(corners, [[0, 0], [2, 2]], atol=1e-12)


def test_landmark203_stub_is_a_tracking_fixed_point():
    crop_pts = landmark203_output().reshape(203, 2) * 224
    m = crop_transform(crop_pts[None], 224, 1.5, vy_ratio=-0.1)[0]
    np.testing.assert_allclose(transform_points(crop_pts, m), crop_pts, atol=1e-9)
