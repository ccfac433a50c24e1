"""The pipeline keeps a bounded number of samplers and engines (each holds CUDA graphs)."""
from __future__ import annotations

import gc
import weakref
from types import SimpleNamespace

import pytest
import torch

from ditto_core import pipeline as pipeline_module
from ditto_core.pipeline import KEPT_SETTINGS, DittoPipeline
from ditto_core.registration.aux_models import AuxModels


class _Built:
    """Stands in for a sampler or engine: records the settings it was built with."""

    def __init__(self, *networks, **settings):
        self.settings = settings


@pytest.mark.reliability(area="Soak and faults", case="a long session trying many step counts or batch sizes",
                         behaviour="the pipeline keeps the samplers and engines (with their CUDA graphs) of the 4 most "
                                   "recently used settings; older ones are released, and rebuilt if asked for again")
def test_samplers_and_engines_are_kept_for_the_most_recent_settings(monkeypatch):
    monkeypatch.setattr(pipeline_module, "DDIMSampler", _Built)
    monkeypatch.setattr(pipeline_module, "WarpDecodeEngine", _Built)
    models = SimpleNamespace(lmdm=None, warp_network=None, decoder=None, device=torch.device("cpu"))
    pipe = DittoPipeline(models, AuxModels(), hubert=None, compile=False)

    first = pipe.sampler(10)
    assert pipe.sampler(10) is first  # reused, not rebuilt
    gone = weakref.ref(first)
    del first
    for steps in range(11, 11 + KEPT_SETTINGS):  # a session sweeping the step count
        pipe.sampler(steps)
    gc.collect()
    assert gone() is None, "the least recently used sampler (and its CUDA graphs) must be released"
    assert len(pipe._samplers) == KEPT_SETTINGS
    recent = pipe.sampler(11 + KEPT_SETTINGS - 1)
    assert recent.settings["steps"] == 11 + KEPT_SETTINGS - 1 and recent is pipe.sampler(11 + KEPT_SETTINGS - 1)

    engines = [pipe.engine(batch_size) for batch_size in range(1, 2 * KEPT_SETTINGS + 1)]
    assert len(pipe._engines) == KEPT_SETTINGS and pipe.engine(2 * KEPT_SETTINGS) is engines[-1]
    assert pipe.engine(1) is not engines[0]  # dropped long ago: built again
