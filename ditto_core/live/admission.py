"""Whether a device takes one more live stream: the limits, the load measured from recent rounds,
and the check a stream's opening passes.

Free of PyTorch, so the ``serve`` flags (:mod:`.cli`) and ComfyUI's settings read the defaults
without importing it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional, Protocol

from ..errors import DittoError, InputError

MAX_STREAMS = 4
"""Streams a runtime admits at once unless told otherwise (an H200 keeps 10 in real time at 25
steps: docs/LIVE.md)."""

MAX_LOAD = 0.8
"""Default share of the device's time the open streams and a new one may need (``max_load``)."""

MAX_STREAM_STEPS = 50
"""Most DDIM steps a stream may ask for, and a server be warmed up for (Ditto's own default): a
window costs the device time in proportion, and every stream of a round waits for the slowest window."""

SILENT_TIMEOUT_S = 600.0
"""Default seconds a stream may go without speech before it is closed and its place freed."""

LOAD_WINDOW_S = 2.0
"""Seconds of recent rounds the load is measured over."""


class CapacityError(DittoError):
    """More live streams were asked for than the runtime admits."""


class TimedRound(Protocol):
    """What the measurement reads of a round (:class:`~.runtime.RoundTiming`)."""

    frames: int
    motion_s: float
    render_s: float
    ended: float


@dataclass(frozen=True)
class DeviceLoad:
    """What the streams cost the device, from the rounds of the last :data:`LOAD_WINDOW_S`.

    The two worker threads (motion and render) wait for the one device, so the busier one's time
    per frame is what a frame costs, and streams that together need more than the whole of a
    second fall behind their speech, all of them. Measured per frame rather than as a share of
    the time, because a stream whose speech arrived ahead (a TTS engine's) is animated as fast as
    the device goes, which says nothing of what it needs in real time.
    """

    busy: float  # share of the window the busier thread worked (a little over 1 when a round began before it)
    seconds_per_frame: float  # the busier thread's time over the frames rendered

    def per_stream(self, fps: float) -> float:
        """Share of the device's time one real-time stream at ``fps`` needs."""
        return fps * self.seconds_per_frame


def measure_load(rounds: Iterable[TimedRound], now: float, fps: float) -> Optional[DeviceLoad]:
    """The load of the rounds that ended in the last :data:`LOAD_WINDOW_S` before ``now``; None while
    they rendered less than a second of one stream's video (``fps`` frames): nothing to go by."""
    recent = [r for r in rounds if r.ended > now - LOAD_WINDOW_S]
    frames = sum(r.frames for r in recent)
    if frames < fps:
        return None
    worked = max(sum(r.render_s for r in recent), sum(r.motion_s for r in recent))
    return DeviceLoad(busy=worked / LOAD_WINDOW_S, seconds_per_frame=worked / frames)


def check_admission(open_streams: int, max_streams: int, load: Optional[DeviceLoad], max_load: Optional[float],
                    fps: float) -> None:
    """Raise :class:`CapacityError` when one more stream is past ``max_streams``, or (with a
    measured ``load`` and a ``max_load``) when the open streams and it would need more than
    ``max_load`` of the device's time in real time. A first stream is never refused for the
    load: on a device too slow for one real-time stream, one slow stream beats none."""
    if open_streams >= max_streams:
        raise CapacityError(
            f"the server is at capacity: {open_streams} of {max_streams} live streams are running on this "
            "device. Try again later, or start the server with a higher --max-streams if the device keeps up "
            "(bench/bench_live.py measures how many it sustains)."
        )
    if load is None or max_load is None or open_streams == 0:
        return
    each = load.per_stream(fps)
    projected = (open_streams + 1) * each
    if projected > max_load:
        raise CapacityError(
            f"the device is busy: a live stream needs about {each:.0%} of its time in real time, so the "
            f"{open_streams} open and one more would need {projected:.0%} (the limit is {max_load:.0%}; past it "
            "every stream falls behind its speech). Try again when a stream has ended; streams with fewer "
            "diffusion steps cost less."
        )


def check_max_load(max_load: Optional[float]) -> None:
    """``max_load`` is a share in (0, 1] or None (no limit)."""
    if max_load is not None and not (isinstance(max_load, (int, float)) and 0 < max_load <= 1):
        raise InputError(f"max_load must be a share of the device's time in (0, 1] or None, got {max_load!r}.")
