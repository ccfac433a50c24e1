"""Motion extractor (ConvNeXt-V2-tiny + pose/keypoint heads) against the reference kit."""
import json

import pytest
import torch
import torch.nn.functional as F

from ditto_core.errors import InputError
from ditto_core.models.checkpoints import load_network
from ditto_core.models.convnext_v2 import GlobalResponseNorm, LayerNorm2d
from ditto_core.models.motion_extractor import MotionExtractor
from tests.parity import rel_l2

OUTPUTS = ("pitch", "yaw", "roll", "t", "exp", "scale", "kp")


@pytest.fixture(scope="module")
def extractor(official_ckpt_dir):
    return load_network("motion_extractor", official_ckpt_dir)


@pytest.fixture(scope="module")
def case(load_case):
    return load_case("motion_extractor")


def test_state_dict_matches_manifest(reference_dir):
    entry = json.loads((reference_dir / "weights_manifest.json").read_text())["checkpoints"]["motion_extractor.pth"]
    want = [(e["key"], tuple(e["shape"])) for e in entry["state_dict"]]
    got = [(k, tuple(v.shape)) for k, v in MotionExtractor().state_dict().items()]
    assert got == want


def test_reference_parity(extractor, case):
    with torch.inference_mode():
        got = extractor(case["inputs"]["image"])
    assert len(got) == len(OUTPUTS)
    errors = {name: rel_l2(out, case["outputs"][name]) for name, out in zip(OUTPUTS, got)}
    for name, out in zip(OUTPUTS, got):
        assert out.shape == case["outputs"][name].shape, name
    assert all(e < 1e-4 for e in errors.values()), errors


def test_batch_rows_are_independent(extractor, case):
    image = case["inputs"]["image"]
    other = image.flip(-1) * 0.8
    with torch.inference_mode():
        batched = extractor(torch.cat([image, other]))
        alone = [extractor(image), extractor(other)]
    for i, single in enumerate(alone):
        for name, b, s in zip(OUTPUTS, batched, single):
            assert rel_l2(b[i : i + 1], s) < 1e-5, (i, name)
    # The two rows really differ, so the comparison above could have failed.
    assert rel_l2(batched[4][0], batched[4][1]) > 1e-2


def test_grn_uses_gamma_beta_and_residual():
    g = torch.Generator().manual_seed(0)
    grn = GlobalResponseNorm(8)
    with torch.no_grad():
        grn.gamma.copy_(torch.randn(1, 1, 1, 8, generator=g))
        grn.beta.copy_(torch.randn(1, 1, 1, 8, generator=g))
    x = torch.randn(2, 5, 6, 8, generator=g)
    gx = x.square().sum(dim=(1, 2), keepdim=True).sqrt()
    nx = gx / (gx.mean(dim=-1, keepdim=True) + 1e-6)
    expected = grn.gamma * (x * nx) + grn.beta + x
    torch.testing.assert_close(grn(x), expected, rtol=1e-6, atol=1e-6)


def test_channels_first_layer_norm_matches_layer_norm_over_channels():
    g = torch.Generator().manual_seed(0)
    norm = LayerNorm2d(6)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(6, generator=g))
        norm.bias.copy_(torch.randn(6, generator=g))
    # Small variance makes eps (1e-6, not PyTorch's default 1e-5) matter.
    x = torch.randn(3, 6, 4, 5, generator=g) * 1e-3
    expected = F.layer_norm(x.permute(0, 2, 3, 1), (6,), norm.weight, norm.bias, eps=1e-6).permute(0, 3, 1, 2)
    torch.testing.assert_close(norm(x), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "bad, match",
    [
        (torch.zeros(1, 256, 256, 3), r"\(1, 256, 256, 3\).*channels-first"),
        (torch.zeros(3, 256, 256), r"\(3, 256, 256\)"),
        (torch.zeros(1, 3, 512, 512), r"\(batch, 3, 256, 256\)"),
        (torch.zeros(1, 3, 256, 256, dtype=torch.uint8), r"uint8.*\[0, 1\]"),
    ],
)
def test_bad_image_is_rejected_with_a_useful_message(bad, match):
    with pytest.raises(InputError, match=match):
        MotionExtractor()(bad)


@pytest.mark.gpu
def test_reference_parity_cuda(official_ckpt_dir, case):
    extractor = load_network("motion_extractor", official_ckpt_dir, device="cuda")
    with torch.inference_mode():
        got = extractor(case["inputs"]["image"].cuda().repeat(4, 1, 1, 1))
    for name, out in zip(OUTPUTS, got):
        assert out.is_cuda
        assert rel_l2(out[:1], case["outputs"][name]) < 1e-4, name
