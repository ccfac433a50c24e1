"""The warp+decode and mask-conv benchmarks compare exact rewrites: each variant must compute
what the shipped networks (or the layer) compute, or its timing compares different work."""
import pytest
import torch

from bench.bench_mask_conv import depth_block_taps, depth_row_taps
from bench.bench_warp_decode_variants import (
    PYTORCH_LAYERS, ChannelPaddedConv, depth_taps_everywhere, depth_taps_full_res, pad_conv_channels,
    with_hourglass_110, with_mask_conv3d, with_ncdhw_3d_weights, with_occlusion_conv2d, with_padded_mask_taps,
    with_pytorch_layers,
)
from ditto_core.models.decoder import SPADEDecoder
from ditto_core.models.depth_tap_conv import DepthTapConv3d
from ditto_core.models.spatial_tap_conv import SpatialTapConv2d
from ditto_core.models.triton_kernels import use_triton_kernels_
from ditto_core.models.warp_network import WarpingNetwork
from tests.parity import keypoint_pair, rel_l2


@pytest.fixture(scope="module")
def nets():
    torch.manual_seed(0)
    warp = WarpingNetwork().eval().prepare_for_inference()
    decoder = SPADEDecoder().eval()
    decoder.prepare_for_inference()
    return warp, decoder


@pytest.fixture(scope="module")
def shipped_render(nets):
    """What the shipped networks render from one set of inputs: the inputs and the frames,
    rendered once for every variant (the largest cost of each case)."""
    feature = torch.randn(1, 32, 16, 32, 32, generator=torch.Generator().manual_seed(1))
    kp_source, kp_driving = keypoint_pair(1, seed=2)
    warp, decoder = nets
    with torch.inference_mode():
        return (feature, kp_source, kp_driving), decoder(warp(feature, kp_source, kp_driving))


@pytest.mark.parametrize(
    "make, changed",
    [
        (with_mask_conv3d, lambda dense: isinstance(dense.mask, torch.nn.Conv3d)),
        (with_occlusion_conv2d, lambda dense: isinstance(dense.occlusion, torch.nn.Conv2d)),
        (with_hourglass_110, lambda dense: dense.mask.slice_conv.weight.shape[1] == 142 and not dense.input_padding),
        (with_ncdhw_3d_weights, lambda dense: dense.hourglass.decoder.conv.weight.is_contiguous()),
        (with_padded_mask_taps, lambda dense: isinstance(dense.mask.slice_conv, ChannelPaddedConv)),
        (depth_taps_everywhere, lambda dense: isinstance(dense.hourglass.decoder.conv.conv, DepthTapConv3d)),
        (lambda n: pad_conv_channels(n, 8), lambda dense: isinstance(dense.mask.slice_conv, ChannelPaddedConv)),
        (depth_taps_full_res, lambda dense: isinstance(dense.hourglass.decoder.conv.conv, DepthTapConv3d)
         and isinstance(dense.hourglass.encoder.down_blocks[1].conv, torch.nn.Conv3d)),
    ],
    ids=["mask_conv3d", "occlusion_conv2d", "hourglass_110", "ncdhw_3d", "pad_mask_taps", "depth_taps_everywhere",
         "pad_channels_8", "depth_taps_full_res"],
)
@torch.inference_mode()
def test_variant_networks_compute_the_same_renders(nets, shipped_render, make, changed):
    (feature, kp_source, kp_driving), expected = shipped_render
    warp, _ = nets
    variant_warp, variant_decoder = make(nets)
    assert changed(variant_warp.dense_motion_network)
    # The originals are untouched.
    assert isinstance(warp.dense_motion_network.mask, DepthTapConv3d)
    assert isinstance(warp.dense_motion_network.occlusion, SpatialTapConv2d)
    assert warp.dense_motion_network.input_padding == 2
    assert warp.dense_motion_network.hourglass.decoder.conv.weight.is_contiguous(memory_format=torch.channels_last_3d)
    got = variant_decoder(variant_warp(feature, kp_source, kp_driving))
    assert rel_l2(got, expected) < 1e-5


@pytest.mark.parametrize("formulation", [depth_block_taps, depth_row_taps], ids=["block_taps", "row_taps"])
@torch.inference_mode()
def test_mask_conv_formulations_compute_the_layer(formulation):
    torch.manual_seed(3)
    conv = torch.nn.Conv3d(6, 3, 7, padding=3)
    x = torch.randn(2, 6, 9, 11, 10, generator=torch.Generator().manual_seed(4))
    want = conv(x)
    got = formulation(conv)(x)
    assert got.shape == want.shape
    assert rel_l2(got, want) < 1e-5
    # The borders, where the blocks read the zero padding, are right too.
    assert torch.allclose(got[..., [0, -1], :], want[..., [0, -1], :], atol=1e-5)
    assert torch.allclose(got[..., [0, -1]], want[..., [0, -1]], atol=1e-5)


@pytest.mark.parametrize("names", [(name,) for name in PYTORCH_LAYERS] + [tuple(PYTORCH_LAYERS)],
                         ids=[*PYTORCH_LAYERS, "all"])
def test_pytorch_layer_variants_ignore_the_engines_triton_switch(nets, names):
    warp, _ = with_pytorch_layers(nets, *names)
    assert use_triton_kernels_(warp, True) == 8
    pinned = {name for name, paths in PYTORCH_LAYERS.items() if not any(warp.get_submodule(p).use_triton for p in paths)}
    assert pinned == set(names)
    # Still the same layers, computing the same thing; the originals are untouched.
    assert isinstance(warp.dense_motion_network.mask, DepthTapConv3d) and isinstance(warp, WarpingNetwork)
    assert use_triton_kernels_(nets[0], False) == 8 and type(nets[0]) is WarpingNetwork
