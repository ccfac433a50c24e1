"""Where a warm worker listens and how a client talks to it. Imports neither torch nor the pipeline.

The worker listens on a Unix socket in a folder only its user can enter (``$XDG_RUNTIME_DIR``,
else the user cache), and checks each client's user id, so no other account on the machine can
hand it a job (which names files it writes). Messages are JSON objects, one a line, at most
:data:`MAX_MESSAGE_BYTES`:

* client -> ``{"type": "job", "code": ..., "settings": {...}, "request": {...}}``
  (:class:`~ditto_core.render_request.RenderSettings`, :class:`~ditto_core.render_request.RenderRequest`);
  later only ``{"type": "cancel"}`` (or closing the connection, which cancels too);
* worker -> ``{"type": "refused", "why": ...}`` (not its settings or code: the client renders
  itself), or ``{"type": "queued", "ahead": n}``, ``{"type": "accepted", "pid": n}``, then any
  number of ``{"type": "status", "text": ...}`` and ``{"type": "progress", "done": i, "total": n}``,
  and last ``{"type": "done", "out": path, "times": {stage: seconds}}`` or
  ``{"type": "error", "kind": "input" | "cancelled" | "failed", "message": ...}``;
* client -> ``{"type": "info"}``: worker -> ``{"type": "info", "pid", "settings", "jobs", "busy",
  "engine": "compiled" | "compiling" | "eager", "idle_s"}``; client -> ``{"type": "stop"}``: the worker finishes its job and exits.
"""
from __future__ import annotations

import hashlib
import json
import os
import socket
import stat
import sys
from pathlib import Path
from typing import Any, BinaryIO, Optional

from ..errors import InputError
from ..user_cache import not_private, open_above, user_cache_dir

MAX_MESSAGE_BYTES = 1 << 16
SOCKET_NAME = "worker.sock"
_PACKAGE = Path(__file__).resolve().parents[1]


class ProtocolError(Exception):
    """The other side sent something that is not a message of this protocol."""


def default_socket() -> Path:
    """``$DITTO_WORKER_SOCKET``, else ``worker.sock`` in a private folder of this user."""
    if os.environ.get("DITTO_WORKER_SOCKET"):
        return Path(os.environ["DITTO_WORKER_SOCKET"])
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    folder = Path(runtime) / "comfyui-ditto" if runtime and os.path.isdir(runtime) else user_cache_dir("worker")
    return folder / SOCKET_NAME


# Longest Unix socket path the system takes (sun_path less its terminating NUL: Linux 108, BSDs 104).
MAX_SOCKET_PATH_BYTES = 107 if sys.platform.startswith("linux") else 103


def lock_file(path: Path) -> Path:
    """The file beside the socket at ``path`` that the worker holding it locks and writes its pid to."""
    return path.with_name(path.name + ".lock")


def path_fits(path: Path) -> bool:
    return len(os.fsencode(path)) <= MAX_SOCKET_PATH_BYTES


def supported() -> bool:
    return hasattr(socket, "AF_UNIX") and hasattr(os, "getuid")


def socket_source(given: Optional[Path]) -> str:
    """Where the socket path came from, for messages: the flag, the variable or the default."""
    if given is not None:
        return "--socket"
    return "DITTO_WORKER_SOCKET" if os.environ.get("DITTO_WORKER_SOCKET") else "the default socket"


def private_folder(path: Path, create: bool, source: str = "--socket") -> Path:
    """``path``'s folder, checked to be this user's alone (created so when ``create``).
    ``source`` (:func:`socket_source`) names where the path came from in the messages."""
    folder = path.parent
    try:
        if create:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        problem = not_private(folder)
        exposed = open_above(folder)
    except OSError as error:  # e.g. a part of the path is a file
        raise InputError(f"{source} {path}: cannot use the folder {folder} ({error}); pass another --socket") from None
    if problem is not None:
        # chmod helps with a folder of ours; a shared one (/tmp: sticky) or another user's needs a folder of our own.
        info = folder.stat()
        mine = info.st_uid == os.getuid() and not info.st_mode & stat.S_ISVTX
        fix = (f"run `chmod 700 {folder}` or pass another --socket" if mine else
               f"make a folder of your own (`mkdir -m 700 {folder / 'ditto'}`) and pass --socket "
               f"{folder / 'ditto' / SOCKET_NAME}")
        raise InputError(f"{source} {path}: the worker socket's folder {folder} must belong to you alone "
                         f"({problem}); {fix}")
    if exposed is not None:
        raise InputError(f"{source} {path}: the worker socket's folder {folder} lies in {exposed}, where another "
                         f"user could put a folder of theirs in its place; pass a --socket under your home folder "
                         f"or /tmp")
    return folder


def code_identity() -> str:
    """Fingerprint of this ditto_core's source files (names, sizes, times): a worker started before
    the code changed refuses jobs from the new code instead of serving them with the old."""
    digest = hashlib.sha256()
    for path in sorted(_PACKAGE.rglob("*.py")):
        info = path.stat()
        digest.update(f"{path.relative_to(_PACKAGE)}:{info.st_size}:{info.st_mtime_ns};".encode())
    return digest.hexdigest()


def send(connection: socket.socket, message: dict[str, Any]) -> None:
    data = json.dumps(message, separators=(",", ":")).encode() + b"\n"
    if len(data) > MAX_MESSAGE_BYTES:
        raise ProtocolError(f"message of {len(data)} bytes is over the {MAX_MESSAGE_BYTES}-byte limit")
    connection.sendall(data)


def receive(reader: BinaryIO) -> Optional[dict[str, Any]]:
    """The next message, or None when the other side has closed the connection."""
    line = reader.readline(MAX_MESSAGE_BYTES + 1)
    if not line:
        return None
    if not line.endswith(b"\n"):
        if len(line) > MAX_MESSAGE_BYTES:
            raise ProtocolError(f"message over the {MAX_MESSAGE_BYTES}-byte limit")
        return None  # the connection closed in the middle of a message
    try:
        message = json.loads(line)
    except ValueError as error:
        raise ProtocolError(f"not JSON: {error}") from None
    except RecursionError:
        raise ProtocolError("not a message: JSON nested too deeply") from None
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        raise ProtocolError("a message is a JSON object with a string 'type'")
    return message


def peer_uid(connection: socket.socket) -> Optional[int]:
    """The connected process's user id (Linux), None where the system cannot say."""
    if not hasattr(socket, "SO_PEERCRED"):
        return None
    import struct

    credentials = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", credentials)[1]
