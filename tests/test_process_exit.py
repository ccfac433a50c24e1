"""A finished CLI render ends its process at once (no teardown), with its status, its messages
and its files complete."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import av
import pytest

from tests.test_signals import REPO, _tiny_clip, _work_folders


def test_exit_now_keeps_status_and_output_and_skips_teardown():
    code = ("import atexit; from ditto_core.process_exit import exit_now; "
            "atexit.register(lambda: print('teardown ran')); "
            "print('result line', end=''); exit_now(3)")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 3
    assert done.stdout == "result line"  # flushed from a pipe's buffer, no newline needed
    assert "teardown ran" not in done.stdout + done.stderr


def test_exit_now_lets_background_work_finish_and_logs_its_failures(tmp_path):
    done_file = tmp_path / "written"
    code = ("import time; from pathlib import Path; from ditto_core.process_exit import exit_now, in_background; "
            f"in_background(lambda: (time.sleep(0.5), Path({str(done_file)!r}).write_text('complete')), 'slow'); "
            "in_background(lambda: 1 / 0, 'broken'); "
            "exit_now(0)")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0
    assert done_file.read_text() == "complete"  # the exit waited for it
    assert "background task broken failed" in done.stderr and "ZeroDivisionError" in done.stderr


@pytest.mark.slow
def test_cli_render_process_ends_with_its_mp4_complete(tmp_path):
    image, audio = _tiny_clip(tmp_path)
    out, temp_dir = tmp_path / "out" / "clip.mp4", tmp_path / "tmp"
    temp_dir.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "ditto_core", "render", "--image", str(image), "--audio", str(audio),
         "--out", str(out), "--random-weights", "--device", "cpu", "--steps", "2", "--preset", "ultrafast",
         "--max-seconds", "0.2", "--batch-size", "2"],
        cwd=REPO, env={**os.environ, "TMPDIR": str(temp_dir)},
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"wrote {out}" in done.stdout
    with av.open(str(out)) as container:
        assert sum(1 for _ in container.decode(video=0)) == 5  # 0.2 s at 25 fps: 2 + 2 + 1, a last short batch
    assert [p.name for p in out.parent.iterdir()] == ["clip.mp4"]
    assert _work_folders(temp_dir) == []
