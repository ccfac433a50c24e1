"""onnxruntime sessions for the face models (CUDA when the runtime has it, CPU otherwise)
and the crop -> run -> map-back loop the landmark models share."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import CheckpointError
from ..model_files import AUX_SOURCE
from .crop import transform_points, warp_image



def providers_for(device: torch.device | str) -> list[Any]:
    """Execution providers for ``device``: the matching CUDA GPU first when onnxruntime-gpu is installed."""
    import onnxruntime as ort

    device = torch.device(device)
    if device.type == "cuda" and "CUDAExecutionProvider" in ort.get_available_providers():
        return [("CUDAExecutionProvider", {"device_id": device.index or 0}), "CPUExecutionProvider"]
    return ["CPUExecutionProvider"]


def create_session(path: Path, device: torch.device | str, role: str):
    """Open ``path`` with onnxruntime; an unreadable file becomes a :class:`CheckpointError`."""
    import onnxruntime as ort

    try:
        return ort.InferenceSession(str(path), providers=providers_for(device))
    except Exception as exc:  # onnxruntime raises its own untyped exceptions for bad files
        raise CheckpointError(
            f"{path} could not be loaded as the {role} ONNX model ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0][:200]}). The file is truncated or not the right model; "
            f"re-download {path.name} from {AUX_SOURCE}."
        ) from exc


def model_error(path: Path, role: str, problem: str) -> CheckpointError:
    """The error for a loadable ONNX file whose inputs/outputs are not the expected model's."""
    return CheckpointError(
        f"{path} is not the {role} model Ditto uses: {problem}. Re-download {path.name} from {AUX_SOURCE}."
    )


class CropLandmarker:
    """Shared by the ONNX landmark models: crop a square around the face, run the network on
    it, map the predicted points back to frame pixels. Subclasses define the crop size, the
    input normalisation and how points are read from the outputs."""

    input_size: int
    role: str

    def __init__(self, session, path: Path):
        self.session = session
        self.path = Path(path)
        inputs = session.get_inputs()
        if len(inputs) != 1:
            raise model_error(self.path, self.role, f"it has {len(inputs)} inputs, expected 1 image")
        # Refuse another model under this name now, not with an obscure shape error mid-registration.
        # Symbolic dimensions (strings or None) are accepted; only fixed ones are checked.
        shape = inputs[0].shape
        expected = (1, 3, self.input_size, self.input_size)
        if len(shape) != 4 or any(isinstance(d, int) and d != e for d, e in zip(shape[1:], expected[1:])):
            raise model_error(self.path, self.role, f"its input has shape {tuple(shape)}, expected {expected}")
        self.input_name = inputs[0].name

    def blob(self, crop: np.ndarray) -> np.ndarray:
        """(S, S, 3) uint8 RGB crop -> the (1, 3, S, S) float32 network input."""
        raise NotImplementedError

    def points(self, outputs: list[np.ndarray]) -> np.ndarray:
        """Network outputs -> (K, 2) points in crop pixels."""
        raise NotImplementedError

    def locate(self, image: np.ndarray, m_o2c: np.ndarray) -> np.ndarray:
        """Landmarks (K, 2) float64 in frame pixels of the face that ``m_o2c`` crops."""
        crop = warp_image(image, m_o2c, self.input_size)
        outputs = self.session.run(None, {self.input_name: self.blob(crop)})
        return transform_points(self.points(outputs).astype(np.float64), np.linalg.inv(m_o2c))
