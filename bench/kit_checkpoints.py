"""The parity kit's random checkpoints in the official layout (its ``make_checkpoints.py``, seed 0),
for the tests and the benchmarks. Imports no torch: a benchmark's parent process times its children's."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ditto_core.model_files import NETWORK_STEMS

__all__ = ["OFFICIAL_FILES", "write_kit_checkpoints"]

OFFICIAL_FILES = tuple(f"{stem}.pth" for stem in NETWORK_STEMS.values())
"""The six network files the script writes, as downloaded."""

_DIGESTS_DIFFER = 3
"""The script's status when every file is written but a content digest differs from the kit's:
the spectral-norm u/v come from numpy's SVD, whose last bits follow the CPU's LAPACK kernels (an
AVX-512 machine differs). The parity tests compare numbers within tolerance and stay the judge of
whether the weights are the reference cases' ones."""


def write_kit_checkpoints(script: Path, out: Path) -> str:
    """Run ``script`` into ``out``; ``''``, or the script's message where only digests differ.

    Raises :class:`RuntimeError` when it fails otherwise or leaves one of :data:`OFFICIAL_FILES` unwritten.
    """
    made = subprocess.run([sys.executable, str(script), "--out", str(out), "--seed", "0"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    written = all((Path(out) / name).is_file() for name in OFFICIAL_FILES)
    if made.returncode == _DIGESTS_DIFFER and written:
        return made.stderr.strip() or "digest mismatch"
    if made.returncode != 0 or not written:
        raise RuntimeError(f"{script.name} failed (status {made.returncode}): {made.stderr.strip()}")
    return ""
