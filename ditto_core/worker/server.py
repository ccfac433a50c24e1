"""The warm worker: one pipeline kept loaded, serving the render command's clips one at a time.

``python -m ditto_core worker`` loads the models once, starts the engine's compile in the
background and listens on its socket (:mod:`.protocol`). Each job is the render command's
:class:`~ditto_core.render_request.RenderRequest`, run exactly as the command would run it in
its own process, with the same settings (a job for other settings, another version of the
code or model files that changed since they were loaded is refused, and its client renders
itself). Jobs queue and run one at a time; a client that cancels or disconnects stops its job
at the next stage or batch, and the writer deletes what it had written. The worker exits after
``idle_s`` without a job, on ``stop`` (the job in progress finishes; queued ones are sent back
to render in their own process), or on SIGINT/SIGTERM (the job in progress is cancelled and
cleaned up first), removing its socket.
"""
from __future__ import annotations

import logging
import os
import socket
import stat
import threading
import time
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from ..errors import DittoError, InputError, Interrupted
from ..render_request import RenderRequest, RenderSettings
from . import protocol

log = logging.getLogger(__name__)

ACCEPT_POLL_S = 0.5  # how often the accept loop looks at the idle clock and the stop flag
STOP_WAIT_S = 60.0  # how long a stopping worker waits for its job to unwind
FIRST_MESSAGE_S = 10.0  # how long a new connection may take to send its request


class Worker:
    """Serves jobs for ``settings`` on ``pipeline`` from a bound, listening socket."""

    def __init__(self, settings: RenderSettings, pipeline: Any, listener: socket.socket,
                 idle_s: Optional[float] = None) -> None:
        self.settings, self.pipeline, self.listener = settings, pipeline, listener
        self.idle_s = idle_s  # None: never exit for idleness
        self.jobs = 0  # jobs finished (successfully or not)
        self._engine = pipeline.engine()  # the one every job renders with
        self._code = protocol.code_identity()
        self._model_files = _model_file_stats(settings)
        self._job_lock = threading.Lock()
        self._state = threading.Lock()  # guards the counters and the set of running cancels
        self._waiting = 0
        self._cancels: set[threading.Event] = set()  # one a job, queued or running
        self._running: Optional[threading.Event] = None  # the running job's
        self._threads: set[threading.Thread] = set()
        self._stop = threading.Event()
        self._last_activity = time.monotonic()

    # -- accept loop ------------------------------------------------------------------------

    def serve(self) -> None:
        """Accept clients until stopped or idle for ``idle_s``, then let the job in progress
        finish (queued ones are sent back to render in their own process). On an interrupt
        (Ctrl-C, SIGTERM) the job in progress is cancelled and cleaned up instead."""
        self.listener.settimeout(ACCEPT_POLL_S)
        try:
            while not self._stop.is_set() and not self._idle_expired():
                try:
                    connection, _ = self.listener.accept()
                except socket.timeout:
                    continue
                thread = threading.Thread(target=self._connection, args=(connection,), daemon=True,
                                          name="ditto-worker-client")
                with self._state:
                    self._threads.add(thread)
                thread.start()
            self.stop()
            self.listener.close()
            self._join_clients(timeout=None)
        except BaseException:
            self.stop(cancel=True)
            self.listener.close()
            self._join_clients(timeout=STOP_WAIT_S)
            raise

    def stop(self, cancel: bool = False) -> None:
        """Take no more jobs; queued ones are sent back. ``cancel``: stop the running job too."""
        self._stop.set()
        with self._state:
            for event in self._cancels:
                if cancel or event is not self._running:
                    event.set()

    def _join_clients(self, timeout: Optional[float]) -> None:
        with self._state:
            threads = list(self._threads)
        for thread in threads:
            thread.join(timeout)

    def _idle_expired(self) -> bool:
        with self._state:
            busy = self._waiting > 0 or self._job_lock.locked()
        if busy:
            self._last_activity = time.monotonic()
        return self.idle_s is not None and time.monotonic() - self._last_activity > self.idle_s

    # -- one client -------------------------------------------------------------------------

    def _connection(self, connection: socket.socket) -> None:
        try:
            with connection, connection.makefile("rb") as reader:
                uid = protocol.peer_uid(connection)
                if uid is not None and uid != os.getuid():
                    log.warning("refused a client of user %d", uid)
                    return
                try:
                    self._answer(connection, reader)
                except protocol.ProtocolError as error:
                    log.info("refused a client's message: %s", error)
                    _try_send(connection, {"type": "error", "kind": "input",
                                           "message": f"not a worker message: {error}"})
        except OSError as error:
            log.info("client connection ended: %s", error)
        finally:
            with self._state:
                self._threads.discard(threading.current_thread())

    def _answer(self, connection: socket.socket, reader) -> None:
        connection.settimeout(FIRST_MESSAGE_S)  # a client that says nothing does not hold a thread
        message = protocol.receive(reader)
        connection.settimeout(None)
        if message is None:
            return
        if message["type"] == "info":
            protocol.send(connection, self.info())
        elif message["type"] == "stop":
            protocol.send(connection, {"type": "stopping", "pid": os.getpid()})
            self.stop()
        elif message["type"] == "job":
            self._job(connection, reader, message)
        else:
            protocol.send(connection, {"type": "error", "kind": "input",
                                       "message": f"unknown message type {message['type']!r}"})

    def info(self) -> dict[str, Any]:
        return {"type": "info", "pid": os.getpid(), "settings": self.settings.to_json(), "jobs": self.jobs,
                "busy": self._job_lock.locked(), "waiting": self._waiting,
                "engine": _engine_state(self._engine),
                "idle_s": round(time.monotonic() - self._last_activity, 1)}

    def _refusal(self, message: dict[str, Any]) -> Optional[str]:
        if self._stop.is_set():
            return "it is stopping"
        if message.get("code") != self._code:
            return "it runs another version of ditto_core; stop it (worker --stop) to use this one"
        try:
            settings = RenderSettings.from_json(message.get("settings"))
        except InputError as error:
            return str(error)
        if settings != self.settings:
            differ = [k for k, v in settings.to_json().items() if self.settings.to_json()[k] != v]
            return f"it was started with other {', '.join(differ)}"
        if _model_file_stats(self.settings) != self._model_files:
            self.stop()  # its networks are not what the folder holds any more
            return "the model files changed since it loaded them; it exits"
        return None

    def _job(self, connection: socket.socket, reader, message: dict[str, Any]) -> None:
        why = self._refusal(message)
        if why is not None:
            protocol.send(connection, {"type": "refused", "why": why})
            return
        try:
            request = RenderRequest.from_json(message.get("request"))
        except InputError as error:
            protocol.send(connection, {"type": "error", "kind": "input", "message": str(error)})
            return
        cancel = threading.Event()
        threading.Thread(target=_watch_for_cancel, args=(reader, cancel), daemon=True,
                         name="ditto-worker-cancel").start()
        with self._turn(connection, cancel):
            if cancel.is_set() and self._stop.is_set():  # stopping: the client renders the clip itself
                protocol.send(connection, {"type": "refused", "why": "it is stopping"})
                return
            if cancel.is_set():
                protocol.send(connection, {"type": "error", "kind": "cancelled", "message": "cancelled while queued"})
                return
            protocol.send(connection, {"type": "accepted", "pid": os.getpid()})
            protocol.send(connection, self._run(connection, request, cancel))

    @contextmanager
    def _turn(self, connection: socket.socket, cancel: threading.Event) -> Iterator[None]:
        """Wait for the pipeline (one job at a time), telling the client how many are ahead; the
        body runs holding it, or without it (``cancel`` set) when the client gave up waiting."""
        with self._state:
            ahead = self._waiting + int(self._job_lock.locked())
            self._waiting += 1
            self._cancels.add(cancel)
        acquired = False
        try:
            if ahead:
                protocol.send(connection, {"type": "queued", "ahead": ahead})
            while not cancel.is_set() and not acquired:
                acquired = self._job_lock.acquire(timeout=ACCEPT_POLL_S)
            with self._state:
                self._waiting -= 1
                if acquired:
                    self._running = cancel
            yield
        finally:
            with self._state:
                self._cancels.discard(cancel)
                if acquired:
                    self._running = None
            if acquired:
                self._last_activity = time.monotonic()
                self._job_lock.release()

    def _run(self, connection: socket.socket, request: RenderRequest, cancel: threading.Event) -> dict[str, Any]:
        """Run one job; the message that ends it."""
        def check() -> None:
            if cancel.is_set():
                raise Interrupted(f"the warm worker was stopped before {request.out.name} was finished; nothing was "
                                  "written. Run the render again" if self._stop.is_set() else "cancelled by its client")

        def status(text: str) -> None:
            check()
            protocol.send(connection, {"type": "status", "text": text})

        def progress(done: int, total: int) -> None:
            check()
            protocol.send(connection, {"type": "progress", "done": done, "total": total})

        start = time.perf_counter()
        self.pipeline.times.seconds.clear()
        try:
            out = request.run(self.pipeline, self.settings.detect_face, progress=progress, status=status)
            log.info("wrote %s in %.2f s", out, time.perf_counter() - start)
            return {"type": "done", "out": str(out), "seconds": time.perf_counter() - start,
                    "times": dict(self.pipeline.times.seconds)}
        except Interrupted as error:
            return {"type": "error", "kind": "cancelled", "message": str(error)}
        except DittoError as error:
            return {"type": "error", "kind": "input", "message": str(error)}
        except OSError as error:  # the client went away mid-send: its job is over
            if cancel.is_set() or isinstance(error, (BrokenPipeError, ConnectionResetError)):
                return {"type": "error", "kind": "cancelled", "message": "the client disconnected"}
            log.error("job failed:\n%s", traceback.format_exc())
            return {"type": "error", "kind": "failed", "message": f"{type(error).__name__}: {error}"}
        except Exception as error:  # a bug or a library failure: the job fails, the worker decides whether to go on
            log.error("job failed:\n%s", traceback.format_exc())
            if _device_is_broken(error):
                self.stop()
            return {"type": "error", "kind": "failed", "message": f"{type(error).__name__}: {error} (the worker's log "
                                                                   "has the traceback)"}
        finally:
            self.jobs += 1


def _try_send(connection: socket.socket, message: dict[str, Any]) -> None:
    """Best effort: the client may be gone already."""
    try:
        protocol.send(connection, message)
    except OSError:
        pass


def _engine_state(engine: Any) -> str:
    """"compiled" (clips render compiled), "compiling" (eagerly until the graph is ready) or "eager"."""
    if engine.compiled_ready():
        return "compiled"
    return "compiling" if engine.stats.compiled else "eager"


def _watch_for_cancel(reader, cancel: threading.Event) -> None:
    """Set ``cancel`` when the client sends ``cancel`` or goes away."""
    try:
        while (message := protocol.receive(reader)) is not None:
            if message["type"] == "cancel":
                break
    except (OSError, ValueError, protocol.ProtocolError):
        pass
    cancel.set()


def _device_is_broken(error: BaseException) -> bool:
    """A CUDA error that leaves the context unusable: later jobs would fail too."""
    text = str(error)
    return "CUDA error" in text or "illegal memory access" in text or type(error).__name__ == "AcceleratorError"


def _model_file_stats(settings: RenderSettings) -> Optional[list[tuple[str, int, int, int]]]:
    """Name, size, time and inode of every model file a render loads (replacing one, or adding
    one the finders prefer, changes them; the avatar cache growing, wherever it is, does not)."""
    if settings.models is None:
        return None
    from ..model_files import render_files

    stats = []
    for path in render_files(settings.models, settings.detect_face):
        info = path.stat()
        stats.append((str(path), info.st_size, info.st_mtime_ns, info.st_ino))
    return stats


@contextmanager
def listening(path: Path, source: str = "--socket") -> Iterator[socket.socket]:
    """A listening socket at ``path``, this user's alone; one worker per path (a lock file says
    which); the socket file is removed on leaving. ``source`` names where the path came from.
    A file at ``path`` or its lock file that this pack did not make is never touched."""
    if not protocol.supported():
        raise InputError("the warm worker needs Unix sockets, which this system lacks; render without it")
    if not protocol.path_fits(path):
        raise InputError(f"{source} {path} is {len(os.fsencode(path))} bytes long; a Unix socket's path may have at "
                         f"most {protocol.MAX_SOCKET_PATH_BYTES}: pass a shorter --socket (or set DITTO_WORKER_SOCKET)")
    import fcntl  # POSIX only, as the sockets are

    protocol.private_folder(path, create=True, source=source)
    _refuse_foreign_file(path, source, "is not a socket", lambda info: stat.S_ISSOCK(info.st_mode))
    lock_path = protocol.lock_file(path)
    _refuse_foreign_file(lock_path, source, "is not a worker's lock file", lambda info: _holds_a_pid(lock_path, info))
    lock = open(lock_path, "a+")
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            raise InputError(f"a worker already serves {path} (pid {lock.read().strip() or '?'}); stop it with "
                             f"`python -m ditto_core worker --stop --socket {path}` or pass another --socket") from None
        lock.seek(0)
        lock.truncate()
        lock.write(str(os.getpid()))
        lock.flush()
        _unlink_socket(path)  # a dead worker's (the lock says none is alive)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(str(path))
            os.chmod(path, 0o600)
            listener.listen(16)
            yield listener
        finally:
            listener.close()
            _unlink_socket(path)
            lock.truncate(0)  # no pid left behind for a later process to mistake for a live worker
    finally:
        lock.close()


def work_folder(path: Path) -> Path:
    """The scratch folder of the worker holding the socket at ``path`` (beside it, so private):
    emptied when a worker takes the socket, which also clears what a killed one left there."""
    return path.with_name(path.name + ".work")


def _refuse_foreign_file(path: Path, source: str, what: str, ours: Callable[[os.stat_result], bool]) -> None:
    try:
        info = path.lstat()
    except FileNotFoundError:
        return
    if not ours(info):
        raise InputError(f"{source} {path}: {path} exists and {what}; it is left alone. Pass another --socket")


def _holds_a_pid(path: Path, info: os.stat_result) -> bool:
    """Whether ``path`` looks like a worker's lock file: a small regular file, empty or a pid."""
    if not stat.S_ISREG(info.st_mode) or info.st_size > 20:
        return False
    text = path.read_text(errors="replace").strip()
    return not text or text.isdigit()


def _unlink_socket(path: Path) -> None:
    try:
        if stat.S_ISSOCK(path.lstat().st_mode):
            path.unlink()
    except FileNotFoundError:
        pass
