"""Bad-input matrix, speech: each case ends in a clear InputError or a documented result, and a
refused track leaves no video or temporary file behind (the avatar, registered before the
audio is checked, may be cached: it is valid).

HuBERT is the stand-in ONNX model with the official interface (ditto_core.audio.hubert_stub),
so the real decoding, resampling, checks and streaming windows run on every case.
"""
from __future__ import annotations

import logging
import sys
import wave

import av
import numpy as np
import pytest
import torch

from ditto_core.audio import HubertFeatureExtractor, load_audio, to_mono_16k
from ditto_core.errors import InputError
from ditto_core.registration import RegistrationOptions
from ditto_core.video.writer import VideoWriter
from tests.hardening_support import (  # noqa: F401  (hubert_stub is a fixture)
    assert_complete_cache, files_under, hubert_stub, speech_like, tiny_pipeline, write_png, write_wav,
)

pytestmark = pytest.mark.filterwarnings("ignore:Eye measurements use neutral defaults")


def reliability(case: str, behaviour: str):
    return pytest.mark.reliability(area="Audio", case=case, behaviour=behaviour)


@pytest.fixture(scope="module")
def hubert(hubert_stub) -> HubertFeatureExtractor:
    return HubertFeatureExtractor(hubert_stub)


@pytest.fixture
def run_pipeline(tmp_path, hubert_stub):
    """``run(audio_file)``: the headless pipeline on a valid 256 px portrait and ``audio_file``;
    afterwards the output folder must hold nothing and the cache only complete entries."""
    portrait = write_png(tmp_path / "portrait.png", np.full((256, 256, 3), 128, np.uint8))
    pipeline = tiny_pipeline(tmp_path, hubert_stub)

    def run(audio):
        try:
            pipeline.run(portrait, audio, tmp_path / "out" / "clip.mp4",
                         registration=RegistrationOptions(detect_face=False))
        finally:
            assert files_under(tmp_path / "out") == []
            assert_complete_cache(pipeline.cache)

    return run


def encode(waveform: torch.Tensor, rate: int, hubert: HubertFeatureExtractor):
    return hubert(to_mono_16k(waveform, rate, name="speech.wav"))


def mux(tmp_path, waveform: torch.Tensor, rate: int) -> av.AudioStream:
    """Write three 64 px frames with ``waveform`` as the soundtrack; return the file's audio stream."""
    path = tmp_path / "muxed.mp4"
    with VideoWriter(path, width=64, height=64, preset="ultrafast", audio=(waveform, rate)) as writer:
        writer.write(torch.zeros(3, 64, 64, 3, dtype=torch.uint8))
    with av.open(str(path)) as container:
        stream = container.streams.audio[0]
        return stream.codec_context.sample_rate, stream.codec_context.channels


@reliability("empty", "Refused: an empty file 'decodes to no samples', an empty waveform 'is empty'; each says "
                      "to connect a track with speech; nothing is written.")
def test_empty(tmp_path, run_pipeline):
    path = tmp_path / "empty.wav"
    with wave.open(str(path), "wb") as header_only:
        header_only.setnchannels(1), header_only.setsampwidth(2), header_only.setframerate(16000)
    with pytest.raises(InputError, match=r"empty\.wav' decodes to no samples; it is empty or truncated"):
        run_pipeline(path)
    with pytest.raises(InputError, match=r"audio input: the audio is empty.*connect a track with speech"):
        to_mono_16k(torch.zeros(1, 2, 0), 44100, name="audio input")


@reliability("10 ms", "Refused: the message gives the length and the 0.2 s minimum and suggests padding with "
                      "silence; nothing is written.")
def test_10_ms(tmp_path, run_pipeline):
    with pytest.raises(InputError, match=r"lasts 0\.010 s, too short to animate \(at least 0\.2 s.*Pad it"):
        run_pipeline(write_wav(tmp_path / "blip.wav", speech_like(0.01, 16000), 16000))


@reliability("pure silence", "Accepted with a logged warning that the audio is silent: the face keeps its mouth "
                             "closed for the track's length.")
def test_pure_silence(hubert, caplog):
    with caplog.at_level(logging.WARNING):
        features = encode(torch.zeros(1, 16000), 16000, hubert)
    assert "the audio is silent" in caplog.text
    assert features.features.shape == (25, 1024) and torch.isfinite(features.features).all()


@reliability("clipped noise", "Accepted with a logged warning giving the share of clipped samples; features are "
                              "computed as usual.")
def test_clipped_noise(hubert, caplog):
    noise = (4 * torch.randn(2, 24000, generator=torch.Generator().manual_seed(0))).clamp(-1, 1)
    with caplog.at_level(logging.WARNING):
        features = encode(noise, 24000, hubert)
    assert "sit at full scale: the recording is clipped" in caplog.text
    assert features.features.shape == (25, 1024) and torch.isfinite(features.features).all()


@reliability("NaN/Inf samples", "Refused: the message counts the bad samples and gives the time of the first; "
                                "nothing is written.")
def test_nan_inf_samples(tmp_path, run_pipeline):
    samples = speech_like(1.0, 16000)
    samples[0, 8000], samples[0, 12000] = np.nan, np.inf
    path = write_wav(tmp_path / "broken.wav", samples, 16000, codec="pcm_f32le")
    with pytest.raises(InputError, match=r"broken\.wav: 2 samples are NaN or infinite \(the first at 0\.500 s\)"):
        run_pipeline(path)


@reliability("8 kHz / 48 kHz / 96 kHz", "Accepted: resampled to 16 kHz for HuBERT (25 video frames per second "
                                        "of speech); the MP4 keeps the original rate.")
@pytest.mark.parametrize("rate", [8000, 48000, 96000])
def test_sample_rates(tmp_path, hubert, rate):
    waveform, file_rate = load_audio(write_wav(tmp_path / "speech.wav", speech_like(0.5, rate), rate))
    assert file_rate == rate and waveform.shape == (1, rate // 2)
    mono = to_mono_16k(waveform, rate)
    assert mono.shape == (8000,)
    spectrum = np.abs(np.fft.rfft(mono.numpy()))
    assert abs(np.argmax(spectrum) * 16000 / 8000 - 220) <= 2  # the voice stays at its pitch
    assert hubert(mono).features.shape == (13, 1024)  # ceil(0.5 s * 25)
    assert mux(tmp_path, waveform, rate) == (rate, 1)


@reliability("6 channels", "Accepted: the channels are averaged to mono for HuBERT and for the MP4's soundtrack.")
def test_six_channels(tmp_path, hubert):
    channels = speech_like(0.5, 48000, channels=6)
    waveform, rate = load_audio(write_wav(tmp_path / "surround.wav", channels, 48000))
    assert waveform.shape == (6, 24000)
    mono = to_mono_16k(waveform, rate)
    assert torch.allclose(mono, to_mono_16k(waveform.mean(0, keepdim=True), rate), atol=1e-6)
    assert hubert(mono).features.shape == (13, 1024)
    assert mux(tmp_path, waveform, rate) == (48000, 1)


@reliability("corrupt file", "Refused: 'cannot decode audio file ... corrupt' (or 'has no audio stream' for a "
                             "silent video), saying to re-export as WAV or FLAC; nothing is written.")
@pytest.mark.parametrize("damage", ["junk", "no audio stream"])
def test_corrupt_file(tmp_path, run_pipeline, damage):
    if damage == "junk":
        path, expected = tmp_path / "speech.mp3", r"cannot decode audio file .*speech\.mp3.*corrupt.*wav or flac"
        path.write_bytes(b"ID3 but not really an mp3\n" * 64)
    else:
        path, expected = tmp_path / "speech.mp4", r"speech\.mp4' has no audio stream"
        with VideoWriter(path, width=64, height=64, preset="ultrafast") as writer:
            writer.write(torch.zeros(2, 64, 64, 3, dtype=torch.uint8))
    with pytest.raises(InputError, match=expected):
        run_pipeline(path)


def peak_rss_mib() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM")) // 1024


@pytest.mark.skipif(sys.platform != "linux", reason="measures peak RSS through Linux's /proc")
@reliability("15 minutes", "Accepted: 22,500 frames of features; HuBERT streams over fixed windows, so host memory "
                           "grows only with the clip's samples and features (about 340 MiB at peak, under 600 MiB).")
def test_15_minutes(tmp_path, hubert):
    path = write_wav(tmp_path / "lecture.wav", speech_like(15 * 60, 8000), 8000)  # 8 kHz keeps the file small
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # reset this process's peak RSS
    before = peak_rss_mib()
    waveform, rate = load_audio(path)
    features = hubert(to_mono_16k(waveform, rate))
    grown = peak_rss_mib() - before
    assert features.features.shape == (22500, 1024) and features.duration_s == 900.0
    assert grown < 600, f"peak host memory grew by {grown} MiB"
