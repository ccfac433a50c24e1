"""The two tap rewrites of the warp network: :class:`DepthTapConv3d` (the 7x7x7 mask conv)
and :class:`SpatialTapConv2d` (the one-channel 7x7 occlusion conv). Each must compute its
convolution exactly (same multiply-adds) and keep half-precision error at the direct conv's."""
import pytest
import torch
from torch import nn

from ditto_core.models.depth_tap_conv import DepthTapConv3d
from ditto_core.models.spatial_tap_conv import SpatialTapConv2d
from ditto_core.models.warp_network import WarpingNetwork
from tests.parity import keypoint_pair, rel_l2


def _conv(kind: type, in_channels: int, out_channels: int, kernel, padding, bias: bool = True, seed: int = 0):
    torch.manual_seed(seed)
    return kind(in_channels, out_channels, kernel, padding=padding, bias=bias)


@pytest.mark.parametrize(
    "kernel, padding, bias",
    [(7, 3, True), (3, 1, True), (3, 1, False), ((5, 3, 1), (2, 1, 0), True), ((3, 7, 7), (1, 0, 3), True)],
    ids=["7x7x7", "3x3x3", "no_bias", "5x3x1", "valid_height"],
)
@torch.inference_mode()
def test_depth_taps_equal_conv3d(kernel, padding, bias):
    conv = _conv(nn.Conv3d, 6, 5, kernel, padding, bias)
    x = torch.randn(2, 6, 9, 11, 10, generator=torch.Generator().manual_seed(1))
    want = conv(x)
    got = DepthTapConv3d(conv)(x)
    assert got.shape == want.shape and got.dtype == torch.float32
    assert rel_l2(got, want) < 1e-6
    # Every output slice is checked, the borders of the depth axis (zero padding) included.
    assert torch.allclose(got[:, :, [0, -1]], want[:, :, [0, -1]], atol=1e-5)


@pytest.mark.parametrize(
    "out_channels, kernel, padding, bias",
    [(1, 7, 3, True), (3, 3, 1, True), (2, 3, 1, False), (2, (5, 1), (2, 0), True), (1, (3, 7), (1, 3), True)],
    ids=["7x7_one_channel", "3x3", "no_bias", "5x1", "3x7"],
)
@torch.inference_mode()
def test_spatial_taps_equal_conv2d(out_channels, kernel, padding, bias):
    conv = _conv(nn.Conv2d, 6, out_channels, kernel, padding, bias)
    x = torch.randn(2, 6, 9, 11, generator=torch.Generator().manual_seed(1))
    want = conv(x)
    got = SpatialTapConv2d(conv)(x)
    assert got.shape == want.shape and got.dtype == torch.float32
    assert rel_l2(got, want) < 1e-6
    # The border rows and columns (where the conv reads its zero padding) are checked too.
    assert torch.allclose(got[..., [0, -1], :], want[..., [0, -1], :], atol=1e-5)
    assert torch.allclose(got[..., [0, -1]], want[..., [0, -1]], atol=1e-5)


@pytest.mark.parametrize(
    "kind, taps, shape",
    [(nn.Conv3d, DepthTapConv3d, (1, 4, 5, 6, 6)), (nn.Conv2d, SpatialTapConv2d, (1, 4, 5, 6))],
    ids=["depth", "spatial"],
)
@torch.inference_mode()
def test_float64_stays_float64_half_sums_in_float32_any_layout(kind, taps, shape):
    conv = _conv(kind, 4, 3, 3, 1).double()
    x = torch.randn(*shape, dtype=torch.float64)
    layout = torch.channels_last_3d if len(shape) == 5 else torch.channels_last
    assert rel_l2(taps(conv)(x), conv(x)) < 1e-12
    assert rel_l2(taps(conv)(x.contiguous(memory_format=layout)), conv(x)) < 1e-12
    half = taps(_conv(kind, 4, 3, 3, 1).to(torch.bfloat16))
    assert half(x.to(torch.bfloat16)).dtype == torch.float32


@pytest.mark.parametrize(
    "taps, conv",
    [
        (DepthTapConv3d, nn.Conv3d(4, 3, 3, padding=1, stride=2)),
        (DepthTapConv3d, nn.Conv3d(4, 3, 3, padding=(0, 1, 1))),
        (DepthTapConv3d, nn.Conv3d(4, 3, (2, 3, 3), padding=1)),
        (DepthTapConv3d, nn.Conv3d(4, 4, 3, padding=1, groups=2)),
        (DepthTapConv3d, nn.Conv3d(4, 3, 3, padding=1, padding_mode="reflect")),
        (SpatialTapConv2d, nn.Conv2d(4, 1, 3, padding=1, stride=2)),
        (SpatialTapConv2d, nn.Conv2d(4, 1, 3, padding=0)),
        (SpatialTapConv2d, nn.Conv2d(4, 1, 2, padding=1)),
        (SpatialTapConv2d, nn.Conv2d(4, 2, 3, padding=1, groups=2)),
        (SpatialTapConv2d, nn.Conv2d(4, 1, 3, padding=2, dilation=2)),
        (SpatialTapConv2d, nn.Conv2d(4, 1, 3, padding=1, padding_mode="reflect")),
    ],
    ids=["depth_stride", "depth_shrinks", "even_depth", "depth_groups", "depth_reflect", "stride", "valid",
         "even_kernel", "groups", "dilation", "reflect"],
)
def test_rejects_convs_it_cannot_reproduce(taps, conv):
    with pytest.raises(ValueError, match=f"{taps.__name__} reproduces"):
        taps(conv)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "kind, taps, channels, shape",
    [
        # The warp network's mask layer: 142 -> 22 channels, 7x7x7, on a 16x64x64 volume.
        (nn.Conv3d, DepthTapConv3d, (142, 22), (2, 142, 16, 64, 64)),
        # Its occlusion layer: 2272 -> 1 channel, 7x7, on 64x64.
        (nn.Conv2d, SpatialTapConv2d, (2272, 1), (4, 2272, 64, 64)),
    ],
    ids=["depth", "spatial"],
)
@torch.inference_mode()
def test_half_precision_error_is_that_of_the_direct_conv_on_cuda(kind, taps, channels, shape):
    conv = _conv(kind, *channels, 7, 3).cuda()
    x = torch.randn(*shape, device="cuda")
    want = conv(x)
    half_conv = _conv(kind, *channels, 7, 3).cuda().half()
    x_half = x.half()
    error_direct = rel_l2(half_conv(x_half).float(), want)
    error_taps = rel_l2(taps(half_conv)(x_half), want)
    assert error_taps < 2 * error_direct + 1e-4
    assert rel_l2(taps(conv)(x), want) < 1e-5


@pytest.mark.gpu
@torch.inference_mode()
def test_half_precision_warp_network_keeps_a_half_occlusion_map_on_cuda():
    torch.manual_seed(5)
    net = WarpingNetwork().eval().cuda()
    feature = torch.randn(1, 32, 16, 64, 64, device="cuda")
    kp_source, kp_driving = (kp.cuda() for kp in keypoint_pair(1, seed=6))
    _, want = net.dense_motion_network(feature, kp_source, kp_driving)
    net.prepare_for_inference().half()
    _, occlusion = net.dense_motion_network(feature.half(), kp_source, kp_driving)
    assert occlusion.dtype == torch.float16  # the float32 logits are not leaked downstream
    assert rel_l2(occlusion.float(), want) < 5e-3
