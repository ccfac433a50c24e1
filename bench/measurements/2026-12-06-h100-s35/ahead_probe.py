"""Session 35: session 33's first_prompt_probe.py with the pipeline's motion generated ahead of the
render (variant "ahead": DittoPipeline.motion_ahead=True; call 1, when it was off by default) or
before it ("serial": motion_ahead=False; call 2, after the default became "where it pays"): a new
process's first clip renders eagerly, and its motion's first use (eager windows, the window graph's
recording) could overlap the render.

    python3 ahead_probe.py ahead|serial MODELS IMAGE AUDIO OUT.json [JOBS]   (the probe's arguments)

The probe times each LMDM window after a device-wide synchronize; on the motion worker that would
make it wait for the render's batches, so the worker's windows are timed unsynchronised (launch
to return).
"""
import runpy
import sys
import threading
from pathlib import Path

import torch

from ditto_core import pipeline

_init = pipeline.DittoPipeline.__init__
_synchronize = torch.cuda.synchronize


def _ahead(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    self.motion_ahead = sys.argv[1] == "ahead"


def _synchronize_off_the_worker(*args, **kwargs):
    if threading.current_thread().name != "ditto-motion-ahead":
        _synchronize(*args, **kwargs)


pipeline.DittoPipeline.__init__ = _ahead
torch.cuda.synchronize = _synchronize_off_the_worker
runpy.run_path(str(Path(__file__).parents[1] / "2026-12-06-h100-s33" / "first_prompt_probe.py"), run_name="__main__")
