"""Checks on speech waveforms, run once per clip at the API boundary.

Each check reads a handful of statistics in one device-to-host transfer; nothing here runs
per chunk. Errors are :class:`~ditto_core.errors.InputError` messages that name the input and
say what to do; recoverable oddities (silence, clipping) are logged warnings, because a user
may mean them (a silent track makes a face that listens with its mouth closed).
"""
from __future__ import annotations

import logging

import torch
from torch import Tensor

from ..errors import InputError

logger = logging.getLogger(__name__)

FULL_SCALE = 0.999  # a sample this close to +-1.0 is at the converter's limit
CLIPPED_FRACTION = 1e-3  # clean speech hits full scale a few times at most, not 0.1 % of the time
SILENCE_PEAK = 1e-4  # -80 dBFS: below any microphone's noise floor
# Resampling a clipped recording rings past full scale (measured up to 2.5 from 8 kHz), while integer
# PCM cast to float without scaling peaks at 127 or more: this threshold tells the two apart.
UNSCALED_PEAK = 4.0


def require_float_waveform(waveform: Tensor, name: str) -> None:
    """Reject what is not a floating-point audio tensor (integer PCM must be scaled first)."""
    if not isinstance(waveform, Tensor):
        raise InputError(f"{name}: expected a torch.Tensor waveform, got {type(waveform).__name__}")
    if not waveform.is_floating_point():
        raise InputError(
            f"{name}: waveform has dtype {waveform.dtype}; expected float samples in [-1, 1]. "
            "Convert integer PCM first, e.g. int16 / 32768."
        )
    if waveform.numel() == 0:
        raise InputError(
            f"{name}: the audio is empty (shape {tuple(waveform.shape)}); connect a track with speech."
        )


def require_finite(waveform: Tensor, name: str, sample_rate: int) -> None:
    """Raise if any sample is NaN or infinite: one such sample poisons every window it touches."""
    bad = torch.isfinite(waveform.detach()).logical_not_()
    if bool(bad.any()):
        first = int(bad.reshape(-1, bad.shape[-1]).any(dim=0).nonzero()[0, 0])  # earliest in time
        raise InputError(
            f"{name}: {int(bad.sum())} samples are NaN or infinite (the first at "
            f"{first / sample_rate:.3f} s); the audio was corrupted upstream. Re-export or "
            "re-decode it; an effect node that divides by zero is a common cause."
        )


def require_scaled_for_playback(waveform: Tensor, name: str) -> None:
    """Raise when float samples reach far outside [-1, 1]: muxed into a video they would play as
    loud, clipped noise (lip motion is only warned about, by :func:`warn_on_level`)."""
    peak = float(waveform.detach().abs().amax()) if waveform.numel() else 0.0
    if peak > UNSCALED_PEAK:
        raise InputError(
            f"{name}: samples reach {peak:.1f}, far outside [-1, 1]; muxed as they are, the speech would play as "
            "loud, clipped noise. Scale float audio to [-1, 1] where it is made (integer PCM cast to float: "
            "divide by 32768)."
        )


def warn_on_level(waveform: Tensor, name: str) -> None:
    """Log a warning for silent, clipped or out-of-range speech (finite samples assumed)."""
    magnitude = waveform.detach().abs()
    stats = torch.stack([magnitude.amax(), (magnitude >= FULL_SCALE).sum().to(magnitude.dtype)])
    peak, num_full_scale = stats.tolist()  # the one host sync of the check
    if peak > UNSCALED_PEAK:
        logger.warning(
            "%s: samples reach %.1f, far outside [-1, 1]; float audio should be scaled to [-1, 1] "
            "(integer PCM cast to float without dividing by 32768 looks like this).", name, peak
        )
    elif num_full_scale > CLIPPED_FRACTION * waveform.numel():
        logger.warning(
            "%s: %.2f %% of samples sit at full scale: the recording is clipped and lip motion may "
            "be less accurate. Lower the gain before export if you can.",
            name, 100 * num_full_scale / waveform.numel(),
        )
    elif peak < SILENCE_PEAK:
        logger.warning(
            "%s: the audio is silent (peak %.1e); the face will keep its mouth closed. "
            "Check that the intended track is connected.", name, peak
        )
