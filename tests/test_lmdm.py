"""LMDM network: checkpoint layout, strict loading and one-step parity with the reference."""
from __future__ import annotations

import json

import pytest
import torch

from ditto_core.errors import InputError
from ditto_core.models.checkpoints import load_network
from ditto_core.models.lmdm import LMDM, cosine_alphas_cumprod
from tests.parity import rel_l2

LMDM_FILE = "lmdm_v0.4_hubert.pth"
TOL = 1e-4


@pytest.fixture(scope="module")
def lmdm(official_ckpt_dir) -> LMDM:
    return load_network("lmdm", official_ckpt_dir)


@pytest.fixture(scope="module")
def step_case(load_case) -> dict:
    return load_case("lmdm_step")


def test_state_dict_matches_manifest(reference_dir):
    manifest = json.loads((reference_dir / "weights_manifest.json").read_text())
    expected = {e["key"]: tuple(e["shape"]) for e in manifest["checkpoints"][LMDM_FILE]["state_dict"]}
    got = {k: tuple(v.shape) for k, v in LMDM(cond_dim=1103).state_dict().items()}
    assert got == expected
    assert sum(k.endswith("rotary.freqs") for k in got) == 11
    assert "alphas_cumprod" not in got  # the schedule is derived, never loaded


def test_strict_load_shares_one_rotary(official_ckpt_dir):
    state = torch.load(official_ckpt_dir / LMDM_FILE, map_location="cpu", weights_only=True)["model_state_dict"]
    model = LMDM(cond_dim=state["cond_projection.weight"].shape[1])
    model.load_state_dict(state, strict=True)
    rotaries = {id(m) for name, m in model.named_modules(remove_duplicate=False) if name.endswith("rotary")}
    assert len(rotaries) == 1
    torch.testing.assert_close(model.rotary.freqs, state["rotary.freqs"], rtol=0, atol=0)


def test_schedule_matches_reference_bits(load_case):
    ref = load_case("lmdm_ddim")["meta"]["alphas_cumprod_float32"]
    assert torch.equal(cosine_alphas_cumprod(), ref)
    assert torch.equal(LMDM().alphas_cumprod, ref)


@pytest.mark.parametrize("index", [0, 1, 2], ids=["t999", "t499", "t19"])
def test_guided_step_parity(lmdm, step_case, index):
    case = step_case["steps"][index]
    inp, ref = case["inputs"], case["outputs"]
    with torch.no_grad():
        pred_noise, x_start = lmdm.guided(inp["x"], inp["cond_frame"], inp["cond"], inp["time_cond"])
    assert rel_l2(x_start, ref["x_start"]) < TOL
    assert rel_l2(pred_noise, ref["pred_noise"]) < TOL


def test_raw_passes_and_null_mask(lmdm, step_case):
    inp, ref = step_case["steps"][1]["inputs"], step_case["steps"][1]["outputs"]
    args = (inp["x"], inp["cond_frame"], inp["cond"], inp["time_cond"])
    with torch.no_grad():
        cond = lmdm(*args)
        uncond = lmdm(*args, null_cond=True)
        mixed = lmdm(*(a.repeat(2, *([1] * (a.ndim - 1))) for a in args), null_cond=torch.tensor([True, False]))
    assert rel_l2(cond, ref["x0_cond"]) < TOL
    assert rel_l2(uncond, ref["x0_uncond"]) < TOL
    assert rel_l2(mixed[:1], ref["x0_uncond"]) < TOL
    assert rel_l2(mixed[1:], ref["x0_cond"]) < TOL


def test_batched_rows_are_independent(lmdm, step_case):
    inp, ref = step_case["steps"][2]["inputs"], step_case["steps"][2]["outputs"]
    gen = torch.Generator().manual_seed(1)
    other = {k: torch.randn(v.shape, generator=gen) for k, v in inp.items() if k != "time_cond"}
    x, frame, cond = (torch.cat((inp[k], other[k])) for k in ("x", "cond_frame", "cond"))
    t = torch.tensor([inp["time_cond"].item(), 700])
    with torch.no_grad():
        condition = lmdm.encode_guidance(frame, cond)
        pred_noise, x_start = lmdm.guided_step(x, t, condition)
    assert condition.batch == 4  # conditional rows, then null rows
    assert rel_l2(x_start[:1], ref["x_start"]) < TOL
    assert rel_l2(pred_noise[:1], ref["pred_noise"]) < TOL
    assert rel_l2(x_start[1:], ref["x_start"]) > 0.1


def test_bad_condition_width_is_actionable():
    model = LMDM(cond_dim=1103)
    with pytest.raises(InputError, match=r"cond has shape \(1, 80, 1024\).*1103"):
        model.encode_guidance(torch.zeros(1, 265), torch.zeros(1, 80, 1024))
    with pytest.raises(InputError, match="cond_frame"):
        model.encode_guidance(torch.zeros(1, 63), torch.zeros(1, 80, 1103))


def test_time_condition_split_by_step_equals_each_steps_own_rows():
    """The sampler computes every step's time condition in one batch and stacks it by step: each
    step gets exactly its own rows, dense, with strides that do not depend on the step count (the
    compiled step is reused across step counts instead of recompiled), whether it is taken by a
    Python index or gathered by a device index (a recorded step's)."""
    torch.manual_seed(0)
    net = LMDM().eval()
    rows = 4  # 2 windows x (conditional, null)
    condition = net.encode_guidance(torch.randn(2, 265), torch.randn(2, 80, net.cond_dim))
    strides = set()
    with torch.no_grad():
        for steps in (3, 5):
            t = torch.randint(0, 1000, (steps,)).repeat_interleave(rows)
            tiled = type(condition)(**{**vars(condition), "hidden": condition.hidden.repeat(steps, 1)})
            every = net.time_condition(t, tiled)
            stacked = every.stacked_steps(steps)
            assert stacked.keys.shape[0] == steps
            for i in range(steps):
                own = slice(i * rows, (i + 1) * rows)
                for part in (stacked.step(i), stacked.step(torch.tensor([i]))):
                    for got, want in ((part.modulations, every.modulations[:, :, :, own]),
                                      (part.keys, every.keys[:, own]), (part.values, every.values[:, own])):
                        assert got.is_contiguous() and torch.equal(got, want)
                    strides.add((part.modulations.stride(), part.keys.stride(), part.values.stride()))
    assert len(strides) == 1
