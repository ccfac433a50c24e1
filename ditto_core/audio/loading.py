"""Speech in: decode audio files and bring any waveform to the 16 kHz mono HuBERT expects.

Resampling uses the SoX resampler (``soxr``, "HQ" quality), the very filter the reference
reaches through ``librosa.load(path, sr=16000)``: 16 kHz speech from here is sample-for-sample
what Ditto was trained and evaluated on (checked against librosa in the tests, which also hold
its pass band flat and its aliasing down; its speed is in docs/PERFORMANCE.md). Resampling
happens once per clip, so the one host copy of a CUDA waveform costs
nothing that matters; a torch-native polyphase filter would have to reproduce soxr's design
to keep parity and would buy no measurable speed.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Union

import av
import numpy as np
import soxr
import torch
from torch import Tensor

from ..errors import InputError
from .audio_features import SAMPLE_RATE
from .validation import require_finite, require_float_waveform

MIN_SAMPLE_RATE = 4_000  # below this there is no intelligible speech left to lip-sync to
MAX_SAMPLE_RATE = 768_000  # the highest rate audio interfaces and FFmpeg's codecs produce
SOXR_QUALITY = "soxr_hq"  # librosa's default ``res_type``, hence the reference's


def load_audio(path: Union[str, os.PathLike], max_seconds: Optional[float] = None) -> tuple[Tensor, int]:
    """Decode the first audio stream of a file (wav, mp3, flac, m4a, ogg, or a video's track).

    Returns ``(waveform, sample_rate)``: ``waveform`` is float32 ``(channels, samples)`` in
    [-1, 1] at the file's own rate (integer PCM is scaled by ``1 / 2**(bits - 1)``). With
    ``max_seconds`` only the first seconds are decoded and returned (an hour-long file cut to
    ten seconds is not decoded whole first).
    Raises :class:`InputError` if the file is missing, unreadable or holds no audio.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"audio file {str(path)!r} does not exist; check the path.")
    blocks: list[np.ndarray] = []
    rates: set[int] = set()
    # Packed float32 at the stream's own rate and layout: a pure sample-format conversion. (Not
    # planar: PyAV reads past the planes of a planar frame of 8 channels or more and crashes.)
    to_float = av.AudioResampler(format="flt")
    try:
        with av.open(str(path)) as container:
            if not container.streams.audio:
                raise InputError(f"{str(path)!r} has no audio stream; give a file that contains speech.")
            stream = container.streams.audio[0]
            decoded, wanted = 0, None
            for frame in container.decode(stream):
                rates.add(frame.sample_rate)
                blocks.extend(map(_channels_first, to_float.resample(frame)))
                if max_seconds is not None:
                    decoded += frame.samples
                    wanted = max(1, int(max_seconds * frame.sample_rate))
                    if decoded >= wanted:
                        break
            blocks.extend(map(_channels_first, to_float.resample(None)))
    except av.FFmpegError as err:
        raise InputError(
            f"cannot decode audio file {str(path)!r} ({err}); it is corrupt or not an audio "
            "format FFmpeg reads. Re-export it as wav or flac."
        ) from err
    if not blocks or sum(b.shape[-1] for b in blocks) == 0:
        raise InputError(f"audio file {str(path)!r} decodes to no samples; it is empty or truncated.")
    if len(rates) != 1:
        raise InputError(
            f"audio file {str(path)!r} changes sample rate mid-stream {sorted(rates)}; re-encode it."
        )
    waveform = np.concatenate(blocks, axis=-1)
    if wanted is not None:
        waveform = waveform[:, :wanted]
    return torch.from_numpy(waveform), rates.pop()


def _channels_first(frame) -> np.ndarray:
    """A packed float frame's samples as ``(channels, samples)``."""
    return frame.to_ndarray().reshape(-1, len(frame.layout.channels)).T


def check_sample_rate(sample_rate: object, name: str) -> int:
    """``sample_rate`` as an int, or an :class:`InputError` naming ``name`` if no audio has that rate."""
    if isinstance(sample_rate, bool) or not isinstance(sample_rate, (int, np.integer)):
        raise InputError(f"{name}: sample rate must be an integer number of Hz, got {sample_rate!r}.")
    if not MIN_SAMPLE_RATE <= sample_rate <= MAX_SAMPLE_RATE:
        raise InputError(
            f"{name}: sample rate {sample_rate} Hz is outside {MIN_SAMPLE_RATE}..{MAX_SAMPLE_RATE} Hz; "
            "the audio's rate was probably mislabelled upstream."
        )
    return int(sample_rate)


def to_mono_16k(waveform: Tensor, sample_rate: int, name: str = "audio") -> Tensor:
    """Mix ``waveform`` down to mono and resample it to 16 kHz for HuBERT.

    ``waveform``: float ``(channels, samples)``, or ``(1, channels, samples)`` as in a ComfyUI
    AUDIO dict; any rate in [4 kHz, 768 kHz], any channel count, any device. Channels are
    averaged (what ``librosa.load(mono=True)`` does). Returns float32 ``(samples_16k,)`` on the
    input's device, ``ceil(samples * 16000 / sample_rate)`` long. ``name`` labels errors.
    """
    require_float_waveform(waveform, name)
    rate = check_sample_rate(sample_rate, name)
    if waveform.dim() == 3:
        if waveform.shape[0] != 1:
            raise InputError(
                f"{name}: holds a batch of {waveform.shape[0]} clips; Ditto animates one clip at a "
                "time. Split the batch and pick one clip."
            )
        waveform = waveform[0]
    if waveform.dim() != 2:
        raise InputError(
            f"{name}: expected a (channels, samples) or (1, channels, samples) waveform, got shape "
            f"{tuple(waveform.shape)}."
        )
    require_finite(waveform, name, rate)
    mono = waveform.to(torch.float32).mean(dim=0)
    if rate == SAMPLE_RATE:
        return mono.contiguous()
    resampled = soxr.resample(mono.cpu().numpy(), rate, SAMPLE_RATE, quality=SOXR_QUALITY)
    # Same length rule as librosa.resample(fix=True): ceil of the length times the float ratio.
    length = int(np.ceil(mono.shape[0] * (SAMPLE_RATE / rate)))
    resampled = np.pad(resampled[:length], (0, max(0, length - resampled.shape[0])))
    return torch.from_numpy(resampled).to(waveform.device)
