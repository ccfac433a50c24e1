"""Bad model files, as users meet them: through the pipeline's loader, for every file it reads.

``tests/test_checkpoints.py`` covers each failure of one network file in detail (truncated,
foreign, wrong shape, lying safetensors header); ``tests/test_registration_aux.py`` and
``tests/test_audio_hubert.py`` cover the face-model and HuBERT wrappers. Here the same kinds
of damage are applied to every file :meth:`DittoPipeline.from_model_dir` opens, checking the
error names the file and the fix, and that a failed load leaves nothing loaded behind.
"""
from __future__ import annotations

import gc
import shutil
import weakref
from pathlib import Path

import pytest
import torch

from ditto_core.audio.hubert import HUBERT_ONNX_NAME
from ditto_core.audio.hubert_stub import write_stub_hubert
from ditto_core.errors import CheckpointError
from ditto_core.models import checkpoints as C
from ditto_core.models import ditto_models
from ditto_core.pipeline import DittoPipeline
from ditto_core.registration import RegistrationOptions
from tests.test_registration_stubs import landmark106_model, landmark203_model, scrfd_model

REDOWNLOAD = "([Rr]e-?download|digital-avatar/ditto-talkinghead)"


@pytest.fixture
def model_dir(tmp_path, official_ckpt_dir) -> Path:
    """A complete model folder: the six seed-0 networks (linked) and stand-in aux models."""
    root = tmp_path / "ditto"
    aux = root / "aux_models"
    aux.mkdir(parents=True)
    for file in Path(official_ckpt_dir).glob("*.pth"):
        (root / file.name).symlink_to(file)
    scrfd_model(aux / "det_10g.onnx", [((100, 50, 250, 230), 0.9, 32)])
    landmark106_model(aux / "2d106det.onnx")
    landmark203_model(aux / "landmark203.onnx")
    write_stub_hubert(aux / HUBERT_ONNX_NAME)
    return root


def _replace(path: Path, data: bytes) -> None:
    path.unlink()  # the network files are links into the shared checkpoint folder: never write through
    path.write_bytes(data)


@pytest.mark.reliability(area="Models", case="empty or truncated network file, each of the six networks",
                         behaviour="CheckpointError naming the file as truncated or corrupt, with the re-download hint")
@pytest.mark.parametrize("keep", [0, 4096], ids=["empty", "first-4KiB"])
@pytest.mark.parametrize("name", sorted(C.NETWORKS))
def test_truncated_network_file_is_named(tmp_path, official_ckpt_dir, name, keep):
    file = C.NETWORKS[name].official_file
    with open(Path(official_ckpt_dir) / file, "rb") as f:
        (tmp_path / file).write_bytes(f.read(keep))
    with pytest.raises(CheckpointError, match=rf"{file}.*truncated, corrupt or not a checkpoint.*{REDOWNLOAD}"):
        C.load_network(name, tmp_path)


@pytest.mark.reliability(area="Models", case="face model or HuBERT .onnx truncated (interrupted download)",
                         behaviour="CheckpointError naming the file and where to re-download it: HuBERT's at pipeline "
                                   "load, before any network is loaded; a face model's when a registration first "
                                   "needs it (one served from the avatar cache opens none)")
@pytest.mark.parametrize("file", ["det_10g.onnx", "2d106det.onnx", "landmark203.onnx", HUBERT_ONNX_NAME])
def test_truncated_aux_model_is_named_when_first_needed(model_dir, file, monkeypatch):
    path = model_dir / "aux_models" / file
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    _fails_when_first_needed(model_dir, file, r"(truncated|damaged)", monkeypatch)


@pytest.mark.reliability(area="Models", case="another model's file under a face-model, landmarker or HuBERT name",
                         behaviour="CheckpointError: the file is not the expected model, re-download it (HuBERT at "
                                   "pipeline load, a face model when a registration first needs it)")
@pytest.mark.parametrize("file, impostor, problem", [
    ("det_10g.onnx", "2d106det.onnx", "is not the SCRFD"),
    ("2d106det.onnx", HUBERT_ONNX_NAME, "is not the InsightFace 106-point"),
    ("landmark203.onnx", "2d106det.onnx", "is not the 203-point"),
    ("face_landmarker.task", "landmark203.onnx", "could not be loaded as MediaPipe's face landmarker"),
    (HUBERT_ONNX_NAME, "landmark203.onnx", "is not Ditto's streaming HuBERT"),
])
def test_foreign_aux_model_is_named_when_first_needed(model_dir, file, impostor, problem, monkeypatch):
    aux = model_dir / "aux_models"
    shutil.copy(aux / impostor, aux / f"{file}.impostor")
    (aux / f"{file}.impostor").replace(aux / file)
    _fails_when_first_needed(model_dir, file, problem, monkeypatch)


def _fails_when_first_needed(model_dir: Path, file: str, problem: str, monkeypatch) -> None:
    if file == HUBERT_ONNX_NAME:
        monkeypatch.setattr(ditto_models, "build_network", _never("a network was loaded before HuBERT"))
        with pytest.raises(CheckpointError, match=rf"{file}.*{problem}.*{REDOWNLOAD}"):
            DittoPipeline.from_model_dir(model_dir, device="cpu", detect_face=False)
        return
    landmarker = model_dir / "aux_models" / "face_landmarker.task"
    if not landmarker.exists():  # detection needs all four files; the bad one is opened (and fails) before it
        landmarker.write_bytes(b"never opened")
    pipeline = DittoPipeline.from_model_dir(model_dir, device="cpu", detect_face=False)  # nothing opened yet
    portrait = torch.full((1, 256, 256, 3), 128, dtype=torch.uint8)
    with pytest.raises(CheckpointError, match=rf"{file}.*{problem}.*{REDOWNLOAD}"):
        pipeline.register(portrait, RegistrationOptions(detect_face=True))


@pytest.mark.reliability(area="Models", case="face model files present, the avatar already in the cache",
                         behaviour="no face model is opened (a new process skips MediaPipe and the ONNX sessions); "
                                   "a registration that needs them opens each once")
def test_face_models_open_when_a_registration_first_needs_them_and_a_cached_avatar_opens_none(
        model_dir, tmp_path, monkeypatch):
    """A new process rendering a known avatar does not pay for the face models' sessions."""
    from ditto_core.registration import aux_models

    class NoMesh:  # MediaPipe's landmarker stand-in: finds no face mesh (neutral eye measurements)
        def __init__(self, path):
            pass

        def __call__(self, image):
            return None

    opened = []
    real_open = aux_models._open
    monkeypatch.setattr(aux_models, "Landmark478", NoMesh)
    monkeypatch.setattr(aux_models, "_open", lambda name, path, device: opened.append(name) or real_open(name, path, device))
    (model_dir / "aux_models" / "face_landmarker.task").write_bytes(b"opened by the stand-in")
    portrait = torch.full((1, 256, 256, 3), 128, dtype=torch.uint8)

    def new_process():
        return DittoPipeline.from_model_dir(model_dir, device="cpu", cache_dir=tmp_path / "cache", compile=False)

    first = new_process()
    assert opened == []
    with pytest.warns(UserWarning):  # no face mesh: neutral eyes
        registered = first.register(portrait, RegistrationOptions(detect_face=True))
    assert sorted(opened) == ["face_detector", "landmark106", "landmark203", "landmark478"]
    first.register(portrait, RegistrationOptions(detect_face=True))
    assert len(opened) == 4  # each opened once
    opened.clear()
    cached = new_process().register(portrait, RegistrationOptions(detect_face=True))
    assert opened == [] and torch.equal(cached.motion.kp, registered.motion.kp)


def _never(why: str):
    def fail(*args, **kwargs):
        raise AssertionError(why)

    return fail


@pytest.mark.reliability(area="Models", case="truncated .safetensors (header promises more data than the file holds)",
                         behaviour="CheckpointError naming the file")
def test_truncated_safetensors_is_named(tmp_path, official_ckpt_dir):
    from safetensors.torch import save_file

    state = C.load_state("stitch_network", Path(official_ckpt_dir) / "stitch_network.pth")
    path = tmp_path / "stitch_network.safetensors"
    save_file(state, str(path))
    path.write_bytes(path.read_bytes()[:-1024])
    with pytest.raises(CheckpointError, match=r"stitch_network\.safetensors.*could not be read"):
        C.load_network("stitch_network", tmp_path)


@pytest.mark.reliability(area="Models", case="converted .safetensors of another network under the right name",
                         behaviour="CheckpointError: the file does not hold this network and which one it looks like")
def test_foreign_safetensors_is_named(tmp_path, official_ckpt_dir):
    from safetensors.torch import save_file

    state = C.load_state("stitch_network", Path(official_ckpt_dir) / "stitch_network.pth")
    save_file(state, str(tmp_path / "decoder.safetensors"))
    with pytest.raises(CheckpointError, match=r"decoder\.safetensors does not hold the decoder.*looks like stitch_network"):
        C.load_network("decoder", tmp_path)


@pytest.mark.reliability(area="Models", case="one bad file in a set of six (the last one loaded)",
                         behaviour="load_ditto_models raises CheckpointError; every network already built is freed "
                                   "once the error is handled, nothing half-loaded stays in memory")
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_failed_set_load_leaves_nothing_loaded(model_dir, monkeypatch, device):
    last = list(C.NETWORKS)[-1]
    bad = model_dir / C.NETWORKS[last].official_file
    _replace(bad, bad.read_bytes()[:4096])
    built: list[weakref.ref] = []
    real_build = ditto_models.build_network

    def recording_build(name, state, path, device="cpu"):
        module = real_build(name, state, path, device)
        built.append(weakref.ref(module))
        return module

    monkeypatch.setattr(ditto_models, "build_network", recording_build)
    if device == "cuda":
        # cuBLAS keeps a workspace per handle and stream (32 MiB on Hopper) from the first
        # product on: the process's, not the load's; made before the baseline so it is not counted.
        torch.ones(8, 8, device="cuda") @ torch.ones(8, 8, device="cuda")
        gc.collect()  # what earlier tests of this process left for the collector is not the load's either
        torch.cuda.synchronize()
        baseline = torch.cuda.memory_allocated()
    with pytest.raises(CheckpointError, match=bad.name):
        ditto_models.load_ditto_models(model_dir, device)
    gc.collect()  # pytest.raises dropped the traceback (and its frames) when the block ended
    assert len(built) == len(C.NETWORKS) - 1, "every file before the bad one should have been tried"
    assert [ref() for ref in built] == [None] * len(built), "networks of the failed load are still alive"
    if device == "cuda":
        assert torch.cuda.memory_allocated() <= baseline
