"""The browser page in headless Chromium: a fake microphone (the example speech) streams in, frames show.

Skipped without ``/usr/bin/chromium`` and the ``playwright`` package. The server is the real
live app on 127.0.0.1 with the light pipeline and a renderer of bright striped frames, so the
screenshot shows whether frames reached the canvas.
"""
from __future__ import annotations

import asyncio
import shutil
import threading
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch

from ditto_core.live import LiveRuntime
from ditto_core.live.server import LiveAvatars, create_app
from ditto_core.motion.motion_options import MotionOptions
from tests.live_support import ProjectionSampler, RecordingRenderer, light_pipeline
from tests.test_live_server import _portrait

CHROMIUM = "/usr/bin/chromium"
playwright = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
pytestmark = pytest.mark.skipif(shutil.which(CHROMIUM) is None, reason=f"{CHROMIUM} is not installed")

STRIPE = (255, 140, 0)


class StripedRenderer(RecordingRenderer):
    """Orange frames with a dark bar that moves with the frame number."""

    def render(self, jobs):
        super().render(jobs)
        out = []
        for job in jobs:
            k = job.motion.kp_driving.shape[0]
            h, w = job.stream.frame_size
            frames = torch.tensor(STRIPE, dtype=torch.uint8).expand(k, h, w, 3).clone()
            for i in range(k):
                x = (job.first_frame + i) * 4 % w
                frames[i, :, x : x + 8] = 20
            out.append(frames)
        return out


@contextmanager
def _serve(avatars):
    """Serve ``avatars``' live app on 127.0.0.1 from a thread of its own; yields the page's URL."""
    loop = asyncio.new_event_loop()
    started = threading.Event()
    state = {}

    async def start():
        from aiohttp import web

        runner = web.AppRunner(create_app(avatars))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        state["runner"], state["port"] = runner, site._server.sockets[0].getsockname()[1]
        started.set()

    thread = threading.Thread(target=lambda: (loop.run_until_complete(start()), loop.run_forever()), daemon=True)
    thread.start()
    assert started.wait(30)
    yield f"http://127.0.0.1:{state['port']}/ditto/live"
    asyncio.run_coroutine_threadsafe(state["runner"].cleanup(), loop).result(30)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    avatars.shutdown()


def _avatars(tmp_path, renderer) -> LiveAvatars:
    pipeline = light_pipeline(tmp_path)
    sampler = ProjectionSampler()
    avatars = LiveAvatars(max_streams=2, renderer=renderer, sampler_factory=lambda options: sampler)
    avatars.publish("anna", pipeline, _portrait(1, is_image=True, seed=2, size=(240, 320)))
    return avatars


@pytest.fixture
def live_server(tmp_path):
    renderer = StripedRenderer()
    with _serve(_avatars(tmp_path, renderer)) as url:
        yield url, renderer


def _browser(p, wav):
    return p.chromium.launch(executable_path=CHROMIUM, args=[
        "--use-fake-device-for-media-stream", "--use-fake-ui-for-media-stream",
        f"--use-file-for-fake-audio-capture={wav}", "--autoplay-policy=no-user-gesture-required", "--no-sandbox",
    ])


@pytest.mark.slow
@pytest.mark.parametrize("output", ["jpeg", "h264"])
def test_page_streams_the_microphone_and_shows_frames(live_server, example_dir, tmp_path, output):
    url, renderer = live_server
    wav = example_dir / "speech_24k_mono.wav"
    shot = tmp_path / "live_page.png"
    with playwright.sync_playwright() as p:
        browser = _browser(p, wav)
        try:
            page = browser.new_page()
            page.goto(f"{url}?avatar=anna&autostart=1&output={output}")
            page.wait_for_function("window.dittoLive.framesShown >= 15", timeout=60_000)
            live = page.evaluate("window.dittoLive")
            page.locator("#view").screenshot(path=str(shot))
        finally:
            browser.close()
    assert live["error"] is None and live["state"] == "streaming" and live["output"] == output
    if output == "h264":  # decoded by WebCodecs from the Annex-B access units, codec read from the SPS
        assert live["codec"].startswith("avc1.") and live["chunksDecoded"] >= 15
    assert live["ready"]["width"] == 320 and live["audioScheduled"] >= live["framesShown"]
    import cv2

    image = cv2.imread(str(shot))[:, :, ::-1]
    assert abs(image.shape[0] - 240) <= 2 and abs(image.shape[1] - 320) <= 2  # CSS pixel rounding
    orange = np.abs(image.astype(int) - STRIPE).sum(axis=2) < 60
    assert orange.mean() > 0.8  # the canvas shows the frames...
    assert (image.sum(axis=2) < 150).any(axis=0).sum() >= 4  # ...with their dark bar
    # the microphone's speech went to the server and came back with the frames
    assert live["speechFrames"] >= 5
    assert sum(m.kp_driving.shape[0] for ms in renderer.motions.values() for _, m in ms) >= 15
    Path("/tmp/ditto_live_page.png").write_bytes(shot.read_bytes())  # for a human look


@pytest.mark.slow
def test_page_waits_while_the_server_warms_up_then_streams(tmp_path, example_dir, monkeypatch):
    gate = threading.Event()
    # Off CUDA the warm-up records nothing but sets the steps served: 25 here, which the page must
    # pick from the server's list (its own first choice, 10, would be refused).
    warm_up = LiveRuntime.warm_up

    monkeypatch.setattr(LiveRuntime, "warm_up", lambda self, *args, **kwargs: (gate.wait(60), warm_up(self, *args, **kwargs)))
    avatars = _avatars(tmp_path, StripedRenderer())
    avatars.warm_up_in_background("anna", MotionOptions())
    with playwright.sync_playwright() as p:
        with _serve(avatars) as url:
            browser = _browser(p, example_dir / "speech_24k_mono.wav")
            try:
                page = browser.new_page()
                page.goto(f"{url}?avatar=anna&autostart=1")
                page.wait_for_function("window.dittoLive.serverReady === false", timeout=30_000)
                waiting = page.evaluate("[document.getElementById('status').textContent, "
                                        "document.getElementById('start').disabled, window.dittoLive.state]")
                gate.set()
                page.wait_for_function("window.dittoLive.framesShown >= 5", timeout=60_000)
                live = page.evaluate("window.dittoLive")
            finally:
                gate.set()
                browser.close()
    status, start_disabled, state = waiting
    assert "warming up" in status and start_disabled and state == "idle"  # no stream was tried while warming
    assert live["serverReady"] is True and live["error"] is None and live["state"] == "streaming"
