"""Live avatars: Ditto's online mode as a streaming API (and its WebSocket server in :mod:`.server`).

Nothing in :mod:`ditto_core` below this package imports it; the server's aiohttp is imported
only by :mod:`.server`. The names below load on first use, so the command line's ``serve``
flags (:mod:`.cli`) are read without importing PyTorch.
"""
import importlib

_EXPORTS = {
    "AvatarStream": "stream",
    "pcm_to_float": "stream",
    "BackpressureError": "runtime",
    "CapacityError": "admission",
    "LiveFrame": "output_frames",
    "LiveRuntime": "runtime",
    "RuntimeStopped": "runtime",
    "StreamConfig": "stream_state",
    "ONLINE_OVERLAP": "schedule",
    "OnlineAudio": "schedule",
    "OnlineMotion": "schedule",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
