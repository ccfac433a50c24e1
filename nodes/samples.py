"""The example inputs, put where the example workflows look for them.

The workflows load ``ditto_portrait.jpg``, ``ditto_speech.wav`` and ``ditto_source.mp4`` from
ComfyUI's input folder; the pack ships small ones in ``example_workflows/inputs/`` (licence in
its README) and copies each into the input folder once, only where no file of that name exists,
so a template runs as it opens and a user's own file under the same name is never replaced.
"""
from __future__ import annotations

import logging
import shutil
from pathlib import Path

import folder_paths

from ditto_core.atomic_files import atomic_write

log = logging.getLogger(__name__)

SAMPLE_DIR = Path(__file__).resolve().parents[1] / "example_workflows" / "inputs"
SAMPLE_FILES = ("ditto_portrait.jpg", "ditto_speech.wav", "ditto_source.mp4")


def install_sample_inputs() -> list[Path]:
    """Copy the missing sample inputs into ComfyUI's input folder; the files written.

    A read-only or full input folder only costs the samples: the pack loads either way.
    """
    target_dir = Path(folder_paths.get_input_directory())
    written = []
    for name in SAMPLE_FILES:
        target = target_dir / name
        if target.exists():
            continue
        try:
            target_dir.mkdir(parents=True, exist_ok=True)
            atomic_write(target, lambda tmp: shutil.copyfile(SAMPLE_DIR / name, tmp))
        except OSError as exc:
            log.warning("Ditto: could not copy the sample input %s to %s (%s); the example workflows need a file "
                        "of that name there.", name, target_dir, exc)
            continue
        written.append(target)
    if written:
        log.info("Ditto: copied the sample inputs %s to %s for the example workflows.",
                 ", ".join(p.name for p in written), target_dir)
    return written
