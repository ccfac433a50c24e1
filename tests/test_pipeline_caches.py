"""The pipeline keeps a bounded number of samplers and engines (each holds CUDA graphs), and
loads the face models only for a registration that misses the avatar cache."""
from __future__ import annotations

import gc
import weakref
from types import SimpleNamespace

import pytest
import torch

from ditto_core import pipeline as pipeline_module
from ditto_core.pipeline import KEPT_SETTINGS, DittoPipeline
from ditto_core.registration.aux_models import AuxModels
from ditto_core.registration.options import RegistrationOptions
from tests.test_hardening_models import _load_then_register, model_dir  # noqa: F401 (model_dir: a fixture)


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


def test_a_cached_avatar_never_loads_the_face_models(model_dir, tmp_path, monkeypatch):
    """Face models load at the first registration that misses the avatar cache, not with the
    pipeline: a render of a cached avatar (a new process's usual job) never waits for them."""
    loads = []
    real_load = pipeline_module.load_aux_models
    monkeypatch.setattr(pipeline_module, "load_aux_models", lambda *a, **k: loads.append(k) or real_load(*a, **k))
    first = _load_then_register(model_dir, cache_dir=tmp_path / "avatars")
    assert loads == [{"required": ()}] and first.aux.landmark203 is not None
    first.register(torch.full((1, 144, 144, 3), 90, dtype=torch.uint8), RegistrationOptions(detect_face=False))
    assert len(loads) == 1  # loaded once per pipeline
    loads.clear()
    again = _load_then_register(model_dir, cache_dir=tmp_path / "avatars")  # a new pipeline, the cached portrait
    assert loads == [] and again.aux.landmark203 is None
    # Same cache key as the pipeline whose face models were loaded: the fingerprint is the files'.
    assert again.aux.identity == first.aux.identity != ""
