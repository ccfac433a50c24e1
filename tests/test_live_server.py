"""The live WebSocket server over a real socket on 127.0.0.1: protocol, bad input, load, cleanup.

The LMDM is the deterministic projection stand-in and warp+decode a renderer of noise frames
(tests/live_support.py); HuBERT is the stub ONNX model. One test renders real frames.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path

import aiohttp
import cv2
import numpy as np
import pytest
import torch

from ditto_core.__main__ import build_parser
from ditto_core.errors import InputError
from ditto_core.live import AvatarStream, LiveRuntime, StreamConfig
from ditto_core.live.runtime import RuntimeStopped
from ditto_core.live.server import CLOSE_CODES, Limits, LiveAvatars, _authorized, create_app, unpack_frame
from ditto_core.motion.motion_options import MotionOptions
from ditto_core.video.fmp4 import NAL_IDR, annexb_units
from tests.live_support import ProjectionSampler, RecordingRenderer, light_pipeline
from tests.loopback_http import served
from tests.process_support import ChildOutput
from tests.test_conditions import random_source

REPO = Path(__file__).resolve().parents[1]


class NoiseRenderer(RecordingRenderer):
    """Random pictures of the output size: their JPEGs are large, so a client that stops reading fills
    the socket quickly."""

    def render(self, jobs):
        super().render(jobs)
        out = []
        for job in jobs:
            size = job.stream.frame_size
            out.append(torch.randint(0, 256, (job.motion.kp_driving.shape[0], *size, 3), dtype=torch.uint8))
        return out


def _portrait(frames: int, is_image: bool, seed: int, size=(160, 200)):
    source = random_source(frames, is_image=is_image, seed=seed)
    return replace(source, frames=torch.zeros(frames, *size, 3, dtype=torch.uint8))


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    return light_pipeline(tmp_path_factory.mktemp("live_server"))


def _avatars(pipeline, max_streams=2, renderer=None) -> LiveAvatars:
    sampler = ProjectionSampler()
    avatars = LiveAvatars(max_streams=max_streams, renderer=renderer or NoiseRenderer(),
                          sampler_factory=lambda options: sampler)
    avatars.publish("anna", pipeline, _portrait(1, is_image=True, seed=2))
    avatars.publish("video", pipeline, _portrait(3, is_image=False, seed=3))
    avatars.publish("wide", pipeline, _portrait(1, is_image=True, seed=4, size=(900, 1200)))
    return avatars


@asynccontextmanager
async def serving(avatars, token=None, limits=Limits()):
    async with served(create_app(avatars, token=token, limits=limits)) as url, aiohttp.ClientSession() as session:
        yield session, f"{url}/ditto/live"


def _pcm(seconds: float, seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    return (3000 * rng.standard_normal(int(seconds * 16000))).astype("<i2").tobytes()


async def _open(session, url, **fields):
    ws = await session.ws_connect(url + "/ws")
    await ws.send_str(json.dumps({"type": "open", "avatar": "anna", "idle": False, "options": {"steps": 2}, **fields}))
    return ws


async def _open_ready(session, url, timeout=30.0, **fields):
    """:func:`_open`, then the server's "ready": a stream being served."""
    ws = await _open(session, url, **fields)
    assert json.loads((await ws.receive(timeout=timeout)).data)["type"] == "ready"
    return ws


async def _until_closed(ws, timeout=30.0):
    """Every message up to the close: (texts as dicts, frames as tuples)."""
    texts, frames = [], []
    while True:
        msg = await ws.receive(timeout=timeout)
        if msg.type == aiohttp.WSMsgType.TEXT:
            texts.append(json.loads(msg.data))
        elif msg.type == aiohttp.WSMsgType.BINARY:
            frames.append(unpack_frame(msg.data))
        else:
            return texts, frames


def test_stream_round_trip(pipeline):
    avatars = _avatars(pipeline)

    async def run():
        async with serving(avatars) as (session, url):
            async with session.get(url + "/avatars") as response:
                assert (await response.json()) == {"avatars": ["anna", "video", "wide"], "ready": True}
            async with session.get(url) as response:
                assert response.status == 200 and "Ditto live avatar" in await response.text()
            ws = await _open(session, url, sample_rate=48000, max_size=100)
            ready = json.loads((await ws.receive(timeout=30)).data)
            assert ready["type"] == "ready" and (ready["height"], ready["width"]) == (80, 100)
            audio = _pcm(3.0)  # 1 s at 48 kHz
            for i in range(0, len(audio), 1922):  # 961 samples at a time
                await ws.send_bytes(audio[i : i + 1922])
            await ws.send_str(json.dumps({"type": "stats"}))
            await ws.send_str(json.dumps({"type": "end"}))
            texts, frames = await _until_closed(ws)
            return ready, texts, frames, ws.close_code

    ready, texts, frames, code = asyncio.run(run())
    avatars.shutdown()
    assert code == 1000
    assert texts[0]["type"] == "stats" and texts[0]["max_streams"] == 2
    assert texts[-1] == {"type": "end", "frames": len(frames)}
    # 1 s at 48 kHz -> 16000 samples: 5 frames per 3200 samples of (lead-in + speech), + the final window's 5
    assert len(frames) == 5 * -(-(16000 + 1920) // 3200) + 5
    assert [f[0] for f in frames] == list(range(len(frames)))
    assert [f[1] for f in frames] == pytest.approx([i / 25 for i in range(len(frames))])
    for index, pts, jpeg, pcm in frames[::7]:
        image = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
        assert image.shape == (80, 100, 3)
        assert len(pcm) == 640 * 2
    assert any(np.frombuffer(f[3], "<i2").any() for f in frames)  # the speech comes back with its frames


def test_h264_output_is_one_access_unit_per_frame(pipeline):
    import av

    avatars = _avatars(pipeline)

    async def run():
        async with serving(avatars) as (session, url):
            ws = await _open(session, url, output="h264", max_size=101)  # 101 x 81 -> even: 100 x 80
            ready = json.loads((await ws.receive(timeout=30)).data)
            await ws.send_bytes(_pcm(0.5))
            await ws.send_str(json.dumps({"type": "end"}))
            return ready, await _until_closed(ws)

    ready, (texts, frames) = asyncio.run(run())
    avatars.shutdown()
    assert (ready["width"], ready["height"]) == (100, 80) and texts[-1]["type"] == "end"
    decoder = av.CodecContext.create("h264", "r")
    pictures = []
    for _, _, unit, _ in frames:
        assert unit.startswith((b"\x00\x00\x00\x01", b"\x00\x00\x01"))  # Annex-B start code
        pictures += decoder.decode(av.Packet(unit))  # each message decodes on its own: one whole frame
    pictures += decoder.decode(None)
    assert len(pictures) == len(frames) and (pictures[0].width, pictures[0].height) == (100, 80)


def test_fmp4_output_is_a_fragment_per_frame_that_plays_as_one_stream(pipeline):
    import io

    import av

    avatars = _avatars(pipeline)

    async def run():
        async with serving(avatars) as (session, url):
            ws = await _open(session, url, output="fmp4", max_size=101)
            ready = json.loads((await ws.receive(timeout=30)).data)
            await ws.send_bytes(_pcm(0.5))
            await ws.send_str(json.dumps({"type": "end"}))
            return ready, await _until_closed(ws)

    ready, (texts, frames) = asyncio.run(run())
    avatars.shutdown()
    assert ready["output"] == "fmp4" and texts[-1]["type"] == "end"
    assert frames[0][2][4:8] == b"ftyp" and all(f[2][4:8] == b"moof" for f in frames[1:])
    with av.open(io.BytesIO(b"".join(f[2] for f in frames)), format="mp4") as container:
        pictures = list(container.decode(video=0))
    assert len(pictures) == len(frames) and (pictures[0].width, pictures[0].height) == (100, 80)
    assert [float(p.pts * p.time_base) for p in pictures] == pytest.approx([f[1] for f in frames])


@pytest.mark.reliability(area="Live streams", case="h264 clients that disconnect while their frames are encoded",
                         behaviour="only their streams end; the runtime keeps serving the next client")
def test_h264_clients_that_leave_mid_stream_do_not_stop_the_runtime(pipeline):
    avatars = _avatars(pipeline)

    async def run():
        async with serving(avatars) as (session, url):
            for _ in range(6):
                ws = await _open(session, url, output="h264", max_size=101)
                await ws.receive(timeout=30)
                await ws.send_bytes(_pcm(1.0))
                await ws.receive(timeout=30)  # its first frame: the encoder is running
                await ws.close()
            ws = await _open(session, url, output="h264", max_size=101)
            ready = json.loads((await ws.receive(timeout=30)).data)
            await ws.send_bytes(_pcm(0.5))
            await ws.send_str(json.dumps({"type": "end"}))
            messages = await _until_closed(ws)
            return ready, messages, next(iter(avatars._runtimes.values()))._error

    ready, (texts, frames), error = asyncio.run(run())
    avatars.shutdown()
    assert ready["type"] == "ready" and texts[-1] == {"type": "end", "frames": len(frames)} and frames
    assert error is None


def _nal_types(unit: bytes) -> set[int]:
    """The NAL unit types of an Annex-B access unit (5: an IDR slice, 1: a slice that needs earlier frames)."""
    return {nal[0] & 0x1F for nal in annexb_units(unit)}


@pytest.mark.reliability(area="Live streams", case="barge-in (clear) on an H.264 stream",
                         behaviour="the frames after the dropped ones start with a keyframe: the client's decoder "
                                   "never gets a frame whose references it was not sent")
def test_h264_frames_after_a_clear_start_with_a_keyframe(pipeline):
    import av

    avatars = _avatars(pipeline)

    async def run():
        async with serving(avatars) as (session, url):
            ws = await _open(session, url, output="h264", max_size=101)
            await ws.receive(timeout=30)
            await ws.send_bytes(_pcm(2.0))
            first = await ws.receive(timeout=30)  # frames are coming: those queued behind it are dropped
            await ws.send_str(json.dumps({"type": "clear"}))
            await ws.send_bytes(_pcm(1.0, seed=1))
            await ws.send_str(json.dumps({"type": "end"}))
            texts, frames = await _until_closed(ws)
            return [unpack_frame(first.data)] + frames, texts

    frames, texts = asyncio.run(run())
    avatars.shutdown()
    assert {"type": "cleared"} in texts and texts[-1]["type"] == "end"
    indices = [f[0] for f in frames]
    gaps = [k for k in range(1, len(frames)) if indices[k] != indices[k - 1] + 1]
    assert gaps, f"no frame was dropped by the clear (indices {indices}): the test proves nothing"
    for k in [0, *gaps]:  # where the decoder missed frames, the next one must stand alone
        assert NAL_IDR in _nal_types(frames[k][2]), f"frame {indices[k]} after a gap is not an IDR: {_nal_types(frames[k][2])}"
    decoder = av.CodecContext.create("h264", "r")
    pictures = [p for f in frames for p in decoder.decode(av.Packet(f[2]))] + list(decoder.decode(None))
    assert len(pictures) == len(frames)


@pytest.mark.reliability(area="Live streams", case="clear sent right after end",
                         behaviour="the stream still ends with its end message (never left waiting)")
@pytest.mark.parametrize("delay", [0.0, 0.05, 0.2])
def test_a_clear_after_end_still_ends_the_stream(pipeline, delay):
    avatars = _avatars(pipeline)

    async def run():
        async with serving(avatars) as (session, url):
            ws = await _open(session, url)
            await ws.receive(timeout=30)
            await ws.send_bytes(_pcm(0.6))
            await ws.send_str(json.dumps({"type": "end"}))
            await asyncio.sleep(delay)
            await ws.send_str(json.dumps({"type": "clear"}))
            return await _until_closed(ws, timeout=20)

    texts, frames = asyncio.run(run())
    avatars.shutdown()
    assert texts[-1] == {"type": "end", "frames": len(frames)}, texts


@pytest.mark.reliability(area="Live streams", case="speech cut into a few samples a message, thousands a second",
                         behaviour="closed with 4400 asking for pieces of 10 ms or more")
def test_a_flood_of_tiny_audio_messages_is_refused(pipeline):
    code, errors = _close_after_audio(pipeline, [b"\x01\x00" * 2] * 200,
                                      Limits(audio_messages_per_s=50, audio_message_burst=20))
    assert code == 4400 and "audio messages a second" in errors[0]["message"], errors


def test_one_message_longer_than_the_buffer_is_refused_for_its_size(pipeline):
    # 31 s in one message, under the 1 MiB limit
    code, errors = _close_after_audio(pipeline, [b"\x00\x01" * 8000 * 31], Limits(), sample_rate=8000)
    assert code == 4400 and "more than a stream buffers (30 s)" in errors[0]["message"], errors


def _close_after_audio(pipeline, messages: list[bytes], limits: Limits, **fields) -> tuple[int, list[dict]]:
    """Open a stream, send ``messages`` of audio, read up to the close: (close code, error messages)."""
    avatars = _avatars(pipeline)

    async def run():
        async with serving(avatars, limits=limits) as (session, url):
            ws = await _open(session, url, **fields)
            await ws.receive(timeout=30)
            for message in messages:
                await ws.send_bytes(message)
            return await _until_closed(ws), ws.close_code

    received, code = asyncio.run(run())
    avatars.shutdown()
    return code, _close(received)


def test_the_token_can_come_from_the_environment(monkeypatch):
    from ditto_core.__main__ import build_parser

    monkeypatch.setenv("DITTO_LIVE_TOKEN", "from-env")
    assert build_parser().parse_args(["serve"]).token == "from-env"
    assert build_parser().parse_args(["serve", "--token", "flag"]).token == "flag"


def _close(messages):
    texts, _ = messages
    return [t for t in texts if t["type"] == "error"]


@pytest.mark.reliability(area="Live streams", case="malformed or invalid control messages",
                         behaviour="error message naming the field, then close 4400/4404/4413")
@pytest.mark.parametrize("first, then, code, words", [
    (b"\x00\x01", None, "bad_request", "must be text"),
    ("{not json", None, "bad_request", "JSON"),
    (json.dumps([1, 2]), None, "bad_request", "JSON objects"),
    (json.dumps({"type": "play"}), None, "bad_request", '"type": "open"'),
    (json.dumps({"type": "open", "avatar": "bob"}), None, "unknown_avatar", "anna, video, wide"),
    (json.dumps({"type": "open", "avatar": "anna", "colour": 1}), None, "bad_request", "colour"),
    (json.dumps({"type": "open", "avatar": "anna", "options": {"fade_in": 3}}), None, "bad_request", "fade_in"),
    (json.dumps({"type": "open", "avatar": "anna", "options": {"steps": 0}}), None, "bad_request", "steps"),
    (json.dumps({"type": "open", "avatar": "anna", "sample_rate": 1000}), None, "bad_request", "1000 Hz"),
    (json.dumps({"type": "open", "avatar": "anna", "quality": 0}), None, "bad_request", "quality"),
    (json.dumps({"type": "open", "avatar": "anna"}), b"\x01\x02\x03", "bad_request", "odd number of bytes"),
    (json.dumps({"type": "open", "avatar": "anna"}), b"\x00" * 5000, "too_large", "limit is 4096"),
    (json.dumps({"type": "open", "avatar": "anna"}), json.dumps({"type": "rewind"}), "bad_request", "rewind"),
    (json.dumps({"type": "open", "avatar": "anna"}), "x" * 3000, "too_large", "control message"),
    (json.dumps({"type": "open", "avatar": "anna"}), "[" * 1500, "bad_request", "nested too deeply"),
    (json.dumps({"type": "open", "avatar": "anna", "idle": "false"}), None, "bad_request", "idle must be true or false"),
    (json.dumps({"type": "open", "avatar": "anna", "quality": True}), None, "bad_request", "quality"),
    (json.dumps({"type": "open", "avatar": "anna", "options": {"steps": 51}}), None, "bad_request", "at most 50 steps"),
    (json.dumps({"type": "open", "avatar": "anna", "options": {"sampler_compile": True}}), None, "bad_request",
     "sampler_compile"),
    (json.dumps({"type": "open", "avatar": "é" * 100}), None, "unknown_avatar", "unknown avatar"),
])
def test_bad_messages_get_a_clear_error_and_close(pipeline, first, then, code, words):
    avatars = _avatars(pipeline)

    async def run():
        async with serving(avatars, limits=Limits(max_message_bytes=4096, max_control_bytes=2048)) as (session, url):
            ws = await session.ws_connect(url + "/ws")
            await (ws.send_bytes(first) if isinstance(first, bytes) else ws.send_str(first))
            if then is not None:
                assert json.loads((await ws.receive(timeout=30)).data)["type"] == "ready"
                await (ws.send_bytes(then) if isinstance(then, bytes) else ws.send_str(then))
            messages = await _until_closed(ws)
            return messages, ws.close_code

    messages, close_code = asyncio.run(run())
    runtimes = list(avatars._runtimes.values())
    avatars.shutdown()
    errors = _close(messages)
    assert len(errors) == 1 and errors[0]["code"] == code and words in errors[0]["message"], errors
    assert close_code == CLOSE_CODES[code]
    assert all(r.active_streams == 0 for r in runtimes)


@pytest.mark.reliability(area="Live streams", case="a client that never sends the open message",
                         behaviour="closed with 4400 after the open timeout")
def test_silent_client_is_closed_after_the_open_timeout(pipeline):
    avatars = _avatars(pipeline)

    async def run():
        async with serving(avatars, limits=Limits(open_timeout_s=0.3)) as (session, url):
            ws = await session.ws_connect(url + "/ws")
            return await _until_closed(ws), ws.close_code

    messages, code = asyncio.run(run())
    avatars.shutdown()
    assert code == 4400 and "no open message" in _close(messages)[0]["message"]


@pytest.mark.reliability(area="Live streams", case="more streams than the device admits",
                         behaviour="refused with 4429 and a message; the running stream is unaffected")
def test_streams_beyond_capacity_are_refused_and_the_others_keep_going(pipeline):
    avatars = _avatars(pipeline, max_streams=1)

    async def run():
        async with serving(avatars) as (session, url):
            first = await _open_ready(session, url)
            second = await _open(session, url)
            refused = await _until_closed(second), second.close_code
            await first.send_bytes(_pcm(0.5))
            await first.send_str(json.dumps({"type": "end"}))
            return refused, await _until_closed(first)

    (refused, code), (texts, frames) = asyncio.run(run())
    avatars.shutdown()
    assert code == 4429 and "at capacity: 1 of 1" in _close(refused)[0]["message"]
    assert texts[-1]["type"] == "end" and len(frames) == texts[-1]["frames"] > 0


@pytest.mark.reliability(area="Live streams", case="stream endpoint with a token",
                         behaviour="wrong or missing token: 4401 / HTTP 401; the right token streams")
def test_token_is_required_when_set(pipeline):
    avatars = _avatars(pipeline)

    async def run():
        async with serving(avatars, token="s3cret") as (session, url):
            async with session.get(url + "/avatars") as response:
                assert response.status == 401
            wrong = await session.ws_connect(url + "/ws?token=nope")
            refused = await _until_closed(wrong), wrong.close_code
            ws = await session.ws_connect(url + "/ws?token=s3cret")
            await ws.send_str(json.dumps({"type": "open", "avatar": "anna"}))
            ready = json.loads((await ws.receive(timeout=30)).data)
            await ws.close()
            headers = {"Authorization": "Bearer s3cret"}
            async with session.get(url + "/avatars", headers=headers) as response:
                listed = response.status
            return refused, ready, listed

    (messages, code), ready, listed = asyncio.run(run())
    avatars.shutdown()
    assert code == 4401 and "token" in _close(messages)[0]["message"]
    assert ready["type"] == "ready" and listed == 200


class _Request:
    def __init__(self, remote, query=None, headers=None, host="127.0.0.1:8188"):
        self.remote, self.query, self.headers, self.host = remote, query or {}, headers or {}, host


def test_without_a_token_only_this_machine_is_served():
    assert _authorized(_Request("127.0.0.1"), None) and _authorized(_Request("::1", host="[::1]:8188"), None)
    assert not _authorized(_Request("192.168.1.20"), None) and not _authorized(_Request(None), None)
    assert _authorized(_Request("192.168.1.20", {"token": "t"}), "t")
    assert not _authorized(_Request("127.0.0.1", {"token": "u"}), "t")
    assert _authorized(_Request("127.0.0.1", headers={"Authorization": "bearer t"}), "t")  # the scheme's case is free


@pytest.mark.reliability(area="Live streams", case="without a token: a web page from elsewhere (its Origin), or a "
                         "DNS-rebound name (the Host), connects through the user's browser",
                         behaviour="refused (401 / 4401) like a client of another machine; pages this machine serves "
                         "are served")
@pytest.mark.parametrize("origin, host, served", [
    (None, "127.0.0.1:8188", True),
    ("http://127.0.0.1:8188", "127.0.0.1:8188", True),
    ("http://localhost:8188", "localhost:8188", True),
    ("http://[::1]:8188", "[::1]:8188", True),
    ("https://evil.example", "127.0.0.1:8188", False),
    ("http://127.0.0.1.evil.example", "127.0.0.1:8188", False),
    ("null", "127.0.0.1:8188", False),
    (None, "rebind.evil.example:8188", False),
    (None, "127.0.0.1.evil.example", False),
])
def test_without_a_token_pages_of_other_sites_are_refused(origin, host, served):
    headers = {} if origin is None else {"Origin": origin}
    assert _authorized(_Request("127.0.0.1", headers=headers, host=host), None) is served


@pytest.mark.reliability(area="Live streams", case="a client that stops reading frames",
                         behaviour="its stream pauses (bounded queues), then it is closed with 4408 and freed")
def test_client_that_stops_reading_is_closed_and_freed(pipeline):
    avatars = _avatars(pipeline)

    async def run():
        async with serving(avatars, limits=Limits(stall_timeout_s=0.5)) as (session, url):
            ws = await _open_ready(session, url, avatar="wide")  # large frames fill the socket's buffers quickly
            for _ in range(8):
                await ws.send_bytes(_pcm(1.0))
            runtime = next(iter(avatars._runtimes.values()))
            deadline = time.monotonic() + 20
            while runtime.active_streams and time.monotonic() < deadline:
                await asyncio.sleep(0.1)  # not reading: frames pile up in the socket, the stream pauses
            freed = runtime.active_streams == 0
            made = runtime.renderer.motions
            texts, frames = await _until_closed(ws)
            return freed, texts, frames, ws.close_code, sum(m.kp_driving.shape[0] for _, m in next(iter(made.values())))

    freed, texts, frames, code, rendered = asyncio.run(run())
    avatars.shutdown()
    assert freed
    assert rendered < 8 * 25  # paused: it did not render the 8 s of speech it was sent
    assert code == 4408 and "took no frames" in _close((texts, frames))[0]["message"]


@pytest.mark.reliability(area="Live streams", case="a client that opens a stream and sends no speech",
                         behaviour="speech keeps it open; silent for --silent-timeout (default 600 s) it is closed "
                                   "with 4408 naming the timeout, and its place freed")
def test_a_stream_without_speech_is_closed_and_its_place_freed(pipeline):
    avatars = _avatars(pipeline)

    async def run():
        async with serving(avatars, limits=Limits(silent_timeout_s=0.6)) as (session, url):
            ws = await _open_ready(session, url)
            runtime = next(iter(avatars._runtimes.values()))
            reading = asyncio.ensure_future(_until_closed(ws))
            for _ in range(8):  # 1.6 s of speech in pieces, longer than the timeout: it stays open
                await ws.send_bytes(_pcm(0.1))
                await asyncio.sleep(0.2)
            open_while_speaking = not reading.done() and runtime.active_streams == 1
            texts, frames = await asyncio.wait_for(reading, timeout=30)
            return open_while_speaking, runtime.active_streams, texts, frames, ws.close_code

    open_while_speaking, active, texts, frames, code = asyncio.run(run())
    avatars.shutdown()
    assert open_while_speaking and frames  # it rendered the speech it was sent
    assert active == 0
    errors = _close((texts, frames))
    assert code == 4408 and errors[0]["code"] == "silent" and "no speech for 0.6 s" in errors[0]["message"]


def test_a_stream_that_ended_is_not_cut_by_the_silent_timeout(pipeline):
    avatars = _avatars(pipeline, renderer=NoiseRenderer(delay=0.4))

    async def run():
        async with serving(avatars, limits=Limits(silent_timeout_s=0.3)) as (session, url):
            ws = await _open_ready(session, url)
            await ws.send_bytes(_pcm(2.0))
            await ws.send_str(json.dumps({"type": "end"}))
            return await _until_closed(ws), ws.close_code

    (texts, frames), code = asyncio.run(run())
    avatars.shutdown()
    assert code == 1000 and texts[-1] == {"type": "end", "frames": len(frames)} and len(frames) >= 50  # all its speech


def test_serve_takes_seconds_or_zero_for_no_silent_timeout():
    from ditto_core.live.admission import SILENT_TIMEOUT_S

    assert build_parser().parse_args(["serve", "--silent-timeout", "90"]).silent_timeout == 90
    assert build_parser().parse_args(["serve", "--silent-timeout", "0"]).silent_timeout == 0
    assert build_parser().parse_args(["serve"]).silent_timeout == SILENT_TIMEOUT_S


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "soon"])
def test_serve_refuses_a_silent_timeout_that_is_not_seconds(value, capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--silent-timeout", value])
    assert "--silent-timeout" in capsys.readouterr().err


@pytest.mark.reliability(area="Live streams", case="a client that disconnects mid-stream",
                         behaviour="its stream and queued work are freed; the server keeps serving")
def test_disconnect_mid_stream_frees_everything(pipeline):
    avatars = _avatars(pipeline)

    async def run():
        async with serving(avatars) as (session, url):
            ws = await _open_ready(session, url)
            await ws.send_bytes(_pcm(3.0))
            await ws.receive(timeout=30)  # a frame is out: the stream is busy
            await ws.close()
            runtime = next(iter(avatars._runtimes.values()))
            deadline = time.monotonic() + 10
            while runtime.active_streams and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            freed = runtime.active_streams == 0
            again = await _open(session, url)
            ready = json.loads((await again.receive(timeout=30)).data)["type"]
            await again.close()
            return freed, ready

    freed, ready = asyncio.run(run())
    avatars.shutdown()
    assert freed and ready == "ready"


@pytest.mark.reliability(area="Live streams", case="NaN or non-PCM audio pushed through the Python API",
                         behaviour="InputError naming the problem; the stream stays usable")
def test_python_api_refuses_bad_audio(pipeline):
    runtime = LiveRuntime(pipeline, max_streams=1, renderer=RecordingRenderer(),
                          sampler_factory=lambda options: ProjectionSampler())

    async def run():
        async with AvatarStream(runtime, random_source(1, is_image=True), config=StreamConfig(idle=False)) as stream:
            bad = np.zeros(800, np.float32)
            bad[100] = np.nan
            with pytest.raises(InputError, match="NaN or infinite"):
                stream.push_audio(bad, 16000)
            with pytest.raises(InputError, match="dtype torch.int32"):
                stream.push_audio(np.zeros(10, np.int32), 16000)
            with pytest.raises(InputError, match="outside"):
                stream.push_audio(np.zeros(10, np.float32), 100)
            stream.push_audio(np.zeros(10, np.float32), 22050)
            with pytest.raises(InputError, match="changed from 22050 Hz to 16000 Hz"):
                stream.push_audio(np.zeros(10, np.float32), 16000)
            stream.end()
            return [f async for f in stream]

    frames = asyncio.run(run())
    runtime.shutdown()
    assert len(frames) == 10  # the zero-padded first window and the final one: the stream worked


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # a fresh interpreter importing torch
def test_streams_are_refused_while_their_runtime_warms_up_then_served(pipeline, monkeypatch):
    gate, calls = threading.Event(), []

    def warm_up(self, source, options, several_avatars=True, steps=None):
        calls.append((several_avatars, steps))
        assert gate.wait(30)

    monkeypatch.setattr(LiveRuntime, "warm_up", warm_up)
    avatars = _avatars(pipeline)
    thread = avatars.warm_up_in_background("anna", MotionOptions(), several_avatars=False)
    assert avatars.warm_up_in_background("video", MotionOptions()) is None  # one runtime: warmed up once

    async def scenario():
        async with serving(avatars) as (session, url):
            async with session.get(url + "/avatars") as response:
                warming = await response.json()
            ws = await _open(session, url)
            refused, _ = await _until_closed(ws)
            code = ws.close_code
            gate.set()
            await asyncio.get_running_loop().run_in_executor(None, thread.join)
            async with session.get(url + "/avatars") as response:
                ready = await response.json()
            ws = await _open(session, url)
            opened = json.loads((await ws.receive(timeout=30)).data)
            await ws.close()
            again = avatars.warm_up_in_background("anna", MotionOptions())  # before the app's shutdown
            return warming, refused, code, ready, opened, again

    try:
        warming, refused, code, ready, opened, again = asyncio.run(scenario())
    finally:
        gate.set()
        avatars.shutdown()
    assert warming["ready"] is False and warming["warming_s"] >= 0 and warming["avatars"] == ["anna", "video", "wide"]
    assert refused[-1]["code"] == "warming_up" and "not ready" in refused[-1]["message"]
    assert code == CLOSE_CODES["warming_up"] == 4503
    assert ready == {"avatars": ["anna", "video", "wide"], "ready": True, "steps": [25]}
    assert opened["type"] == "ready" and calls == [(False, (25,))]
    assert again is None  # warm already


@pytest.mark.reliability(area="Live streams", case="a client opens a stream with DDIM steps the server did not warm up",
                         behaviour="refused at open (bad_request) naming options.steps and the steps served; nothing "
                                   "compiles or records while the other streams are served")
def test_a_warmed_up_server_serves_only_the_steps_it_recorded(pipeline):
    avatars = _avatars(pipeline)
    # Off CUDA the warm-up records nothing, but sets what is served as on a GPU.
    avatars.warm_up_in_background("anna", MotionOptions(steps=2), steps=(3, 2)).join(30)
    with pytest.raises(InputError, match=r"steps 4: the live runtime of these models serves steps 3, 2"):
        avatars.warm_up_in_background("wide", MotionOptions(), steps=(4,))  # the same runtime, other steps
    assert avatars.warm_up_in_background("wide", MotionOptions(steps=3)) is None  # one it serves: nothing to do

    async def scenario():
        async with serving(avatars) as (session, url):
            async with session.get(url + "/avatars") as response:
                status = await response.json()
            served = []
            for steps in (2, 3):
                ws = await _open(session, url, options={"steps": steps})
                served.append(json.loads((await ws.receive(timeout=30)).data)["type"])
                await ws.close()
            ws = await _open(session, url, options={"steps": 10})
            refused, _ = await _until_closed(ws)
            return status, served, refused, ws.close_code

    try:
        status, served, refused, code = asyncio.run(scenario())
    finally:
        avatars.shutdown()
    assert status == {"avatars": ["anna", "video", "wide"], "ready": True, "steps": [2, 3]}
    assert served == ["ready", "ready"]
    assert refused[-1]["code"] == "bad_request" and code == CLOSE_CODES["bad_request"]
    message = refused[-1]["message"]
    assert "MotionOptions.steps=10" in message and "serves steps 2, 3" in message


def test_a_runtime_warms_up_for_one_to_four_valid_step_counts(pipeline):
    runtime = LiveRuntime(pipeline, renderer=RecordingRenderer())
    try:
        assert runtime.served_steps is None  # before a warm-up: any steps
        for bad, match in (((1, 2, 3, 4, 5), "1 to 4 step counts"), ((), "1 to 4 step counts"), ((0,), "steps")):
            with pytest.raises(InputError, match=match):
                runtime.warm_up(random_source(1, is_image=True, seed=1), MotionOptions(), steps=bad)
        runtime.warm_up(random_source(1, is_image=True, seed=1), MotionOptions(steps=7), steps=None)
        assert runtime.served_steps == [7]  # the options' own steps by default
    finally:
        runtime.shutdown()


def _live_threads() -> set[threading.Thread]:
    return {thread for thread in threading.enumerate() if thread.name.startswith(("ditto-live-motion", "ditto-live-render"))}


@pytest.mark.reliability(area="Live streams", case="a client opens a stream, or a warm-up is asked for, after the avatars' "
                                         "runtimes were shut down (the server stopping)",
                         behaviour="closed with 'gone' naming the shutdown; no runtime (threads, VRAM) is started "
                                   "again, none left running")
def test_nothing_opens_or_warms_up_after_the_shutdown(pipeline):
    avatars = _avatars(pipeline)
    before = _live_threads()

    async def scenario():
        async with serving(avatars) as (session, url):
            ws = await _open(session, url)
            opened = json.loads((await ws.receive(timeout=30)).data)
            await asyncio.get_running_loop().run_in_executor(None, avatars.shutdown)
            first, _ = await _until_closed(ws)  # the open stream ends
            ws = await _open(session, url)
            later, _ = await _until_closed(ws)
            return opened, first, later, ws.close_code

    opened, first, later, code = asyncio.run(scenario())
    assert opened["type"] == "ready"
    assert first[-1]["code"] == "gone" and later[-1]["code"] == "gone" and code == CLOSE_CODES["gone"]
    assert "shutting down" in later[-1]["message"]
    with pytest.raises(RuntimeStopped, match="shutting down"):
        avatars.warm_up_in_background("anna", MotionOptions())
    assert _live_threads() <= before  # the runtime that served is stopped; none was made again


def test_a_failed_warm_up_is_told_to_every_client_of_its_avatars(pipeline, monkeypatch):
    def warm_up(self, source, options, several_avatars=True, steps=None):
        raise RuntimeError("CUDA out of memory while recording")

    monkeypatch.setattr(LiveRuntime, "warm_up", warm_up)
    avatars = _avatars(pipeline)
    avatars.warm_up_in_background("anna", MotionOptions()).join(30)

    async def scenario():
        async with serving(avatars) as (session, url):
            ws = await _open(session, url, avatar="wide")  # another avatar of the same runtime
            texts, _ = await _until_closed(ws)
            retry = avatars.warm_up_in_background("anna", MotionOptions())  # a failed warm-up may be tried again
            assert retry is not None
            await asyncio.get_running_loop().run_in_executor(None, retry.join, 30)
            return texts, ws.close_code

    try:
        texts, code = asyncio.run(scenario())
    finally:
        avatars.shutdown()
    assert code == CLOSE_CODES["internal"]
    assert texts[-1]["code"] == "internal" and "warm-up failed" in texts[-1]["message"]
    assert "CUDA out of memory while recording" in texts[-1]["message"]


@pytest.mark.parametrize("fails", [False, True])
def test_what_follows_a_warm_up_runs_before_its_avatars_are_served_and_only_after_a_success(pipeline, monkeypatch,
                                                                                           fails):
    def warm_up(self, source, options, several_avatars=True, steps=None):
        if fails:
            raise RuntimeError("CUDA out of memory while recording")

    monkeypatch.setattr(LiveRuntime, "warm_up", warm_up)
    avatars = _avatars(pipeline)
    seen = []  # whether the avatars were served when `then` ran
    try:
        avatars.warm_up_in_background("anna", MotionOptions(), then=lambda: seen.append(avatars.status()["ready"])
                                      ).join(30)
        after = avatars.status()
    finally:
        avatars.shutdown()
    assert seen == ([] if fails else [False])
    assert after["ready"] and ("steps" in after) is not fails  # done either way; steps served only after a success


def test_a_warm_up_cut_short_by_an_unload_is_logged_as_asked_for_not_as_a_fault(pipeline, monkeypatch, caplog):
    gate = threading.Event()
    monkeypatch.setattr(LiveRuntime, "warm_up", lambda self, source, options, several_avatars=True, steps=None:
                        self._on_render_thread(lambda: gate.wait(30)))  # the render thread busy recording
    avatars = _avatars(pipeline)
    with caplog.at_level(logging.INFO, logger="ditto_core.live.server"):
        warming = avatars.warm_up_in_background("anna", MotionOptions())
        unload = threading.Thread(target=avatars.withdraw, args=(pipeline, "the models were unloaded"))
        unload.start()
        warming.join(30)
        gate.set()
        unload.join(30)
    told = [record for record in caplog.records if "warm-up" in record.getMessage()]
    assert [record.levelno for record in told] == [logging.INFO], [record.getMessage() for record in told]
    assert "the models were unloaded" in told[0].getMessage() and not warming.is_alive()


def test_withdrawn_avatars_end_their_streams_with_the_reason_and_cannot_be_opened(pipeline):
    avatars = _avatars(pipeline)

    async def scenario():
        async with serving(avatars) as (session, url):
            ws = await _open_ready(session, url, timeout=10)
            await ws.send_bytes(_pcm(1.0))
            withdrawn = await asyncio.get_running_loop().run_in_executor(
                None, avatars.withdraw, pipeline, "the avatar's models were unloaded")
            texts, _ = await _until_closed(ws)
            code = ws.close_code
            async with session.get(url + "/avatars") as response:
                listed = await response.json()
            again = await _open(session, url)
            refused, _ = await _until_closed(again)
            return withdrawn, texts, code, listed, refused

    try:
        withdrawn, texts, code, listed, refused = asyncio.run(scenario())
    finally:
        avatars.shutdown()
    assert withdrawn == ["anna", "video", "wide"] and listed == {"avatars": [], "ready": True}
    assert code == CLOSE_CODES["gone"] == 4410
    assert texts[-1] == {"type": "error", "code": "gone", "message": "the avatar's models were unloaded"}
    assert refused[-1]["code"] == "unknown_avatar"


@pytest.mark.reliability(area="Live streams", case="the runtime stops (models unloaded, server stopping) while a "
                                                   "stream's JPEG frames are still being encoded",
                         behaviour="the frames handed out arrive in order, then 'gone' with the reason; never an "
                                   "abnormal close (1006) without one")
def test_frames_in_flight_when_the_runtime_stops_arrive_before_gone(pipeline, monkeypatch):
    from ditto_core.live import runtime as runtime_module

    encode = runtime_module.encode_jpeg

    def slow_encode(*args):  # the encoder threads fall behind the render: frames queue for them
        time.sleep(0.05)
        return encode(*args)

    monkeypatch.setattr(runtime_module, "encode_jpeg", slow_encode)
    avatars = _avatars(pipeline)

    async def scenario():
        async with serving(avatars) as (session, url):
            ws = await _open_ready(session, url, timeout=10)
            await ws.send_bytes(_pcm(3.0))
            first = await ws.receive(timeout=30)
            await asyncio.sleep(0.3)  # more frames rendered than encoded
            await asyncio.get_running_loop().run_in_executor(None, avatars.withdraw, pipeline, "the models were unloaded")
            texts, frames = await _until_closed(ws)
            return unpack_frame(first.data)[0], texts, frames, ws.close_code

    try:
        first, texts, frames, code = asyncio.run(scenario())
    finally:
        avatars.shutdown()
    assert code == CLOSE_CODES["gone"]
    assert texts[-1] == {"type": "error", "code": "gone", "message": "the models were unloaded"}
    assert [index for index, *_ in frames] == list(range(first + 1, first + 1 + len(frames)))


def test_standalone_server_refuses_a_public_bind_without_a_token():
    result = subprocess.run([sys.executable, "-m", "ditto_core", "serve", "--random-weights", "--host", "0.0.0.0"],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "--token" in result.stderr


def test_serve_steps_are_checked_before_anything_loads():
    parser = build_parser()
    assert parser.parse_args(["serve", "--steps", "25", "10"]).steps == [25, 10]
    assert parser.parse_args(["serve"]).steps is None  # the motion default, warmed up alone
    for bad in ("0", "51", "ten"):
        with pytest.raises(SystemExit):
            parser.parse_args(["serve", "--steps", bad])
    from ditto_core.live.server import run

    args = parser.parse_args(["serve", "--random-weights", "--steps", "5", "10", "15", "20", "25"])
    with pytest.raises(InputError, match=r"--steps 5 10 15 20 25: at most 4 step counts"):
        run(args)


@pytest.mark.slow
def test_standalone_server_starts_serves_and_stops(example_dir):
    port = _free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1"}  # a crash shows its threads' stacks
    proc = subprocess.Popen(
        [sys.executable, "-m", "ditto_core", "serve", "--random-weights", "--device", "cpu", "--no-compile",
         "--precision", "fp32", "--port", str(port), "--avatar", f"demo={example_dir / 'portrait.jpg'}",
         "--steps", "25", "10"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )
    printed = ChildOutput(proc)
    try:
        assert printed.wait_for("serving", timeout=240), printed.text()

        async def probe():
            async with aiohttp.ClientSession() as session:
                for _ in range(100):
                    try:
                        async with session.get(f"http://127.0.0.1:{port}/ditto/live/avatars") as response:
                            status = await response.json()
                            if status["ready"]:
                                return status
                    except aiohttp.ClientConnectionError:
                        pass
                    await asyncio.sleep(0.1)

        status = asyncio.run(probe())
        assert status["avatars"] == ["demo"] and status["steps"] == [10, 25]  # the steps its warm-up recorded
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    output = printed.text(timeout=30)
    assert proc.returncode == 0, output[-3000:]
    assert "Ditto live: ready after a" in output  # the operator sees the warm-up end (logged to stderr)
    # What the start-up and the warm-up made is frozen before streams are served (gc_pauses).
    frozen = re.search(r"Ditto live: (\d+) objects of the start-up and warm-up are kept out", output)
    assert frozen and int(frozen.group(1)) > 10_000, output[-3000:]
