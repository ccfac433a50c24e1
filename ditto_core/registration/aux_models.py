"""The four face-analysis models registration needs, found and loaded as one set."""
from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

import torch

from ..errors import MissingModelError
from ..model_files import AUX_FILES, AUX_SOURCE, find_aux_file
from ..models.checkpoints import file_identity
from .face_detector import FaceDetector
from .landmark106 import Landmark106
from .landmark203 import Landmark203
from .landmark478 import Landmark478
from .onnx_session import create_session



@dataclass
class AuxModels:
    """Face models; any may be None when it was not required (see :func:`load_aux_models`).

    Duck-typed on purpose: registration only calls them, so tests and other back ends can
    pass any callables with the same signatures.
    """

    face_detector: Optional[FaceDetector] = None
    landmark106: Optional[Landmark106] = None
    landmark203: Optional[Landmark203] = None
    landmark478: Optional[Landmark478] = None
    identity: str = ""  # fingerprint of the files loaded: part of the avatar cache key

    def found(self, name: str) -> bool:
        return getattr(self, name) is not None


def load_aux_models(
    aux_dir: Path | str, device: torch.device | str = "cpu", required: Iterable[str] = tuple(AUX_FILES)
) -> AuxModels:
    """Load every aux model found under ``aux_dir`` (see :func:`~ditto_core.model_files.aux_dirs`).

    ``required`` names the models that must be present; all missing ones are reported in one
    :class:`MissingModelError`. Registration with face detection needs all four; the
    no-detector mode needs none (pass ``required=()``; the landmarker is still used if found).
    """
    files = _aux_files(Path(aux_dir), required)
    return AuxModels(**{name: _open(name, path, device) for name, path in files.items() if path is not None},
                     identity=_identity(files))


class DeferredAuxModels:
    """The aux models of a folder, as :func:`load_aux_models` finds them, each opened when
    registration first uses it: a portrait served from the avatar cache (every render of a known
    avatar) never pays for their sessions in a new process. Missing files are reported at once;
    a damaged one when it is first used."""

    def __init__(self, aux_dir: Path | str, device: torch.device | str = "cpu",
                 required: Iterable[str] = tuple(AUX_FILES)) -> None:
        self._files = _aux_files(Path(aux_dir), required)
        self._device = device
        self._opened: dict[str, object] = {}
        self._lock = threading.Lock()  # two registrations at once open each model once
        self.identity = _identity(self._files)

    def found(self, name: str) -> bool:
        return self._files[name] is not None

    def __getattr__(self, name: str):
        if name not in AUX_FILES:
            raise AttributeError(name)
        with self._lock:
            if name not in self._opened:
                path = self._files[name]
                self._opened[name] = None if path is None else _open(name, path, self._device)
            return self._opened[name]


def _aux_files(aux_dir: Path, required: Iterable[str]) -> dict[str, Optional[Path]]:
    """Each aux model's file under ``aux_dir`` (None: not there); every missing required one reported."""
    required = list(required)
    unknown = sorted(set(required) - set(AUX_FILES))
    if unknown:
        raise KeyError(f"unknown aux model(s) {unknown}; expected names from {sorted(AUX_FILES)}")
    files = {name: find_aux_file(name, aux_dir) for name in AUX_FILES}
    missing = [AUX_FILES[name] for name in required if files[name] is None]
    if missing:
        raise MissingModelError(
            f"Missing Ditto face model file(s): {', '.join(missing)}. Looked in {aux_dir.resolve()} (and its "
            f"aux_models/ and ditto_pytorch/aux_models/ subfolders). Download them from {AUX_SOURCE} "
            f"and put them in that folder; inside ComfyUI this is ComfyUI/models/ditto/aux_models/."
        )
    return files


def _open(name: str, path: Path, device: torch.device | str):
    onnx_models = {"face_detector": FaceDetector, "landmark106": Landmark106, "landmark203": Landmark203}
    if name in onnx_models:
        return onnx_models[name](create_session(path, device, AUX_FILES[name]), path)
    return Landmark478(path)


def _identity(files: dict[str, Optional[Path]]) -> str:
    """Fingerprint of the files found: part of the avatar cache key."""
    fingerprint = "|".join(f"{name}={file_identity(path)}" for name, path in files.items() if path is not None)
    return hashlib.sha256(fingerprint.encode()).hexdigest()
