"""SCRFD face detector (InsightFace ``det_10g.onnx``): letter-boxed 512 input, anchor-free
distance decoding on three strides, greedy NMS."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from .onnx_session import model_error

_ROLE = "SCRFD face detector (det_10g.onnx)"


@dataclass
class Faces:
    """Detections in frame pixels, best score first."""

    boxes: np.ndarray  # (K, 4) float32: x1, y1, x2, y2
    scores: np.ndarray  # (K,) float32
    keypoints: np.ndarray  # (K, 5, 2) float32: eyes, nose, mouth corners

    def __len__(self) -> int:
        return len(self.scores)

    @property
    def sizes(self) -> np.ndarray:
        """(K,) longer box side in pixels."""
        return np.maximum(self.boxes[:, 2] - self.boxes[:, 0], self.boxes[:, 3] - self.boxes[:, 1])


def nms(boxes: np.ndarray, scores: np.ndarray, threshold: float) -> np.ndarray:
    """Greedy non-maximum suppression: indices of kept boxes, best score first.

    Uses InsightFace's inclusive-pixel areas (``x2 - x1 + 1``) so the same boxes survive as
    in Ditto. Each round is vectorised over the remaining candidates, memory stays O(K).
    """
    order = np.argsort(-scores, kind="stable")
    x1, y1, x2, y2 = boxes.T
    areas = (x2 - x1 + 1) * (y2 - y1 + 1)
    keep = []
    while order.size:
        best, rest = order[0], order[1:]
        keep.append(best)
        w = np.maximum(0.0, np.minimum(x2[best], x2[rest]) - np.maximum(x1[best], x1[rest]) + 1)
        h = np.maximum(0.0, np.minimum(y2[best], y2[rest]) - np.maximum(y1[best], y1[rest]) + 1)
        inter = w * h
        order = rest[inter / (areas[best] + areas[rest] - inter) <= threshold]
    return np.asarray(keep, dtype=np.int64)


class FaceDetector:
    """``__call__(image (H, W, 3) uint8 RGB) -> Faces``."""

    input_size = 512
    strides = (8, 16, 32)
    anchors_per_cell = 2
    score_threshold = 0.5
    nms_threshold = 0.4

    def __init__(self, session, path: Path = Path("det_10g.onnx")):
        self.session = session
        self.path = Path(path)
        inputs, outputs = session.get_inputs(), session.get_outputs()
        if len(inputs) != 1 or len(outputs) != 3 * len(self.strides):
            raise model_error(self.path, _ROLE, f"it has {len(inputs)} input(s) and {len(outputs)} outputs, "
                                               f"expected 1 and {3 * len(self.strides)}")
        self.input_name = inputs[0].name
        centers, strides = [], []
        for stride in self.strides:
            cells = self.input_size // stride
            ys, xs = np.mgrid[:cells, :cells]
            xy = np.stack([xs, ys], -1).reshape(-1, 1, 2) * stride
            centers.append(np.repeat(xy, self.anchors_per_cell, axis=1).reshape(-1, 2))
            strides.append(np.full(len(centers[-1]), stride))
        self._counts = [len(c) for c in centers]
        self._centers = np.concatenate(centers).astype(np.float32)  # (A, 2) anchor centres, all strides
        self._strides = np.concatenate(strides).astype(np.float32)[:, None]

    def preprocess(self, image: np.ndarray) -> tuple[np.ndarray, float]:
        """Letter-box into the top-left of a black 512 square -> (1, 3, 512, 512) BGR blob
        normalised as ``(x - 127.5) / 128``, and the frame -> input scale."""
        height, width = image.shape[:2]
        size = self.input_size
        if height > width:
            new_h, new_w = size, int(size / (height / width))
        else:
            new_h, new_w = int(size * (height / width)), size
        canvas = np.zeros((size, size, 3), dtype=np.uint8)
        canvas[:new_h, :new_w] = cv2.resize(image, (new_w, new_h))
        blob = (canvas[..., ::-1].astype(np.float32) - 127.5) / 128  # the network was trained on BGR
        return np.ascontiguousarray(blob.transpose(2, 0, 1)[None]), new_h / height

    def decode(self, outputs: list[np.ndarray], scale: float) -> Faces:
        """Raw network outputs (scores, box distances, keypoint offsets per stride) -> Faces."""
        n = len(self.strides)
        try:  # outputs come grouped by kind, each group ordered by stride
            scores, dist, kps = (
                np.concatenate([o.reshape(count, -1) for o, count in zip(outputs[k * n:(k + 1) * n], self._counts)])
                for k in range(3)
            )
        except ValueError as exc:
            raise model_error(self.path, _ROLE, f"its outputs do not match {self.input_size}x{self.input_size} "
                                               f"anchors ({exc})") from exc
        if scores.shape[1] != 1 or dist.shape[1] != 4 or kps.shape[1] != 10:
            raise model_error(self.path, _ROLE, "its outputs are not (score, 4 box distances, 5 keypoints)")
        hit = scores[:, 0] >= self.score_threshold
        centers, step = self._centers[hit], self._strides[hit]
        dist, offsets = dist[hit] * step, kps[hit].reshape(-1, 5, 2) * step[:, :, None]
        boxes = np.concatenate([centers - dist[:, :2], centers + dist[:, 2:]], axis=1)
        points = centers[:, None] + offsets
        keep = nms(boxes, scores[hit, 0], self.nms_threshold)
        return Faces((boxes[keep] / scale).astype(np.float32), scores[hit, 0][keep].astype(np.float32),
                     (points[keep] / scale).astype(np.float32))

    def __call__(self, image: np.ndarray) -> Faces:
        blob, scale = self.preprocess(image)
        return self.decode(self.session.run(None, {self.input_name: blob}), scale)
