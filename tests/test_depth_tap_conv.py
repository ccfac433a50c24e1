import pytest
import torch
from torch import nn

from ditto_core.models.depth_tap_conv import DepthTapConv3d
from ditto_core.models.warp_network import WarpingNetwork
from tests.parity import keypoint_pair, rel_l2


def _conv(in_channels: int, out_channels: int, kernel, padding, bias: bool = True, seed: int = 0) -> nn.Conv3d:
    torch.manual_seed(seed)
    return nn.Conv3d(in_channels, out_channels, kernel, padding=padding, bias=bias)


@pytest.mark.parametrize(
    "kernel, padding, bias",
    [(7, 3, True), (3, 1, True), (3, 1, False), ((5, 3, 1), (2, 1, 0), True), ((3, 7, 7), (1, 0, 3), True)],
    ids=["7x7x7", "3x3x3", "no_bias", "5x3x1", "valid_height"],
)
@torch.inference_mode()
def test_equals_conv3d(kernel, padding, bias):
    conv = _conv(6, 5, kernel, padding, bias)
    x = torch.randn(2, 6, 9, 11, 10, generator=torch.Generator().manual_seed(1))
    want = conv(x)
    got = DepthTapConv3d(conv)(x)
    assert got.shape == want.shape and got.dtype == torch.float32
    assert rel_l2(got, want) < 1e-6
    # Every output slice is checked, the borders of the depth axis (zero padding) included.
    assert torch.allclose(got[:, :, [0, -1]], want[:, :, [0, -1]], atol=1e-5)


@torch.inference_mode()
def test_float64_stays_float64_and_half_sums_in_float32():
    conv = _conv(4, 3, 3, 1).double()
    x = torch.randn(1, 4, 5, 6, 6, dtype=torch.float64)
    assert rel_l2(DepthTapConv3d(conv)(x), conv(x)) < 1e-12
    half = DepthTapConv3d(_conv(4, 3, 3, 1).to(torch.bfloat16))
    assert half(x.to(torch.bfloat16)).dtype == torch.float32


@pytest.mark.parametrize(
    "conv",
    [
        nn.Conv3d(4, 3, 3, padding=1, stride=2),
        nn.Conv3d(4, 3, 3, padding=(0, 1, 1)),
        nn.Conv3d(4, 3, (2, 3, 3), padding=1),
        nn.Conv3d(4, 4, 3, padding=1, groups=2),
        nn.Conv3d(4, 3, 3, padding=1, padding_mode="reflect"),
    ],
    ids=["stride", "depth_shrinks", "even_depth", "groups", "reflect"],
)
def test_rejects_convs_it_cannot_reproduce(conv):
    with pytest.raises(ValueError, match="DepthTapConv3d reproduces"):
        DepthTapConv3d(conv)


@torch.inference_mode()
def test_warp_network_prepare_uses_it_and_keeps_the_output():
    torch.manual_seed(3)
    net = WarpingNetwork().eval()
    feature = torch.randn(1, 32, 16, 32, 32)
    kp_source, kp_driving = keypoint_pair(1, seed=4)
    before = net(feature, kp_source, kp_driving)
    net.prepare_for_inference()
    assert isinstance(net.dense_motion_network.mask, DepthTapConv3d)
    net.prepare_for_inference()  # idempotent: the rewritten layer is not rewritten again
    assert isinstance(net.dense_motion_network.mask, DepthTapConv3d)
    assert rel_l2(net(feature, kp_source, kp_driving), before) < 1e-5


@pytest.mark.gpu
@torch.inference_mode()
def test_half_precision_error_is_that_of_the_3d_kernel_on_cuda():
    # The warp network's mask layer: 142 -> 22 channels, 7x7x7, on a 16x64x64 volume.
    conv = _conv(142, 22, 7, 3).cuda()
    x = torch.randn(2, 142, 16, 64, 64, device="cuda")
    want = conv(x)
    half_conv = _conv(142, 22, 7, 3).cuda().half()
    x_half = x.half()
    error_3d = rel_l2(half_conv(x_half).float(), want)
    error_taps = rel_l2(DepthTapConv3d(half_conv)(x_half), want)
    assert error_taps < 2 * error_3d + 1e-4
    assert rel_l2(DepthTapConv3d(conv)(x), want) < 1e-5
