"""SPADE decoder: official layout, parity with the reference, and the exact inference rewrites.

Full 64x64 -> 512x512 forwards cost seconds on CPU, so only the parity checks run at that size
(once per variant, shared through a fixture); behavioural checks use 16x16 inputs, which the
fully convolutional decoder maps to 128x128, or single blocks and convs at small sizes.
"""
import copy
import json

import pytest
import torch
import torch.nn.functional as F

from ditto_core.errors import InputError
from ditto_core.models.checkpoints import load_network
from ditto_core.models.decoder import (
    SPADE,
    NearestUpsampledConv2d,
    SPADEDecoder,
    ShiftFoldedShortcut,
    SPADEResnetBlock,
    SpectralNormConv2d,
)
from tests.parity import rel_l2


@pytest.fixture(scope="module")
def official_state(official_ckpt_dir) -> dict:
    return torch.load(official_ckpt_dir / "decoder.pth", map_location="cpu", weights_only=True)


@pytest.fixture(scope="module")
def raw_decoder(official_state) -> SPADEDecoder:
    """Strictly loaded, not prepared: sigma is computed from weight_u/weight_v on every call."""
    decoder = SPADEDecoder()
    decoder.load_state_dict(official_state, strict=True)
    return decoder.eval()


@pytest.fixture(scope="module")
def prepared_decoder(official_ckpt_dir) -> SPADEDecoder:
    """Through the production loader, which calls prepare_for_inference."""
    return load_network("decoder", official_ckpt_dir)


@pytest.fixture(scope="module")
def case_outputs(load_case, raw_decoder, prepared_decoder) -> dict:
    case = load_case("decoder")
    with torch.inference_mode():
        return {
            "reference": case["outputs"]["output"],
            "raw": raw_decoder(case["inputs"]["feature"]),
            "prepared": prepared_decoder(case["inputs"]["feature"]),
        }


def _small_features(batch: int) -> torch.Tensor:
    return torch.randn(batch, 256, 16, 16, generator=torch.Generator().manual_seed(1))


def test_state_dict_layout_matches_manifest(reference_dir):
    manifest = json.loads((reference_dir / "weights_manifest.json").read_text())
    expected = manifest["checkpoints"]["decoder.pth"]["state_dict"]
    decoder = SPADEDecoder()
    params = dict(decoder.named_parameters())
    got = [
        {"key": k, "shape": list(v.shape), "kind": "parameter" if k in params else "buffer"}
        for k, v in decoder.state_dict().items()
    ]
    assert got == [{"key": e["key"], "shape": e["shape"], "kind": e["kind"]} for e in expected]


@pytest.mark.parametrize("variant", ["raw", "prepared"])
def test_reference_parity(case_outputs, variant):
    got, ref = case_outputs[variant], case_outputs["reference"]
    assert got.shape == (1, 3, 512, 512) and got.dtype == torch.float32
    error = rel_l2(got, ref)
    print(f"decoder {variant}: rel-L2 {error:.2e}")
    assert error < 1e-4


def test_prepare_folds_to_plain_convs_and_matches_unprepared(case_outputs, prepared_decoder):
    assert not any(isinstance(m, SpectralNormConv2d) for m in prepared_decoder.modules())
    keys = prepared_decoder.state_dict().keys()
    assert not any(k.endswith(("weight_orig", "weight_u", "weight_v")) for k in keys)
    assert "G_middle_0.conv_0.weight" in keys and "up_1.shortcut.conv.weight" in keys
    assert rel_l2(case_outputs["prepared"], case_outputs["raw"]) < 1e-5


def test_prepared_matches_unprepared_on_random_features(raw_decoder, prepared_decoder):
    x = _small_features(2)
    with torch.inference_mode():
        raw = raw_decoder(x)
        prepared = prepared_decoder(x)
        channels_last = copy.deepcopy(prepared_decoder).to(memory_format=torch.channels_last)
        prepared_cl = channels_last(x.to(memory_format=torch.channels_last))
    assert rel_l2(prepared, raw) < 1e-5
    assert rel_l2(prepared_cl, raw) < 1e-5


def test_prepare_shares_one_label_embedding_per_block(prepared_decoder):
    """Each block embeds the label once, at label resolution; the SPADEs keep only scale/shift."""
    blocks = {f"G_middle_{i}": 1 for i in range(6)} | {"up_0": 2, "up_1": 4}
    for name, scale in blocks.items():
        block = getattr(prepared_decoder, name)
        norms = [block.norm_0, block.norm_1]
        assert block.label_embedding.scale_factor == scale
        # The up blocks' third embedding feeds their learned shortcut (norm_s folded into it).
        assert block.label_embedding.out_channels == 128 * (3 if name.startswith("up") else 2)
        assert (block.shortcut is not None) == name.startswith("up") and block.norm_s is None
        assert all(norm.mlp_shared is None and norm.mlp_scale_shift is not None for norm in norms)
    assert not any("mlp_shared" in key for key in prepared_decoder.state_dict())


def test_prepared_decoder_traces_as_one_graph(prepared_decoder):
    """No graph breaks (data-dependent control flow, host syncs) for torch.compile to trip on."""
    compiled = torch.compile(prepared_decoder, backend="eager", fullgraph=True)
    x = _small_features(1)
    with torch.inference_mode():
        assert torch.equal(compiled(x), prepared_decoder(x))


def test_prepare_is_idempotent(prepared_decoder):
    before = {k: v.clone() for k, v in prepared_decoder.state_dict().items()}
    prepared_decoder.prepare_for_inference()
    after = prepared_decoder.state_dict()
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_unnormalised_weight_orig_is_far_off(prepared_decoder, official_state):
    """A loader that copies weight_orig into plain convs (skipping 1/sigma) must be caught."""
    naive = copy.deepcopy(prepared_decoder)
    replaced = 0
    with torch.no_grad():
        for name, module in naive.named_modules():
            name = name.replace("shortcut.conv", "conv_s")  # where prepare_for_inference moved conv_s
            if f"{name}.weight_orig" in official_state:
                module.weight.copy_(official_state[f"{name}.weight_orig"])
                replaced += 1
    assert replaced == 6 * 2 + 2 * 3  # conv_0/conv_1 per block, plus conv_s in up_0/up_1
    x = _small_features(1)
    with torch.inference_mode():
        assert rel_l2(naive(x), prepared_decoder(x)) > 0.05


def test_batch_elements_are_independent(prepared_decoder):
    x = _small_features(2)
    with torch.inference_mode():
        both = prepared_decoder(x)
        singles = torch.cat([prepared_decoder(x[:1]), prepared_decoder(x[1:])])
    assert both.shape == (2, 3, 128, 128)
    assert 0 < both.min() and both.max() < 1
    assert rel_l2(both, singles) < 1e-6
    assert rel_l2(both[0], both[1]) > 1e-2  # distinct inputs give distinct images


@pytest.mark.parametrize("shape", [(1, 128, 64, 64), (256, 64, 64)])
def test_rejects_wrong_feature_shape(prepared_decoder, shape):
    with pytest.raises(InputError, match="'feature'.*256"):
        prepared_decoder(torch.zeros(shape))


@pytest.mark.parametrize("kernel_size, bias", [(3, True), (1, False)])
def test_spectral_conv_divides_by_stored_sigma_and_folds_exactly(kernel_size, bias):
    g = torch.Generator().manual_seed(0)
    conv = SpectralNormConv2d(8, 6, kernel_size, padding=kernel_size // 2, bias=bias)
    with torch.no_grad():
        conv.weight_orig.copy_(torch.randn(conv.weight_orig.shape, generator=g))
        u, s, vh = torch.linalg.svd(conv.weight_orig.flatten(1), full_matrices=False)
        conv.weight_u.copy_(u[:, 0])
        conv.weight_v.copy_(vh[0])
    assert torch.allclose(conv.sigma(), s[0], rtol=1e-5)
    # With the converged singular pair the effective weight has spectral norm exactly 1.
    effective = conv.normalized_weight().flatten(1)
    assert torch.allclose(torch.linalg.matrix_norm(effective, ord=2), torch.tensor(1.0), rtol=1e-5)

    x = torch.randn(2, 8, 5, 7, generator=g)
    plain = conv.folded()
    assert type(plain) is torch.nn.Conv2d and plain.bias is conv.bias
    with torch.no_grad():
        expected = torch.nn.functional.conv2d(x, conv.weight_orig / s[0], conv.bias, padding=kernel_size // 2)
        assert torch.allclose(conv(x), expected, atol=1e-5)
        assert torch.allclose(plain(x), conv(x), atol=1e-6)


def test_default_init_sigma_is_close_to_largest_singular_value():
    conv = SpectralNormConv2d(64, 32, 3)
    largest = torch.linalg.matrix_norm(conv.weight_orig.detach().flatten(1), ord=2)
    assert 0.7 * largest < conv.sigma() <= largest * (1 + 1e-5)


def test_spade_fused_modulation_matches_separate_convs():
    g = torch.Generator().manual_seed(0)
    spade = SPADE(num_features=8, label_channels=4, hidden_channels=16)
    x = torch.randn(2, 8, 6, 6, generator=g) * 3 + 1
    label = torch.randn(2, 4, 6, 6, generator=g)
    with torch.no_grad():
        separate = spade(x, label)
        var, mean = torch.var_mean(x, dim=(2, 3), correction=0, keepdim=True)
        normalized = (x - mean) / torch.sqrt(var + 1e-5)
        hidden = spade.mlp_shared(label)
        by_hand = normalized * (1 + spade.mlp_gamma(hidden)) + spade.mlp_beta(hidden)
        spade.prepare_for_inference()
        fused = spade(x, label)
    assert torch.allclose(separate, by_hand, atol=1e-5)
    assert torch.allclose(fused, separate, atol=1e-6)
    assert {k.split(".")[0] for k in spade.state_dict()} == {"mlp_shared", "mlp_scale_shift"}


def _random_conv(
    in_channels: int, out_channels: int, kernel_size: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    weight = torch.randn(out_channels, in_channels, kernel_size, kernel_size, generator=generator)
    return weight, torch.randn(out_channels, generator=generator)


@pytest.mark.parametrize("kernel_size, with_bias", [(3, True), (3, False), (5, True)])
@pytest.mark.parametrize("scale", [1, 2, 3, 4])
@pytest.mark.parametrize("size", [(1, 1), (2, 3), (5, 7)])  # (1, 1), (2, 3): every pixel is a border pixel
def test_nearest_upsampled_conv_equals_conv_of_upsampled_input(kernel_size, with_bias, scale, size):
    g = torch.Generator().manual_seed(scale)
    weight, bias = _random_conv(4, 6, kernel_size, g)
    bias = bias if with_bias else None
    x = torch.randn(2, 4, *size, generator=g)
    expected = F.conv2d(F.interpolate(x, scale_factor=scale, mode="nearest"), weight, bias, padding=kernel_size // 2)
    conv = NearestUpsampledConv2d(weight, bias, scale)
    with torch.no_grad():
        got = conv(x)
        got_cl = conv(x.to(memory_format=torch.channels_last))
    assert got.shape == expected.shape == (2, 6, scale * size[0], scale * size[1])
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got_cl, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "scale, kernel_shapes",
    [
        (1, [((3, 3), 1)]),
        (2, [((2, 2), 4)]),  # phases (0|1) x (0|1): all four read 2x2 low-res pixels
        (4, [((2, 2), 4), ((2, 1), 2), ((1, 2), 2), ((1, 1), 1)]),  # phases 1, 2 read one row/column
    ],
)
def test_nearest_upsampled_conv_runs_one_conv_per_distinct_kernel_shape(scale, kernel_shapes):
    """One conv per support shape, holding each distinct phase kernel once: the FLOP saving."""
    weight, bias = _random_conv(4, 6, 3, torch.Generator().manual_seed(0))
    conv = NearestUpsampledConv2d(weight, bias, scale)
    assert [(tuple(c.kernel_size), c.out_channels // 6) for c in conv.convs] == kernel_shapes
    assert all(torch.equal(c.bias, bias.repeat(kinds)) for c, (_, kinds) in zip(conv.convs, kernel_shapes))


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("scale", [1, 4])
def test_nearest_upsampled_conv_chunks_are_dense_slices_of_the_output(scale, channels_last):
    g = torch.Generator().manual_seed(0)
    conv = NearestUpsampledConv2d(*_random_conv(4, 6, 3, g), scale)
    layout = torch.channels_last if channels_last else torch.contiguous_format
    x = torch.randn(2, 4, 5, 7, generator=g).to(memory_format=layout)
    with torch.no_grad():
        chunks = conv.forward_chunks(x, 3)
        whole = conv(x)
    assert all(c.is_contiguous(memory_format=layout) for c in chunks)
    assert torch.equal(torch.cat(chunks, dim=1), whole)


def test_nearest_upsampled_conv_rejects_even_kernels():
    with pytest.raises(ValueError, match="square odd kernel"):
        NearestUpsampledConv2d(torch.zeros(2, 2, 2, 2), None, 2)


@pytest.mark.parametrize("in_channels, out_channels", [(8, 4), (4, 8)])
def test_shift_folded_shortcut_equals_conv_of_modulated_input(in_channels, out_channels):
    g = torch.Generator().manual_seed(0)
    spade = SPADE(in_channels, label_channels=5, hidden_channels=6)
    spade.prepare_for_inference()
    conv_s = torch.nn.Conv2d(in_channels, out_channels, 1, bias=False)
    normalized = torch.randn(2, in_channels, 7, 5, generator=g)
    hidden = torch.relu(torch.randn(2, 6, 7, 5, generator=g))
    with torch.no_grad():
        expected = conv_s(spade.modulate(normalized, hidden))
        folded = ShiftFoldedShortcut(spade.mlp_scale_shift, conv_s)
        got = folded(normalized, hidden)
    assert folded.scale_shift.out_channels == in_channels + out_channels
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_prepare_cuts_the_documented_flops():
    """891.6 GFLOP a 512x512 frame as trained, 741.9 after the rewrites (module docstring)."""
    from torch.utils.flop_counter import FlopCounterMode

    def gflop(decoder: SPADEDecoder) -> float:
        counter = FlopCounterMode(display=False)
        with counter, torch.no_grad():
            decoder.to("meta")(torch.zeros(1, 256, 64, 64, device="meta"))
        return counter.get_total_flops() / 1e9

    torch.manual_seed(0)
    decoder = SPADEDecoder().eval()
    assert gflop(copy.deepcopy(decoder)) == pytest.approx(891.6, abs=0.1)
    decoder.prepare_for_inference()
    assert gflop(decoder) == pytest.approx(741.9, abs=0.1)


def test_upsampling_block_matches_reference_formula_and_its_prepared_form():
    """The block as the reference writes it: upsample x and label, then normalise at high resolution."""
    torch.manual_seed(0)
    block = SPADEResnetBlock(8, 4, label_channels=6, upsample=2, label_scale=4).eval()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 8, 6, 4, generator=g) * 2 + 1
    label = torch.randn(2, 6, 3, 2, generator=g)
    with torch.no_grad():
        x_up = F.interpolate(x, scale_factor=2, mode="nearest")
        label_up = F.interpolate(label, size=x_up.shape[-2:], mode="nearest")

        def spade(norm, t):
            hidden = norm.mlp_shared(label_up)
            return F.instance_norm(t, eps=1e-5) * (1 + norm.mlp_gamma(hidden)) + norm.mlp_beta(hidden)

        dx = block.conv_0(F.leaky_relu(spade(block.norm_0, x_up), 0.2))
        dx = block.conv_1(F.leaky_relu(spade(block.norm_1, dx), 0.2))
        expected = dx + block.conv_s(spade(block.norm_s, x_up))
        got = block(x, label)
        block.prepare_for_inference()
        prepared = block(x, label)
    assert got.shape == (2, 4, 12, 8)
    assert rel_l2(got, expected) < 1e-6
    assert rel_l2(prepared, expected) < 1e-5


@pytest.mark.gpu
def test_cuda_matches_cpu_and_half_precision_stays_close():
    torch.manual_seed(0)
    decoder = SPADEDecoder().eval()
    decoder.prepare_for_inference()
    x = _small_features(2)
    with torch.inference_mode():
        cpu = decoder(x)
        decoder.cuda()
        assert rel_l2(decoder(x.cuda()), cpu) < 1e-5
        for dtype in (torch.float16, torch.bfloat16):
            half = copy.deepcopy(decoder).to(dtype)(x.cuda().to(dtype))
            assert half.dtype == dtype and torch.isfinite(half).all()
            error = rel_l2(half, cpu)
            print(f"decoder {dtype}: rel-L2 {error:.2e} vs fp32")
            assert error < 2e-2


@pytest.mark.gpu
@pytest.mark.parametrize("channels_last", [False, True])
def test_inductor_compiled_decoder_matches_eager_on_cuda(channels_last):
    """Inductor's lowering of the sub-pixel embedding (phase crops, interleaving stacks) stays exact."""
    torch.manual_seed(0)
    decoder = SPADEDecoder().eval()
    decoder.prepare_for_inference()
    layout = torch.channels_last if channels_last else torch.contiguous_format
    decoder.cuda().to(memory_format=layout)
    x = _small_features(2).cuda().to(memory_format=layout)
    with torch.inference_mode():
        eager = decoder(x)
        compiled = torch.compile(decoder, fullgraph=True, dynamic=False)(x)
    assert rel_l2(compiled, eager) < 1e-5
