"""A render handed to a warm worker: the command line's side, without PyTorch.

A new process pays for importing torch, starting CUDA, loading the networks and recording the
engine's graphs before its first frame; a worker paid that once. :func:`hand_off` connects to
the worker's socket (nothing there: None, the caller renders itself), sends the clip, relays
the worker's status lines and progress to the caller's callbacks, and returns the worker's
answer. Ctrl-C (or SIGTERM) cancels the job in the worker, which deletes what it had written,
before the interruption goes on up.
"""
from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional

from ..errors import DittoError, InputError
from ..render_request import RenderRequest, RenderSettings
from . import protocol

CONNECT_TIMEOUT_S = 2.0
CANCEL_WAIT_S = 30.0  # how long an interrupted client waits for the worker to confirm its cleanup
_NO_WORKER = {errno.ENOENT, errno.ECONNREFUSED, errno.ENOTSOCK, errno.ENOTDIR}


class WorkerError(DittoError):
    """The worker took the job and it failed there; ``kind`` is "input", "failed" or "lost"."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def connect(path: Path) -> Optional[socket.socket]:
    """A connection to the worker at ``path``; None when no worker listens there."""
    if not protocol.supported() or not protocol.path_fits(path):  # no worker can listen there
        return None
    try:
        if path.stat().st_uid != os.getuid():
            return None
    except (FileNotFoundError, NotADirectoryError):
        return None
    protocol.private_folder(path, create=False)
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.settimeout(CONNECT_TIMEOUT_S)
    try:
        connection.connect(str(path))
    except OSError as error:
        connection.close()
        if error.errno in _NO_WORKER or isinstance(error, socket.timeout):
            return None
        raise
    connection.settimeout(None)
    return connection


def ask(path: Path, message: dict[str, Any], timeout: Optional[float] = None) -> Optional[dict[str, Any]]:
    """One question (``info``, ``stop``) and its answer; None when no worker listens at ``path``
    or none answered within ``timeout`` seconds (a worker still loading its models answers
    once they are loaded)."""
    connection = connect(path)
    if connection is None:
        return None
    with connection, connection.makefile("rb") as reader:
        connection.settimeout(timeout)
        try:
            protocol.send(connection, message)
            return protocol.receive(reader)
        except socket.timeout:
            return None


def hand_off(
    path: Path, settings: RenderSettings, request: RenderRequest,
    status: Callable[[str], None], progress: Callable[[int, int], None],
) -> Optional[dict[str, Any]]:
    """Render ``request`` in the worker at ``path``: its ``done`` message, or None when there is no
    worker there or it serves other settings or code (then the caller renders the clip itself).
    Raises :class:`WorkerError` when the job failed in the worker."""
    connection = connect(path)
    if connection is None:
        return None
    with connection, connection.makefile("rb") as reader:
        pid = None
        try:
            protocol.send(connection, {"type": "job", "code": protocol.code_identity(),
                                       "settings": settings.to_json(), "request": request.to_json()})
            while True:
                message = protocol.receive(reader)
                if message is None:
                    raise ConnectionResetError("the worker closed the connection")
                kind = message["type"]
                if kind == "refused":
                    status(f"the warm worker at {path} cannot take this job ({message.get('why')}); rendering here")
                    return None
                if kind == "queued":
                    status(f"waiting for the warm worker: {message.get('ahead')} job(s) ahead")
                elif kind == "accepted":
                    pid = message.get("pid")
                    status(f"handed to the warm worker (pid {pid})")
                elif kind == "status":
                    status(str(message.get("text")))
                elif kind == "progress":
                    progress(int(message["done"]), int(message["total"]))
                elif kind == "done":
                    return message
                elif kind == "error":
                    raise WorkerError(str(message.get("kind")), str(message.get("message")))
        except (OSError, protocol.ProtocolError) as error:
            if pid is None:  # gone before it took the job (stopping, killed while loading): nothing was started
                status(f"the warm worker at {path} went away before taking the job ({error}); rendering here")
                return None
            raise WorkerError("lost", f"the warm worker (pid {pid}) stopped before the video was finished; nothing "
                                      f"was written to {request.out}. Run again (--worker off renders in this "
                                      "process)") from None
        except KeyboardInterrupt:
            finished = _cancel(connection, reader)
            if finished is not None:  # done before the cancel arrived: the MP4 is complete
                return finished
            raise


def _cancel(connection: socket.socket, reader) -> Optional[dict[str, Any]]:
    """Tell the worker to stop the job and wait (bounded) until it has cleaned up; its ``done``
    message if the job had finished before the cancel reached it."""
    try:
        protocol.send(connection, {"type": "cancel"})
        connection.settimeout(CANCEL_WAIT_S)
        while (message := protocol.receive(reader)) is not None:
            if message["type"] == "done":
                return message
            if message["type"] == "error":
                break
    except (OSError, protocol.ProtocolError):
        pass  # the worker is gone: its own exit removes its temporaries
    return None


def start_worker(path: Path, settings: RenderSettings, idle_minutes: float, wait_s: float = 600.0,
                 status: Callable[[str], None] = lambda text: None) -> Path:
    """Start a worker for ``settings`` at ``path`` as a process of its own (it outlives this one
    and exits after ``idle_minutes`` without a job); returns its log once it accepts jobs."""
    log = path.parent / "worker.log"
    protocol.private_folder(path, create=True)
    command = [sys.executable, "-m", "ditto_core", "worker", "--socket", str(path), "--idle-minutes", str(idle_minutes),
               *settings_flags(settings)]
    status(f"starting a warm worker (its log: {log})")
    with open(log, "ab") as output:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
                                   start_new_session=True)  # Ctrl-C in this terminal does not stop it
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if ask(path, {"type": "info"}, timeout=1.0) is not None:  # answered once its models are loaded
            return log
        if process.poll() is not None and not _lock_holder_alive(path):
            # (one started beside it by another render holding the socket: that one is waited for)
            raise InputError(f"the warm worker exited ({process.returncode}) before it was ready; its log: {log}\n"
                             + _tail(log))
        time.sleep(0.1)
    raise InputError(f"the warm worker was not ready after {wait_s:.0f} s; its log: {log}")


def _lock_holder_alive(path: Path) -> bool:
    """Whether a worker holds the socket's lock (asked of the lock itself: a pid in the file may
    be a dead worker's, reused by another process)."""
    import fcntl  # POSIX only, as the sockets are

    try:
        with open(protocol.lock_file(path), "rb") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(lock, fcntl.LOCK_UN)
    except OSError:
        pass
    return False


def settings_flags(settings: RenderSettings) -> list[str]:
    """The ``worker`` command's flags that load ``settings``."""
    flags = ["--precision", settings.precision, "--batch-size", str(settings.batch_size)]
    if settings.random_weights:
        flags += ["--random-weights", "--seed", str(settings.weights_seed)]
    else:
        flags += ["--models", str(settings.models)]
    if not settings.detect_face and not settings.random_weights:
        flags.append("--cropped")
    if settings.device is not None:
        flags += ["--device", settings.device]
    if settings.cache_dir is not None:
        flags += ["--cache-dir", str(settings.cache_dir)]
    return flags


def _tail(log: Path, lines: int = 15) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
