"""The warp+decode and mask-conv benchmarks compare exact rewrites: each variant must compute
what the shipped networks (or the layer) compute, or its timing compares different work."""
import copy
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from bench_mask_conv import depth_block_taps, depth_row_taps  # noqa: E402
from bench_warp_decode_variants import (  # noqa: E402
    ChannelPaddedConv, CudnnDepthTapConv3d, depth_taps_everywhere, depth_taps_full_res, pad_conv_channels,
    with_cudnn_mask_conv, with_hourglass_110, with_mask_conv3d, with_ncdhw_3d_weights, with_occlusion_conv2d,
    triton_sampling, with_padded_mask_taps,
)
from ditto_core.models.decoder import SPADEDecoder  # noqa: E402
from ditto_core.models.depth_tap_conv import DepthTapConv3d  # noqa: E402
from ditto_core.models.spatial_tap_conv import SpatialTapConv2d  # noqa: E402
from ditto_core.models.warp_network import WarpingNetwork  # noqa: E402
from tests.parity import keypoint_pair, rel_l2  # noqa: E402
from tests.triton_interpreter import run_interpreted  # noqa: E402


@pytest.fixture(scope="module")
def nets():
    torch.manual_seed(0)
    warp = WarpingNetwork().eval().prepare_for_inference()
    decoder = SPADEDecoder().eval()
    decoder.prepare_for_inference()
    return warp, decoder


def _ignores_triton_switch(mask: torch.nn.Module) -> bool:
    """The engine switches depth-tap convs to Triton; the cuDNN variant's must stay on cuDNN."""
    mask.use_triton = True
    return isinstance(mask, CudnnDepthTapConv3d) and not mask.use_triton


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
        (with_cudnn_mask_conv, lambda dense: _ignores_triton_switch(dense.mask)),
        (depth_taps_full_res, lambda dense: isinstance(dense.hourglass.decoder.conv.conv, DepthTapConv3d)
         and isinstance(dense.hourglass.encoder.down_blocks[1].conv, torch.nn.Conv3d)),
    ],
    ids=["mask_conv3d", "occlusion_conv2d", "hourglass_110", "ncdhw_3d", "pad_mask_taps", "depth_taps_everywhere",
         "pad_channels_8", "cudnn_mask_conv", "depth_taps_full_res"],
)
@torch.inference_mode()
def test_variant_networks_compute_the_same_renders(nets, make, changed):
    feature = torch.randn(1, 32, 16, 32, 32, generator=torch.Generator().manual_seed(1))
    kp_source, kp_driving = keypoint_pair(1, seed=2)
    warp, decoder = nets
    expected = decoder(warp(feature, kp_source, kp_driving))
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



INTERPRETED_SAMPLING = """
    import json
    import torch
    import grid_sample_triton
    from ditto_core.models import volume_sampling
    from ditto_core.models.dense_motion import identity_grid

    def errors(got, want):
        return [float((got.float() - want.float()).norm() / want.float().norm()),
                float((got.float() - want.float()).abs().max()), str(got.dtype), list(got.shape)]

    g = torch.Generator().manual_seed(0)
    result = {}
    for dtype in (torch.float32, torch.float16):
        # Channels-last volumes (strides passed through), a grid reaching outside the volume
        # (zero padding) and landing on exact voxel centres.
        volume = torch.randn(2, 5, 4, 6, 7, generator=g).to(dtype).contiguous(memory_format=torch.channels_last_3d)
        grid = torch.rand(2, 3, 5, 6, 3, generator=g) * 2.6 - 1.3
        grid[0, 0, 0] = identity_grid(4, 6, 7, grid)[0, 0, :6]
        result[f"grid {dtype}"] = errors(grid_sample_triton.sample_volume(volume, grid),
                                         volume_sampling.sample_volume(volume, grid))
        offsets = torch.rand(2, 3, 3, generator=g) * 1.6 - 0.8
        offsets[:, 0] = 0  # the background candidate: the identity grid itself
        identity = identity_grid(4, 6, 7, offsets)
        result[f"translations {dtype}"] = errors(grid_sample_triton.sample_translations(volume, identity, offsets),
                                                 volume_sampling.sample_translations(volume, identity, offsets))
    print(json.dumps(result))
"""


def test_triton_sampling_kernels_compute_what_grid_sample_computes_in_the_interpreter():
    result = run_interpreted(INTERPRETED_SAMPLING)
    assert result["grid torch.float32"][2:] == ["torch.float32", [2, 5, 3, 5, 6]]
    assert result["translations torch.float16"][2:] == ["torch.float16", [2, 3, 5, 4, 6, 7]]
    for case, (rel, max_abs, _, _) in result.items():
        # float32: the same arithmetic up to rounding; float16: one rounding of the output apart.
        assert rel < (1e-6 if "float32" in case else 1e-3) and max_abs < (1e-5 if "float32" in case else 4e-3), case


@pytest.mark.gpu
@torch.inference_mode()
def test_triton_grid_sample_variant_renders_what_grid_sample_renders_on_cuda(nets):
    pytest.importorskip("triton")
    warp, decoder = (copy.deepcopy(net).cuda().half() for net in nets)
    feature = torch.randn(2, 32, 16, 64, 64, generator=torch.Generator().manual_seed(1)).cuda().half()
    kp_source, kp_driving = (kp.cuda() for kp in keypoint_pair(2, seed=2))
    expected = decoder(warp(feature, kp_source, kp_driving)).float()
    with triton_sampling():
        got = decoder(warp(feature, kp_source, kp_driving)).float()
    assert rel_l2(got, expected) < 2e-3
