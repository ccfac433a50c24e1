"""InsightFace ``2d106det.onnx``: 106 landmarks from a detection box, used to place the first
landmark-203 crop."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .crop import similarity
from .onnx_session import CropLandmarker, model_error

NUM_POINTS = 106


class Landmark106(CropLandmarker):
    """``__call__(image (H, W, 3) uint8 RGB, box (4,) x1 y1 x2 y2) -> (106, 2)`` frame pixels."""

    input_size = 192
    role = "InsightFace 106-point landmark (2d106det.onnx)"
    box_scale = 1.5  # the crop spans 1.5x the box's longer side

    def __init__(self, session, path: Path = Path("2d106det.onnx")):
        super().__init__(session, path)

    def blob(self, crop: np.ndarray) -> np.ndarray:
        # Raw 0..255 BGR: the network's normalisation is folded into its first layer.
        return np.ascontiguousarray(crop[..., ::-1].transpose(2, 0, 1)[None], dtype=np.float32)

    def points(self, outputs: list[np.ndarray]) -> np.ndarray:
        flat = outputs[0].reshape(-1)
        if flat.size < 2 * NUM_POINTS:
            raise model_error(self.path, self.role, f"it predicts {flat.size} values, expected {2 * NUM_POINTS}")
        # Coordinates are in [-1, 1] over the crop; some exports prepend extra points.
        return (flat.reshape(-1, 2)[-NUM_POINTS:] + 1) * (self.input_size // 2)

    def __call__(self, image: np.ndarray, box: np.ndarray) -> np.ndarray:
        box = np.asarray(box, dtype=np.float64)
        center = (box[:2] + box[2:4]) / 2
        zoom = self.input_size / (max(box[2] - box[0], box[3] - box[1]) * self.box_scale)
        m_o2c = similarity(center[None], np.array([zoom]), np.eye(2)[None], self.input_size / 2)[0]
        return self.locate(image, m_o2c)
