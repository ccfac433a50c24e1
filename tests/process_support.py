"""Real processes for the tests: pids that have exited, temporaries they left, children that
hold their own temporaries while alive, and scripts run in a fresh interpreter that report JSON."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
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
