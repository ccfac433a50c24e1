"""Import the node pack the way ComfyUI does, against these stand-ins when ComfyUI is absent.

The modules in this folder (``folder_paths``, ``comfy``, ``comfy_api``) are importable as
top-level names once :func:`install` has put the folder on ``sys.path``.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

STUB_DIR = Path(__file__).resolve().parent
REPO = STUB_DIR.parents[1]
PACK_MODULE = "comfyui_ditto_pack"


def install() -> None:
    """Make ``folder_paths``/``comfy``/``comfy_api`` importable: ComfyUI's own if present, else these."""
    try:
        import comfy_api.latest  # noqa: F401
    except ImportError:
        if str(STUB_DIR) not in sys.path:
            sys.path.insert(0, str(STUB_DIR))


def load_pack():
    """The pack's top-level module, loaded as ComfyUI loads a custom-node folder (a package
    from ``<folder>/__init__.py``, under a name of the loader's choosing)."""
    install()
    if PACK_MODULE not in sys.modules:
        spec = importlib.util.spec_from_file_location(PACK_MODULE, REPO / "__init__.py",
                                                      submodule_search_locations=[str(REPO)])
        module = importlib.util.module_from_spec(spec)
        sys.modules[PACK_MODULE] = module
        spec.loader.exec_module(module)
    return sys.modules[PACK_MODULE]
