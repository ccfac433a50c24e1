import json

import pytest
import torch

from ditto_core.errors import InputError
from ditto_core.models.blocks import fold_batchnorms_
from ditto_core.models.checkpoints import load_network
from ditto_core.models.depth_tap_conv import DepthTapConv3d
from ditto_core.models.spatial_tap_conv import SpatialTapConv2d
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


def _small_random_case(seed: int) -> tuple[WarpingNetwork, tuple, torch.Tensor]:
    """A random network (official layout, BatchNorms unfolded), 32x32 inputs, and its output."""
    torch.manual_seed(seed)
    net = WarpingNetwork().eval()
    inputs = (torch.randn(1, 32, 16, 32, 32), *keypoint_pair(1, seed=seed + 1))
    return net, inputs, net(*inputs)


@torch.inference_mode()
def test_prepare_for_inference_applies_every_rewrite_and_keeps_the_output():
    net, (feature, kp_source, kp_driving), before = _small_random_case(7)
    dense = net.dense_motion_network
    _, occlusion_before = dense(feature, kp_source, kp_driving)
    with pytest.raises(RuntimeError, match="BatchNorms folded first"):
        dense.pad_hourglass_channels_()
    net.prepare_for_inference()
    net.prepare_for_inference()  # idempotent: nothing is rewritten or padded twice
    assert not any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in net.modules())
    assert isinstance(dense.mask, DepthTapConv3d) and isinstance(dense.occlusion, SpatialTapConv2d)
    assert dense.input_padding == 2 and dense.hourglass.out_channels == 144
    assert dense.hourglass.encoder.down_blocks[0].conv.weight.shape[1] == 112
    assert dense.mask.slice_conv.weight.shape[1] == 144
    assert dense.occlusion.tap_weight.shape == (49, 144 * 16)
    # The 3-D conv weights are stored NDHWC, the layout cuDNN's fast kernels read.
    conv3d = [m for m in net.modules() if isinstance(m, torch.nn.Conv3d)]
    assert conv3d and all(m.weight.is_contiguous(memory_format=torch.channels_last_3d) for m in conv3d)
    seen = []
    handle = dense.hourglass.register_forward_hook(lambda _m, args, out: seen.append((args[0], out)))
    try:
        after = net(feature, kp_source, kp_driving)
    finally:
        handle.remove()
    (hourglass_in, hourglass_out), = seen
    assert hourglass_in.shape[1] == 112 and hourglass_out.shape[1] == 144
    # The padding channels stay exactly zero through the hourglass (they are its last two).
    assert not hourglass_in[:, 110:].any() and not hourglass_out[:, 142:].any()
    assert hourglass_out[:, :142].abs().amax() > 0
    _, occlusion = dense(feature, kp_source, kp_driving)
    assert rel_l2(occlusion, occlusion_before) < 1e-5
    assert rel_l2(after, before) < 1e-5


@torch.inference_mode()
def test_hourglass_padding_also_pads_plain_mask_and_occlusion_convs():
    # pad_hourglass_channels_ is public: after BatchNorm folding alone, the mask and occlusion
    # layers are still the official Conv3d / Conv2d and must be padded as such.
    net, inputs, before = _small_random_case(9)
    fold_batchnorms_(net)
    dense = net.dense_motion_network
    dense.pad_hourglass_channels_()
    assert isinstance(dense.mask, torch.nn.Conv3d) and dense.mask.weight.shape[1] == 144
    assert isinstance(dense.occlusion, torch.nn.Conv2d) and dense.occlusion.weight.shape[1] == 144 * 16
    assert dense.occlusion.in_channels == 144 * 16
    assert rel_l2(net(*inputs), before) < 1e-5
