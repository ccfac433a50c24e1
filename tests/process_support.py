"""Real processes for the tests: pids that have exited, temporaries they left, children that
hold their own temporaries while alive, scripts run in a fresh interpreter that report JSON, and
the output of long-running children read as it comes."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from ditto_core.atomic_files import _HOST

REPO = Path(__file__).resolve().parents[1]


def python_child(code: str, *args: str, **popen) -> subprocess.Popen:
    """A Python process running ``code`` (``sys.argv[1:]``: ``args``) from the repository root;
    stdin and stdout piped, as text."""
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *args], cwd=REPO, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, **popen)


def child_json(code: str, *args: str, env: dict[str, str] | None = None, timeout: float = 600) -> dict:
    """Run ``code`` (``sys.argv[1:]``: ``args``) in a new interpreter from the repository root and
    return the JSON object its last line prints; a failing child fails the test with its stderr."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def dead_pid() -> int:
    """The pid of a process that has exited (and been waited for)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(timeout=60)
    return child.pid


def stale_temp(folder: Path, target_name: str, suffix: str = ".part.mp4") -> Path:
    """A temporary of ours, as a process killed outright while writing ``target_name`` leaves it."""
    path = folder / f".{target_name}.~ditto.{dead_pid()}.1.{_HOST}.0badc0de{suffix}"
    path.write_bytes(b"\0" * 48)
    return path


class LiveTemp:
    """A child process holding a temporary of ``target`` (made by ``temp_sibling``) until closed."""

    def __init__(self, target: Path):
        self.process = python_child(f"""
            import sys
            from ditto_core.atomic_files import temp_sibling
            print(temp_sibling({str(target)!r}, suffix=".part.mp4"), flush=True)
            sys.stdin.read()  # alive until the test closes our stdin
        """)
        self.path = Path(self.process.stdout.readline().strip())

    def __enter__(self) -> "LiveTemp":
        return self

    def __exit__(self, *exc) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


class ChildOutput:
    """Every line a child writes to its piped text ``stdout``, read on a thread as it comes.

    Why not ``readline()`` up to a marker and then ``communicate()``: ``communicate`` reads the
    pipe's descriptor, so lines that ``readline`` had already buffered past the marker are lost."""

    def __init__(self, process: subprocess.Popen):
        self._lines: list[str] = []
        self._ended = False
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, args=(process.stdout,), daemon=True)
        self._reader.start()

    def _read(self, stream) -> None:
        for line in stream:
            with self._changed:
                self._lines.append(line)
                self._changed.notify_all()
        with self._changed:
            self._ended = True
            self._changed.notify_all()

    def wait_for(self, text: str, timeout: float) -> bool:
        """Whether a line containing ``text`` came within ``timeout`` s (False once the output ended without it)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not any(text in line for line in self._lines):
                left = deadline - time.monotonic()
                if self._ended or left <= 0:
                    return False
                self._changed.wait(left)
            return True

    def text(self, timeout: float = 0) -> str:
        """What came so far; with ``timeout``, first wait that long for the output to end (EOF)."""
        self._reader.join(timeout)
        with self._changed:
            return "".join(self._lines)
