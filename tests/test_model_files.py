"""The official file set: where each file is looked for, what is missing, where downloads go."""
from pathlib import Path

import pytest

from ditto_core.errors import MissingModelError
from ditto_core.model_files import (
    AUX_FILES, CONFIG_DIR, CONFIG_FILE, HUBERT_ONNX_NAME, NETWORK_STEMS, aux_download_dir, check_model_files,
    find_aux_file, find_hubert, find_network_file, missing_downloads, render_files,
)


def _touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x")
    return path


def test_every_layout_is_found(tmp_path):
    flat = _touch(tmp_path / "flat" / "decoder.pth")
    hf = _touch(tmp_path / "hf" / "ditto_pytorch" / "models" / "lmdm_v0.4_hubert.pth")
    assert find_network_file("decoder", tmp_path / "flat") == flat
    assert find_network_file("lmdm", tmp_path / "hf") == hf
    converted = _touch(tmp_path / "flat" / "models" / "decoder.safetensors")
    assert find_network_file("decoder", tmp_path / "flat") == flat, "a folder nearer the root wins"
    flat.unlink()
    assert find_network_file("decoder", tmp_path / "flat") == converted
    aux = _touch(tmp_path / "hf" / "ditto_pytorch" / "aux_models" / AUX_FILES["landmark203"])
    assert find_aux_file("landmark203", tmp_path / "hf") == aux and find_hubert(tmp_path / "hf") is None
    hubert = _touch(tmp_path / "hf" / "aux_models" / HUBERT_ONNX_NAME)
    assert find_hubert(tmp_path / "hf") == hubert


def test_missing_files_are_listed_once_with_the_download_command(tmp_path):
    _touch(tmp_path / "decoder.pth")
    with pytest.raises(MissingModelError) as caught:
        check_model_files(tmp_path)
    message = str(caught.value)
    assert "decoder.pth" not in message and "appearance_extractor.pth" in message
    assert all(name in message for name in (*AUX_FILES.values(), HUBERT_ONNX_NAME))
    assert f"python -m ditto_core download --models {tmp_path}" in message
    with pytest.raises(MissingModelError) as caught:
        check_model_files(tmp_path, detect_face=False)
    assert AUX_FILES["face_detector"] not in str(caught.value) and HUBERT_ONNX_NAME in str(caught.value)


def test_render_files_are_the_files_a_render_loads(tmp_path):
    networks = [_touch(tmp_path / f"{stem}.pth") for stem in NETWORK_STEMS.values()]
    faces = [_touch(tmp_path / "aux_models" / name) for name in AUX_FILES.values()]
    hubert = _touch(tmp_path / "aux_models" / HUBERT_ONNX_NAME)
    config = _touch(tmp_path / CONFIG_DIR / CONFIG_FILE)
    _touch(tmp_path / "cache" / "avatar.safetensors")  # not a model file
    assert sorted(render_files(tmp_path)) == sorted([*networks, *faces, hubert, config])
    assert sorted(render_files(tmp_path, detect_face=False)) == sorted([*networks, hubert, config])
    networks[0].unlink()
    assert networks[0] not in render_files(tmp_path)


def test_download_targets(tmp_path):
    flat = tmp_path / "flat"
    assert aux_download_dir(flat) == flat / "aux_models"
    (tmp_path / "hf" / "ditto_pytorch" / "aux_models").mkdir(parents=True)
    assert aux_download_dir(tmp_path / "hf") == tmp_path / "hf" / "ditto_pytorch" / "aux_models"
    wanted = missing_downloads(flat)
    assert len(wanted) == len(NETWORK_STEMS) + len(AUX_FILES) + 2  # + HuBERT + the config
    assert wanted["ditto_pytorch/models/lmdm_v0.4_hubert.pth"] == flat / "lmdm_v0.4_hubert.pth"
    assert wanted[f"ditto_pytorch/aux_models/{HUBERT_ONNX_NAME}"] == flat / "aux_models" / HUBERT_ONNX_NAME
    assert wanted[f"{CONFIG_DIR}/{CONFIG_FILE}"] == flat / CONFIG_DIR / CONFIG_FILE
    for target in wanted.values():
        _touch(target)
    assert missing_downloads(flat) == {}
