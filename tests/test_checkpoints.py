"""Loading the official checkpoint files: strict, safe, and loud about bad files."""
import json
import shutil
import struct

import pytest
import torch

from ditto_core.errors import CheckpointError, MissingModelError
from ditto_core.model_files import find_network_file
from ditto_core.models import checkpoints as C
from ditto_core.models.ditto_models import load_ditto_models


def _manifest(reference_dir):
    return json.loads((reference_dir / "weights_manifest.json").read_text())["checkpoints"]


@pytest.mark.parametrize("name", sorted(C.NETWORKS))
def test_strict_load_matches_manifest(name, official_ckpt_dir, reference_dir):
    """Every official file loads strictly, and our modules hold exactly the manifest's keys."""
    spec = C.NETWORKS[name]
    entry = _manifest(reference_dir)[spec.official_file]
    state = C.load_state(name, official_ckpt_dir / spec.official_file)
    want = {e["key"]: tuple(e["shape"]) for e in entry["state_dict"]}
    assert {k: tuple(v.shape) for k, v in state.items()} == want
    fresh = spec.build(state)
    assert {k: tuple(v.shape) for k, v in fresh.state_dict().items()} == want
    module = C.build_network(name, state, official_ckpt_dir / spec.official_file)
    assert not module.training
    assert all(not p.requires_grad for p in module.parameters())


def test_lmdm_condition_width_comes_from_checkpoint(official_ckpt_dir):
    state = C.load_state("lmdm", official_ckpt_dir / "lmdm_v0.4_hubert.pth")
    assert state["cond_projection.weight"].shape[1] == 1103
    assert C.NETWORKS["lmdm"].build(state).cond_projection.in_features == 1103


def test_load_ditto_models_all_six(official_ckpt_dir):
    models = load_ditto_models(official_ckpt_dir)
    assert models.cond_dim == 1103
    assert set(models.files) == set(C.NETWORKS)
    assert len(models.identity) == 64
    # The identity is stable for the same files.
    assert load_ditto_models(official_ckpt_dir).identity == models.identity


@pytest.mark.reliability(area="Models", case="missing network file(s)",
                         behaviour="MissingModelError listing every missing file, the folder searched and where to download; nothing loads")
def test_missing_files_are_all_named(tmp_path, official_ckpt_dir):
    shutil.copy(official_ckpt_dir / "stitch_network.pth", tmp_path)
    with pytest.raises(MissingModelError) as err:
        load_ditto_models(tmp_path)
    msg = str(err.value)
    for name in ("appearance_extractor.pth", "decoder.pth", "lmdm_v0.4_hubert.pth", "warp_network.pth"):
        assert name in msg
    assert "stitch_network.pth" not in msg
    assert str(tmp_path) in msg and "digital-avatar/ditto-talkinghead" in msg and "ComfyUI/models/ditto" in msg


def test_huggingface_folder_layout_is_found(tmp_path, official_ckpt_dir):
    nested = tmp_path / "ditto_pytorch" / "models"
    nested.mkdir(parents=True)
    shutil.copy(official_ckpt_dir / "stitch_network.pth", nested)
    assert find_network_file("stitch_network", tmp_path) == nested / "stitch_network.pth"
    assert C.load_network("stitch_network", tmp_path) is not None


@pytest.mark.reliability(area="Models", case="truncated .pth",
                         behaviour="CheckpointError naming the file as truncated or corrupt, with the re-download hint")
def test_truncated_file_is_named(tmp_path, official_ckpt_dir):
    data = (official_ckpt_dir / "stitch_network.pth").read_bytes()
    (tmp_path / "stitch_network.pth").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="stitch_network.pth.*truncated"):
        C.load_network("stitch_network", tmp_path)


@pytest.mark.reliability(area="Models", case="another network's file under the right name",
                         behaviour="CheckpointError: the file does not hold this network and which official file it looks like")
def test_other_network_under_the_right_name(tmp_path, official_ckpt_dir):
    shutil.copy(official_ckpt_dir / "appearance_extractor.pth", tmp_path / "warp_network.pth")
    with pytest.raises(CheckpointError, match="does not hold the warp_network.*looks like appearance_extractor.pth"):
        C.load_network("warp_network", tmp_path)


@pytest.mark.reliability(area="Models", case="one tensor of the wrong shape",
                         behaviour="CheckpointError naming the tensor and both shapes, before any weight is copied")
def test_wrong_shape_names_key_and_both_shapes(tmp_path, official_ckpt_dir):
    obj = torch.load(official_ckpt_dir / "stitch_network.pth", weights_only=True)
    key = "module.mlp.0.weight"
    obj["retarget_shoulder"][key] = torch.zeros(3, 3)
    torch.save(obj, tmp_path / "stitch_network.pth")
    with pytest.raises(CheckpointError, match=r"'mlp.0.weight' has shape \(3, 3\).*needs \(128, 126\)"):
        C.load_network("stitch_network", tmp_path)


@pytest.mark.reliability(area="Models", case="a tensor missing from the checkpoint",
                         behaviour="CheckpointError naming the first missing key and its expected shape")
def test_missing_key_is_named(tmp_path, official_ckpt_dir):
    obj = torch.load(official_ckpt_dir / "stitch_network.pth", weights_only=True)
    del obj["retarget_shoulder"]["module.mlp.2.bias"]
    torch.save(obj, tmp_path / "stitch_network.pth")
    with pytest.raises(CheckpointError, match="missing 1 key.*'mlp.2.bias'"):
        C.load_network("stitch_network", tmp_path)


@pytest.mark.reliability(area="Models", case="checkpoint without the expected container entry",
                         behaviour="CheckpointError naming the missing entry and what was found")
def test_wrong_container_is_named(tmp_path):
    torch.save({"weights": {}}, tmp_path / "lmdm_v0.4_hubert.pth")
    with pytest.raises(CheckpointError, match="no 'model_state_dict' entry"):
        C.load_network("lmdm", tmp_path)


@pytest.mark.reliability(area="Safety", case="checkpoint that would run code when unpickled",
                         behaviour="refused by torch.load(weights_only=True); the payload never runs")
def test_pickled_code_is_refused(tmp_path):
    """weights_only=True: a checkpoint that would run code on load is rejected, not executed."""

    class Evil:
        def __reduce__(self):
            return (shutil.rmtree, (str(tmp_path / "victim"),))

    (tmp_path / "victim").mkdir()
    torch.save({"x": Evil()}, tmp_path / "decoder.pth")
    with pytest.raises(CheckpointError):
        C.load_network("decoder", tmp_path)
    assert (tmp_path / "victim").is_dir()


def test_half_precision_files_load_as_fp32(tmp_path, official_ckpt_dir):
    obj = torch.load(official_ckpt_dir / "stitch_network.pth", weights_only=True)
    half = {head: {k: v.half() for k, v in sd.items()} for head, sd in obj.items()}
    torch.save(half, tmp_path / "stitch_network.pth")
    net = C.load_network("stitch_network", tmp_path)
    assert all(p.dtype == torch.float32 for p in net.parameters())


def test_convert_weights_round_trip(tmp_path, official_ckpt_dir):
    from ditto_core.__main__ import main

    src = tmp_path / "src"
    src.mkdir()
    for name in ("stitch_network.pth", "lmdm_v0.4_hubert.pth"):
        (src / name).symlink_to(official_ckpt_dir / name)
    dst = tmp_path / "dst"
    assert main(["convert-weights", str(src), str(dst)]) == 0
    assert sorted(p.name for p in dst.iterdir()) == ["ditto_models.json", "lmdm_v0.4_hubert.safetensors",
                                                      "stitch_network.safetensors"]
    index = json.loads((dst / "ditto_models.json").read_text())
    assert index["stitch_network.safetensors"]["ditto_network"] == "stitch_network"
    for name in ("stitch_network", "lmdm"):
        assert find_network_file(name, dst).suffix == ".safetensors"
        a = C.load_network(name, src).state_dict()
        b = C.load_network(name, dst).state_dict()
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert not list(dst.glob(".*tmp*")), "temp files left behind"


@pytest.mark.reliability(area="Models", case="convert-weights given a wrong file",
                         behaviour="CheckpointError; no .safetensors is written")
def test_convert_refuses_a_bad_file_and_writes_nothing(tmp_path, official_ckpt_dir):
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    shutil.copy(official_ckpt_dir / "appearance_extractor.pth", src / "stitch_network.pth")
    with pytest.raises(CheckpointError):
        C.convert_weights(src, dst)
    assert not (dst / "stitch_network.safetensors").exists()


@pytest.mark.reliability(area="Models", case="safetensors header that lies about its size",
                         behaviour="CheckpointError naming the file")
def test_safetensors_header_that_lies_about_its_size(tmp_path, official_ckpt_dir):
    from safetensors.torch import save_file

    path = tmp_path / "stitch_network.safetensors"
    save_file({"x": torch.zeros(4)}, str(path))
    data = bytearray(path.read_bytes())
    data[:8] = struct.pack("<Q", 10**12)
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="stitch_network.safetensors"):
        C.load_network("stitch_network", tmp_path)


def test_loading_is_deterministic(official_ckpt_dir):
    a = C.load_network("stitch_network", official_ckpt_dir)
    b = C.load_network("stitch_network", official_ckpt_dir)
    x = torch.randn(2, 21, 3, generator=torch.Generator().manual_seed(0))
    assert torch.equal(a(x, x), b(x, x))


def test_legacy_serialization_format_loads(tmp_path, official_ckpt_dir):
    """Files from the pre-zip serializer cannot be memory-mapped; they still load, safely."""
    obj = torch.load(official_ckpt_dir / "stitch_network.pth", weights_only=True)
    torch.save(obj, tmp_path / "stitch_network.pth", _use_new_zipfile_serialization=False)
    a = C.load_network("stitch_network", tmp_path).state_dict()
    b = C.load_network("stitch_network", official_ckpt_dir).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in b)
