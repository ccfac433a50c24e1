"""Live avatars: Ditto's online mode as a streaming API (and its WebSocket server in :mod:`.server`).

Nothing in :mod:`ditto_core` below this package imports it; the server's aiohttp is imported
only by :mod:`.server`.
"""
from .runtime import BackpressureError, CapacityError, LiveFrame, LiveRuntime, RuntimeStopped, StreamConfig
from .schedule import ONLINE_OVERLAP, OnlineAudio, OnlineMotion
from .stream import AvatarStream, pcm_to_float

__all__ = [
    "AvatarStream",
    "BackpressureError",
    "CapacityError",
    "LiveFrame",
    "LiveRuntime",
    "RuntimeStopped",
    "ONLINE_OVERLAP",
    "OnlineAudio",
    "OnlineMotion",
    "StreamConfig",
    "pcm_to_float",
]
