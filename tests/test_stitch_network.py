"""Stitching network (LivePortrait's shoulder retargeting MLP) against the reference kit."""
import json

import pytest
import torch

from ditto_core.errors import InputError
from ditto_core.models.checkpoints import load_network
from ditto_core.models.stitch_network import StitchingNetwork
from tests.parity import rel_l2


@pytest.fixture(scope="module")
def stitch(official_ckpt_dir):
    return load_network("stitch_network", official_ckpt_dir)


@pytest.fixture(scope="module")
def case(load_case):
    return load_case("stitch_network")


def test_state_dict_matches_manifest(reference_dir):
    entry = json.loads((reference_dir / "weights_manifest.json").read_text())["checkpoints"]["stitch_network.pth"]
    want = [(e["key"], tuple(e["shape"])) for e in entry["state_dict"]]
    got = [(k, tuple(v.shape)) for k, v in StitchingNetwork().state_dict().items()]
    assert got == want


def test_loads_the_shoulder_head_of_the_three_head_file(stitch, official_ckpt_dir):
    raw = torch.load(official_ckpt_dir / "stitch_network.pth", weights_only=True)
    assert {"retarget_shoulder", "retarget_mouth", "retarget_eye"} <= set(raw)
    for key, value in raw["retarget_shoulder"].items():
        assert torch.equal(stitch.state_dict()[key.replace("module.", "")], value.float()), key


def test_reference_parity(stitch, case):
    with torch.inference_mode():
        got = stitch(**case["inputs"])
    ref = case["outputs"]["out"]
    assert got.shape == ref.shape
    assert rel_l2(got, ref) < 1e-4


def test_offsets_then_xy_shift_layout():
    """Output = kp_driving + delta[:63] as (21, 3), with delta[63:65] added to x and y only."""
    net = StitchingNetwork().eval()
    last = net.mlp[-1]
    with torch.no_grad():
        last.weight.zero_()
        last.bias.copy_(torch.arange(65.0))
    g = torch.Generator().manual_seed(0)
    kp_s, kp_d = torch.randn(2, 2, 21, 3, generator=g)
    expected = kp_d + torch.arange(63.0).reshape(21, 3) + torch.tensor([63.0, 64.0, 0.0])
    torch.testing.assert_close(net(kp_s, kp_d), expected)
    torch.testing.assert_close(net.delta(kp_s, kp_d), torch.arange(65.0).expand(2, 65))


def test_batch_rows_are_independent_and_source_broadcasts(stitch, case):
    kp_s, kp_d = case["inputs"]["kp_source"], case["inputs"]["kp_driving"]
    g = torch.Generator().manual_seed(1)
    drivers = torch.cat([kp_d, kp_d + 0.05 * torch.randn(3, 21, 3, generator=g)])
    with torch.inference_mode():
        batched = stitch(kp_s.expand(4, 21, 3), drivers)
        broadcast = stitch(kp_s, drivers)
        alone = torch.cat([stitch(kp_s, d[None]) for d in drivers])
    torch.testing.assert_close(batched, alone, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(broadcast, batched, rtol=0, atol=0)
    assert rel_l2(batched[0], case["outputs"]["out"][0]) < 1e-4


@pytest.mark.parametrize(
    "kp_s, kp_d, match",
    [
        (torch.zeros(1, 63), torch.zeros(1, 21, 3), r"kp_source has shape \(1, 63\).*\(batch, 21, 3\)"),
        (torch.zeros(1, 21, 3), torch.zeros(2, 20, 3), r"kp_driving has shape \(2, 20, 3\)"),
        (torch.zeros(2, 21, 3), torch.zeros(3, 21, 3), r"kp_source has 2 rows but kp_driving has 3"),
    ],
)
def test_bad_keypoints_are_rejected_with_a_useful_message(kp_s, kp_d, match):
    with pytest.raises(InputError, match=match):
        StitchingNetwork()(kp_s, kp_d)
