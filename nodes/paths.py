"""Where Ditto's files live inside ComfyUI: the ``ditto`` model folder and the output folder.

The model folder is registered with ``folder_paths.add_model_folder_path("ditto", ...)``, so
``ComfyUI/models/ditto`` works out of the box and ``extra_model_paths.yaml`` can add more
(a ``ditto:`` entry). A *model folder* is a folder ``ditto_core`` loads from: the networks flat in it
or in ``models/`` / ``ditto_pytorch/models/`` below it, the face models and HuBERT in
``aux_models/`` / ``ditto_pytorch/aux_models/``. The dropdown lists every such folder found.
"""
from __future__ import annotations

import os
import re
from pathlib import Path, PurePosixPath

import folder_paths

from ditto_core.atomic_files import reap_stale_temporaries
from ditto_core.model_files import NETWORK_STEMS, find_network_file

FOLDER_NAME = "ditto"
ROOT_CHOICE = "."
"""The model-folder choice meaning "the ditto folder itself" (always offered)."""
_NETWORK_STEMS = set(NETWORK_STEMS.values())
_UNSAFE_CHARS = re.compile(r'[\x00-\x1f<>:"|?*]')


def register_model_folder() -> None:
    """Add ``<ComfyUI models>/ditto`` to the ``ditto`` model paths (idempotent)."""
    default = os.path.join(folder_paths.models_dir, FOLDER_NAME)
    folder_paths.add_model_folder_path(FOLDER_NAME, default)


OUTPUT_DEPTH = 3
"""Subfolder levels of the output folder searched for stale temporaries (a ``filename_prefix``
such as ``videos/ditto/take`` saves two levels down)."""


def reap_stale_files() -> list[Path]:
    """Remove the partial files that Ditto runs killed outright (a server stopped mid-save, a
    crash) left in ComfyUI's output and temp folders, the avatar cache and the model folders
    (an interrupted download); temporaries of live processes, such as a second ComfyUI
    sharing the folders, stay. Returns what was removed."""
    folders = [(folder_paths.get_output_directory(), OUTPUT_DEPTH), (folder_paths.get_temp_directory(), 0),
               (avatar_cache_dir(), 0), *((root, 1) for root in model_roots())]
    return [path for folder, depth in folders for path in reap_stale_temporaries(folder, depth=depth)]


def model_roots() -> list[Path]:
    """Every registered ``ditto`` root, in ComfyUI's search order."""
    return [Path(p) for p in folder_paths.get_folder_paths(FOLDER_NAME)]


def model_folder_choices() -> list[str]:
    """Dropdown entries: ``"."`` (the ditto folder itself) plus every folder, relative to its
    root in posix form, whose networks sit in it or in its ``models/`` or ``ditto_pytorch/models/``."""
    folders = {ROOT_CHOICE}
    for name in folder_paths.get_filename_list(FOLDER_NAME):
        path = PurePosixPath(name)
        if path.stem in _NETWORK_STEMS and path.suffix in (".pth", ".safetensors"):
            folders.add(str(_model_root(path.parent)))
    return sorted(folders)


def resolve_model_folder(choice: str) -> Path:
    """The folder a dropdown entry names: the first root holding it with networks in it (for
    ``"."``: the first root with any network file), else the first candidate, so that a
    missing-files message names the folder a user should fill."""
    relative = Path(*[p for p in PurePosixPath(choice).parts if p not in ("", ".", "..", "/")])
    candidates = [root / relative for root in model_roots()]
    for folder in candidates:
        if any(find_network_file(name, folder) for name in NETWORK_STEMS):
            return folder
    existing = [folder for folder in candidates if folder.is_dir()]
    return (existing or candidates)[0]


def _model_root(folder: PurePosixPath) -> PurePosixPath:
    """The folder ``ditto_core`` is given for networks found in ``folder`` (strips a trailing
    ``ditto_pytorch/models`` or ``models``, the layouts it searches below a model folder)."""
    for tail in (("ditto_pytorch", "models"), ("models",)):
        if folder.parts[-len(tail):] == tail:
            return PurePosixPath(*folder.parts[:-len(tail)]) if len(folder.parts) > len(tail) else PurePosixPath(".")
    return folder


def avatar_cache_dir() -> Path:
    """Avatar cache root: in ComfyUI's user folder, so it survives restarts (unlike temp/)."""
    return Path(folder_paths.get_user_directory()) / "ditto_avatar_cache"


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
