import json

import pytest
import torch

from ditto_core.errors import InputError
from ditto_core.models.appearance_extractor import AppearanceFeatureExtractor
from ditto_core.models.checkpoints import load_network
from tests.parity import rel_l2, strict_load


@pytest.fixture(scope="module")
def strict_net(official_ckpt_dir):
    """The official file through a bare strict ``load_state_dict``, BatchNorms unfolded."""
    return strict_load(AppearanceFeatureExtractor(), official_ckpt_dir / "appearance_extractor.pth")


def test_state_dict_matches_manifest(reference_dir):
    manifest = json.loads((reference_dir / "weights_manifest.json").read_text())
    want = [(e["key"], tuple(e["shape"])) for e in manifest["checkpoints"]["appearance_extractor.pth"]["state_dict"]]
    got = [(k, tuple(v.shape)) for k, v in AppearanceFeatureExtractor().state_dict().items()]
    assert got == want


@torch.inference_mode()
def test_reference_parity_strict_load(strict_net, load_case):
    case = load_case("appearance_extractor")
    f_s = strict_net(case["inputs"]["image"])
    assert f_s.shape == (1, 32, 16, 64, 64) and f_s.dtype == torch.float32
    assert rel_l2(f_s, case["outputs"]["f_s"]) < 1e-4


@torch.inference_mode()
def test_reference_parity_load_network_folds_batchnorm(official_ckpt_dir, load_case):
    net = load_network("appearance_extractor", official_ckpt_dir)
    # load_network applies prepare_for_inference: only the pre-activation norm1 of each
    # residual block stays a BatchNorm, everything that follows a conv is folded.
    norms = [n for n, m in net.named_modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    assert norms and all(n.endswith(".norm1") for n in norms)
    case = load_case("appearance_extractor")
    assert rel_l2(net(case["inputs"]["image"]), case["outputs"]["f_s"]) < 1e-4


@torch.inference_mode()
def test_batch_items_are_independent(strict_net):
    images = torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    batched = strict_net(images)
    assert batched.shape == (2, 32, 16, 16, 16)
    for i in range(2):
        assert rel_l2(batched[i : i + 1], strict_net(images[i : i + 1])) < 1e-6
    assert rel_l2(batched[0], batched[1]) > 1e-2  # different images, different features


@pytest.mark.parametrize(
    "image",
    [torch.zeros(1, 256, 256, 3), torch.zeros(3, 256, 256), torch.zeros(1, 3, 256, 256, dtype=torch.uint8)],
    ids=["channels_last", "unbatched", "uint8"],
)
def test_rejects_malformed_image(image):
    with pytest.raises(InputError, match=r"image must be a floating-point \(B, 3, H, W\)"):
        AppearanceFeatureExtractor()(image)


@pytest.mark.gpu
@torch.inference_mode()
def test_reference_parity_cuda(official_ckpt_dir, load_case):
    net = load_network("appearance_extractor", official_ckpt_dir, device="cuda")
    case = load_case("appearance_extractor")
    assert rel_l2(net(case["inputs"]["image"].cuda()), case["outputs"]["f_s"]) < 1e-4
