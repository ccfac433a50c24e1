"""Ditto's ``landmark203.onnx`` (LivePortrait's 203-point model): refines any earlier
landmarks (106 from the first frame, or the previous frame's 203 when tracking a video)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .crop import crop_transform
from .onnx_session import CropLandmarker, model_error

NUM_POINTS = 203


class Landmark203(CropLandmarker):
    """``__call__(image (H, W, 3) uint8 RGB, guide (K, 2) landmarks) -> (203, 2)`` frame pixels."""

    input_size = 224
    role = "203-point landmark (landmark203.onnx)"
    crop_scale = 1.5
    crop_vy_ratio = -0.1

    def __init__(self, session, path: Path = Path("landmark203.onnx")):
        super().__init__(session, path)
        if len(session.get_outputs()) < 3:
            raise model_error(self.path, self.role,
                              f"it has {len(session.get_outputs())} outputs; the landmarks are the third")

    def blob(self, crop: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(crop.transpose(2, 0, 1)[None], dtype=np.float32) / 255

    def points(self, outputs: list[np.ndarray]) -> np.ndarray:
        flat = outputs[2].reshape(-1)
        if flat.size != 2 * NUM_POINTS:
            raise model_error(self.path, self.role, f"its third output has {flat.size} values, "
                                                   f"expected {2 * NUM_POINTS}")
        return flat.reshape(NUM_POINTS, 2) * self.input_size  # predicted in [0, 1] over the crop

    def __call__(self, image: np.ndarray, guide: np.ndarray) -> np.ndarray:
        m_o2c = crop_transform(np.asarray(guide)[None], self.input_size, self.crop_scale,
                               vy_ratio=self.crop_vy_ratio, rotate=True)[0]
        return self.locate(image, m_o2c)
