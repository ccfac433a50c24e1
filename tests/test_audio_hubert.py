"""Streaming HuBERT features: Ditto's windowing, padding and 50 -> 25 Hz pairing, on a stub model.

The stub (``ditto_core.audio.hubert_stub``) has the official model's interface and a computation
the oracle below redoes in float64 numpy; the oracle then follows the reference's offline loop
step by step (float index arithmetic included), independently of our implementation.
"""
from __future__ import annotations

import logging
import math

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper

from ditto_core.audio import (
    HUBERT_ONNX_NAME,
    AudioFeatures,
    HubertFeatureExtractor,
    StreamingWindow,
    load_audio,
    num_video_frames,
    to_mono_16k,
)
from ditto_core.audio.hubert_stub import write_stub_hubert
from ditto_core.errors import CheckpointError, InputError, Interrupted, MissingModelError
from tests.parity import rel_l2


@pytest.fixture(scope="module")
def stub_path(tmp_path_factory):
    return write_stub_hubert(tmp_path_factory.mktemp("hubert") / HUBERT_ONNX_NAME)


@pytest.fixture(scope="module")
def extractor(stub_path):
    return HubertFeatureExtractor(stub_path)


@pytest.fixture(scope="module")
def stub_weights(stub_path):
    tensors = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(stub_path)).graph.initializer}
    return tensors["weight"][:, 0, :].astype(np.float64), tensors["bias"].astype(np.float64)


def _stub_rows(window: np.ndarray, weights) -> np.ndarray:
    """The stub's output for one window, from its definition: framed projection + window mean."""
    weight, bias = weights
    frames = np.lib.stride_tricks.sliding_window_view(window.astype(np.float64), 400)[::320]
    rows = frames @ weight.T + bias
    return rows + rows.mean(axis=0, keepdims=True)


def _oracle(speech: np.ndarray, weights, exact_starts: bool = False, firsts=None) -> np.ndarray:
    """Ditto's offline wav2feat loop for chunks (3, 5, 2), written out plainly.

    ``firsts``: compute only the windows starting at these frames (default: all of them).
    """
    frames = math.ceil(len(speech) / 16000 * 25)
    window = int(10 * 0.04 * 16000) + 80
    padded = np.concatenate([np.zeros(window - int(7 * 0.04 * 16000)), speech, np.zeros(window)])
    out = []
    for first in range(0, frames, 5) if firsts is None else firsts:
        start = first * 640 if exact_starts else int(first * 0.04 * 16000)
        rows = _stub_rows(padded[start : start + window], weights)
        out.append(rows[-14:-4].reshape(5, 2, 1024).mean(axis=1))
    return np.concatenate(out)[:frames]


def _speech(seconds: float, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return 0.1 * torch.randn(round(seconds * 16000), generator=g)


# ------------------------------------------------------------------------------ index arithmetic


def test_window_layout_of_the_reference():
    w = StreamingWindow()
    assert (w.num_samples, w.pad_before, w.pad_after) == (6480, 2000, 6480)
    assert w.kept_rows(20) == slice(6, 16)
    assert w.starts(11) == [0, 3200, 6400]
    starts = w.starts(1620)
    assert starts[323] == 1615 * 640 - 1  # the reference's float arithmetic, kept on purpose
    assert sum(s != i * 3200 for i, s in enumerate(starts)) == 1
    with pytest.raises(ValueError):
        StreamingWindow(valid=0)


def test_num_video_frames_follows_the_reference_formula():
    assert num_video_frames(252075) == 394  # the 15.75 s example
    assert num_video_frames(252000) == 394
    assert num_video_frames(640) == 1 and num_video_frames(641) == 2
    assert num_video_frames(4480) == 8  # float rounding makes 7.000000000000001
    for n in range(1, 20000, 7):
        assert num_video_frames(n) == math.ceil(n / 16000 * 25)


# ------------------------------------------------------------------------------ features vs oracle


@pytest.mark.parametrize("seconds", [0.2, 0.23, 1.0, 3.37])
def test_features_match_oracle(extractor, stub_weights, seconds):
    speech = _speech(seconds)
    got = extractor(speech)
    ref = _oracle(speech.numpy(), stub_weights)
    assert isinstance(got, AudioFeatures)
    assert got.features.dtype == torch.float32 and got.features.shape == ref.shape
    assert got.num_frames == num_video_frames(speech.shape[0])
    assert got.duration_s == pytest.approx(seconds, abs=1e-4)
    assert rel_l2(got.features, torch.from_numpy(ref)) < 1e-6


def test_example_speech_gives_394_frames(extractor, stub_weights, example_dir):
    speech = to_mono_16k(*load_audio(example_dir / "speech_24k_mono.wav"))
    got = extractor(speech)
    assert got.features.shape == (394, 1024)
    assert rel_l2(got.features, torch.from_numpy(_oracle(speech.numpy(), stub_weights))) < 1e-6


def test_float_window_starts_past_64_seconds(extractor, stub_weights):
    speech = _speech(65.0, seed=1)
    got = extractor(speech).features[1610:1625]
    around = range(1610, 1625, 5)  # the window starting at frame 1615 is the first off by one
    quirky = _oracle(speech.numpy(), stub_weights, firsts=around)
    exact = _oracle(speech.numpy(), stub_weights, exact_starts=True, firsts=around)
    assert rel_l2(got, torch.from_numpy(quirky)) < 1e-6
    assert rel_l2(got, torch.from_numpy(exact)) > 1e-3  # the test can tell the two apart


def test_model_exports_that_keep_the_batch_axis(tmp_path, extractor):
    batched = HubertFeatureExtractor(write_stub_hubert(tmp_path / "b.onnx", keep_batch_axis=True))
    speech = _speech(1.1)
    assert torch.equal(batched(speech).features, extractor(speech).features)


# ------------------------------------------------------------------------------ long audio, progress


def test_long_audio_is_encoded_window_by_window(extractor, monkeypatch):
    speech = torch.zeros(round(10.5 * 60 * 16000))  # 10.5 minutes
    speech[::997] = 0.1
    seen = []

    def spy(window):  # stands in for onnxruntime: only the windowing is under test here
        seen.append(tuple(window.shape))
        return torch.zeros(1, 20, 1024)

    monkeypatch.setattr(extractor, "_runner", spy)
    calls = []
    got = extractor(speech, progress=lambda done, total: calls.append((done, total)))
    assert got.features.shape == (15750, 1024)
    assert set(seen) == {(1, 6480)} and len(seen) == 3150  # never more than one window at a time
    assert calls[0] == (1, 3150) and calls[-1] == (3150, 3150) and len(calls) == 3150


def test_progress_callback_can_cancel(extractor):
    def cancel(done, total):
        if done == 2:
            raise Interrupted("stopped by the user")

    with pytest.raises(Interrupted):
        extractor(_speech(2.0), progress=cancel)


# ------------------------------------------------------------------------------ bad speech


def test_silence_is_allowed_with_a_warning(extractor, stub_weights, caplog):
    silence = torch.zeros(16000)
    with caplog.at_level(logging.WARNING, logger="ditto_core.audio"):
        got = extractor(silence)
    assert "silent" in caplog.text
    assert rel_l2(got.features, torch.from_numpy(_oracle(silence.numpy(), stub_weights))) < 1e-6


def test_clipped_and_unscaled_speech_warn(extractor, caplog):
    clipped = (_speech(1.0) * 10).clamp(-1, 1)
    with caplog.at_level(logging.WARNING, logger="ditto_core.audio"):
        extractor(clipped)
    assert "clipped" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="ditto_core.audio"):
        extractor(_speech(1.0) * 32768)
    assert "32768" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="ditto_core.audio"):
        extractor(_speech(1.0))
    assert not caplog.records


def test_bad_speech_is_refused(extractor):
    with pytest.raises(InputError, match="too short"):
        extractor(_speech(0.19))
    with pytest.raises(InputError, match="empty"):
        extractor(torch.zeros(0))
    broken = _speech(1.0)
    broken[8000] = float("nan")
    with pytest.raises(InputError, match=r"1 samples are NaN or infinite \(the first at 0.500 s\)"):
        extractor(broken)
    with pytest.raises(InputError, match="44100 Hz"):
        extractor(_speech(1.0), sample_rate=44100)
    with pytest.raises(InputError, match="to_mono_16k"):
        extractor(_speech(1.0)[None])
    with pytest.raises(InputError, match="int16 / 32768"):
        extractor(torch.zeros(16000, dtype=torch.int16))


# ------------------------------------------------------------------------------ bad models


def test_missing_model(tmp_path):
    with pytest.raises(MissingModelError, match="huggingface.co/digital-avatar/ditto-talkinghead"):
        HubertFeatureExtractor(tmp_path / HUBERT_ONNX_NAME)
    with pytest.raises(MissingModelError, match="aux_models"):
        HubertFeatureExtractor.from_model_dir(tmp_path)


def test_from_model_dir_official_layout(tmp_path):
    write_stub_hubert((tmp_path / "aux_models").mkdir() or tmp_path / "aux_models" / HUBERT_ONNX_NAME)
    assert HubertFeatureExtractor.from_model_dir(tmp_path).execution_provider == "CPUExecutionProvider"


def test_corrupt_and_foreign_models(tmp_path):
    corrupt = tmp_path / "corrupt.onnx"
    corrupt.write_bytes(b"\x08\x07garbage" * 64)
    with pytest.raises(CheckpointError, match="damaged or not an ONNX model"):
        HubertFeatureExtractor(corrupt)
    narrow = HubertFeatureExtractor(write_stub_hubert(tmp_path / "narrow.onnx", width=768))
    with pytest.raises(CheckpointError, match=r"rows of shape \(20, 768\)"):
        narrow(_speech(1.0))
    # A graph with the wrong input signature is refused before any audio reaches it.
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Identity", ["x"], ["y"])],
        "image_model",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 8, 8])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 3, 8, 8])],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "image.onnx"))
    with pytest.raises(CheckpointError, match="not Ditto's streaming HuBERT"):
        HubertFeatureExtractor(tmp_path / "image.onnx")


# ------------------------------------------------------------------------------ GPU


@pytest.mark.gpu
def test_cuda_features_match_cpu(stub_path, extractor):
    speech = _speech(4.0)
    on_gpu = HubertFeatureExtractor(stub_path, device="cuda")
    got = on_gpu(speech.cuda())
    assert got.features.device.type == "cuda"
    assert rel_l2(got.features, extractor(speech).features) < 1e-5
