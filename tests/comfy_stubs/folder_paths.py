"""Stand-in for ComfyUI's ``folder_paths``: model folders, output folder, save-path helper."""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile

base_path = tempfile.mkdtemp(prefix="comfy_stub_")
atexit.register(shutil.rmtree, base_path, ignore_errors=True)  # each test process made one and left it
models_dir = os.path.join(base_path, "models")
folder_names_and_paths: dict[str, tuple[list[str], set[str]]] = {}
_output_directory = os.path.join(base_path, "output")
_user_directory = os.path.join(base_path, "user")
_temp_directory = os.path.join(base_path, "temp")
_input_directory = os.path.join(base_path, "input")


def set_output_directory(path: str) -> None:
    global _output_directory
    _output_directory = path


def get_output_directory() -> str:
    return _output_directory


def set_temp_directory(path: str) -> None:
    global _temp_directory
    _temp_directory = path


def get_temp_directory() -> str:
    return _temp_directory
def set_input_directory(path: str) -> None:
    global _input_directory
    _input_directory = path


def get_input_directory() -> str:
    return _input_directory


def set_user_directory(path: str) -> None:
    global _user_directory
    _user_directory = path


def get_user_directory() -> str:
    return _user_directory


def add_model_folder_path(folder_name: str, full_folder_path: str, is_default: bool = False) -> None:
    paths, _ = folder_names_and_paths.setdefault(folder_name, ([], set()))
    if full_folder_path in paths:
        paths.remove(full_folder_path)
    paths.insert(0, full_folder_path) if is_default else paths.append(full_folder_path)


def get_folder_paths(folder_name: str) -> list[str]:
    return list(folder_names_and_paths[folder_name][0])


def get_filename_list(folder_name: str) -> list[str]:
    """Files under every registered folder, relative to it, with ``/`` separators (as ComfyUI)."""
    paths, extensions = folder_names_and_paths.get(folder_name, ([], set()))
    found = set()
    for root in paths:
        for dirpath, _, files in os.walk(root, followlinks=True):
            for name in files:
                if extensions and os.path.splitext(name)[1].lower() not in extensions:
                    continue
                found.add(os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/"))
    return sorted(found)


def get_save_image_path(filename_prefix: str, output_dir: str, image_width=0, image_height=0):
    """(folder, file stem, next counter, subfolder, prefix); refuses folders outside ``output_dir``
    as ComfyUI does."""
    subfolder = os.path.dirname(os.path.normpath(filename_prefix))
    filename = os.path.basename(os.path.normpath(filename_prefix))
    full_output_folder = os.path.join(output_dir, subfolder)
    if os.path.commonpath((output_dir, os.path.abspath(full_output_folder))) != output_dir:
        raise Exception("Saving image outside the output folder is not allowed.")
    os.makedirs(full_output_folder, exist_ok=True)
    counters = [0]
    for name in os.listdir(full_output_folder):
        stem, _, rest = name.partition(f"{filename}_")
        if stem == "" and rest[:5].isdigit():
            counters.append(int(rest[:5]))
    return full_output_folder, filename, max(counters) + 1, subfolder, filename_prefix
