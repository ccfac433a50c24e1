"""Run a script under Triton's interpreter (CPU) in a child process and read its JSON result.

A child process because Triton reads TRITON_INTERPRET when its kernels are defined, and this
test process may have imported them for real. The script sees the repository on
its path and prints one JSON object as its last line.
"""
import os
from pathlib import Path

import pytest

from tests.process_support import child_json

REPO = Path(__file__).resolve().parents[1]


def run_interpreted(script: str) -> dict:
    """Skips the calling test where Triton is not installed."""
    pytest.importorskip("triton")
    return child_json(script, env=dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(REPO)))
