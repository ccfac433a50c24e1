"""Node execution through the ComfyUI stand-ins on tiny inputs, with seed-0 official-layout weights.

Register, audio and motion run the real networks on the CPU. Warp+decode of real networks costs
tens of seconds per frame on two CPU cores, so the render-side nodes run with two small stand-in
networks of the same interface, swapped into the model registry; everything around them
(engine, put-back, encoder, IMAGE/VIDEO conversion) is the real code.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path

import av
import pytest
import torch
from torch import nn

from tests.comfy_stubs import load_pack

pack = load_pack()

import comfy.model_management  # noqa: E402
import comfy.utils  # noqa: E402
import folder_paths  # noqa: E402
from ditto_core.audio.hubert_stub import write_stub_hubert  # noqa: E402
from ditto_core.errors import InputError, MissingModelError  # noqa: E402
from ditto_core.motion.motion_options import MotionOptions  # noqa: E402
from ditto_core.pipeline import DittoPipeline  # noqa: E402
from ditto_core.render.rendered_frames import VideoFrames  # noqa: E402
from comfyui_ditto_pack.nodes.model_registry import REGISTRY  # noqa: E402
from comfyui_ditto_pack.nodes.paths import register_model_folder  # noqa: E402

NODES = {n.GET_SCHEMA().node_id: n for n in asyncio.run(asyncio.run(pack.comfy_entrypoint()).get_node_list())}
LOAD = dict(model_folder=".", device="cpu", precision="auto", download_missing=False)
REGISTER = dict(detect_face=False, use_cache=True, crop_scale=2.3, crop_vx_ratio=0.0, crop_vy_ratio=-0.125,
                face_index=-1, max_size=1920, video_smoothing=13)


@pytest.fixture(scope="module")
def comfy_base(tmp_path_factory, official_ckpt_dir):
    """A ComfyUI-like base folder: models/ditto with the six files and a stand-in HuBERT."""
    base = tmp_path_factory.mktemp("comfy")
    ditto = base / "models" / "ditto"
    (ditto / "aux_models").mkdir(parents=True)
    for file in Path(official_ckpt_dir).glob("*.pth"):
        (ditto / file.name).symlink_to(file)
    write_stub_hubert(ditto / "aux_models" / "hubert_streaming_fix_kv.onnx")
    folder_paths.models_dir = str(base / "models")
    folder_paths.folder_names_and_paths.clear()
    folder_paths.set_output_directory(str(base / "output"))
    folder_paths.set_user_directory(str(base / "user"))
    register_model_folder()
    yield base
    REGISTRY.release()


@pytest.fixture(scope="module")
def handle(comfy_base):
    return NODES["DittoLoadModels"].execute(**LOAD)[0]


@pytest.fixture(scope="module")
def portrait(example_dir):
    import cv2

    image = cv2.resize(cv2.imread(str(example_dir / "portrait.jpg")), (256, 256))[:, :, ::-1]
    return torch.from_numpy(image.copy()).float()[None] / 255  # ComfyUI IMAGE (1, H, W, 3)


def speech(seconds: float = 0.3, rate: int = 24000, channels: int = 2) -> dict:
    g = torch.Generator().manual_seed(0)
    return {"waveform": 0.1 * torch.randn(1, channels, int(seconds * rate), generator=g), "sample_rate": rate}


@pytest.fixture(scope="module")
def source(handle, portrait):
    return NODES["DittoRegisterAvatar"].execute(models=handle, image=portrait, **REGISTER)[0]


@pytest.fixture(scope="module")
def features(handle):
    return NODES["DittoAudioFeatures"].execute(models=handle, audio=speech())[0]


def sample(handle, source, features, seed: int, options=None):
    return NODES["DittoLMDMSampler"].execute(models=handle, source=source, audio_features=features, steps=2, seed=seed,
                                            overlap=10, smoothing=3, precision="fp32 (exact)", options=options)


class TinyWarp(nn.Module):
    """Warp-network interface: (f_s (B,32,16,64,64), kp_s, kp_d (B,21,3)) -> (B,256,64,64)."""

    def __init__(self) -> None:
        super().__init__()
        self.mix = nn.Conv2d(32 * 16, 256, 1)

    def forward(self, f_s, kp_source, kp_driving):
        shift = (kp_driving - kp_source).mean((1, 2))[:, None, None, None]
        return self.mix(f_s.flatten(1, 2)) + shift


class TinyDecoder(nn.Module):
    """Decoder interface: (B,256,64,64) -> (B,3,512,512) in [0, 1]."""

    def __init__(self) -> None:
        super().__init__()
        self.rgb = nn.Conv2d(256, 3, 1)

    def forward(self, feature):
        return torch.sigmoid(nn.functional.interpolate(self.rgb(feature), scale_factor=8))


@pytest.fixture(scope="module")
def fast_handle(handle):
    """The real handle's pipeline with the tiny warp/decoder, under a handle of its own."""
    fast = replace(handle, model_dir=handle.model_dir + "/.")
    real = REGISTRY.pipeline(handle)
    models = replace(real.models, warp_network=TinyWarp().eval(), decoder=TinyDecoder().eval())
    REGISTRY.pipeline(fast, build=lambda: DittoPipeline(models, real.aux, real.hubert, real.cache))
    return fast


def test_load_models_reports_missing_files_with_the_download_source(comfy_base, tmp_path):
    (tmp_path / "partial").mkdir()
    (tmp_path / "partial" / "decoder.pth").symlink_to(Path(comfy_base / "models" / "ditto" / "decoder.pth"))
    folder_paths.add_model_folder_path("ditto", str(tmp_path))
    try:
        with pytest.raises(MissingModelError, match=r"(?s)appearance_extractor\.pth.*digital-avatar/ditto-talkinghead"):
            NODES["DittoLoadModels"].execute(**{**LOAD, "model_folder": "partial"})
    finally:
        folder_paths.folder_names_and_paths["ditto"][0].remove(str(tmp_path))


def test_load_models_refuses_half_precision_on_the_cpu(comfy_base):
    with pytest.raises(InputError, match="fp32"):
        NODES["DittoLoadModels"].execute(**{**LOAD, "precision": "fp16"})


def test_load_models_resolves_folder_device_precision(handle, comfy_base):
    assert handle.device == "cpu" and handle.precision == "fp32"
    assert Path(handle.model_dir) == comfy_base / "models" / "ditto"
    assert Path(handle.cache_dir) == comfy_base / "user" / "ditto_avatar_cache"
    assert REGISTRY.is_loaded(handle)


def test_load_models_starts_the_engines_warm_up(comfy_base, monkeypatch):
    started = []
    monkeypatch.setattr(DittoPipeline, "start_warmup", lambda self, **given: started.append((self, given)))
    handle = NODES["DittoLoadModels"].execute(**LOAD)[0]
    assert started == [(REGISTRY.pipeline(handle), {})]  # the pipeline's own default priming


def test_register_avatar_no_detector_and_cache(handle, portrait, source, comfy_base):
    assert len(source) == 1 and source.is_image and source.frames.shape == (1, 256, 256, 3)
    cached = list((comfy_base / "user" / "ditto_avatar_cache").glob("*/tensors.safetensors"))
    assert len(cached) == 1
    again = NODES["DittoRegisterAvatar"].execute(models=handle, image=portrait, **REGISTER)
    assert torch.equal(again[0].f_s, source.f_s)
    assert again.ui["ditto_stats"][0]["frames"] == 1


def test_register_avatar_detector_mode_needs_the_face_models(handle, portrait):
    with pytest.raises(MissingModelError, match="det_10g.onnx"):
        NODES["DittoRegisterAvatar"].execute(models=handle, image=portrait, **{**REGISTER, "detect_face": True})


def test_audio_features_one_row_per_video_frame(features, handle):
    assert features.features.shape == (8, 1024)  # ceil(0.3 s * 25 fps)
    with pytest.raises(InputError, match="Load Audio"):
        NODES["DittoAudioFeatures"].execute(models=handle, audio=torch.zeros(100))


def test_sampler_precision_widget_reaches_the_sampler(handle, source, features, monkeypatch):
    pipeline = REGISTRY.pipeline(handle)
    exact, asked = pipeline.sampler, []

    def sampler(steps, precision, compile):
        asked.append((precision, compile))
        return exact(steps)  # sample exactly: the mapping is under test, not the fast modes

    monkeypatch.setattr(pipeline, "sampler", sampler)
    widget = next(i for i in NODES["DittoLMDMSampler"].GET_SCHEMA().inputs if i.id == "precision")
    assert widget.default == widget.options[0] and widget.options[0].startswith("auto")
    for choice in widget.options:
        NODES["DittoLMDMSampler"].execute(models=handle, source=source, audio_features=features, steps=2, seed=0,
                                          overlap=10, smoothing=3, precision=choice)
    # auto beside these fp32 models is fp32 (beside fp16 ones tf32: test_pipeline's resolution test)
    assert asked == [("fp32", False), ("fp32", False), ("tf32", False), ("bf16", True)]


def test_motion_options_map_widgets():
    node = NODES["DittoMotionOptions"]
    widgets = dict(emotion="happy", eye_lock=True, drive_eye="off", blinks="off", pitch_offset=1.5, yaw_offset=-3.0,
                   roll_offset=0.0, fade_to="none", fade_in=12, fade_out=0, stitching=False)
    options = node.execute(**widgets)[0]
    assert (options.emo, options.eye_f0_mode, options.drive_eye, options.delta_eye_open_n) == (3, True, False, -1)
    assert (options.delta_pitch, options.delta_yaw, options.flag_stitching) == (1.5, -3.0, False)
    assert (options.fade_type, options.fade_in) == ("", 0)  # a fade length without a target is dropped
    faded = node.execute(**{**widgets, "fade_to": "source"})[0]
    assert (faded.fade_type, faded.fade_in) == ("s", 12)


def test_sampler_is_reproducible_per_seed(handle, source, features):
    first = sample(handle, source, features, seed=7)
    motion = first[0]
    assert motion.kp_driving.shape == (8, 21, 3) and torch.isfinite(motion.kp_driving).all()
    assert first.ui["ditto_stats"][0]["frames"] == 8
    assert torch.equal(sample(handle, source, features, seed=7)[0].kp_driving, motion.kp_driving)
    other = sample(handle, source, features, seed=8, options=MotionOptions(emo=3))[0]
    assert not torch.equal(other.kp_driving, motion.kp_driving)


def test_sampler_cancels_promptly(handle, source, features):
    comfy.model_management.interrupt_current_processing(True)
    with pytest.raises(comfy.model_management.InterruptProcessingException):
        sample(handle, source, features, seed=0)


@pytest.fixture(scope="module")
def frames(fast_handle, handle, source, features):
    motion = sample(handle, source, features, seed=0)[0]
    output = NODES["DittoWarpDecode"].execute(models=fast_handle, source=source, motion=motion, batch_size=3,
                                              compile=True)
    renders, engine = output[0], output.ui["ditto_stats"][0]["engine"]
    assert renders.images.shape == (8, 3, 512, 512)
    # the node reports its engine: on a CPU nothing compiles, and 8 frames are 3 batches of at most 3
    assert (engine["compiled"], engine["batch_size"], engine["eager_batches"]) == (False, 3, 3), engine
    return NODES["DittoPutBack"].execute(renders=renders, source=source, backend="auto")


def test_putback_gives_full_resolution_uint8(frames, source):
    video = frames[0]
    assert video.frames.shape == (8, 256, 256, 3) and video.frames.dtype == torch.uint8
    assert frames.ui["ditto_stats"][0]["stage"] == "PutBack"
    assert not torch.equal(video.frames[0], source.frames[0])  # the face was pasted in


def decoded(path: Path) -> tuple[int, float]:
    with av.open(str(path)) as container:
        count = sum(1 for _ in container.decode(video=0))
        audio = container.streams.audio[0]
        return count, float(audio.duration * audio.time_base)


def test_save_video_writes_a_playable_mp4_inside_the_output_folder(frames, comfy_base):
    out = NODES["DittoSaveVideo"].execute(frames=frames[0], filename_prefix="../../escape/clip", crf=23,
                                         preset="ultrafast", audio=speech(channels=3))
    saved = out.ui["images"][0]
    assert saved == {"filename": "clip_00001_.mp4", "subfolder": "escape", "type": "output"}
    path = comfy_base / "output" / "escape" / "clip_00001_.mp4"
    count, audio_seconds = decoded(path)
    assert count == 8 and abs(audio_seconds - 0.32) < 0.05
    second = NODES["DittoSaveVideo"].execute(frames=frames[0], filename_prefix="escape/clip", crf=23,
                                            preset="ultrafast", audio=None)
    assert second.ui["images"][0]["filename"] == "clip_00002_.mp4"


def test_cancelled_save_leaves_no_file(frames, comfy_base):
    comfy.model_management.interrupt_current_processing(True)
    with pytest.raises(comfy.model_management.InterruptProcessingException):
        NODES["DittoSaveVideo"].execute(frames=frames[0], filename_prefix="cancelled/clip", crf=23,
                                       preset="ultrafast", audio=speech())
    assert list((comfy_base / "output" / "cancelled").iterdir()) == []


@pytest.mark.reliability(area="Audio", case="AUDIO of integer range cast to float (another pack's), into a saving node",
                         behaviour="InputError naming the peak before anything is encoded: muxed it would play as "
                                   "loud, clipped noise; divide by 32768")
@pytest.mark.parametrize("node", ["DittoSaveVideo", "DittoFramesToVideo", "DittoTalkingHead"])
def test_audio_of_integer_range_is_refused_before_it_is_muxed(node, frames, fast_handle, portrait, comfy_base,
                                                               monkeypatch):
    loud = speech()
    loud["waveform"] = loud["waveform"] * 32767
    if node == "DittoTalkingHead":  # refused before any stage runs
        monkeypatch.setattr(REGISTRY, "pipeline", lambda handle: pytest.fail("the clip started before the check"))
        inputs = dict(models=fast_handle, image=portrait, steps=2, seed=3, detect_face=False,
                      filename_prefix="loud/clip", crf=23, preset="ultrafast")
    elif node == "DittoSaveVideo":
        inputs = dict(frames=frames[0], filename_prefix="loud/clip", crf=23, preset="ultrafast")
    else:
        inputs = dict(frames=frames[0])
    with pytest.raises(InputError, match=r"audio: samples reach \d+\.\d, far outside \[-1, 1\].*divide by 32768"):
        NODES[node].execute(audio=loud, **inputs)
    assert not (comfy_base / "output" / "loud").exists() or not list((comfy_base / "output" / "loud").iterdir())


def test_frames_to_image_and_video(frames):
    image = NODES["DittoFramesToImage"].execute(frames=frames[0])[0]
    assert image.shape == (8, 256, 256, 3) and image.dtype == torch.float32 and image.device.type == "cpu"
    assert torch.equal((image * 255).round().to(torch.uint8), frames[0].frames)
    video = NODES["DittoFramesToVideo"].execute(frames=frames[0], audio=speech())[0]
    components = video.get_components()
    assert components.frame_rate == 25 and torch.equal(components.images, image)


def test_frames_to_image_warns_above_the_memory_threshold(monkeypatch, caplog):
    from comfyui_ditto_pack.nodes import output_nodes

    monkeypatch.setattr(output_nodes, "IMAGE_WARN_BYTES", 1000)
    small = VideoFrames(frames=torch.zeros(2, 16, 16, 3, dtype=torch.uint8))
    with caplog.at_level("WARNING"):
        NODES["DittoFramesToImage"].execute(frames=small)
    assert "GB of RAM" in caplog.text


def test_all_in_one_saves_the_video_and_returns_it(fast_handle, portrait, comfy_base):
    comfy.utils.UPDATES.clear()
    out = NODES["DittoTalkingHead"].execute(models=fast_handle, image=portrait, audio=speech(0.2), steps=2, seed=3,
                                           detect_face=False, filename_prefix="aio/clip", crf=23, preset="ultrafast")
    saved = out.ui["images"][0]
    path = comfy_base / "output" / saved["subfolder"] / saved["filename"]
    assert out[0].get_stream_source() == str(path)
    count, audio_seconds = decoded(path)
    assert count == 5 and abs(audio_seconds - 0.2) < 0.05
    record = out.ui["ditto_stats"][0]
    assert {"audio_features", "motion", "render", "finalize_mp4"} <= set(record["stages"])  # this prompt's stages
    assert sum(record["stages"][s] for s in ("model_management", "audio_features", "motion", "render_video")) \
        <= record["seconds"]
    assert 0 <= record["stages"]["python_gc_longest"] <= record["stages"]["python_gc"] <= record["seconds"]
    assert 0 < time.time() - record["started_at"] - record["seconds"] < 60  # when the timed block began
    values = [v for v, _ in comfy.utils.UPDATES]
    assert values == sorted(values) and comfy.utils.UPDATES[-1][0] == comfy.utils.UPDATES[-1][1]


def test_unload_releases_the_model_set(handle):
    assert REGISTRY.is_loaded(handle)
    out = NODES["DittoUnloadModels"].execute(enabled=True, models=handle)
    assert out.ui == {"text": ["released 1 Ditto model set(s)"]} and not REGISTRY.is_loaded(handle)
