"""Where Ditto's files live inside ComfyUI: the ``ditto`` model folder and the output folder.

The model folder is registered with ``folder_paths.add_model_folder_path("ditto", ...)``, so
``ComfyUI/models/ditto`` works out of the box and ``extra_model_paths.yaml`` can add more
(a ``ditto:`` entry). A *model folder* is any folder under those roots that holds the six
official network files, flat or in the HuggingFace layout (``ditto_pytorch/models``);
auxiliary ONNX models sit in an ``aux_models`` folder next to or above it.
"""
from __future__ import annotations

import os
import re
from pathlib import Path, PurePosixPath
from typing import Optional

import folder_paths

from ditto_core.models.checkpoints import NETWORKS

FOLDER_NAME = "ditto"
ROOT_CHOICE = "."
"""The model-folder choice meaning "the ditto folder itself" (always offered)."""
_NETWORK_STEMS = {spec.stem for spec in NETWORKS.values()}
_UNSAFE_CHARS = re.compile(r'[\x00-\x1f<>:"|?*]')


def register_model_folder() -> None:
    """Add ``<ComfyUI models>/ditto`` to the ``ditto`` model paths (idempotent)."""
    default = os.path.join(folder_paths.models_dir, FOLDER_NAME)
    folder_paths.add_model_folder_path(FOLDER_NAME, default)


def model_roots() -> list[Path]:
    """Every registered ``ditto`` root, in ComfyUI's search order."""
    return [Path(p) for p in folder_paths.get_folder_paths(FOLDER_NAME)]


def model_folder_choices() -> list[str]:
    """Dropdown entries: ``"."`` plus each subfolder (posix, relative to its root) that holds
    at least one Ditto network file."""
    folders = {ROOT_CHOICE}
    for name in folder_paths.get_filename_list(FOLDER_NAME):
        path = PurePosixPath(name)
        if path.stem in _NETWORK_STEMS and path.suffix in (".pth", ".safetensors"):
            folders.add(str(path.parent))
    return sorted(folders)


def resolve_model_folder(choice: str) -> Path:
    """The folder a dropdown entry names: the first root holding it (for ``"."``, the first
    root with any network file in it, else the first root, so a missing-files message names
    the folder a user should fill)."""
    roots = model_roots()
    relative = Path(*[p for p in PurePosixPath(choice).parts if p not in ("", ".", "..", "/")])
    candidates = [root / relative for root in roots]
    for folder in candidates:
        if folder.is_dir() and any(_has_network(f) for f in (folder, folder / "models", folder / "ditto_pytorch" / "models")):
            return folder
    existing = [folder for folder in candidates if folder.is_dir()]
    return (existing or candidates)[0]


def aux_folder(model_dir: Path) -> Optional[Path]:
    """The ``aux_models`` folder belonging to a model folder: inside it, beside it (HuggingFace
    layout ``ditto_pytorch/{models,aux_models}``) or under its ``ditto_pytorch``; None if absent."""
    for folder in (model_dir / "aux_models", model_dir.parent / "aux_models", model_dir / "ditto_pytorch" / "aux_models"):
        if folder.is_dir():
            return folder
    return None


def safe_filename_prefix(prefix: str, default: str = "ditto/talking_head") -> str:
    """A ``filename_prefix`` that stays inside the output folder.

    Drive letters, absolute roots, ``..`` and ``.`` components, and characters that are not
    valid in file names are removed; backslashes count as separators. What is left is a
    relative path such as ``ditto/clip``; an empty result falls back to ``default``.
    """
    parts = []
    for part in re.split(r"[\\/]+", _UNSAFE_CHARS.sub("", str(prefix)).strip()):
        part = part.strip().rstrip(".")
        if part and part != "..":
            parts.append(part)
    return "/".join(parts) or default


def _has_network(folder: Path) -> bool:
    return folder.is_dir() and any((folder / f"{stem}{ext}").is_file() for stem in _NETWORK_STEMS for ext in (".pth", ".safetensors"))
