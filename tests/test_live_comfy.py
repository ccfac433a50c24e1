"""The live routes on ComfyUI's server: mounted by the extension's on_load, fed by Publish Live Avatar.

ComfyUI's ``server.PromptServer`` is stood in for by a module holding an aiohttp
``RouteTableDef`` (what ``PromptServer.instance.routes`` is); the app built from those routes is
served on 127.0.0.1 and streamed from like the standalone one.
"""
from __future__ import annotations

import asyncio
import json
import sys
import time
import types

import aiohttp
import pytest
from aiohttp import web

from tests.comfy_stubs import load_pack
from tests.live_support import ProjectionSampler, RecordingRenderer, light_pipeline
from tests.loopback_http import served
from tests.test_conditions import random_source

pack = load_pack()

from comfyui_ditto_pack.nodes import live_nodes  # noqa: E402
from comfyui_ditto_pack.nodes.model_registry import ModelHandle  # noqa: E402
from ditto_core.errors import InputError  # noqa: E402
from ditto_core.live.server import LiveAvatars, unpack_frame  # noqa: E402


@pytest.fixture
def prompt_server(monkeypatch):
    module = types.ModuleType("server")

    class PromptServer:
        instance = types.SimpleNamespace(routes=web.RouteTableDef())

    module.PromptServer = PromptServer
    monkeypatch.setitem(sys.modules, "server", module)
    return PromptServer.instance


def test_routes_are_mounted_by_a_comfyui_that_only_asks_for_the_node_list(prompt_server):
    """ComfyUI releases that never call on_load (0.3.6x) still get the live routes."""
    extension = asyncio.run(pack.comfy_entrypoint())
    assert asyncio.run(extension.get_node_list())
    assert sorted(route.path for route in prompt_server.routes) == ["/ditto/live", "/ditto/live/avatars",
                                                                     "/ditto/live/ws"]


def test_routes_on_comfyui_stream_a_published_avatar(prompt_server, monkeypatch, tmp_path):
    pipeline = light_pipeline(tmp_path)
    sampler = ProjectionSampler()
    avatars = LiveAvatars(max_streams=1, renderer=RecordingRenderer(), sampler_factory=lambda options: sampler)
    monkeypatch.setattr(live_nodes, "LIVE_AVATARS", avatars)
    handle = ModelHandle(model_dir=str(tmp_path), device="cpu", precision="fp32")
    monkeypatch.setattr(live_nodes.REGISTRY, "pipeline", lambda h: pipeline if h == handle else None)

    extension = asyncio.run(pack.comfy_entrypoint())
    asyncio.run(extension.on_load())
    asyncio.run(extension.on_load())  # a second load does not mount the routes twice
    paths = sorted(route.path for route in prompt_server.routes)
    assert paths == ["/ditto/live", "/ditto/live/avatars", "/ditto/live/ws"]

    out = live_nodes.PublishLiveAvatar.execute(models=handle, source=random_source(1, is_image=True), avatar_id="anna",
                                               steps=10)
    assert "anna" in out.ui["text"][0] and "10 steps" in out.ui["text"][0]
    deadline = time.monotonic() + 30  # publishing started the runtime's warm-up (nothing to record on a CPU)
    while not avatars.status()["ready"] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert avatars.status() == {"avatars": ["anna"], "ready": True, "steps": [10]}
    with pytest.raises(InputError, match="serves steps 10"):  # another avatar of these models, other steps
        live_nodes.PublishLiveAvatar.execute(models=handle, source=random_source(1, is_image=True), avatar_id="bob",
                                             steps=25)
    assert avatars.ids() == ["anna"]  # refused before it was published

    async def run():
        app = web.Application()
        app.add_routes(prompt_server.routes)
        try:
            async with served(app) as url, aiohttp.ClientSession() as session:
                ws = await session.ws_connect(f"{url}/ditto/live/ws")
                await ws.send_str(json.dumps({"type": "open", "avatar": "anna", "idle": False, "options": {"steps": 10}}))
                assert json.loads((await ws.receive(timeout=10)).data)["type"] == "ready"
                await ws.send_bytes(b"\x00\x10" * 3200)
                await ws.send_str(json.dumps({"type": "end"}))
                frames = []
                while True:
                    msg = await ws.receive(timeout=10)
                    if msg.type == aiohttp.WSMsgType.BINARY:
                        frames.append(unpack_frame(msg.data)[0])
                    elif msg.type != aiohttp.WSMsgType.TEXT:
                        return frames, ws.close_code
        finally:
            avatars.shutdown()

    frames, code = asyncio.run(run())
    assert code == 1000 and frames == list(range(15))


def test_unloading_the_models_withdraws_their_live_avatars_and_stops_the_runtime(monkeypatch, tmp_path):
    """A live runtime holds its pipeline: without this, Unload Ditto Models (or ComfyUI making
    room) would leave the models' VRAM in use behind ComfyUI's back."""
    from comfyui_ditto_pack.nodes.model_nodes import UnloadDittoModels

    pipeline = light_pipeline(tmp_path)
    sampler = ProjectionSampler()
    avatars = LiveAvatars(max_streams=1, renderer=RecordingRenderer(), sampler_factory=lambda options: sampler)
    monkeypatch.setattr(live_nodes, "LIVE_AVATARS", avatars)
    handle = ModelHandle(model_dir=str(tmp_path), device="cpu", precision="fp32")
    assert live_nodes.REGISTRY.pipeline(handle, lambda: pipeline) is pipeline
    live_nodes.PublishLiveAvatar.execute(models=handle, source=random_source(1, is_image=True), avatar_id="anna")
    deadline = time.monotonic() + 30
    while not avatars.status()["ready"] and time.monotonic() < deadline:
        time.sleep(0.01)
    runtime, _ = avatars.open("anna")
    try:
        out = UnloadDittoModels.execute(enabled=True, models=handle)
        assert out.ui == {"text": ["released 1 Ditto model set(s)"]}
        assert avatars.ids() == [] and runtime._stopping and not any(t.is_alive() for t in runtime._threads)
    finally:
        avatars.shutdown()


@pytest.mark.parametrize("name, text, expected", [
    ("DITTO_LIVE_MAX_LOAD", "0.5", 0.5), ("DITTO_LIVE_MAX_LOAD", "2", None), ("DITTO_LIVE_MAX_LOAD", "high", None),
    ("DITTO_LIVE_MAX_STREAMS", "8", 8), ("DITTO_LIVE_MAX_STREAMS", "0", None), ("DITTO_LIVE_MAX_STREAMS", "8.5", None),
    ("DITTO_LIVE_SILENT_TIMEOUT", "30", 30.0), ("DITTO_LIVE_SILENT_TIMEOUT", "0", 0.0),
    ("DITTO_LIVE_SILENT_TIMEOUT", "-5", None), ("DITTO_LIVE_SILENT_TIMEOUT", "inf", None),
    ("DITTO_LIVE_SILENT_TIMEOUT", "nan", None),
])
def test_live_settings_from_the_environment_fall_back_to_the_default_with_a_warning(monkeypatch, caplog, name, text,
                                                                                     expected):
    """A bad value must not stop ComfyUI from loading the pack: it is logged and the default used."""
    monkeypatch.setenv(name, text)
    value = live_nodes.setting(name)
    assert value == (expected if expected is not None else live_nodes.SETTINGS[name][0])
    assert (f"{name}={text!r} is not " in caplog.text) == (expected is None)
