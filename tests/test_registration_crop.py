"""Ditto's crop math on hand-checked landmarks, the batched warps against OpenCV, and the eye
measurements on synthetic meshes."""
from __future__ import annotations

import math

import cv2
import numpy as np
import pytest
import torch

from ditto_core.registration.crop import (
    crop_transform, face_axes, letterbox_transform, network_input, transform_points, warp_frames, warp_image,
)
from ditto_core.registration.eye_info import DEFAULT_EYE_OPEN, default_eye_measurements, eye_measurements
from tests.test_registration_stubs import canonical_face, mesh_with_eyes


def _rotation(deg: float) -> np.ndarray:
    a = math.radians(deg)
    return np.array([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]])


def test_upright_face_crop_by_hand():
    # Box [-1, 1]^2 * 100 around (500, 400): side 200 * 2.3 = 460; centre moved -0.125 * 460 = 57.5 px up.
    pts = canonical_face(203)[None] * 100 + (500, 400)
    m = crop_transform(pts, 512, 2.3, 0.0, -0.125, rotate=True)[0]
    zoom = 512 / 460
    np.testing.assert_allclose(m, [[zoom, 0, 256 - zoom * 500], [0, zoom, 256 - zoom * 342.5], [0, 0, 1]], atol=1e-9)
    # vx shifts along the face's x axis by a fraction of the crop side
    m_vx = crop_transform(pts, 512, 2.3, 0.1, -0.125)[0]
    np.testing.assert_allclose(m_vx[0, 2], 256 - zoom * (500 + 46), atol=1e-9)


@pytest.mark.parametrize("layout", [106, 203])
def test_tilted_face_is_turned_upright(layout):
    rot = _rotation(25)
    pts = canonical_face(layout) * 80 @ rot.T + (300, 260)
    np.testing.assert_allclose(face_axes(pts[None])[0], rot.T, atol=1e-12)  # rows: face x axis, face y axis
    m = crop_transform(pts[None], 512, 2.0, 0.0, 0.0, rotate=True)[0]
    # In the crop the face is the upright canonical face, 160 px -> 512 / 2 px per unit, centred.
    np.testing.assert_allclose(transform_points(pts, m), canonical_face(layout) * 128 + 256, atol=1e-9)
    straight = crop_transform(pts[None], 512, 2.0, 0.0, 0.0, rotate=False)[0]
    np.testing.assert_allclose(straight[:2, :2], np.eye(2) * 512 / 320, atol=1e-12)  # same size, no rotation
    np.testing.assert_allclose(transform_points(np.array([300.0, 260.0]), straight), [256, 256], atol=1e-9)


def test_degenerate_axis_falls_back_to_image_down():
    pts = canonical_face(203)[None] * 50
    pts[0, [0, 6, 12, 18, 24, 30, 36, 42, 48, 66]] = (3.0, 4.0)  # eyes and lips on one spot: no axis
    np.testing.assert_allclose(face_axes(pts)[0], np.eye(2))
    assert np.isfinite(crop_transform(pts, 512, 2.3)).all()


def test_letterbox_fits_whole_frame():
    m = letterbox_transform(300, 600, 512)
    np.testing.assert_allclose(transform_points(np.array([[0.0, 0], [600, 300]]), m), [[0, 128], [512, 384]])


def test_device_warp_matches_opencv(example_dir):
    image = cv2.cvtColor(cv2.imread(str(example_dir / "portrait.jpg")), cv2.COLOR_BGR2RGB)
    pts = canonical_face(203) * 250 @ _rotation(-12).T + (733, 700)
    m_o2c = crop_transform(pts[None], 512, 2.3, 0, -0.125)[0]  # reaches past the top/left border
    expected = warp_image(image, m_o2c, 512)
    frames = torch.from_numpy(image)[None].expand(2, -1, -1, -1)
    got = warp_frames(frames, torch.from_numpy(np.linalg.inv(m_o2c))[None].expand(2, -1, -1), 512)
    assert got.shape == (2, 512, 512, 3) and got.dtype == torch.uint8
    diff = (got[1].int() - torch.from_numpy(expected).int()).abs()
    # OpenCV quantises weights and source coordinates to 1/32 px: +-1 inside the frame (how often
    # depends on its version), a few levels on the frame border, where the blend with black is steep.
    assert diff.float().mean() < 0.05 and (diff > 1).float().mean() < 1e-3 and diff.max() <= 8
    assert (expected == 0).all(-1).any()  # the crop does reach outside the frame


def test_network_input_is_opencv_inter_area():
    crops = np.random.default_rng(0).integers(0, 256, (2, 512, 512, 3), dtype=np.uint8)
    got = network_input(torch.from_numpy(crops))
    assert got.shape == (2, 3, 256, 256)
    for crop, image in zip(crops, got):
        expected = cv2.resize(crop, (256, 256), interpolation=cv2.INTER_AREA).astype(np.float32) / 255
        np.testing.assert_array_equal(image.permute(1, 2, 0).numpy(), expected)
    assert network_input(torch.from_numpy(crops), torch.float16).dtype == torch.float16


def test_eye_measurements_by_hand():
    mesh = torch.from_numpy(np.stack([mesh_with_eyes(0.75), mesh_with_eyes(0.2)]))
    eye_open, eye_ball = eye_measurements(mesh)
    np.testing.assert_allclose(eye_open.numpy(), [[0.75, 0.75], [0.2, 0.2]], rtol=1e-5)
    # Left iris offset (0.01, 0.005): unit (2, 1)/sqrt(5); the eye's inner->outer direction is (-1, 0);
    # (unit - direction) * |offset|. The right iris is centred: zero. Layout [xL, xR, yL, yR, zL, zR].
    length = math.hypot(0.01, 0.005)
    expected = [(2 / math.sqrt(5) + 1) * length, 0, (1 / math.sqrt(5)) * length, 0, 0, 0]
    np.testing.assert_allclose(eye_ball[0].numpy(), expected, atol=1e-6)
    assert eye_open.shape == (2, 2) and eye_ball.shape == (2, 6)


def test_default_eye_measurements():
    eye_open, eye_ball = default_eye_measurements(3)
    assert eye_open.shape == (3, 2) and torch.all(eye_open == DEFAULT_EYE_OPEN)
    assert eye_ball.shape == (3, 6) and not eye_ball.any()
