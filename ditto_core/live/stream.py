"""``AvatarStream``: one live avatar as an asyncio object -- push speech, iterate frames.

The shape follows LiveKit Agents' ``VideoGenerator`` (push audio, clear the buffer, iterate
output), so an adapter for LiveKit or Pipecat is a few lines (docs/LIVE.md shows one):

    async with AvatarStream(runtime, source, MotionOptions(steps=10)) as stream:
        stream.push_audio(pcm_int16, 48000)      # any chunk size, any rate
        stream.end()                              # no more speech: flush the tail
        async for frame in stream:                # LiveFrame: image or JPEG, its audio, pts
            ...

Without ``end()`` the stream keeps going: while no speech arrives it animates silence (the
face stays alive), and new speech joins whenever it comes. ``clear()`` is barge-in: speech not
yet animated and frames not yet taken are dropped, and the stream returns to idle.
"""
from __future__ import annotations

import asyncio
from typing import Optional, Union

import numpy as np
import torch
from torch import Tensor

from ..audio.audio_features import SAMPLE_RATE
from ..audio.loading import check_sample_rate
from ..audio.validation import require_finite
from ..errors import InputError
from ..motion.motion_options import MotionOptions
from ..registration.source_info import SourceInfo
from .output_frames import LiveFrame
from .runtime import LiveRuntime
from .stream_state import StreamConfig

Pcm = Union[Tensor, np.ndarray, bytes]


def pcm_to_float(pcm: Pcm, name: str = "live audio") -> Tensor:
    """Speech samples as float32 mono ``(n,)`` in [-1, 1].

    ``pcm``: int16 or float samples ``(n,)`` or ``(n, channels)`` (channels averaged), as a
    tensor, a numpy array, or little-endian PCM16 bytes. Non-finite samples are refused.
    """
    if isinstance(pcm, (bytes, bytearray, memoryview)):
        if len(pcm) % 2:
            raise InputError(f"{name}: PCM16 data has an odd number of bytes ({len(pcm)}); send whole samples.")
        pcm = np.frombuffer(pcm, dtype="<i2").copy()
    samples = torch.as_tensor(np.asarray(pcm)) if not isinstance(pcm, Tensor) else pcm.detach().cpu()
    if samples.dtype == torch.int16:
        samples = samples.to(torch.float32) / 32768
    elif samples.is_floating_point():
        samples = samples.to(torch.float32)
    else:
        raise InputError(f"{name}: samples have dtype {samples.dtype}; send int16 PCM or float samples in [-1, 1].")
    if samples.dim() == 2:
        samples = samples.mean(dim=1)
    if samples.dim() != 1:
        raise InputError(f"{name}: expected samples of shape (n,) or (n, channels), got {tuple(samples.shape)}.")
    if samples.numel():
        require_finite(samples, name, SAMPLE_RATE)
    return samples


class AvatarStream:
    """A live stream of one registered avatar on a :class:`LiveRuntime` (create it in a running loop).

    Args:
        runtime: the device's shared runtime.
        source: the registered avatar.
        options: motion options (fades are not available on streams).
        config: output format, size, idle animation, buffer limits.

    Raises :class:`~ditto_core.live.admission.CapacityError` when the runtime is full.
    """

    def __init__(
        self, runtime: LiveRuntime, source: SourceInfo, options: Optional[MotionOptions] = None,
        config: Optional[StreamConfig] = None,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue = asyncio.Queue()
        self._runtime = runtime
        self._rate: Optional[int] = None
        self._resampler = None
        self._done = False
        self._state = runtime.open_state(source, options or MotionOptions(), config or StreamConfig(), self._deliver)

    @property
    def id(self) -> int:
        return self._state.id

    @property
    def frame_size(self) -> tuple[int, int]:
        """(height, width) of the output frames."""
        return self._state.frame_size

    def _deliver(self, item: object) -> None:
        """Worker threads hand over frames (or the end / an error) here."""
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:  # the event loop is gone: nobody is listening any more
            pass

    # -- input --------------------------------------------------------------------------------

    def push_audio(self, pcm: Pcm, sample_rate: int) -> None:
        """Queue speech: any number of samples at any rate (one rate per stream; resampled to 16 kHz)."""
        rate = check_sample_rate(sample_rate, "live audio")
        samples = pcm_to_float(pcm)  # checked before the stream commits to a rate
        if self._rate is None:
            self._rate = rate
            if rate != SAMPLE_RATE:
                import soxr

                self._resampler = soxr.ResampleStream(rate, SAMPLE_RATE, 1, dtype="float32", quality="HQ")
        elif rate != self._rate:
            raise InputError(
                f"live audio: the sample rate changed from {self._rate} Hz to {rate} Hz; a stream takes one "
                "rate. Resample on the client or open a new stream."
            )
        if self._resampler is not None:
            samples = torch.from_numpy(self._resampler.resample_chunk(samples.numpy(), last=False).copy())
        if samples.numel():
            self._runtime.push(self._state, samples)

    def end(self) -> None:
        """No more speech: the tail is animated and the iteration ends after its last frame."""
        if self._resampler is not None:
            tail = self._resampler.resample_chunk(np.zeros(0, dtype=np.float32), last=True)
            if tail.size:
                self._runtime.push(self._state, torch.from_numpy(tail.copy()))
        self._runtime.request_end(self._state)

    def clear(self) -> None:
        """Barge-in: drop speech not yet animated and frames not yet taken; continue idle."""
        self._runtime.request_clear(self._state)
        while not self._queue.empty():
            item = self._queue.get_nowait()
            if item is None or isinstance(item, BaseException):  # keep the end / an error
                self._queue.put_nowait(item)
                break

    # -- output -------------------------------------------------------------------------------

    def __aiter__(self) -> "AvatarStream":
        return self

    async def __anext__(self) -> LiveFrame:
        while not self._done:
            item = await self._queue.get()
            if item is None or isinstance(item, BaseException):
                self._done = True
                self.close()
                if item is None:
                    break
                raise item
            epoch, payload = item
            if epoch != self._state.epoch:
                continue  # made before a clear()
            frame = payload if isinstance(payload, LiveFrame) else await asyncio.wrap_future(payload)
            if epoch != self._state.epoch:
                continue
            self._runtime.taken(self._state)
            return frame
        raise StopAsyncIteration

    def stats(self) -> dict:
        return self._runtime.stats(self._state)

    def stalled_for(self) -> float:
        """Seconds this stream has been paused because nobody takes its frames."""
        return self._runtime.stalled_for(self._state)

    def close(self) -> None:
        """Free the stream's place on the runtime (idempotent); frames in flight are dropped."""
        self._runtime.close_state(self._state)

    async def __aenter__(self) -> "AvatarStream":
        return self

    async def __aexit__(self, *exc) -> None:
        self.close()
