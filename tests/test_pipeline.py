"""The headless pipeline and CLI end to end (random weights: every stage, real code paths)."""
import dataclasses

import av
import pytest
import torch

from ditto_core.__main__ import main
from ditto_core.errors import InputError, Interrupted
from ditto_core.motion.motion_options import MotionOptions
from ditto_core.pipeline import DittoPipeline
from ditto_core.registration.options import RegistrationOptions


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    return DittoPipeline.random(tmp_path_factory.mktemp("pipe"), device="cpu", compile=False)


def _example(example_dir):
    return example_dir / "portrait.jpg", example_dir / "speech_24k_mono.wav"


def test_cli_without_models_names_every_file(tmp_path, example_dir, capsys):
    image, audio = _example(example_dir)
    out = tmp_path / "out.mp4"
    code = main(["render", "--image", str(image), "--audio", str(audio), "--out", str(out),
                 "--models", str(tmp_path / "models")])
    err = capsys.readouterr().err
    assert code == 2
    for name in ("appearance_extractor.pth", "lmdm_v0.4_hubert.pth", "det_10g.onnx", "face_landmarker.task",
                 "hubert_streaming_fix_kv.onnx"):
        assert name in err
    assert "--random-weights" in err and "digital-avatar/ditto-talkinghead" in err
    assert not out.exists()


@pytest.mark.slow
def test_random_weights_render_end_to_end(tmp_path, example_dir):
    image, audio = _example(example_dir)
    out = tmp_path / "smoke.mp4"
    # Two diffusion steps: the motion's values are not under test, only that every stage runs.
    code = main(["render", "--image", str(image), "--audio", str(audio), "--out", str(out), "--random-weights",
                 "--device", "cpu", "--max-seconds", "0.2", "--preset", "ultrafast", "--lmdm-precision", "bf16",
                 "--steps", "2"])
    assert code == 0
    with av.open(str(out)) as container:
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
        assert container.streams.audio, "speech must be muxed into the MP4"
    assert len(frames) == 5  # ceil(0.2 s * 25 fps)
    # The portrait keeps its size (1432 is under max_size) and the pasted face changes pixels.
    assert frames[0].shape == (1432, 1432, 3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["smoke.mp4"], "temp files left behind"


@pytest.mark.slow
def test_interrupted_render_leaves_nothing(pipeline, tmp_path, example_dir):
    image, _ = _example(example_dir)
    from ditto_core.registration.image_io import load_source

    frames, _ = load_source(image)
    source = pipeline.register(frames, RegistrationOptions(detect_face=False), is_image=True)
    waveform = 0.1 * torch.randn(1, 16000 * 4 // 25 * 3, generator=torch.Generator().manual_seed(0))
    features = pipeline.audio_features(waveform, 16000)
    motion = pipeline.motion(source, features, MotionOptions(steps=2))  # any motion: the render is under test

    def cancel(done, total):
        raise Interrupted("cancelled by the test")

    out = tmp_path / "cancelled.mp4"
    with pytest.raises(Interrupted):
        pipeline.render_video(source, motion, out, audio=(waveform, 16000), progress=cancel)
    assert list(tmp_path.iterdir()) == []


def test_stage_outputs_stay_on_the_pipeline_device(pipeline, example_dir):
    from ditto_core.registration.image_io import load_source

    frames, _ = load_source(_example(example_dir)[0])
    source = pipeline.register(frames, RegistrationOptions(detect_face=False), is_image=True)
    assert source.f_s.shape == (1, 32, 16, 64, 64) and source.frames.dtype == torch.uint8
    waveform = 0.1 * torch.randn(2, 48000 // 5, generator=torch.Generator().manual_seed(1))  # 0.2 s stereo 48 kHz
    features = pipeline.audio_features(waveform, 48000)
    assert features.features.shape == (5, 1024)
    motion = pipeline.motion(source, features, MotionOptions(steps=2, seed=3))
    again = pipeline.motion(source, features, MotionOptions(steps=2, seed=3))
    other = pipeline.motion(source, features, MotionOptions(steps=2, seed=4))
    assert motion.kp_driving.shape == (5, 21, 3) and motion.source_index.tolist() == [0] * 5
    assert torch.equal(motion.kp_driving, again.kp_driving), "same seed, same motion"
    assert not torch.equal(motion.kp_driving, other.kp_driving)
    for t in (source.f_s, source.M_c2o, features.features, motion.kp_source, motion.kp_driving):
        assert t.device == pipeline.device


@pytest.mark.parametrize("dtype, choice, resolved", [
    (torch.float32, "auto", "fp32"), (torch.float16, "auto", "tf32"), (torch.bfloat16, "auto", "tf32"),
    (torch.float16, "fp32", "fp32"), (torch.float32, "bf16", "bf16"),
])
def test_lmdm_precision_auto_follows_the_image_networks(pipeline, monkeypatch, dtype, choice, resolved):
    """``auto`` (the default) samples the motion in fp32 beside fp32 networks and in tf32 beside
    half-precision ones; an explicit choice is kept."""
    from ditto_core.precision import lmdm_precision_for

    assert MotionOptions().sampler_precision == "auto"
    assert lmdm_precision_for(choice, dtype) == resolved
    asked = []
    monkeypatch.setattr(pipeline, "models", dataclasses.replace(pipeline.models, dtype=dtype))
    monkeypatch.setattr(pipeline, "sampler", lambda steps, precision, compile: asked.append(precision))
    monkeypatch.setattr("ditto_core.pipeline.build_conditions", lambda *args: None)
    monkeypatch.setattr("ditto_core.pipeline.build_kp_condition", lambda source: (None,))
    pipeline._motion_inputs(None, None, MotionOptions(sampler_precision=choice))
    assert asked == [resolved]


def test_start_warmup_of_a_deferred_engine_primes_the_first_batch_and_starts_no_compile(pipeline, monkeypatch):
    # "deferred" (ComfyUI's under cudaMallocAsync) compiles after the first clip, not at load; by
    # default only the first batch's shape is primed (a full batch's too measured slower, session 57).
    from ditto_core.render import warp_decode

    monkeypatch.setattr(warp_decode, "compile_available", lambda device: (True, ""))
    monkeypatch.setattr(warp_decode, "use_compile_cache", lambda cache_dir=None: None)
    primed = []
    monkeypatch.setattr(warp_decode.WarpDecodeEngine, "prime", lambda engine, full_batch: primed.append(full_batch))
    deferred = DittoPipeline(pipeline.models, pipeline.aux, pipeline.hubert, batch_size=4, warmup="deferred")
    deferred.start_warmup()
    engine = deferred.engine()
    assert engine.stats.compiled and engine.warmup == "deferred"
    assert primed == [False] and not engine._warmups


def test_start_warmup_primes_on_cuda_only_and_refuses_an_unknown_priming(pipeline):
    pipeline.start_warmup()  # a CPU pipeline: nothing to compile, nothing to prime
    assert not pipeline.engine()._prime.started
    with pytest.raises(InputError, match=r'prime must be "full", "first" or "off", got \'sometimes\''):
        pipeline.start_warmup(prime="sometimes")


def test_a_pipeline_records_lmdm_steps_and_its_live_runtime_whole_windows(pipeline):
    """A pipeline's samplers record the prologue and one step (motion/lmdm_step_graph.py), which a
    clip's first window waits for; the live runtime, which samples a window every 5 frames of
    every stream, records whole windows, which replay fastest; a pipeline may be told either."""
    from ditto_core.live import LiveRuntime
    from tests.live_support import RecordingRenderer

    assert pipeline.sampler(3).graph_span == "step"
    whole = DittoPipeline(pipeline.models, pipeline.aux, pipeline.hubert, lmdm_graph_span="window")
    assert whole.sampler(3).graph_span == "window"
    runtime = LiveRuntime(pipeline, max_streams=1, renderer=RecordingRenderer())
    try:
        assert runtime.sampler(MotionOptions(steps=3)).graph_span == "window"
    finally:
        runtime.shutdown()
