"""The hourglass encoder's bias + ReLU + 2x2 average pooling kernel (``ditto_core.models.down_pool_triton``):
against PyTorch's ops and a down block's own forward in Triton's interpreter, where the warp
network uses it (eager half-precision CUDA batches only), and on a GPU."""
import pytest
import torch

from ditto_core.models.blocks import DownBlock, fold_batchnorms_
from ditto_core.models.triton_kernels import use_triton_kernels_
from ditto_core.models.warp_network import WarpingNetwork
from tests.parity import keypoint_pair, rel_l2
from tests.triton_interpreter import run_interpreted

KERNEL = """
    import json
    import torch
    import torch.nn.functional as F
    from ditto_core.models.down_pool_triton import bias_relu_pool

    g = torch.Generator().manual_seed(0)
    result = {}
    # 70 channels: two channel blocks, the second partly masked; 6x10 -> 15 output pixels, under one pixel block.
    for layout in ("ncdhw", "channels_last_3d"):
        for biased in (False, True):
            fmt = torch.channels_last_3d if layout == "channels_last_3d" else torch.contiguous_format
            y = torch.randn(2, 70, 3, 6, 10, generator=g).contiguous(memory_format=fmt)
            bias = torch.randn(70, generator=g) if biased else None
            want = F.avg_pool3d(F.relu(y + (bias[:, None, None, None] if biased else 0)), (1, 2, 2))
            got = bias_relu_pool(y, bias)
            result[f"{layout} bias {biased}"] = {
                "max_abs": float((got - want).abs().max()), "shape": list(got.shape),
                "channels_last": got.is_contiguous(memory_format=torch.channels_last_3d)}
    for name, call in {"odd": lambda: bias_relu_pool(y[..., :5], None),
                       "bias": lambda: bias_relu_pool(y, torch.zeros(3))}.items():
        try:
            call()
        except ValueError as error:
            result[name] = str(error)
    print(json.dumps(result))
"""


def test_the_kernel_computes_pytorchs_bias_relu_and_pooling_in_the_interpreter():
    result = run_interpreted(KERNEL)
    cases = {k: v for k, v in result.items() if k not in ("odd", "bias")}
    assert len(cases) == 4
    for case, got in cases.items():
        assert got["shape"] == [2, 70, 3, 3, 5] and got["channels_last"], case
        assert got["max_abs"] < 1e-5, case  # float32 throughout: rounding only
    assert "halves H and W; got 6x5" in result["odd"]
    assert "the bias must be (70,), one per channel; got (3,)" in result["bias"]


BLOCK = """
    import json
    import torch
    from ditto_core.models.blocks import DownBlock, fold_batchnorms_

    torch.manual_seed(0)
    block = DownBlock(12, 24, dims=3).eval()
    block.norm.running_mean.normal_()  # statistics other than the identity, so the fold shows
    block.norm.running_var.uniform_(0.5, 2.0)
    fold_batchnorms_(block)
    x = torch.randn(2, 12, 4, 8, 8).contiguous(memory_format=torch.channels_last_3d)
    with torch.no_grad():
        want = block(x)  # PyTorch's ops (the kernel is for CUDA half precision)
        got = block._forward_kernel(x)
    print(json.dumps({"rel_l2": float((got - want).norm() / want.norm()), "shape": list(got.shape),
                      "want_shape": list(want.shape), "runs_kernel": block.runs_kernel(x),
                      "channels_last": got.is_contiguous(memory_format=torch.channels_last_3d)}))
"""


def test_a_down_blocks_kernel_path_computes_its_forward_in_the_interpreter():
    got = run_interpreted(BLOCK)
    assert got["shape"] == got["want_shape"] == [2, 24, 4, 4, 4] and got["channels_last"]
    assert got["rel_l2"] < 1e-6, got["rel_l2"]
    assert not got["runs_kernel"]  # a CPU float32 input keeps PyTorch's ops


def test_only_3d_blocks_have_the_switch_and_only_folded_ones_run_it():
    assert not hasattr(DownBlock(4, 8, dims=2), "use_triton")  # the appearance extractor's: no kernel
    block = DownBlock(4, 8, dims=3).eval()
    assert use_triton_kernels_(block, True) == 1
    half = torch.zeros(1, 4, 2, 4, 4, dtype=torch.float16)
    assert not block.runs_kernel(half)  # CPU: PyTorch's ops
    if torch.cuda.is_available():
        block = block.cuda().half()
        cuda_half = half.cuda()
        assert not block.runs_kernel(cuda_half)  # the norm not folded yet
        fold_batchnorms_(block)
        assert block.runs_kernel(cuda_half) and not block.runs_kernel(cuda_half.float())
        use_triton_kernels_(block, False)
        assert not block.runs_kernel(cuda_half)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@torch.inference_mode()
def test_the_warp_networks_eager_kernels_render_what_pytorchs_ops_render_on_cuda(dtype):
    torch.manual_seed(0)
    warp = WarpingNetwork().eval().prepare_for_inference().cuda().to(dtype)
    feature = torch.randn(2, 32, 16, 64, 64, device="cuda", dtype=dtype)
    kp_source, kp_driving = (kp.cuda() for kp in keypoint_pair(2, seed=2))
    want = warp(feature, kp_source, kp_driving).float()  # every switch off: PyTorch's ops
    blocks = warp.dense_motion_network.hourglass.encoder.down_blocks
    use_triton_kernels_(warp, True)
    assert all(block.runs_kernel(feature) for block in blocks)
    got = warp(feature, kp_source, kp_driving)
    assert got.shape == want.shape and got.dtype == dtype
    # Both in half precision; the kernels round once where PyTorch rounds after each op.
    assert rel_l2(got.float(), want) < (2e-3 if dtype == torch.float16 else 1e-2)
