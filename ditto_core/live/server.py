"""The live avatar over WebSocket (aiohttp): standalone (``python -m ditto_core serve``) or on ComfyUI's server.

Routes (the same in both; ComfyUI mounts them on its own server):

* ``GET /ditto/live`` -- the browser page (``web/live.html``): microphone in, avatar out;
* ``GET /ditto/live/avatars`` -- JSON: the avatar ids that can be opened, and whether the server is
  ready (``"ready"``; while it warms up, ``"warming_s"``: seconds so far);
* ``GET /ditto/live/ws`` -- the stream. Protocol (docs/LIVE.md has the full text):

  1. client -> ``{"type": "open", "avatar": ID, "sample_rate": 16000, "output": "jpeg" | "h264" | "fmp4",
     "max_size": 720, "quality": 85, "idle": true, "options": {...MotionOptions fields...}}``
  2. server -> ``{"type": "ready", "stream": N, "fps": 25, "width": W, "height": H,
     "audio_rate": 16000, "frame_samples": 640}``
  3. client -> binary messages of PCM16 little-endian mono speech at its ``sample_rate``, any
     size up to the message limit; text ``{"type": "end" | "clear" | "stats"}``.
  4. server -> one binary message per frame (:func:`pack_frame`: header, the JPEG, H.264
     Annex-B access unit or fragmented-MP4 fragment, the frame's 40 ms of 16 kHz PCM16), text ``{"type": "cleared"}``, ``{"type": "stats", ...}``,
     ``{"type": "end", "frames": n}`` after the last frame of an ended stream, and on any
     problem ``{"type": "error", "code": ..., "message": ...}`` followed by a close with the
     code of :data:`CLOSE_CODES`.

Without a token only clients on this machine are served; a server reachable from elsewhere is
started with a token, which clients pass as ``?token=`` (browsers cannot set headers on a
WebSocket) or an ``Authorization: Bearer`` header.
"""
from __future__ import annotations

import argparse
import asyncio
import hmac
import ipaddress
import json
import logging
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence
from urllib.parse import urlsplit

from ..audio.loading import check_sample_rate
from ..cli_logging import log_to_stderr
from ..errors import DittoError, InputError
from ..gc_pauses import freeze_for_the_process
from ..motion.motion_options import MotionOptions
from ..registration.source_info import SourceInfo
from .output_frames import LiveFrame
from .admission import MAX_STREAM_STEPS, SILENT_TIMEOUT_S, CapacityError
from .runtime import MAX_SAMPLERS, BackpressureError, LiveRuntime, RuntimeFailed, RuntimeStopped, distinct_steps
from .stream_state import StreamConfig
from .stream import AvatarStream

log = logging.getLogger(__name__)

PREFIX = "/ditto/live"
PAGE = Path(__file__).resolve().parents[2] / "web" / "live.html"
FRAME_MAGIC = b"DLF1"
FRAME_HEADER = struct.Struct("<4sIdII")  # magic, frame index, pts (s), image bytes, audio bytes
CLOSE_CODES = {
    "bad_request": 4400,
    "unauthorized": 4401,
    "unknown_avatar": 4404,
    "not_reading": 4408,
    "silent": 4408,
    "too_large": 4413,
    "capacity": 4429,
    "gone": 4410,
    "internal": 4500,
    "warming_up": 4503,
}
OPTION_FIELDS = (
    "emo", "eye_f0_mode", "steps", "seed", "smo_k_d", "fix_kp_cond", "use_d_keys", "relative_d", "drive_eye", "delta_eye_open_n", "delta_pitch", "delta_yaw", "delta_roll",
    "alpha_pitch", "alpha_yaw", "alpha_roll", "flag_stitching",
)
"""MotionOptions a client may set (the per-frame and fade options need a clip's length; the
sampler's precision and compilation are the server's: they decide what its warm-up recorded)."""


@dataclass(frozen=True)
class Limits:
    """What one connection may send and how long it may keep the server waiting."""

    max_message_bytes: int = 1 << 20  # one binary message: 1 MiB is 32 s of 16 kHz PCM16
    max_control_bytes: int = 16 << 10
    # Audio messages a second, sustained, and in a burst (a network hiccup delivers many at once):
    # each costs a push on the event loop, so a client slicing speech into a few samples a message
    # would slow every stream. 250 a second is 4 ms pieces; clients send 10-100 ms.
    audio_messages_per_s: float = 250.0
    audio_message_burst: int = 1000
    open_timeout_s: float = 10.0  # the first message must come within this
    stall_timeout_s: float = 5.0  # a client that takes no frames for this long is disconnected
    # A stream that is sent no speech for this long is closed: an open stream holds a slot of
    # ``max_streams`` and animates silence on the device, so forgotten tabs and clients that open
    # and wait would otherwise lock everyone else out. None: streams may stay silent forever.
    silent_timeout_s: Optional[float] = SILENT_TIMEOUT_S


def pack_frame(frame: LiveFrame) -> bytes:
    """One frame as a binary message: header, the image (JPEG or H.264), the audio (PCM16 LE, 16 kHz)."""
    image = frame.packet or b""
    audio = frame.audio.numpy().astype("<i2").tobytes()
    return FRAME_HEADER.pack(FRAME_MAGIC, frame.index, frame.pts, len(image), len(audio)) + image + audio


def unpack_frame(data: bytes) -> tuple[int, float, bytes, bytes]:
    """``(index, pts, image, audio)`` of a :func:`pack_frame` message (clients, tests)."""
    magic, index, pts, n_image, n_audio = FRAME_HEADER.unpack_from(data)
    if magic != FRAME_MAGIC:
        raise ValueError("not a Ditto live frame")
    start = FRAME_HEADER.size
    return index, pts, data[start : start + n_image], data[start + n_image : start + n_image + n_audio]


class UnknownAvatar(DittoError):
    pass


class WarmingUp(DittoError):
    """The avatar's runtime is still compiling its engines and recording its CUDA graphs."""


class WarmUpFailed(DittoError):
    """The avatar's runtime could not warm up (the log has the traceback)."""


@dataclass
class _RuntimeWarmUp:
    """One runtime's warm-up: running until ``done``; ``failure`` says why it did not succeed."""

    started: float  # time.monotonic()
    steps: tuple[int, ...]  # the DDIM steps it records a sampler for: what the runtime serves
    done: bool = False
    failure: Optional[str] = None


class LiveAvatars:
    """Avatars that clients may open, each with the runtime of the pipeline it was registered with.

    One runtime per pipeline (its device, its models), shared by every avatar of that pipeline;
    ``runtime_options`` go to every :class:`LiveRuntime` it makes.

    A runtime warms up (:meth:`warm_up_in_background`: engines compiled, CUDA graphs recorded)
    on a thread while the server already answers; until it is done its avatars are refused with
    :class:`WarmingUp`. Serving streams beside those recordings is what faulted the H200 once
    (docs/LIVE.md), and a stream opened then would wait minutes for its first frame.
    """

    def __init__(self, **runtime_options: Any) -> None:
        self._lock = threading.Lock()
        self._avatars: dict[str, tuple[Any, SourceInfo]] = {}
        self._runtimes: dict[int, LiveRuntime] = {}
        self._runtime_options = runtime_options
        self._warmups: dict[int, _RuntimeWarmUp] = {}  # runtime's pipeline id -> its warm-up
        self._shut_down = False  # after shutdown() no runtime is made again (its threads would outlive the server)

    def publish(self, avatar_id: str, pipeline, source: SourceInfo, steps: Optional[Sequence[int]] = None) -> None:
        """Put ``source`` under ``avatar_id``; with ``steps``, only if the runtime of ``pipeline``
        serves them or has not been warmed up (:class:`InputError` otherwise, nothing published)."""
        if not isinstance(avatar_id, str) or not avatar_id or len(avatar_id) > 128:
            raise InputError(f"avatar id must be a non-empty string of at most 128 characters, got {avatar_id!r}.")
        if steps is not None:
            steps = _served_steps(steps)
        with self._lock:
            if steps is not None:
                self._check_steps(id(pipeline), steps)
            self._avatars[avatar_id] = (pipeline, source)

    def _check_steps(self, key: int, steps: Sequence[int]) -> bool:
        """Whether the runtime ``key`` was (or is being) warmed up; :class:`InputError` if for steps
        other than ``steps``. Called holding ``_lock``."""
        earlier = self._warmups.get(key)
        if earlier is None or earlier.failure is not None:
            return False
        if not set(steps) <= set(earlier.steps):
            raise InputError(
                f"steps {', '.join(map(str, steps))}: the live runtime of these models serves steps "
                f"{', '.join(map(str, earlier.steps))}, recorded by its warm-up (recording more while streams "
                "are served would make them wait); use those, or unload the models and publish again.")
        return True

    def ids(self) -> list[str]:
        with self._lock:
            return sorted(self._avatars)

    def status(self) -> dict:
        """What ``GET /ditto/live/avatars`` answers: the ids, and whether streams can open now."""
        with self._lock:
            started = min((w.started for w in self._warmups.values() if not w.done), default=None)
            status = {"avatars": sorted(self._avatars), "ready": started is None}
            steps = sorted({n for w in self._warmups.values() if w.failure is None for n in w.steps})
            if steps:  # the DDIM steps streams may ask for (none listed: no warm-up, any)
                status["steps"] = steps
            if started is not None:
                status["warming_s"] = round(time.monotonic() - started, 1)
            return status

    def open(self, avatar_id: Any) -> tuple[LiveRuntime, SourceInfo]:
        with self._lock:
            runtime, source, key = self._runtime_of(avatar_id)
            warm_up = self._warmups.get(key)
            if warm_up is not None and not warm_up.done:
                raise WarmingUp(
                    f"avatar {avatar_id!r} is not ready: the server is compiling its engines and recording its "
                    f"CUDA graphs (for {time.monotonic() - warm_up.started:.0f} s so far; minutes the first time "
                    "on a machine, seconds from its caches). Try again shortly; GET /ditto/live/avatars says when "
                    "it is ready."
                )
            if warm_up is not None and warm_up.failure is not None:
                raise WarmUpFailed(f"avatar {avatar_id!r} cannot stream: its warm-up failed "
                                   f"({warm_up.failure}); the server's log has the details.")
            return runtime, source

    def _runtime_of(self, avatar_id: Any) -> tuple[LiveRuntime, SourceInfo, int]:
        if self._shut_down:
            raise RuntimeStopped("the live server is shutting down; reconnect once it is back")
        entry = self._avatars.get(avatar_id) if isinstance(avatar_id, str) else None
        if entry is None:
            known = ", ".join(sorted(self._avatars)) or "none are published"
            raise UnknownAvatar(f"unknown avatar {avatar_id!r}; the server has: {known}.")
        pipeline, source = entry
        key = id(pipeline)
        runtime = self._runtimes.get(key)
        if runtime is None:
            runtime = self._runtimes[key] = LiveRuntime(pipeline, **self._runtime_options)
        return runtime, source, key

    def warm_up_in_background(self, avatar_id: str, options: MotionOptions, several_avatars: bool = True,
                              steps: Optional[Sequence[int]] = None,
                              then: Optional[Callable[[], None]] = None) -> Optional[threading.Thread]:
        """Warm the runtime of ``avatar_id`` up on a thread (once per runtime, again after a failed
        one; None if it is, or is being, warmed up). Its avatars are refused until the thread ends.
        ``steps`` (default ``options.steps``): the DDIM steps its streams may use
        (:meth:`LiveRuntime.warm_up`); a runtime warmed up for others refuses more with :class:`InputError`.
        ``then``: run on that thread after a warm-up that succeeded, before its avatars are served."""
        steps = _served_steps((options.steps,) if steps is None else steps)
        with self._lock:
            runtime, source, key = self._runtime_of(avatar_id)
            if self._check_steps(key, steps):
                return None
            warm_up = self._warmups[key] = _RuntimeWarmUp(time.monotonic(), steps)

        def warm() -> None:
            try:
                runtime.warm_up(source, options, several_avatars=several_avatars, steps=steps)
                if then is not None:
                    then()
            except RuntimeStopped as stopped:  # withdrawn or shut down meanwhile: asked for, not a fault
                log.info("Ditto live: the warm-up for avatar %r ended early: %s", avatar_id, stopped)
                failure = str(stopped)
            except Exception as error:  # the avatars' clients hear of it when they open
                log.exception("Ditto live: the warm-up for avatar %r failed", avatar_id)
                failure = f"{type(error).__name__}: {error}"
            else:
                failure = None
                log.info("Ditto live: ready after a %.0f s warm-up", time.monotonic() - warm_up.started)
            with self._lock:  # a runtime withdrawn meanwhile took this record with it
                warm_up.done, warm_up.failure = True, failure

        thread = threading.Thread(target=warm, name="ditto-live-warmup", daemon=True)
        thread.start()
        return thread

    def withdraw(self, pipeline, reason: str) -> list[str]:
        """Take back every avatar of ``pipeline`` and stop its runtime (its open streams end with
        :class:`RuntimeStopped` and ``reason``), so that nothing here keeps the pipeline, or its
        VRAM, alive. Returns the withdrawn ids; the avatars can be published again."""
        key = id(pipeline)
        with self._lock:
            withdrawn = sorted(i for i, (owner, _) in self._avatars.items() if owner is pipeline)
            for avatar_id in withdrawn:
                del self._avatars[avatar_id]
            runtime = self._runtimes.pop(key, None)
            self._warmups.pop(key, None)
        if runtime is not None:
            runtime.shutdown(reason)
        return withdrawn

    def shutdown(self) -> None:
        """Stop every runtime (their open streams end with :class:`RuntimeStopped`); later opens
        and warm-ups are refused with it too, instead of starting a runtime nothing would stop."""
        with self._lock:
            self._shut_down = True
            runtimes, self._runtimes = list(self._runtimes.values()), {}
            self._warmups.clear()
        for runtime in runtimes:
            runtime.shutdown()


def _served_steps(steps: Sequence[int]) -> tuple[int, ...]:
    """``steps`` checked against what a stream may ask for: what a runtime is warmed up to serve."""
    for n in steps:
        if not (isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= MAX_STREAM_STEPS):
            raise InputError(f"steps={n!r} is not allowed: expected an integer in [1, {MAX_STREAM_STEPS}] (the DDIM "
                             "steps of the avatar's streams).")
    return distinct_steps(steps)


def _is_loopback(host: Optional[str]) -> bool:
    if host in ("localhost", None):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


def _authorized(request, token: Optional[str]) -> bool:
    if token is None:
        # Without a token only this machine may connect, and only from a page it serves: a web
        # page elsewhere (its Origin) or a DNS-rebound name (the Host) must not open streams.
        origin = request.headers.get("Origin")
        return (_is_loopback(request.remote) and _names_loopback(request.host)
                and (origin is None or _names_loopback(urlsplit(origin).netloc)))
    given = request.query.get("token", "")
    scheme, _, credentials = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer" and credentials:
        given = credentials.strip()
    return hmac.compare_digest(given.encode(), token.encode())


def _names_loopback(netloc: str) -> bool:
    """Whether a Host header or an Origin's ``host[:port]`` names this machine's loopback."""
    try:
        return _is_loopback(urlsplit("//" + netloc).hostname)  # drops user, port and IPv6 brackets; lower case
    except ValueError:  # e.g. an unclosed "[" or a port that is no number
        return False


class _Closed(Exception):
    """Raised inside a session to end it with a close code and an error message to the client."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


def _parse_open(msg: dict) -> tuple[str, int, MotionOptions, StreamConfig]:
    if msg.get("type") != "open":
        raise _Closed("bad_request", f'the first message must be {{"type": "open", ...}}, got type {msg.get("type")!r}.')
    allowed = {"type", "avatar", "sample_rate", "output", "max_size", "quality", "idle", "options"}
    unknown = sorted(set(msg) - allowed)
    if unknown:
        raise _Closed("bad_request", f"open: unknown fields {unknown}; allowed: {sorted(allowed)}.")
    rate = msg.get("sample_rate", 16000)
    options = msg.get("options") or {}
    if not isinstance(options, dict):
        raise _Closed("bad_request", f"open: options must be an object of MotionOptions fields, got {options!r}.")
    idle = msg.get("idle", True)
    if not isinstance(idle, bool):
        raise _Closed("bad_request", f"open: idle must be true or false, got {idle!r}.")
    steps = options.get("steps")
    if isinstance(steps, int) and not isinstance(steps, bool) and steps > MAX_STREAM_STEPS:
        raise _Closed("bad_request", f"open: options.steps={steps}: a stream may use at most {MAX_STREAM_STEPS} steps.")
    bad = sorted(set(options) - set(OPTION_FIELDS))
    if bad:
        raise _Closed("bad_request", f"open: options {bad} cannot be set on a stream; allowed: {list(OPTION_FIELDS)}.")
    try:
        motion = MotionOptions(**options)
        config = StreamConfig(output=msg.get("output", "jpeg"), max_size=msg.get("max_size"),
                              quality=msg.get("quality", 85), idle=idle)
    except InputError as error:
        raise _Closed("bad_request", f"open: {error}") from None
    if config.output == "rgb":
        raise _Closed("bad_request", 'open: over WebSocket the output is "jpeg", "h264" or "fmp4".')
    try:
        rate = check_sample_rate(rate, "open: sample_rate")
    except InputError as error:
        raise _Closed("bad_request", str(error)) from None
    return msg.get("avatar"), rate, motion, config


class _Session:
    """One WebSocket connection: at most one stream."""

    def __init__(self, request, ws, avatars: LiveAvatars, limits: Limits) -> None:
        self.request, self.ws, self.avatars, self.limits = request, ws, avatars, limits
        self.stream: Optional[AvatarStream] = None
        self.rate = 16000
        self.last_speech = time.monotonic()
        self.ended = False  # the client sent "end": the stream finishes by itself

    async def send_json(self, payload: dict) -> None:
        if not self.ws.closed:
            await self.ws.send_str(json.dumps(payload))

    async def fail(self, code: str, message: str) -> None:
        """Tell the client what went wrong, then close; never waits long on a client that does not read."""
        log.info("Ditto live: closing a connection (%s): %s", code, message)
        try:
            await asyncio.wait_for(self._close_with(code, message), timeout=2)
        except (asyncio.TimeoutError, ConnectionError):
            # A client that reads nothing would hold the socket and its unsent frames for as long
            # as it stays connected: drop the connection.
            transport = self.request.transport
            if transport is not None:
                transport.abort()

    async def _close_with(self, code: str, message: str) -> None:
        await self.send_json({"type": "error", "code": code, "message": message})
        # A close frame's reason holds 123 bytes: cut the UTF-8, not the characters.
        reason = message.encode()[:120].decode(errors="ignore").encode()
        await self.ws.close(code=CLOSE_CODES[code], message=reason)

    async def run(self) -> None:
        tasks: list[asyncio.Future] = []
        try:
            await self._open()
            tasks = [asyncio.ensure_future(self._send_frames()), asyncio.ensure_future(self._receive())]
            done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            # The other task stops first: a receive still waiting on the socket would take the
            # client's answer to the close below, and the close would end abnormally (1006).
            await _cancelled(pending)
            for task in done:
                task.result()  # re-raises _Closed
        except _Closed as closed:
            await self.fail(closed.code, closed.message)
        except ConnectionError as error:  # the client went away while frames were sent: nothing to tell it
            log.info("Ditto live: a client disconnected (%s)", error)
        except Exception as error:  # a bug: the client still hears why its stream stopped
            log.exception("Ditto live session failed")
            await self.fail("internal", f"internal error: {type(error).__name__}: {error}")
        finally:
            await _cancelled([task for task in tasks if not task.done()])
            if self.stream is not None:
                self.stream.close()

    async def _open(self) -> None:
        import aiohttp

        try:
            msg = await self.ws.receive(timeout=self.limits.open_timeout_s)
        except asyncio.TimeoutError:
            raise _Closed("bad_request", f"no open message within {self.limits.open_timeout_s:g} s.") from None
        if msg.type != aiohttp.WSMsgType.TEXT:
            raise _Closed("bad_request", 'the first message must be text: {"type": "open", "avatar": ...}.')
        avatar_id, self.rate, options, config = _parse_open(self._json(msg.data))
        try:
            runtime, source = self.avatars.open(avatar_id)
            self.stream = AvatarStream(runtime, source, options, config)
        except UnknownAvatar as error:
            raise _Closed("unknown_avatar", str(error)) from None
        except WarmingUp as error:
            raise _Closed("warming_up", str(error)) from None
        except (WarmUpFailed, RuntimeFailed) as error:
            raise _Closed("internal", str(error)) from None
        except RuntimeStopped as error:
            raise _Closed("gone", str(error)) from None
        except CapacityError as error:
            raise _Closed("capacity", str(error)) from None
        except DittoError as error:
            raise _Closed("bad_request", f"open: {error}") from None
        height, width = self.stream.frame_size
        await self.send_json({"type": "ready", "stream": self.stream.id, "fps": 25, "width": width, "height": height,
                              "audio_rate": 16000, "frame_samples": 640, "output": config.output})

    def _json(self, text: str) -> dict:
        if len(text) > self.limits.max_control_bytes:
            raise _Closed("too_large", f"control message of {len(text)} bytes; the limit is "
                                       f"{self.limits.max_control_bytes}.")
        try:
            msg = json.loads(text)
        except ValueError as error:
            raise _Closed("bad_request", f"control messages must be JSON objects ({error}).") from None
        except RecursionError:
            raise _Closed("bad_request", "control messages must be JSON objects (this one is nested too deeply).") from None
        if not isinstance(msg, dict):
            raise _Closed("bad_request", f"control messages must be JSON objects, got {type(msg).__name__}.")
        return msg

    async def _receive(self) -> None:
        import aiohttp

        allowance, last = float(self.limits.audio_message_burst), time.monotonic()
        while True:
            msg = await self.ws.receive()
            if msg.type == aiohttp.WSMsgType.BINARY:
                if len(msg.data) > self.limits.max_message_bytes:
                    raise _Closed("too_large", f"audio message of {len(msg.data)} bytes; the limit is "
                                               f"{self.limits.max_message_bytes}: send smaller chunks.")
                now = time.monotonic()
                allowance = min(self.limits.audio_message_burst,
                                allowance + (now - last) * self.limits.audio_messages_per_s) - 1
                last = now
                if allowance < 0:
                    raise _Closed("bad_request", f"more than {self.limits.audio_messages_per_s:g} audio messages a "
                                                 "second: send speech in pieces of 10 ms or more.")
                self.last_speech = now
                try:
                    self.stream.push_audio(msg.data, self.rate)
                except BackpressureError as error:
                    raise _Closed("not_reading", str(error)) from None
                except InputError as error:
                    raise _Closed("bad_request", str(error)) from None
            elif msg.type == aiohttp.WSMsgType.TEXT:
                await self._control(self._json(msg.data))
            else:  # closed by the client, or a protocol error: nothing more to read
                return

    async def _control(self, msg: dict) -> None:
        kind = msg.get("type")
        if kind == "end":
            self.ended = True
            self.stream.end()
        elif kind == "clear":
            self.stream.clear()
            await self.send_json({"type": "cleared"})
        elif kind == "stats":
            await self.send_json({"type": "stats", **self.stream.stats()})
        else:
            raise _Closed("bad_request", f'unknown control message type {kind!r}; use "end", "clear" or "stats".')

    async def _send_frames(self) -> None:
        frames = 0
        watchdog = asyncio.ensure_future(self._watch())
        try:
            async for frame in self.stream:
                await self.ws.send_bytes(pack_frame(frame))
                frames += 1
        except RuntimeStopped as error:
            raise _Closed("gone", str(error)) from None
        except DittoError as error:
            raise _Closed("internal", str(error)) from None
        finally:
            watchdog.cancel()
        await self.send_json({"type": "end", "frames": frames})
        await self.ws.close()

    async def _watch(self) -> None:
        """Close a stream whose client stopped reading frames, or stopped sending speech."""
        silent_limit = self.limits.silent_timeout_s
        while True:
            await asyncio.sleep(0.25)
            if self.stream.stalled_for() > self.limits.stall_timeout_s:
                await self.fail("not_reading", f"the client took no frames for {self.limits.stall_timeout_s:g} s; "
                                               "read frames as they come (the stream was closed).")
                break
            if silent_limit is not None and not self.ended and time.monotonic() - self.last_speech > silent_limit:
                await self.fail("silent", f"no speech for {silent_limit:g} s: the stream was closed to free its "
                                          "place; open a new one to go on (or send silence to keep one open).")
                break
        self.stream.close()


async def _cancelled(tasks) -> None:
    """Cancel ``tasks`` and wait until they have stopped."""
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.wait(tasks)


def _aiohttp_web():
    try:
        from aiohttp import web
    except ImportError:
        raise DittoError("the live server needs aiohttp: pip install aiohttp (ComfyUI already has it).") from None
    return web


def add_live_routes(routes, avatars: LiveAvatars, token: Optional[str] = None, limits: Limits = Limits()) -> None:
    """Register the live routes on an aiohttp ``RouteTableDef`` (ComfyUI's ``PromptServer.instance.routes``)."""
    web = _aiohttp_web()

    @routes.get(PREFIX)
    async def live_page(request):
        return web.FileResponse(PAGE)

    @routes.get(PREFIX + "/avatars")
    async def live_avatars(request):
        if not _authorized(request, token):
            return web.json_response({"error": _UNAUTHORIZED}, status=401)
        return web.json_response(avatars.status())

    @routes.get(PREFIX + "/ws")
    async def live_socket(request):
        ws = web.WebSocketResponse(max_msg_size=2 * limits.max_message_bytes, heartbeat=30)
        await ws.prepare(request)
        session = _Session(request, ws, avatars, limits)
        if not _authorized(request, token):
            await session.fail("unauthorized", _UNAUTHORIZED)
        else:
            await session.run()
        return ws


_UNAUTHORIZED = ("this live server needs its token: connect with ?token=... (clients on other machines, and "
                 "pages served from elsewhere, are only served by a server started with --token)")


def create_app(avatars: LiveAvatars, token: Optional[str] = None, limits: Limits = Limits()):
    """The standalone aiohttp application; shutting it down stops the avatars' runtimes."""
    web = _aiohttp_web()

    app = web.Application()
    routes = web.RouteTableDef()
    add_live_routes(routes, avatars, token, limits)
    app.add_routes(routes)

    async def stop_runtimes(app):
        await asyncio.get_running_loop().run_in_executor(None, avatars.shutdown)

    app.on_shutdown.append(stop_runtimes)
    return app


# -- CLI ------------------------------------------------------------------------------------


def _out_of_full_collections() -> None:
    """What the standalone server's start-up and warm-up made, kept out of every later collection.

    Its avatars, models, compiled engines and recorded graphs serve until it stops, and they are
    most of the interpreter's objects: a full collection after the warm-up walks every one of them
    (docs/LIVE.md has what that costs) holding the GIL that every stream's worker threads need. None came in a 5-minute stream, but the objects a long-running server keeps would start
    one eventually; frozen, these are skipped, and the streams' own are collected as usual.
    """
    frozen = freeze_for_the_process(collect_first=True)
    log.info("Ditto live: %d objects of the start-up and warm-up are kept out of the garbage collector's passes", frozen)


def run(args: argparse.Namespace) -> int:
    web = _aiohttp_web()
    from ..pipeline import DittoPipeline
    from ..precision import network_dtype
    from ..registration.image_io import load_source
    from ..registration.options import RegistrationOptions

    if not _is_loopback(args.host) and not args.token:
        raise InputError(
            f"--host {args.host} makes the server reachable from other machines: set DITTO_LIVE_TOKEN=SECRET (or "
            "pass --token SECRET; clients then connect with ?token=SECRET), or bind to 127.0.0.1."
        )
    if args.steps is not None:
        try:
            distinct_steps(args.steps)  # the runtime's rule, checked before the models load, naming the flag
        except InputError:
            raise InputError(f"--steps {' '.join(map(str, args.steps))}: at most {MAX_SAMPLERS} step counts (each "
                             "keeps its recorded graphs in VRAM).") from None
    avatar_specs = []
    for spec in args.avatar:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise InputError(f"--avatar {spec!r}: expected ID=IMAGE, e.g. --avatar anna=portrait.jpg.")
        avatar_specs.append((name, Path(path)))
    common = dict(device=args.device, dtype=network_dtype(args.precision), compile=not args.no_compile)
    log_to_stderr()  # the warm-up's end, clients leaving, a stream's failure (not every HTTP request)
    import tempfile

    with tempfile.TemporaryDirectory(prefix="ditto_live_") as workdir:
        if args.random_weights:
            pipeline = DittoPipeline.random(Path(workdir), **common)
        else:
            pipeline = DittoPipeline.from_model_dir(
                args.models, cache_dir=args.cache_dir or Path(args.models) / "cache", **common)
        avatars = LiveAvatars(max_streams=args.max_streams, max_load=args.max_load or None)
        registration = RegistrationOptions(detect_face=not args.random_weights)
        for name, path in avatar_specs:
            frames, is_image = load_source(path)
            avatars.publish(name, pipeline, pipeline.register(frames, registration, is_image=is_image, name=str(path)))
        if avatar_specs:  # the engines compiled and the graphs recorded while the server already answers
            avatars.warm_up_in_background(avatar_specs[0][0], MotionOptions(), several_avatars=len(avatar_specs) > 1,
                                          steps=args.steps, then=_out_of_full_collections)
        app = create_app(avatars, token=args.token, limits=Limits(silent_timeout_s=args.silent_timeout or None))
        print(f"Ditto live: serving http://{args.host}:{args.port}{PREFIX} (avatars: {', '.join(avatars.ids()) or 'none'}"
              f"{'; warming up, streams open once GET ' + PREFIX + '/avatars says ready' if avatar_specs else ''})",
              flush=True)
        web.run_app(app, host=args.host, port=args.port, print=None, handle_signals=True, access_log=None)
    return 0
