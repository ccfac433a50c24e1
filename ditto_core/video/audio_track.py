"""The clip's speech as the MP4's AAC track: checked, at a rate AAC takes, encoded along with the video."""
from __future__ import annotations

from fractions import Fraction
from typing import Tuple, Union

import av
import numpy as np
from torch import Tensor

from ..errors import InputError

Waveform = Union[np.ndarray, Tensor]

# Rates the AAC encoder takes as they are; anything else is resampled to 48 kHz first.
_AAC_RATES = frozenset({7350, 8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000, 64000, 88200, 96000})
_AAC_FALLBACK_RATE = 48000
_LAYOUTS = {1: "mono", 2: "stereo"}


def prepare_audio(audio: Tuple[Waveform, int]) -> Tuple[np.ndarray, int]:
    """Validate ``(waveform, rate)``; return a (C, T) float32 array (C = 1 or 2) at an AAC rate.

    More than two channels are mixed down to mono (the mix the lip motion was computed from);
    an odd rate is resampled to 48 kHz.
    """
    try:
        waveform, rate = audio
    except (TypeError, ValueError):
        raise InputError("VideoWriter: audio must be a (waveform, sample_rate) pair") from None
    if isinstance(waveform, Tensor):
        waveform = waveform.detach().cpu().numpy()
    waveform = np.asarray(waveform, dtype=np.float32)
    if waveform.ndim == 1:
        waveform = waveform[None]
    if waveform.ndim != 2 or waveform.shape[0] == 0 or waveform.shape[1] == 0:
        raise InputError(
            f"VideoWriter: audio waveform must be (channels, samples) with at least one sample, got "
            f"{waveform.shape}"
        )
    if waveform.shape[0] not in _LAYOUTS:  # e.g. 5.1: AAC is muxed as mono or stereo here
        waveform = waveform.mean(axis=0, keepdims=True)
    if not np.isfinite(waveform).all():
        raise InputError("VideoWriter: audio waveform contains NaN or infinity")
    if not (isinstance(rate, (int, np.integer)) and rate > 0):
        raise InputError(f"VideoWriter: audio sample_rate must be a positive integer, got {rate!r}")
    if rate not in _AAC_RATES:
        waveform, rate = _resample(waveform, int(rate), _AAC_FALLBACK_RATE), _AAC_FALLBACK_RATE
    return np.ascontiguousarray(waveform), int(rate)


def _resample(waveform: np.ndarray, rate: int, target: int) -> np.ndarray:
    """(C, T) float32 at ``rate`` -> (C, T') float32 at ``target``, with FFmpeg's resampler."""
    layout = _LAYOUTS[waveform.shape[0]]
    resampler = av.AudioResampler(format="fltp", layout=layout, rate=target)
    frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(waveform), format="fltp", layout=layout)
    frame.sample_rate = rate
    frame.pts = 0
    frames = resampler.resample(frame) + resampler.resample(None)
    return np.concatenate([f.to_ndarray() for f in frames], axis=1)


class AudioTrack:
    """The AAC stream of an output file, encoded just ahead of the video it plays along with.

    Muxing audio as the video advances keeps the muxer's interleaving buffer small; the track
    is cut or padded with silence to the video's length.
    """

    def __init__(self, container: av.container.OutputContainer, audio: Tuple[np.ndarray, int], fps: Fraction):
        self._container = container
        self._waveform, self._rate = audio
        self._fps = fps
        self._samples = 0
        self.stream = container.add_stream("aac", rate=self._rate)
        self.stream.layout = _LAYOUTS[self._waveform.shape[0]]
        self.stream.format = "fltp"
        self.stream.time_base = Fraction(1, self._rate)

    def until(self, frame_count: int) -> None:
        """Encode audio up to the end of video frame ``frame_count``, padding with silence."""
        end = round(frame_count * self._rate / self._fps)
        if end <= self._samples:
            return
        samples = self._waveform[:, self._samples : end]
        missing = end - self._samples - samples.shape[1]
        if missing:
            samples = np.pad(samples, ((0, 0), (0, missing)))
        frame = av.AudioFrame.from_ndarray(
            np.ascontiguousarray(samples), format="fltp", layout=_LAYOUTS[self._waveform.shape[0]]
        )
        frame.sample_rate = self._rate
        frame.pts = self._samples
        self._container.mux(self.stream.encode(frame))
        self._samples = end

    def finish(self, frame_count: int) -> None:
        self.until(frame_count)
        self._container.mux(self.stream.encode(None))
