"""The decoder's instance norm + SPADE modulation kernels (``ditto_core.models.spade_norm_triton``):
against PyTorch's ops and the blocks' own forward in Triton's interpreter, where the decoder
uses them (eager half-precision CUDA batches only), and on a GPU."""
import pytest
import torch

from ditto_core.models.decoder import SPADEDecoder, SPADEResnetBlock
from ditto_core.models.triton_kernels import use_triton_kernels_
from tests.parity import rel_l2
from tests.triton_interpreter import run_interpreted

KERNELS = """
    import itertools
    import json
    import torch
    import torch.nn.functional as F
    from ditto_core.models.spade_norm_triton import instance_stats, spade_modulate

    g = torch.Generator().manual_seed(0)
    result = {}
    # 6x7 planes fit one statistics program; 40x40 (1600 pixels) are split over two. A mean
    # far from zero against the spread is what the shifted sums are for.
    for (h, w) in ((6, 7), (40, 40)):
        for layout in ("nchw", "channels_last"):
            for up in (1, 2):
                for (shift_on, slope), biased in itertools.product(((True, 0.2), (False, None)), (False, True)):
                    fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
                    x = (torch.randn(2, 5, h, w, generator=g) * 3 + 40).contiguous(memory_format=fmt)
                    scale, shift = torch.randn(2, 10, h * up, w * up, generator=g).contiguous(memory_format=fmt).chunk(2, 1)
                    # The conv bias the decoder leaves to the kernel: (C,), added per channel.
                    scale_bias, shift_bias = torch.randn(2, 5, generator=g) if biased else (None, None)
                    full_scale = scale + (scale_bias[:, None, None] if biased else 0)
                    full_shift = shift + (shift_bias[:, None, None] if biased else 0)
                    want = F.interpolate(F.instance_norm(x, eps=1e-5), scale_factor=up, mode="nearest")
                    want = want * full_scale + (full_shift if shift_on else 0)
                    want = F.leaky_relu(want, 0.2) if slope else want
                    got = spade_modulate(x, instance_stats(x, 1e-5), scale, shift if shift_on else None, up, slope,
                                         scale_bias, shift_bias if shift_on else None)
                    result[f"{h}x{w} {layout} up{up} shift {shift_on} bias {biased}"] = {
                        "max_abs": float((got - want).abs().max()), "shape": list(got.shape),
                        "channels_last": got.is_contiguous(memory_format=torch.channels_last)}
    stats = instance_stats(x, 1e-5)
    for name, call in {
        "refused": lambda: spade_modulate(x, stats, scale[:, :2], None, up, None),
        "refused_bias": lambda: spade_modulate(x, stats, scale, shift, up, None, torch.zeros(4)),
        "refused_shift_bias": lambda: spade_modulate(x, stats, scale, None, up, None, None, torch.zeros(5)),
    }.items():
        try:
            call()
        except ValueError as error:
            result[name] = str(error)
    print(json.dumps(result))
"""


def test_kernels_compute_pytorchs_norm_modulation_and_activation_in_the_interpreter():
    result = run_interpreted(KERNELS)
    cases = {k: v for k, v in result.items() if not k.startswith("refused")}
    assert len(cases) == 32
    for case, got in cases.items():
        h, w = map(int, case.split()[0].split("x"))
        up = int(case.split()[2][2:])
        assert got["shape"] == [2, 5, h * up, w * up] and got["channels_last"], case
        assert got["max_abs"] < 1e-4, case  # float32 throughout: rounding only
    assert "scale/shift must be (2, 5, 80, 80)" in result["refused"]
    assert "scale_bias must be a contiguous (5,) tensor, got (4,)" in result["refused_bias"]
    assert "shift_bias without a shift" in result["refused_shift_bias"]


BLOCKS = """
    import json
    import torch
    from ditto_core.models.decoder import SPADEResnetBlock

    torch.manual_seed(0)
    result = {}
    for name, (cin, cout, up) in {"middle": (16, 16, 1), "upsampling, learned shortcut": (16, 8, 2)}.items():
        block = SPADEResnetBlock(cin, cout, 8, upsample=up, label_scale=up).eval()
        block.prepare_for_inference()
        x = torch.randn(2, cin, 6, 6).contiguous(memory_format=torch.channels_last)
        label = torch.randn(2, 8, 6, 6).contiguous(memory_format=torch.channels_last)
        with torch.no_grad():
            want = block(x, label)  # PyTorch's ops (the kernels are for CUDA half precision)
            got = block._forward_kernels(x, label)
        result[name] = {"rel_l2": float((got - want).norm() / want.norm()), "shape": list(got.shape),
                        "want_shape": list(want.shape), "runs_kernels": block.runs_kernels(x)}
    print(json.dumps(result))
"""


def test_a_blocks_kernel_path_computes_its_forward_in_the_interpreter():
    result = run_interpreted(BLOCKS)
    for name, got in result.items():
        assert got["shape"] == got["want_shape"], name
        assert got["rel_l2"] < 1e-5, (name, got["rel_l2"])
        assert not got["runs_kernels"], name  # a CPU float32 input keeps PyTorch's ops


def test_the_switch_reaches_every_block_and_the_kernels_run_only_where_they_should():
    decoder = SPADEDecoder().eval()
    assert use_triton_kernels_(decoder, True) == 8
    block = decoder.G_middle_0
    half = torch.zeros(1, 512, 4, 4, dtype=torch.float16)
    assert not block.runs_kernels(half)  # CPU: PyTorch's ops
    if torch.cuda.is_available():
        cuda_half = half.cuda()
        assert not block.runs_kernels(cuda_half)  # not prepared: no fused scale/shift conv yet
        decoder.prepare_for_inference()
        assert block.runs_kernels(cuda_half) and not block.runs_kernels(cuda_half.float())
        use_triton_kernels_(decoder, False)
        assert not block.runs_kernels(cuda_half)


def test_every_block_kind_takes_the_kernels_after_preparing():
    block = SPADEResnetBlock(16, 8, 8, upsample=2, label_scale=2).eval()
    assert block.norm_s is not None  # a learned shortcut: folded by prepare_for_inference
    block.prepare_for_inference()
    assert block.label_embedding is not None and block.norm_s is None and block.shortcut is not None


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@torch.inference_mode()
def test_the_decoders_kernel_path_renders_what_pytorchs_ops_render_on_cuda(dtype):
    torch.manual_seed(0)
    decoder = SPADEDecoder().eval()
    decoder.prepare_for_inference()
    decoder = decoder.cuda().to(dtype)
    feature = torch.randn(2, 256, 64, 64, device="cuda", dtype=dtype)
    want = decoder(feature).float()
    assert use_triton_kernels_(decoder, True) == 8 and decoder.up_1.runs_kernels(feature)
    got = decoder(feature)
    assert got.shape == want.shape and got.is_contiguous() and got.dtype == dtype
    # Both in half precision; the kernels round once where PyTorch rounds after each op.
    assert rel_l2(got.float(), want) < (2e-3 if dtype == torch.float16 else 1e-2)

