"""Decoding audio files and converting waveforms to the 16 kHz mono HuBERT reads."""
from __future__ import annotations

import logging
import math
import wave

import av
import numpy as np
import pytest
import torch

from ditto_core.audio import SAMPLE_RATE, load_audio, to_mono_16k
from ditto_core.errors import InputError


def _tone(freq: float, rate: int, seconds: float = 1.0, amplitude: float = 0.5) -> np.ndarray:
    t = np.arange(round(rate * seconds)) / rate
    return (amplitude * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def _encode(path, samples: np.ndarray, rate: int, codec: str) -> None:
    """Write ``samples`` float32 (channels, T) with PyAV (which converts to the codec's format)."""
    layout = {1: "mono", 2: "stereo"}[samples.shape[0]]
    with av.open(str(path), "w") as container:
        stream = container.add_stream(codec, rate=rate, layout=layout)
        frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(samples), format="fltp", layout=layout)
        frame.sample_rate = rate
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            container.mux(packet)


def _spectrum_peak_hz(x: torch.Tensor, rate: int) -> float:
    spectrum = torch.fft.rfft(x.double() * torch.hann_window(x.shape[0], dtype=torch.float64)).abs()
    return spectrum.argmax().item() * rate / x.shape[0]


# ---------------------------------------------------------------------------------- load_audio


def test_load_example_wav_matches_raw_pcm(example_dir):
    path = example_dir / "speech_24k_mono.wav"
    waveform, rate = load_audio(path)
    with wave.open(str(path)) as raw:
        assert raw.getsampwidth() == 2
        pcm = np.frombuffer(raw.readframes(raw.getnframes()), dtype="<i2").reshape(-1, raw.getnchannels()).T
        assert rate == raw.getframerate() == 24000
    assert waveform.dtype == torch.float32 and waveform.shape == pcm.shape == (1, 378112)
    assert torch.equal(waveform, torch.from_numpy(pcm / np.float32(32768)))


@pytest.mark.parametrize(
    "codec, suffix, rate, tolerance",
    [("flac", "flac", 44100, 1e-4), ("pcm_s16le", "wav", 22050, 1e-4), ("libmp3lame", "mp3", 44100, 0.1)],
)
def test_load_encoded_files(tmp_path, codec, suffix, rate, tolerance):
    left, right = _tone(440, rate), _tone(440, rate, amplitude=0.25)
    path = tmp_path / f"speech.{suffix}"
    _encode(path, np.stack([left, right]), rate, codec)
    waveform, got_rate = load_audio(path)
    assert got_rate == rate and waveform.dtype == torch.float32
    assert waveform.shape == (2, rate)  # PyAV trims the mp3 encoder delay
    # Channels stay apart and in order; lossless codecs round-trip to 16-bit precision.
    for channel, expected in ((0, left), (1, right)):
        err = np.sqrt(np.mean((waveform[channel].numpy() - expected) ** 2)) / np.sqrt(np.mean(expected**2))
        assert err < tolerance, (suffix, channel, err)


@pytest.mark.reliability(area="Audio", case="a long speech file rendered with --max-seconds",
                         behaviour="only the first seconds are decoded (an hour-long file is not decoded whole "
                                   "first); the samples are those of a full decode")
def test_max_seconds_decodes_only_the_start(tmp_path, monkeypatch, example_dir):
    from ditto_core.audio import loading

    rate = 16000
    path = tmp_path / "long.flac"
    _encode(path, _tone(220, rate, seconds=60)[None], rate, "flac")
    blocks = []
    real = loading._channels_first
    monkeypatch.setattr(loading, "_channels_first", lambda frame: blocks.append(frame.samples) or real(frame))
    whole, _ = load_audio(path)
    decoded_whole, blocks[:] = sum(blocks), []
    start, got_rate = load_audio(path, max_seconds=1.5)
    assert got_rate == rate and start.shape == (1, 24000)
    assert torch.equal(start, whole[:, :24000])
    assert sum(blocks) < decoded_whole / 10  # it stopped decoding near 1.5 of the 60 s
    longer, _ = load_audio(example_dir / "speech_24k_mono.wav", max_seconds=100)  # longer than the file: all of it
    assert longer.shape == (1, 378112)


@pytest.mark.reliability(area="Audio", case="speech of 8 or more channels (a multichannel WAV or FLAC)",
                         behaviour="loaded channels-first and mixed down like stereo (it used to crash the process "
                                   "inside PyAV)")
@pytest.mark.parametrize("channels", [1, 2, 8, 12])
def test_wav_of_many_channels_loads_channels_first(tmp_path, channels):
    """8 channels and more used to crash the process inside PyAV (planar frames read past their planes)."""
    rate, frames = 16000, 4000
    pcm = (np.arange(frames * channels).reshape(frames, channels) % 1000 - 500).astype("<i2")
    path = tmp_path / f"speech_{channels}ch.wav"
    with wave.open(str(path), "wb") as f:
        f.setnchannels(channels)
        f.setsampwidth(2)
        f.setframerate(rate)
        f.writeframes(pcm.tobytes())
    waveform, got_rate = load_audio(path)
    assert got_rate == rate and waveform.shape == (channels, frames)
    assert torch.equal(waveform, torch.from_numpy(pcm.T.astype(np.float32) / 32768))


def test_load_missing_corrupt_and_audio_less_files(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        load_audio(tmp_path / "nope.wav")
    garbage = tmp_path / "broken.mp3"
    garbage.write_bytes(b"this is not audio at all" * 100)
    with pytest.raises(InputError, match="cannot decode audio file.*broken.mp3"):
        load_audio(garbage)
    silent_movie = tmp_path / "video_only.mp4"
    with av.open(str(silent_movie), "w") as container:
        stream = container.add_stream("mpeg4", rate=25)
        stream.width, stream.height = 32, 32
        frame = av.VideoFrame.from_ndarray(np.zeros((32, 32, 3), np.uint8), format="rgb24")
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            container.mux(packet)
    with pytest.raises(InputError, match="no audio stream"):
        load_audio(silent_movie)


# ---------------------------------------------------------------------------------- to_mono_16k


@pytest.mark.parametrize("rate", [8000, 24000, 44100, 48000])
def test_resampling_keeps_frequency_level_and_length(rate):
    for freq in (440.0, 3000.0, 7000.0):
        x = torch.from_numpy(_tone(freq, rate))
        y = to_mono_16k(x[None], rate)
        assert y.dtype == torch.float32 and y.dim() == 1
        assert y.shape[0] == math.ceil(x.shape[0] * SAMPLE_RATE / rate)
        if freq < rate / 2:
            assert abs(_spectrum_peak_hz(y, SAMPLE_RATE) - freq) <= 1.0
            middle = y[1000:-1000]  # away from the filter's edge transients
            assert abs(middle.pow(2).mean().sqrt().item() / (0.5 / math.sqrt(2)) - 1) < 0.01


def test_resampling_rejects_what_would_alias():
    # 12 kHz cannot exist at 16 kHz; a naive decimator would fold it onto 4 kHz.
    y = to_mono_16k(torch.from_numpy(_tone(12000, 48000))[None], 48000)
    assert y[1000:-1000].abs().max().item() < 1e-3 * 0.5


def test_matches_librosa_load_as_in_the_reference(example_dir, tmp_path):
    librosa = pytest.importorskip("librosa")
    path = example_dir / "speech_24k_mono.wav"
    ours = to_mono_16k(*load_audio(path))
    theirs, _ = librosa.load(str(path), sr=16000)
    assert ours.shape == (252075,) and np.array_equal(ours.numpy(), theirs)
    # Stereo at 44.1 kHz: the channel mix and the resampler both match too.
    stereo = tmp_path / "stereo.wav"
    _encode(stereo, np.stack([_tone(440, 44100), _tone(1000, 44100, amplitude=0.3)]), 44100, "pcm_s16le")
    ours = to_mono_16k(*load_audio(stereo))
    theirs, _ = librosa.load(str(stereo), sr=16000)
    np.testing.assert_allclose(ours.numpy(), theirs, rtol=0, atol=1e-6)


def test_channel_mixing_and_comfy_layout():
    left = torch.from_numpy(_tone(440, 16000))
    right = torch.from_numpy(_tone(1000, 16000, amplitude=0.2))
    comfy = torch.stack([left, right])[None].double()  # ComfyUI AUDIO: (batch=1, channels, T)
    mono = to_mono_16k(comfy, 16000)
    assert mono.dtype == torch.float32 and torch.allclose(mono, (left + right) / 2, atol=1e-7)
    six = torch.stack([left] * 6)
    assert torch.allclose(to_mono_16k(six, 16000), left, atol=1e-7)


@pytest.mark.parametrize("rate", [0, -16000, 16000.0, True, "16000", 1000, 10_000_000])
def test_invalid_sample_rates(rate):
    with pytest.raises(InputError, match="sample rate"):
        to_mono_16k(torch.zeros(1, 16000), rate)


def test_bad_waveforms():
    with pytest.raises(InputError, match="empty"):
        to_mono_16k(torch.zeros(1, 0), 16000)
    with pytest.raises(InputError, match="batch of 2 clips"):
        to_mono_16k(torch.zeros(2, 1, 16000), 16000)
    with pytest.raises(InputError, match=r"\(channels, samples\)"):
        to_mono_16k(torch.zeros(16000), 16000)
    with pytest.raises(InputError, match="int16 / 32768"):
        to_mono_16k(torch.zeros(1, 16000, dtype=torch.int16), 16000)
    with pytest.raises(InputError, match="Tensor"):
        to_mono_16k(np.zeros((1, 16000), np.float32), 16000)
    corrupt = torch.zeros(2, 48000)
    corrupt[1, 24000] = float("nan")
    corrupt[0, 30000] = float("inf")
    with pytest.raises(InputError, match=r"2 samples are NaN or infinite \(the first at 0.500 s\)"):
        to_mono_16k(corrupt, 48000)


def test_resampling_keeps_device_and_is_quiet_on_clean_speech(caplog):
    x = torch.from_numpy(_tone(440, 22050))[None]
    with caplog.at_level(logging.WARNING):
        y = to_mono_16k(x, 22050)
    assert y.device == x.device and not caplog.records
