"""The warp network's Triton kernels: the engine's switch, every kernel built for real GPUs
(on the CPU: Triton compiles to a cubin without a device), the two sampling kernels
(``ditto_core.models.volume_sampling_triton``) against the PyTorch ops they replace, in
Triton's interpreter and on a GPU, and eager launches on their tensors' GPU (ours, the
decoder's and the writer's colour conversion)."""
import pytest
import torch

from ditto_core.models.decoder import SPADEDecoder
from ditto_core.models.dense_motion import KP_VARIANCE, DenseMotionNetwork, identity_grid
from ditto_core.models.triton_kernels import runs_triton, triton_kernels_supported, use_triton_kernels_
from ditto_core.models.volume_sampling import sample_volume
from ditto_core.models.warp_network import WarpingNetwork
from tests.parity import keypoint_pair, rel_l2
from tests.triton_interpreter import run_interpreted


def test_switch_reaches_every_layer_with_a_kernel_and_back():
    warp = WarpingNetwork().eval().prepare_for_inference()
    dense = warp.dense_motion_network
    layers = (warp, dense, dense.mask, *dense.hourglass.encoder.down_blocks)
    assert use_triton_kernels_(warp, True) == 8 and all(layer.use_triton for layer in layers)
    assert use_triton_kernels_(warp, False) == 8 and not any(layer.use_triton for layer in layers)


def test_kernels_run_only_for_half_precision_cuda():
    assert triton_kernels_supported(torch.device("cpu"), torch.float16) == (
        False, "the Triton kernels need a CUDA device")
    assert not runs_triton(True, torch.zeros(1, dtype=torch.float16))  # CPU: PyTorch's ops
    if torch.cuda.is_available():
        ok, why = triton_kernels_supported(torch.device("cuda"), torch.float32)
        assert not ok and "half precision" in why
        assert not runs_triton(True, torch.zeros(1, device="cuda"))
        assert not runs_triton(False, torch.zeros(1, device="cuda", dtype=torch.float16))
        assert runs_triton(True, torch.zeros(1, device="cuda", dtype=torch.bfloat16))


def _compile(kernel, pointers: dict, integers: list, constants: dict, capability: int, **options):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    signature = {**pointers, **{name: "i32" for name in integers}, **{name: "constexpr" for name in constants}}
    source = ASTSource(fn=kernel, signature=signature, constexprs=constants)
    return triton.compile(source, target=GPUTarget("cuda", capability, 32), options=options)


@pytest.mark.parametrize("capability", [80, 90], ids=["ampere", "hopper"])
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_every_kernel_builds_for_ampere_and_hopper_at_dittos_shapes(capability, dtype):
    """Triton's interpreter runs kernel bodies as Python, so a kernel can pass it and still not
    compile (a constexpr reassigned in an unrolled loop did once); this builds each one."""
    pytest.importorskip("triton")
    from ditto_core.models import slice_conv_triton, spade_norm_triton, volume_sampling_triton

    half = f"*{dtype}"
    built = [
        _compile(volume_sampling_triton._hourglass_input_kernel,
                 dict(volume_ptr=half, kp_source_ptr="*fp32", kp_driving_ptr="*fp32", out_ptr=half),
                 ["stride_b", "stride_c", "stride_d", "stride_h", "stride_w"],
                 dict(C=4, D=16, H=64, W=64, MOVES=22, CHANNELS=112, COEF=-0.5 / KP_VARIANCE,
                      BLOCK=volume_sampling_triton._BLOCK), capability, num_warps=volume_sampling_triton._WARPS),
        _compile(volume_sampling_triton._warp_kernel, dict(volume_ptr=half, grid_ptr="*fp32", out_ptr=half),
                 ["stride_b", "stride_c", "stride_d", "stride_h", "stride_w", "grid_stride_b", "grid_stride_d",
                  "grid_stride_h", "grid_stride_w", "grid_stride_xyz"],
                 dict(C=32, D=16, H=64, W=64, OUT_D=16, OUT_H=64, OUT_W=64, BLOCK=volume_sampling_triton._BLOCK),
                 capability, num_warps=volume_sampling_triton._WARPS),
    ]
    strides = [f"{t}_s{d}" for t in "xst" for d in "bchw"]
    # The decoder's three uses (norm_1, norm_0 of an upsampling block, the shortcut), each taking the
    # scale/shift conv's bias (the shortcut: the scale's only).
    for up, shift, activate in ((1, True, True), (2, True, True), (2, False, False)):
        built.append(_compile(
            spade_norm_triton._modulate_kernel, dict(x_ptr=half, mean_ptr="*fp32", rstd_ptr="*fp32", scale_ptr=half,
                                                     shift_ptr=half, scale_bias_ptr=half, shift_bias_ptr=half,
                                                     out_ptr=half), [*strides, "C", "H", "W"],
            dict(UP=up, HAS_SHIFT=shift, HAS_SCALE_BIAS=True, HAS_SHIFT_BIAS=shift, ACTIVATE=activate, SLOPE=0.2,
                 BLOCK_P=spade_norm_triton._MODULATE_BLOCK[0], BLOCK_C=spade_norm_triton._MODULATE_BLOCK[1]),
            capability, num_warps=spade_norm_triton._WARPS))
    built.append(_compile(
        spade_norm_triton._stats_kernel, dict(x_ptr=half, partial_ptr="*fp32"),
        ["stride_b", "stride_c", "stride_h", "stride_w", "C", "W", "P", "SPLIT"],
        dict(PIXELS=spade_norm_triton._PIXELS_PER_PROGRAM, BLOCK_P=spade_norm_triton._STATS_BLOCK[0],
             BLOCK_C=spade_norm_triton._STATS_BLOCK[1]), capability, num_warps=spade_norm_triton._WARPS))
    for tile in slice_conv_triton.CONFIGS:
        built.append(_compile(
            slice_conv_triton._slice_conv_kernel, dict(x_ptr=half, w_ptr=half, out_ptr=half),
            ["x_slice_stride", "x_row_stride", "x_pixel_stride"],
            dict(H=64, W=64, C=144, N=154, N_PAD=160, KH=7, KW=7, SLICE_CLASS=512, **tile.kwargs), capability,
            num_warps=tile.num_warps, num_stages=tile.num_stages))
    assert all(kernel.asm.get("cubin") for kernel in built)
    # An H200 or A100 gives a block at most 227 / 163 KiB of shared memory.
    assert max(kernel.metadata.shared for kernel in built) <= (227 if capability == 90 else 163) * 1024


INTERPRETED = """
    import json
    import torch
    from ditto_core.models.dense_motion import KP_VARIANCE, DenseMotionNetwork, identity_grid
    from ditto_core.models.volume_sampling import sample_volume
    from ditto_core.models.volume_sampling_triton import make_hourglass_input, warp_volume

    def compare(got, want):
        return {"equal": torch.equal(got, want), "max_abs": float((got.float() - want.float()).abs().max()),
                "shape": list(got.shape), "dtype": str(got.dtype)}

    g = torch.Generator().manual_seed(0)
    result = {}
    b, c, d, h, w, k = 2, 4, 3, 6, 8, 5
    # Keypoints anywhere in [-1, 1]: the moved grids reach outside the volume (zero padding).
    kp_source, kp_driving = (torch.rand(b, k, 3, generator=g) * 2 - 1 for _ in range(2))
    for padding in (0, 3):
        # The compressed feature as the compiled engine has it: channels-last (strides passed through).
        volume = torch.randn(b, c, d, h, w, generator=g).half().contiguous(memory_format=torch.channels_last_3d)
        dense = DenseMotionNetwork(num_kp=k, compress=c, feature_depth=d)
        dense.input_padding = padding
        want = dense.hourglass_input(volume, kp_source, kp_driving, identity_grid(d, h, w, kp_source))
        got = make_hourglass_input(volume, kp_source, kp_driving, -0.5 / KP_VARIANCE, padding)
        result[f"hourglass_input padding {padding}"] = {**compare(got, want), "contiguous": got.is_contiguous()}
    # The feature warp: a contiguous volume, a grid reaching outside it and a non-contiguous grid
    # (the deformation is a permuted view in the network).
    feature = torch.randn(b, 8, d, h, w, generator=g).half()
    grid = (torch.rand(b, 3, d, h, w, generator=g) * 2.4 - 1.2).permute(0, 2, 3, 4, 1)
    grid[0, 0, 0] = identity_grid(d, h, w, grid)[0, 0]  # exactly on voxel centres
    got = warp_volume(feature, grid)
    result["feature_warp"] = {**compare(got, sample_volume(feature, grid)), "contiguous": got.is_contiguous()}
    print(json.dumps(result))
"""


def test_sampling_kernels_compute_what_pytorch_computes_in_the_interpreter():
    result = run_interpreted(INTERPRETED)
    shapes = {"hourglass_input padding 0": [2, 30, 3, 6, 8], "hourglass_input padding 3": [2, 33, 3, 6, 8],
              "feature_warp": [2, 8, 3, 6, 8]}
    for case, shape in shapes.items():
        got = result[case]
        assert got["shape"] == shape and got["dtype"] == "torch.float16" and got["contiguous"], case
        # The interpreter rounds as PyTorch's CPU ops do: bit for bit.
        assert got["equal"], (case, got["max_abs"])


def test_sampling_kernels_name_what_they_cannot_take():
    pytest.importorskip("triton")
    from ditto_core.models.volume_sampling_triton import make_hourglass_input, warp_volume

    kp = torch.zeros(1, 21, 3)
    with pytest.raises(ValueError, match=r"\(B, K, 3\) keypoints"):
        make_hourglass_input(torch.zeros(1, 4, 2, 4, 4).half(), kp, kp[:, :20], -50.0)
    with pytest.raises(ValueError, match="float32"):
        warp_volume(torch.zeros(1, 4, 2, 4, 4).half(), torch.zeros(1, 2, 4, 4, 3).half())


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@torch.inference_mode()
def test_sampling_kernels_match_pytorch_on_cuda_at_dittos_shapes(dtype):
    from ditto_core.models.volume_sampling_triton import make_hourglass_input, warp_volume

    g = torch.Generator().manual_seed(0)
    kp_source, kp_driving = (kp.cuda() for kp in keypoint_pair(2, seed=3))
    volume = torch.randn(2, 4, 16, 64, 64, generator=g).cuda().to(dtype)
    volume = volume.contiguous(memory_format=torch.channels_last_3d)  # strided: any layout is read in place
    dense = DenseMotionNetwork().cuda()
    dense.input_padding = 2
    want = dense.hourglass_input(volume, kp_source, kp_driving, identity_grid(16, 64, 64, kp_source))
    got = make_hourglass_input(volume, kp_source, kp_driving, -0.5 / KP_VARIANCE, 2)
    # At most one rounding of the half-precision output apart (Triton's exp and FMAs).
    ulp = 2 ** -10 if dtype == torch.float16 else 2 ** -7
    assert got.shape == want.shape and got.is_contiguous()
    assert ((got.float() - want.float()).abs() <= ulp * want.float().abs().clamp(min=1)).all()
    feature = torch.randn(2, 32, 16, 64, 64, generator=g).cuda().to(dtype)
    grid = (torch.rand(2, 16, 64, 64, 3, generator=g) * 2.2 - 1.1).cuda()
    want = sample_volume(feature, grid)
    got = warp_volume(feature, grid)
    assert got.shape == want.shape and got.is_contiguous()
    assert ((got.float() - want.float()).abs() <= ulp * want.float().abs().clamp(min=1)).all()


@pytest.mark.gpu
@torch.inference_mode()
def test_compiled_engine_runs_our_kernels_and_renders_what_pytorch_renders(tmp_path):
    from ditto_core.render.warp_decode import WarpDecodeEngine

    torch.manual_seed(0)
    warp = WarpingNetwork().eval().prepare_for_inference().cuda().half()
    decoder = SPADEDecoder().eval()
    decoder.prepare_for_inference()
    decoder = decoder.cuda().half()
    feature = torch.randn(1, 32, 16, 64, 64, device="cuda").half()
    kp_source, kp_driving = (kp.cuda() for kp in keypoint_pair(2, seed=2))
    expected = decoder(warp(feature.expand(2, -1, -1, -1, -1), kp_source, kp_driving)).float()  # switch off
    engine = WarpDecodeEngine(warp, decoder, batch_size=2, compile=True, cache_dir=tmp_path)
    assert engine.stats.triton_kernels == 8 and warp.use_triton and warp.dense_motion_network.use_triton
    assert decoder.up_1.use_triton  # switched on too, but a trace keeps the decoder's PyTorch ops
    got = engine.render_batch(feature, kp_source, kp_driving).float()
    assert engine.stats.compiled
    assert rel_l2(got, expected) < 2e-3
    eager = WarpDecodeEngine(warp, decoder, batch_size=2, compile=False)
    assert eager.stats.triton_kernels == 0 and not warp.dense_motion_network.mask.use_triton
    assert not decoder.up_1.use_triton  # the decoder's eager kernels go with the others


def test_an_eager_launch_for_cpu_tensors_sets_no_device():
    from ditto_core.triton_launch import launch_device

    with launch_device(torch.zeros(1)):  # nothing to set (and no CUDA needed)
        pass


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
@torch.inference_mode()
def test_eager_kernels_run_on_their_tensors_gpu_not_the_current_one():
    """Triton launches on the current device: a pipeline on cuda:1 while cuda:0 is current must
    still get its kernels on cuda:1 (the decoder's, the warp network's, the writer's colour conversion)."""
    from ditto_core.models.spade_norm_triton import instance_stats, spade_modulate
    from ditto_core.models.volume_sampling import sample_volume
    from ditto_core.models.volume_sampling_triton import warp_volume
    from ditto_core.video.colour import rgb_to_yuv420p

    torch.cuda.set_device(0)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 8, 16, 16, generator=g).to("cuda:1", torch.float16)
    scale, shift = torch.randn(2, 16, 16, 16, generator=g).to("cuda:1", torch.float16).chunk(2, 1)
    want = torch.addcmul(shift, torch.nn.functional.instance_norm(x.float(), eps=1e-5).half(), scale).float()
    got = spade_modulate(x, instance_stats(x, 1e-5), scale, shift, 1, None)
    assert got.device == x.device and rel_l2(got.float(), want) < 2e-3
    feature = torch.randn(1, 4, 4, 8, 8, generator=g).to("cuda:1", torch.float16)
    grid = (torch.rand(1, 4, 8, 8, 3, generator=g) * 2 - 1).to("cuda:1")
    assert rel_l2(warp_volume(feature, grid).float(), sample_volume(feature, grid).float()) < 2e-3
    frames = torch.randint(0, 256, (2, 16, 32, 3), generator=g, dtype=torch.uint8).to("cuda:1")
    yuv = rgb_to_yuv420p(frames, backend="triton")  # the writer's conversion, also a kernel of ours
    assert (yuv.int() - rgb_to_yuv420p(frames, backend="torch").int()).abs().max() <= 1
    assert torch.cuda.current_device() == 0
