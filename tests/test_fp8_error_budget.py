"""The FP8 error study must round the way a scaled FP8 GEMM does, or its numbers mean nothing."""
import torch

from bench.fp8_error_budget import RoundedConv, _round_input, _round_weight


def test_e4m3_rounding_keeps_three_mantissa_bits_within_each_scale():
    # (1, 2 channels, 2 pixels): pixel 0 holds tiny values, pixel 1 large ones.
    x = torch.tensor([[[1e-3, 1000.0], [2e-3, 900.0]]])
    per_tensor = _round_input(x, "fp8_e4m3")
    per_pixel = _round_input(x, "fp8_e4m3_pixelwise")
    # The large values keep e4m3's relative precision either way (3 mantissa bits: <= 2**-4).
    assert ((per_tensor[..., 1] - x[..., 1]).abs() / x[..., 1]).max() <= 2**-4
    # One scale for the tensor flushes the tiny pixel to zero; its own scale keeps it.
    assert torch.equal(per_tensor[..., 0], torch.zeros(1, 2))
    assert ((per_pixel[..., 0] - x[..., 0]).abs() / x[..., 0]).max() <= 2**-4
    # Weights get one scale per output channel, so a small channel keeps its own resolution.
    w = torch.tensor([[1e-3, 1.1e-3], [1000.0, 900.0]])
    assert ((_round_weight(w, "fp8_e4m3") - w).abs() / w).max() <= 2**-4


def test_rounded_conv_is_the_conv_up_to_the_format_error():
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(8, 4, 3, padding=1)
    x = torch.randn(1, 8, 6, 6)
    with torch.no_grad():
        exact = conv(x)
        errors = {fmt: ((RoundedConv(conv, fmt)(x) - exact).norm() / exact.norm()).item()
                  for fmt in ("bf16", "fp8_e4m3", "fp8_e4m3_pixelwise")}
    assert 0 < errors["bf16"] < 1e-2
    assert 1e-2 < errors["fp8_e4m3"] < 1e-1 and 1e-2 < errors["fp8_e4m3_pixelwise"] < 1e-1
