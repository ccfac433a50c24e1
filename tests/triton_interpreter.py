"""Run a script under Triton's interpreter (CPU) in a child process and read its JSON result.

A child process because Triton reads TRITON_INTERPRET when its kernels are defined, and this
test process may have imported them for real. The script sees the repository on
its path and prints one JSON object as its last line.
"""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def run_interpreted(script: str) -> dict:
    """Skips the calling test where Triton is not installed."""
    pytest.importorskip("triton")
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
