"""The per-user cache folder of the pack: compiled kernels, mapped weights.

Everything here is derived from other files and can be deleted at any time. It lives where
only the user writes (``$XDG_CACHE_HOME``, else ``~/.cache``), never in the models folder that a
download or another user may fill, because some of it (Inductor's compiled kernels) is code.
"""
from __future__ import annotations

import os
from pathlib import Path


def user_cache_dir(kind: str) -> Path:
    """``<XDG_CACHE_HOME or ~/.cache>/comfyui-ditto/<kind>`` (not created here)."""
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "comfyui-ditto" / kind
