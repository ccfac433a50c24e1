import json

import pytest
import torch

from ditto_core.errors import InputError
from ditto_core.models.checkpoints import load_network
from ditto_core.models.warp_network import WarpingNetwork
from tests.parity import keypoint_pair, rel_l2, strict_load


@pytest.fixture(scope="module")
def strict_net(official_ckpt_dir):
    """The official file through a bare strict ``load_state_dict``, BatchNorms unfolded."""
    return strict_load(WarpingNetwork(), official_ckpt_dir / "warp_network.pth")


def test_state_dict_matches_manifest(reference_dir):
    manifest = json.loads((reference_dir / "weights_manifest.json").read_text())
    want = [(e["key"], tuple(e["shape"])) for e in manifest["checkpoints"]["warp_network.pth"]["state_dict"]]
    got = [(k, tuple(v.shape)) for k, v in WarpingNetwork().state_dict().items()]
    assert got == want


@pytest.mark.slow
@torch.inference_mode()
def test_reference_parity_strict_load(strict_net, load_case):
    case = load_case("warp_network")
    out = strict_net(**case["inputs"])
    assert out.shape == (1, 256, 64, 64) and out.dtype == torch.float32
    assert rel_l2(out, case["outputs"]["out"]) < 1e-4


@pytest.mark.slow
@torch.inference_mode()
def test_reference_parity_load_network_folds_batchnorm(official_ckpt_dir, load_case):
    net = load_network("warp_network", official_ckpt_dir)
    # Every BatchNorm of this network follows a conv, so prepare_for_inference removes all.
    assert not any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in net.modules())
    case = load_case("warp_network")
    assert rel_l2(net(**case["inputs"]), case["outputs"]["out"]) < 1e-4


@torch.inference_mode()
def test_batch_items_are_independent(strict_net):
    # 32x32 is the smallest size the 5-level hourglass takes; it keeps this test quick on CPU.
    feature = torch.randn(2, 32, 16, 32, 32, generator=torch.Generator().manual_seed(2))
    kp_source, kp_driving = keypoint_pair(2, seed=3)
    batched = strict_net(feature, kp_source, kp_driving)
    assert batched.shape == (2, 256, 32, 32)
    for i in range(2):
        item = strict_net(feature[i : i + 1], kp_source[i : i + 1], kp_driving[i : i + 1])
        assert rel_l2(batched[i : i + 1], item) < 1e-5
    # The keypoints matter: swapping the driving sets between the items changes the output.
    swapped = strict_net(feature, kp_source, kp_driving.flip(0))
    assert rel_l2(swapped, batched) > 1e-3


@pytest.mark.parametrize(
    "shapes, match",
    [
        (((1, 512, 64, 64), (1, 21, 3), (1, 21, 3)), r"feature_3d must be a floating-point \(B, 32, 16, H, W\)"),
        (((1, 32, 16, 48, 48), (1, 21, 3), (1, 21, 3)), "multiples of 32"),
        (((1, 32, 16, 64, 64), (1, 63), (1, 21, 3)), r"kp_source must have shape \(B, 21, 3\)"),
        (((2, 32, 16, 64, 64), (2, 21, 3), (1, 21, 3)), r"kp_driving must have shape \(B, 21, 3\) with B = 2"),
    ],
    ids=["flat_feature", "bad_size", "flat_kp", "batch_mismatch"],
)
def test_rejects_malformed_inputs(shapes, match):
    with pytest.raises(InputError, match=match):
        WarpingNetwork()(*(torch.zeros(s) for s in shapes))


@pytest.mark.gpu
@torch.inference_mode()
def test_reference_parity_cuda(official_ckpt_dir, load_case):
    net = load_network("warp_network", official_ckpt_dir, device="cuda")
    case = load_case("warp_network")
    out = net(**{k: v.cuda() for k, v in case["inputs"].items()})
    assert rel_l2(out, case["outputs"]["out"]) < 1e-4
