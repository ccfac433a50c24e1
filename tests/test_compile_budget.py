"""Compiled functions of the pack keep compiling new shapes past torch's default of 8 entries.

Dynamo keeps one list of compiled entries per code object, shared by every ``torch.compile`` of
the function, so every sampler's step and every engine's step gather into one list; past the
limit a new shape silently runs eagerly (``compilation.RECOMPILE_BUDGET``). Real Dynamo on the
CPU, with a backend that counts the graphs it is handed and runs them as they are.
"""
from __future__ import annotations

import pytest
import torch

from ditto_core.compilation import RECOMPILE_BUDGET, compile_function
from ditto_core.models.keypoints import MOTION_DIM
from ditto_core.models.lmdm import LMDM, WINDOW
from ditto_core.motion import lmdm_sampler
from ditto_core.motion.lmdm_sampler import DDIMSampler

SHAPES = 12  # past torch's default limit of 8, within the budget


class CountingBackend:
    """A Dynamo backend that counts the graphs it compiles and runs them unchanged."""

    def __init__(self) -> None:
        self.graphs = 0

    def __call__(self, graph_module, example_inputs):
        self.graphs += 1
        return graph_module.forward


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Empty compile caches, torch's default limit, and both restored after: on a torch without a
    per-function limit, compile_function raises the process's limit, which must not outlive the test."""
    import torch._dynamo

    torch._dynamo.reset()
    with torch._dynamo.config.patch(recompile_limit=8):
        yield
    torch._dynamo.reset()


def _scale_rows(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + 1


def _other_scale_rows(x: torch.Tensor) -> torch.Tensor:  # a code object of its own: a cache of its own
    return x * 2 + 1


def test_a_function_compiled_by_the_pack_compiles_every_shape_past_torchs_default_limit():
    plain = CountingBackend()
    baseline = torch.compile(_other_scale_rows, backend=plain, dynamic=False)
    for rows in range(1, SHAPES + 1):
        x = torch.randn(rows, 3)
        assert torch.equal(baseline(x), x * 2 + 1)
    assert plain.graphs == 8 < SHAPES <= RECOMPILE_BUDGET  # the premise: past 8 entries, shapes ran eagerly
    ours = CountingBackend()
    compiled = compile_function(_scale_rows, backend=ours, dynamic=False)
    for rows in range(1, SHAPES + 1):
        x = torch.randn(rows, 3)
        assert torch.equal(compiled(x), x * 2 + 1)
    assert ours.graphs == SHAPES


@pytest.mark.parametrize("user_limit, expected", [(8, RECOMPILE_BUDGET), (2 * RECOMPILE_BUDGET, 2 * RECOMPILE_BUDGET)])
def test_a_torch_without_a_per_function_limit_gets_the_process_limit_raised_never_lowered(
        monkeypatch, user_limit, expected):
    """A torch whose ``torch.compile`` takes no ``recompile_limit`` (2.13's does): the process-wide one is raised."""
    import torch._dynamo

    real_compile = torch.compile

    def older_compile(fn, **options):
        if "recompile_limit" in options:
            raise TypeError("compile() got an unexpected keyword argument 'recompile_limit'")
        return real_compile(fn, **options)

    monkeypatch.setattr(torch, "compile", older_compile)
    backend = CountingBackend()
    with torch._dynamo.config.patch(recompile_limit=user_limit):
        compiled = compile_function(_scale_rows, backend=backend, dynamic=False)
        assert torch._dynamo.config.recompile_limit == expected
        for rows in range(1, SHAPES + 1):
            compiled(torch.randn(rows, 3))
    assert backend.graphs == SHAPES


def test_other_type_errors_from_torch_compile_are_not_swallowed(monkeypatch):
    def broken(fn, **options):
        raise TypeError("compile() got an unexpected keyword argument 'mode'")

    monkeypatch.setattr(torch, "compile", broken)
    with pytest.raises(TypeError, match="'mode'"):
        compile_function(_scale_rows, mode="default")


@pytest.mark.reliability(
    area="Soak and faults",
    case="a long-lived process compiles the LMDM step or the warp+decode step at more than 8 shapes (a warmed live "
         "runtime's 8 engine and 5 sampler shapes, then an offline render, another model or another precision in "
         "the same ComfyUI)",
    behaviour="every new shape still compiles: the pack's compiled steps have room for 64 entries, where torch's "
              "default of 8, shared by every sampler's and every engine's step, made the ninth shape run eagerly "
              "for the rest of the process with one log line")
def test_samplers_of_two_models_compile_every_batch_size_into_one_shared_list(monkeypatch):
    """Two models' compiled samplers share their step's entries (the second model compiles nothing
    the first compiled) and a ninth batch size still compiles (a live runtime's batches, an offline
    sampler and another model in one process)."""
    backend = CountingBackend()
    real_compile = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **options: real_compile(fn, backend=backend, **options))
    monkeypatch.setattr(lmdm_sampler, "compile_available", lambda device: (True, ""))
    torch.manual_seed(0)
    models = [LMDM().eval().requires_grad_(False) for _ in range(2)]
    samplers = [DDIMSampler(model, 1, cuda_graph=False, compile=True) for model in models]
    batches = range(1, 10)
    for batch in batches:
        for model, sampler in zip(models, samplers):
            kp, aud = torch.randn(batch, MOTION_DIM), torch.randn(batch, WINDOW, 1103)
            x_T = torch.randn(batch, WINDOW, MOTION_DIM)
            noise = torch.zeros(sampler.noise_shape(batch))
            got = sampler.sample(kp, aud, x_T, noise)
            if batch == batches[-1]:  # the last entry compiled: the eager answer
                want = DDIMSampler(model, 1, cuda_graph=False).sample(kp, aud, x_T, noise)
                torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert backend.graphs == len(batches)
