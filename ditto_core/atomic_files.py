"""Files that appear whole or not at all, the temporaries behind them, and their digests.

Every file the pack writes for later runs or other programs to trust (rendered MP4s, converted
weights, avatar cache entries, downloads) goes through here:

1. :func:`temp_sibling` creates a temporary beside the target (same folder, so the final
   rename never crosses filesystems). Its name carries the owning process -- pid, the pid's
   start time and a token for the host's boot and pid namespace -- so a later run can tell
   a leftover of a dead process from the work of a live one, even once the pid is reused::

       .clip.mp4.~ditto.4242.1234567.3f2a9c1e.b7d01a44.part.mp4
        target   marker pid  start   host    random  suffix

   It is created with the mode a plain ``open(target, "w")`` would give (``0o666`` less the
   umask, default ACLs honoured: the kernel applies them), never ``mkstemp``'s ``0o600``,
   which would survive the rename and hide the file from a web server or another user.
2. :func:`publish` syncs its bytes, renames it over the target and syncs the folder, so after
   a crash the target is the old file or the new one, never a prefix of the new one. A file
   written over seconds can have its bytes sent to the disk as it grows (:class:`Writeback`),
   so that sync has only the last stretch left to wait for.
3. :func:`discard` removes it after a failure; :func:`reap_stale_temporaries` removes what
   processes that died without cleaning up (SIGKILL, power loss) left in a folder.
4. :func:`disk_full_error` turns ENOSPC/EDQUOT into :class:`DiskFullError`, naming the folder,
   the space needed and the space free.
5. :func:`folder_lock` serialises the processes that rewrite one folder as a whole (a weights
   conversion), where per-file atomicity alone would let two of them interleave.

:func:`atomic_target` (a context manager) and :func:`atomic_write` / :func:`atomic_write_bytes`
combine the steps for the common case; :func:`atomic_dir` does the same for a folder of files
that must appear together (a cache entry), published by renaming the folder.
"""
from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import hashlib
import os
import re
import secrets
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional, Union

from .errors import DittoError

PathLike = Union[str, os.PathLike]

TEMP_MARKER = "~ditto"
"""What sets our temporaries' names apart from anything a user or another program writes."""

FOREIGN_TEMP_AGE_S = 24 * 3600
"""A temporary whose owner cannot be checked (written on another host sharing the folder, or
before a reboot, or on a platform without ``/proc``) is reaped only once it has not been
touched for this long: a live writer touches its file far more often."""

_DISK_FULL_ERRNOS = frozenset(e for e in (errno.ENOSPC, getattr(errno, "EDQUOT", None)) if e is not None)
_RUST_OS_ERROR = re.compile(r"\(os error (\d+)\)")
_NAME_ROOM = 120  # characters of the target's name kept in a temporary's name (NAME_MAX is 255)
_TEMP_NAME = re.compile(
    r"^\.(?P<target>.*)\." + re.escape(TEMP_MARKER)
    + r"\.(?P<pid>\d+)\.(?P<start>\d+)\.(?P<host>[0-9a-f]{8})\.[0-9a-f]{8}(?P<suffix>(\.[A-Za-z0-9_-]+)*)$",
    re.DOTALL,
)
_UNKNOWN_HOST = "0" * 8


class DiskFullError(DittoError, OSError):
    """A write ran out of disk space or quota; nothing half-written was left behind.

    Also an :class:`OSError` (with ``errno`` set), so callers that handle I/O failures in
    general keep doing so.
    """

    def __init__(self, message: str, code: int, folder: Path, needed: Optional[int], free: Optional[int]):
        OSError.__init__(self, code, message)
        self.folder, self.needed, self.free = folder, needed, free
        self.message = message

    def __str__(self) -> str:
        return self.message

    def __reduce__(self):  # crosses process boundaries whole (batch workers, multiprocessing)
        return type(self), (self.message, self.errno, self.folder, self.needed, self.free)


# ---------------------------------------------------------------------------------- owners


def _host_token() -> str:
    """8 hex digits naming where our pids mean something: this boot of this host's kernel and
    this pid namespace (two containers on one host share the boot but not the pids); zeros
    where unknown."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        return _UNKNOWN_HOST
    return hashlib.sha256(f"{boot}/{namespace}".encode()).hexdigest()[:8]


def _start_time(pid: int) -> Optional[int]:
    """When ``pid`` started, in clock ticks since boot (``/proc/<pid>/stat`` field 22); None if
    the process does not exist or the platform has no ``/proc``."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may itself contain ") ".
    fields = raw[raw.rindex(b")") + 2:].split()
    if fields[0] == b"Z":
        return None  # a zombie: exited, only its exit status is left
    return int(fields[19])


_HOST = _host_token()
_OWN: dict[int, str] = {}


def _owner_tag() -> str:
    """``pid.start.host`` of this process (recomputed after a fork: the child has a new pid)."""
    pid = os.getpid()
    if pid not in _OWN:
        _OWN[pid] = f"{pid}.{_start_time(pid) or 0}.{_HOST}"
    return _OWN[pid]


def _pid_exists(pid: int) -> Optional[bool]:
    """Whether a process ``pid`` exists; None where that cannot be asked safely."""
    if os.name != "posix":
        return None  # os.kill(pid, 0) on Windows would terminate the process
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by another user
    return True


@dataclass(frozen=True)
class TempInfo:
    """What a temporary's name says about it."""

    target_name: str  # the target's name, possibly shortened
    pid: int
    start: int  # clock ticks since boot; 0 where unknown
    host: str  # boot and pid namespace token; zeros where unknown


def parse_temp_name(name: str) -> Optional[TempInfo]:
    """The owner recorded in one of our temporaries' names; None for any other name."""
    match = _TEMP_NAME.match(name)
    if match is None:
        return None
    return TempInfo(match["target"], int(match["pid"]), int(match["start"]), match["host"])


def owner_is_alive(info: TempInfo) -> Optional[bool]:
    """True if the process that created the temporary is running, False if it certainly is
    not, None if that cannot be told from here (another host or container, an earlier boot,
    no ``/proc``)."""
    if info.host == _UNKNOWN_HOST or info.host != _HOST:
        return None
    exists = _pid_exists(info.pid)
    if not exists:
        return exists
    if info.start == 0:
        return True  # the writer could not record its start: trust the pid
    return _start_time(info.pid) == info.start  # a different start: the pid was reused


# ---------------------------------------------------------------------------------- temporaries


def temp_sibling(target: PathLike, *, suffix: str = ".tmp", directory: bool = False) -> Path:
    """Create and return an empty temporary file (or folder) beside ``target``, owned by us.

    ``suffix`` ends the name (e.g. ``".part.mp4"`` for a tool that looks at extensions).
    The target's folder must exist. The caller hands the result to :func:`publish` or
    :func:`discard`.
    """
    target = Path(target)
    if not re.fullmatch(r"(\.[A-Za-z0-9_-]+)*", suffix):
        raise ValueError(f"temp_sibling: suffix must look like '.part.mp4', got {suffix!r}")
    stem = f".{target.name[:_NAME_ROOM]}.{TEMP_MARKER}.{_owner_tag()}"
    while True:
        path = target.parent / f"{stem}.{secrets.token_hex(4)}{suffix}"
        try:
            if directory:
                os.mkdir(path, 0o777)  # the umask and default ACLs apply, as for any mkdir
            else:
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666))
            return path
        except FileExistsError:
            continue  # 32 random bits collided: draw again


def _fsync_path(path: Path, directory: bool) -> None:
    if directory and os.name != "posix":
        return  # folders cannot be opened, nor need syncing, on Windows
    # A file is opened for writing: Windows refuses to sync a read-only descriptor.
    fd = os.open(path, (os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)) if directory else os.O_RDWR)
    try:
        os.fsync(fd)
    except OSError as exc:
        if not directory or exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise  # some filesystems cannot sync a folder; the rename is still atomic there
    finally:
        os.close(fd)


@functools.lru_cache(maxsize=1)
def _sync_file_range() -> Optional[Callable[..., int]]:
    """glibc's ``sync_file_range`` (Linux only; Python's ``os`` has no binding), or None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        call = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    call.restype = ctypes.c_int
    return call


_SYNC_FILE_RANGE_WRITE = 2  # start writing the range's dirty pages; do not wait for them


class Writeback:
    """Starts the disk writes of a growing file every ``every`` bytes, without waiting for them.

    :func:`publish` syncs a file before renaming it into place; for a file of tens of MiB
    written over seconds, that sync otherwise waits for every byte at the very end, after the
    last frame (the user's wait). Started here as the file grows, the writes overlap the
    encoding and the final sync finds only the last stretch dirty. Linux only (elsewhere, and
    where the call fails, it does nothing: the final sync still makes the file durable).
    """

    def __init__(self, path: PathLike, every: int) -> None:
        self.path = Path(path)
        self.every = every
        self._started = 0  # the size at the last start
        self._fd: Optional[int] = None
        self._call = _sync_file_range()

    def grown(self, size: int) -> None:
        """The file now holds ``size`` bytes: start writing them if ``every`` more have come."""
        if self._call is None or size - self._started < self.every:
            return
        try:
            if self._fd is None:
                self._fd = os.open(self.path, os.O_RDONLY)
        except OSError:
            self._call = None
            return
        # The whole file (length 0: to its end): pages already on their way are skipped, and
        # bytes a muxer buffered past the last call are included.
        if self._call(self._fd, 0, 0, _SYNC_FILE_RANGE_WRITE) != 0:
            self._call = None  # e.g. a filesystem without it: the final sync covers everything
            return
        self._started = size

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def publish(temp: PathLike, target: PathLike, *, replace_folder: bool = False,
            needed: Optional[int] = None) -> bool:
    """Move a finished temporary into place atomically; return whether it was published.

    Its bytes are synced first (so the rename cannot reach the disk before them), the rename
    itself after it (by syncing the folder). A file always replaces an existing target. A
    folder is renamed only where ``target`` does not exist yet: if it does (another process
    published the same entry first), the temporary is discarded and False returned, unless
    ``replace_folder``, which moves the existing folder aside first (readers then see a short
    miss, never a mixture of both). On failure the temporary is discarded and ``target`` left
    as it was; running out of space raises :class:`DiskFullError` (``needed``: the size).
    """
    temp, target = Path(temp), Path(target)
    with disk_full_translated(target, needed):
        try:
            if temp.is_dir():
                for child in temp.iterdir():
                    if child.is_file():
                        _fsync_path(child, directory=False)
                _fsync_path(temp, directory=True)
                published = _rename_folder(temp, target, replace_folder)
            else:
                _fsync_path(temp, directory=False)
                os.replace(temp, target)
                published = True
            _fsync_path(target.parent, directory=True)
        except BaseException:
            discard(temp)
            raise
    return published


def _rename_folder(temp: Path, target: Path, replace: bool) -> bool:
    while True:
        try:
            os.rename(temp, target)
            return True
        except OSError as exc:
            taken = exc.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR) or isinstance(exc, FileExistsError)
            if not taken:
                raise
        if not replace:
            discard(temp)
            return False
        # Move the old folder aside under a name of ours, then retry: whoever renames it
        # aside first wins, a second replacer finds it gone and simply retries the rename.
        aside = temp_sibling(target, directory=True)
        os.rmdir(aside)
        try:
            os.rename(target, aside)
        except FileNotFoundError:
            continue
        discard(aside)


def cannot_write_under(folder: PathLike) -> Optional[str]:
    """Why files cannot be written in ``folder`` or the folders to be made below its nearest
    existing ancestor ("cannot write into /proc (it takes no new files)"); None if they can.

    Found by creating a file there: permission bits do not tell, as root passes ``os.access`` on
    a folder without write bits and pseudo-filesystems (``/proc``) refuse new files whatever the mode.
    """
    folder = Path(folder).absolute()
    existing = next(p for p in (folder, *folder.parents) if p.exists())
    if not existing.is_dir():
        return f"cannot write into {existing}: it is a file"
    try:
        discard(temp_sibling(existing / "write-check"))
    except OSError as error:
        # ENOENT for a folder that exists: /proc answers so for a new name.
        why = "it takes no new files" if error.errno == errno.ENOENT else error.strerror or type(error).__name__
        return f"cannot write into {existing} ({why}); choose a folder of your own"
    return None


def discard(temp: PathLike) -> None:
    """Remove a temporary file or folder; nothing happens if it is already gone."""
    temp = Path(temp)
    if temp.is_dir() and not temp.is_symlink():
        shutil.rmtree(temp, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()


def reap_stale_temporaries(folder: PathLike, *, depth: int = 0, now: Optional[float] = None) -> list[Path]:
    """Remove the temporaries that dead processes left in ``folder``; return them.

    Subfolders are searched too, ``depth`` levels deep (0: ``folder`` only; symbolic links are
    never followed). Only names made by :func:`temp_sibling` are considered. A temporary of a
    live process is kept; one whose owner cannot be checked (see :func:`owner_is_alive`) is
    kept until it has been untouched for :data:`FOREIGN_TEMP_AGE_S`. A missing or unreadable
    folder, or a temporary that cannot be removed, is skipped: this runs at start-up and must
    never stop it.
    """
    now = time.time() if now is None else now
    reaped = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return reaped
    for entry in entries:
        info = parse_temp_name(entry.name)
        try:
            if info is None:
                if depth > 0 and entry.is_dir(follow_symlinks=False):
                    reaped += reap_stale_temporaries(entry.path, depth=depth - 1, now=now)
                continue
            if entry.is_symlink():
                continue
            alive = owner_is_alive(info)
            if alive is None:
                alive = now - entry.stat(follow_symlinks=False).st_mtime < FOREIGN_TEMP_AGE_S
            if not alive:
                discard(entry.path)
                reaped.append(Path(entry.path))
        except OSError:
            continue  # vanished meanwhile, or not ours to remove (another user's folder)
    return reaped


@contextlib.contextmanager
def folder_lock(folder: PathLike, *, shared: bool = False) -> Iterator[bool]:
    """Hold an advisory lock on ``folder`` while the block runs: exclusive for a process that
    rewrites the folder's files as a set, ``shared`` for one that reads them as a set.

    A process asking for the lock waits while an incompatible one holds it. The lock is
    ``flock`` on the folder itself, so no lock file is left behind, and the kernel releases it
    if the holder dies. An exclusive lock creates the folder if needed. Yields whether a lock
    is held: False where the platform or the filesystem has none (Windows, some network
    filesystems) or the folder does not exist; the block then runs unserialised, each file
    still published atomically.
    """
    folder = Path(folder)
    if not shared:
        folder.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:
        yield False
        return
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except FileNotFoundError:
        yield False
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        except OSError as exc:
            if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL, errno.EBADF):
                raise
            yield False
            return
        yield True
    finally:
        os.close(fd)  # releases the lock


# ---------------------------------------------------------------------------------- disk full


def _format_bytes(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def free_bytes(folder: PathLike) -> Optional[int]:
    """Bytes an unprivileged write can still use in ``folder``; None if it cannot be asked."""
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def disk_full_error(exc: BaseException, target: PathLike, needed: Optional[int] = None) -> Optional[DiskFullError]:
    """A :class:`DiskFullError` for ``exc`` if it (or what caused it) is ENOSPC/EDQUOT, else None.

    ``needed`` is the size of what was being written, where known.
    """
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, DiskFullError):
            return exc
        if isinstance(exc, OSError) and exc.errno in _DISK_FULL_ERRNOS:
            return make_disk_full_error(Path(target), needed, exc.errno)
        # Libraries written in Rust (safetensors) raise their own exception type carrying
        # std::io::Error's text, which ends in "(os error N)".
        rust = _RUST_OS_ERROR.search(str(exc))
        if rust is not None and int(rust[1]) in _DISK_FULL_ERRNOS:
            return make_disk_full_error(Path(target), needed, int(rust[1]))
        exc = exc.__cause__ or exc.__context__
    return None


def make_disk_full_error(target: Path, needed: Optional[int], code: int = errno.ENOSPC) -> DiskFullError:
    """The error for writing ``target`` (``needed`` bytes, if known) into a full folder."""
    folder = target.parent.resolve()
    free = free_bytes(folder)
    what = "disk quota" if code != errno.ENOSPC else "disk space"
    need = f"needs {_format_bytes(needed)}" if needed is not None else "needs more space"
    have = f", {_format_bytes(free)} free" if free is not None else ""
    message = (f"out of {what} in {folder}: writing {target.name} {need}{have}. Free some space there "
               f"(or choose another folder) and run again; nothing half-written was left behind.")
    return DiskFullError(message, code, folder, needed, free)


def check_free_space(target: PathLike, needed: int) -> None:
    """Raise :class:`DiskFullError` now if ``needed`` bytes clearly do not fit beside ``target``."""
    target = Path(target)
    free = free_bytes(target.parent)
    if free is not None and needed > free:
        raise make_disk_full_error(target, needed)


# ---------------------------------------------------------------------------------- combined


@contextlib.contextmanager
def disk_full_translated(target: PathLike, needed: Optional[int] = None) -> Iterator[None]:
    """Re-raise ENOSPC/EDQUOT escaping the block as :class:`DiskFullError` about ``target``."""
    try:
        yield
    except BaseException as exc:
        translated = disk_full_error(exc, target, needed)
        if translated is None or translated is exc:
            raise
        raise translated from exc


def atomic_target(target: PathLike, *, suffix: str = ".tmp",
                  needed: Optional[int] = None) -> contextlib.AbstractContextManager[Path]:
    """Yield a temporary to write ``target``'s content into; publish it when the block ends.

    On any exception (including KeyboardInterrupt) the temporary is removed and ``target``
    left as it was; running out of space raises :class:`DiskFullError`. ``needed``, the
    expected size, is checked against the free space first and named in that error.
    """
    target = Path(target)
    return _staged(target, needed, lambda: temp_sibling(target, suffix=suffix),
                   lambda temp: publish(temp, target, needed=needed))


def atomic_dir(target: PathLike, *, replace: bool = False,
               needed: Optional[int] = None) -> contextlib.AbstractContextManager[Path]:
    """Yield a temporary folder to fill; rename it to ``target`` when the block ends.

    Readers see the folder complete or not at all. If ``target`` already exists when the
    block ends, another writer got there first: ours is discarded unless ``replace``.
    ``target``'s parent is created if needed; ``needed`` is as for :func:`atomic_target`.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    return _staged(target, needed, lambda: temp_sibling(target, directory=True),
                   lambda temp: publish(temp, target, replace_folder=replace, needed=needed))


@contextlib.contextmanager
def _staged(target: Path, needed: Optional[int], create: Callable[[], Path],
            finish: Callable[[Path], object]) -> Iterator[Path]:
    """Check the space, ``create()`` a temporary, yield it, ``finish(it)``; discard it on failure."""
    with disk_full_translated(target, needed):
        if needed is not None:
            check_free_space(target, needed)
        temp = create()
        try:
            yield temp
        except BaseException:
            discard(temp)
            raise
        finish(temp)


def atomic_write(target: PathLike, write: Callable[[Path], object], *, needed: Optional[int] = None) -> None:
    """Call ``write(tmp)`` on a temporary path beside ``target``, then publish it as ``target``.

    On any failure (including cancellation) the temporary file is removed and ``target`` is
    left as it was.
    """
    with atomic_target(target, needed=needed) as temp:
        write(temp)


def atomic_write_bytes(target: PathLike, data: bytes) -> None:
    atomic_write(target, lambda tmp: tmp.write_bytes(data), needed=len(data))


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file, read in 4 MiB blocks (what ``sha256sum`` prints)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()
