"""The per-user cache folder of the pack: compiled kernels, mapped weights.

Everything here is derived from other files and can be deleted at any time. It lives where
only the user writes (``$XDG_CACHE_HOME``, else ``~/.cache``), never in the models folder that a
download or another user may fill, because some of it (Inductor's compiled kernels, AOT
packages) is code that later processes load and run: the folder is made this user's alone
before anything is read from it or written to it.
"""
from __future__ import annotations

import logging
import os
import stat
from pathlib import Path
from typing import Optional

from .errors import DittoError

log = logging.getLogger(__name__)

_PACK_FOLDER = "comfyui-ditto"


def user_cache_dir(kind: str) -> Path:
    """``<XDG_CACHE_HOME or ~/.cache>/comfyui-ditto/<kind>``, in a folder of this user's alone
    (the ``comfyui-ditto`` folder is created mode 700, or made so if it is this user's;
    :class:`~ditto_core.errors.DittoError` if it belongs to another user or cannot be made).
    ``kind`` itself is not created here."""
    root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / _PACK_FOLDER
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = root.stat()
        owner_ok = not hasattr(os, "getuid") or info.st_uid == os.getuid()
        if owner_ok and not_private(root) is not None:
            # Ours, made by an earlier version with the umask's mode: tightened rather than refused.
            os.chmod(root, 0o700)
            log.info("Ditto: made the cache folder %s private (it was mode %o)", root, stat.S_IMODE(info.st_mode))
    except OSError as error:
        raise DittoError(f"cannot use the Ditto cache folder {root} ({error}); set XDG_CACHE_HOME to a folder "
                         "you can write") from error
    if not owner_ok:
        raise DittoError(f"the Ditto cache folder {root} belongs to another user (owner {info.st_uid}), and it "
                         "holds compiled code this process would run; set XDG_CACHE_HOME to a folder of yours")
    exposed = open_above(root)
    if exposed is not None:
        raise DittoError(f"the Ditto cache folder {root} lies in {exposed}: another user could swap the folder for "
                         "one of theirs, and it holds compiled code this process would run; set XDG_CACHE_HOME to "
                         "a folder of yours")
    return root / kind


def not_private(folder: Path) -> Optional[str]:
    """Why ``folder`` is not this user's alone ("owner 1001", "mode 775"); None if it is, and
    on systems without user ids."""
    if not hasattr(os, "getuid"):
        return None
    info = folder.stat()
    if info.st_uid != os.getuid():
        return f"owner {info.st_uid}"
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        return f"mode {stat.S_IMODE(info.st_mode):o}"
    return None


def open_above(folder: Path) -> Optional[str]:
    """The first folder above ``folder`` that another user could change ("/srv/x (mode 777)",
    "/home/b (owner 1001)"); None if every one belongs to this user or root and only they write
    it, or it is sticky (``/tmp``: others cannot rename what is ours). A folder of ours in a folder
    others write is not ours to keep: they can rename it away and put theirs in its place."""
    if not hasattr(os, "getuid"):
        return None
    for parent in folder.resolve().parents:
        info = parent.stat()
        if info.st_uid not in (0, os.getuid()):
            return f"{parent} (owner {info.st_uid})"
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not info.st_mode & stat.S_ISVTX:
            return f"{parent} (mode {stat.S_IMODE(info.st_mode):o})"
    return None
