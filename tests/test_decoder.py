"""SPADE decoder: official layout, parity with the reference, and the spectral-norm fold.

Full 64x64 -> 512x512 forwards cost seconds on CPU, so only the two parity checks run at that
size (once each, shared through a fixture); behavioural checks use 16x16 inputs, which the
fully convolutional decoder maps to 128x128.
"""
import copy
import json

import pytest
import torch

from ditto_core.errors import InputError
from ditto_core.models.checkpoints import load_network
from ditto_core.models.decoder import SPADE, SPADEDecoder, SpectralNormConv2d
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
    assert "G_middle_0.conv_0.weight" in keys and "up_1.conv_s.weight" in keys
    assert rel_l2(case_outputs["prepared"], case_outputs["raw"]) < 1e-5


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
