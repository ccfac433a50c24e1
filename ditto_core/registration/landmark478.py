"""MediaPipe face landmarker (``face_landmarker.task``): 478 mesh points incl. irises, the
input of Ditto's eye measurements."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

from ..errors import CheckpointError
from ..model_files import AUX_SOURCE
from .eye_info import NUM_MESH_POINTS


class Landmark478:
    """``__call__(image (H, W, 3) uint8 RGB) -> (478, 3) float32`` normalised (x, y in [0, 1]
    of the image, z relative depth), or None when no face is found."""

    def __init__(self, path: Path):
        self.path = Path(path)
        try:
            from mediapipe.tasks.python import BaseOptions, vision

            options = vision.FaceLandmarkerOptions(
                base_options=BaseOptions(model_asset_path=str(self.path)),
                running_mode=vision.RunningMode.IMAGE,
                num_faces=1,
            )
            self._landmarker = vision.FaceLandmarker.create_from_options(options)
        except ImportError as exc:
            raise CheckpointError(
                "mediapipe is not installed; it runs face_landmarker.task. Install it with `pip install mediapipe`."
            ) from exc
        except Exception as exc:  # mediapipe reports a bad bundle as RuntimeError or ValueError
            raise CheckpointError(
                f"{self.path} could not be loaded as MediaPipe's face landmarker ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0][:200]}). Re-download face_landmarker.task from {AUX_SOURCE}."
            ) from exc

    @staticmethod
    def landmarks_from_result(result) -> Optional[np.ndarray]:
        """The first face of a ``FaceLandmarkerResult`` as (478, 3), or None."""
        faces = getattr(result, "face_landmarks", None)
        if not faces or len(faces[0]) != NUM_MESH_POINTS:
            return None
        return np.array([(p.x, p.y, p.z) for p in faces[0]], dtype=np.float32)

    def __call__(self, image: np.ndarray) -> Optional[np.ndarray]:
        import mediapipe as mp

        frame = mp.Image(image_format=mp.ImageFormat.SRGB, data=np.ascontiguousarray(image))
        return self.landmarks_from_result(self._landmarker.detect(frame))

    def close(self) -> None:
        self._landmarker.close()
