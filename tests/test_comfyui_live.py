"""The pack inside a real ComfyUI: headless on the CPU, every API example workflow queued.

Runs only when ``COMFYUI_DIR`` points at a ComfyUI checkout (``COMFYUI_PYTHON``: the Python of
its environment, with the pack's requirements installed; default: this one). A temporary base
folder gets the pack (symlinked into ``custom_nodes``), random official-layout weights
(``make_checkpoints.py`` of the parity kit, or ``DITTO_TEST_CKPT_DIR``), a stand-in HuBERT and
short inputs. Neither face-detection models nor real weights exist here, so avatars are
registered in the no-detector mode and the videos show noise; what is checked is that every
workflow validates, runs and writes an MP4 that decodes with the expected frames and audio.

    COMFYUI_DIR=/path/to/ComfyUI COMFYUI_PYTHON=/path/to/venv/bin/python python -m pytest tests/test_comfyui_live.py

``COMFYUI_GPU=1`` starts ComfyUI without ``--cpu``: on its GPU, with its own defaults (the
``cudaMallocAsync`` allocator among them), as users run it. ``COMFYUI_FRONT_END_ROOT``: passed
as ``--front-end-root`` (a machine without ComfyUI's front-end package serves an empty folder).
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
import wave
from pathlib import Path

import pytest

from bench.kit_checkpoints import OFFICIAL_FILES, write_kit_checkpoints
from tests.conftest import REPO_ROOT

COMFYUI_DIR = os.environ.get("COMFYUI_DIR")
pytestmark = pytest.mark.skipif(not COMFYUI_DIR, reason="set COMFYUI_DIR to a ComfyUI checkout to run the live test")

COMFY_PYTHON = os.environ.get("COMFYUI_PYTHON", sys.executable)
ON_GPU = os.environ.get("COMFYUI_GPU") == "1"
FRONT_END = os.environ.get("COMFYUI_FRONT_END_ROOT")
STARTUP_TIMEOUT_S = 300
RUN_TIMEOUT_S = float(os.environ.get("DITTO_LIVE_TIMEOUT_S", 3600))
SPEECH_SECONDS = 0.24  # 6 video frames: the CPU renders about one frame every few seconds
API_DIR = REPO_ROOT / "example_workflows" / "api"
SAVING_NODES = {"DittoSaveVideo", "DittoTalkingHead", "SaveVideo"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _request(url: str, payload: dict | None = None, timeout: float = 30) -> tuple[int, dict]:
    data = json.dumps(payload).encode() if payload is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def _write_inputs(input_dir: Path, example_dir: Path) -> None:
    import av
    import numpy as np
    from PIL import Image

    input_dir.mkdir(parents=True)
    portrait = Image.open(example_dir / "portrait.jpg").convert("RGB").resize((512, 512))
    portrait.save(input_dir / "ditto_portrait.jpg")
    with wave.open(str(example_dir / "speech_24k_mono.wav")) as src, wave.open(str(input_dir / "ditto_speech.wav"), "wb") as dst:
        dst.setparams(src.getparams())
        dst.writeframes(src.readframes(int(SPEECH_SECONDS * src.getframerate())))
    with av.open(str(input_dir / "ditto_source.mp4"), "w") as container:
        stream = container.add_stream("libx264", rate=25)
        stream.width, stream.height, stream.pix_fmt = 256, 256, "yuv420p"
        still = np.asarray(portrait.resize((256, 256)))
        for shift in range(3):
            frame = av.VideoFrame.from_ndarray(np.roll(still, 2 * shift, axis=1), format="rgb24")
            container.mux(stream.encode(frame))
        container.mux(stream.encode())


def _write_models(ditto_dir: Path, reference_dir: Path) -> None:
    from ditto_core.audio.hubert_stub import write_stub_hubert

    (ditto_dir / "aux_models").mkdir(parents=True)
    given = os.environ.get("DITTO_TEST_CKPT_DIR")
    if given and all((Path(given) / f).is_file() for f in OFFICIAL_FILES):
        for name in OFFICIAL_FILES:
            (ditto_dir / name).symlink_to(Path(given) / name)
    else:
        write_kit_checkpoints(reference_dir / "make_checkpoints.py", ditto_dir)
    write_stub_hubert(ditto_dir / "aux_models" / "hubert_streaming_fix_kv.onnx")


@pytest.fixture(scope="module")
def comfy(tmp_path_factory, reference_dir, example_dir):
    base = tmp_path_factory.mktemp("comfy_base")
    (base / "custom_nodes").mkdir()
    (base / "custom_nodes" / "ComfyUI-Ditto").symlink_to(REPO_ROOT, target_is_directory=True)
    _write_models(base / "models" / "ditto", reference_dir)
    _write_inputs(base / "input", example_dir)
    port = _free_port()
    log = open(base / "comfyui.log", "w")
    server = subprocess.Popen(
        [COMFY_PYTHON, "main.py", *([] if ON_GPU else ["--cpu"]), "--listen", "127.0.0.1", "--port", str(port),
         "--base-directory", str(base), "--disable-auto-launch", *(["--front-end-root", FRONT_END] if FRONT_END else [])],
        cwd=COMFYUI_DIR, stdout=log, stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},  # the log is read while the server runs
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            assert server.poll() is None, f"ComfyUI exited during start-up; see {base / 'comfyui.log'}"
            try:
                if _request(f"{url}/object_info/DittoLoadModels", timeout=5)[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"ComfyUI did not answer within {STARTUP_TIMEOUT_S} s"
            time.sleep(1)
        yield url, base
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


def _live_workflow(path: Path) -> dict:
    """The example as queued here: no face detector (no face models on this machine), fixed seeds."""
    prompt = json.loads(path.read_text())
    for node in prompt.values():
        if "detect_face" in node["inputs"]:
            node["inputs"]["detect_face"] = False
    return prompt


def _saved_files(outputs: dict, base: Path) -> list[Path]:
    files = []
    for node_output in outputs.values():
        for entry in node_output.get("images", []):
            if entry["filename"].endswith(".mp4"):
                files.append(base / entry["type"] / entry["subfolder"] / entry["filename"])
    return files


def test_every_ditto_node_is_registered(comfy):
    url, _ = comfy
    status, info = _request(f"{url}/object_info")
    assert status == 200
    ditto = {name: node for name, node in info.items() if node.get("category") == "Ditto"}
    expected = {"DittoLoadModels", "DittoUnloadModels", "DittoRegisterAvatar", "DittoAudioFeatures",
                "DittoMotionOptions", "DittoLMDMSampler", "DittoWarpDecode", "DittoPutBack", "DittoSaveVideo",
                "DittoFramesToImage", "DittoFramesToVideo", "DittoTalkingHead", "DittoPublishLiveAvatar"}
    assert set(ditto) == expected
    assert "." in info["DittoLoadModels"]["input"]["required"]["model_folder"][1]["options"]


def test_workflow_node_specs_match_the_running_comfyui(comfy):
    """The node descriptions the example builder and the CPU validators use agree with what the
    server reports, for the core nodes (described by hand) as for Ditto's (read from the stand-ins)."""
    import importlib.util

    url, _ = comfy
    spec = importlib.util.spec_from_file_location("build_workflows", REPO_ROOT / "example_workflows" / "build_workflows.py")
    build = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = build
    spec.loader.exec_module(build)
    _, info = _request(f"{url}/object_info")
    for name, node in build.all_specs().items():
        real = info[name]
        declared = {**real["input"]["required"], **real["input"].get("optional", {})}
        order = real["input_order"]["required"] + real["input_order"].get("optional", [])
        assert [s.name for s in node.inputs] == order, name
        for sock in node.inputs:
            kind = declared[sock.name][0]
            assert sock.type == ("COMBO" if isinstance(kind, list) else kind), f"{name}.{sock.name}"
            assert sock.optional == (sock.name in real["input"].get("optional", {})), f"{name}.{sock.name}"
        assert [o.type for o in node.outputs] == real["output"], name
        assert [o.name for o in node.outputs] == real["output_name"], name


def test_every_api_workflow_runs_and_writes_a_playable_mp4(comfy):
    import av

    url, base = comfy
    queued = {}
    for path in sorted(API_DIR.glob("*.json")):
        prompt = _live_workflow(path)
        status, reply = _request(f"{url}/prompt", {"prompt": prompt, "client_id": str(uuid.uuid4())})
        assert status == 200 and not reply.get("node_errors"), f"{path.name} was refused: {reply}"
        expected = sum(node["class_type"] in SAVING_NODES for node in prompt.values())
        queued[reply["prompt_id"]] = (path.name, expected)

    deadline = time.monotonic() + RUN_TIMEOUT_S
    pending = dict(queued)
    while pending:
        assert time.monotonic() < deadline, f"not finished within {RUN_TIMEOUT_S} s: {sorted(n for n, _ in pending.values())}"
        for prompt_id in list(pending):
            status, history = _request(f"{url}/history/{prompt_id}")
            if status != 200 or prompt_id not in history:
                continue
            name, expected = pending.pop(prompt_id)
            entry = history[prompt_id]
            assert entry["status"]["status_str"] == "success", f"{name} failed: {entry['status']['messages']}"
            files = _saved_files(entry["outputs"], base)
            assert len(files) == expected, f"{name}: expected {expected} videos, got {files}"
            for file in files:
                assert file.is_file(), f"{name}: {file} is missing"
                with av.open(str(file)) as container:
                    frames = sum(1 for _ in container.decode(video=0))
                    assert container.streams.audio, f"{name}: {file.name} has no audio track"
                assert frames >= int(SPEECH_SECONDS * 25), f"{name}: {file.name} has only {frames} frames"
            stats = [o["ditto_stats"][0] for o in entry["outputs"].values() if "ditto_stats" in o]
            assert stats and all(s["seconds"] >= 0 for s in stats), f"{name}: no stage timings in the UI output"
        time.sleep(2)
    assert not list((base / "output").rglob("*.part.mp4")), "a temporary video file was left behind"


def _run_prompt(url: str, prompt: dict) -> dict:
    status, reply = _request(f"{url}/prompt", {"prompt": prompt, "client_id": str(uuid.uuid4())})
    assert status == 200 and not reply.get("node_errors"), reply
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while True:
        status, history = _request(f"{url}/history/{reply['prompt_id']}")
        if status == 200 and reply["prompt_id"] in history:
            entry = history[reply["prompt_id"]]
            assert entry["status"]["status_str"] == "success", entry["status"]["messages"]
            return entry
        assert time.monotonic() < deadline, "the prompt did not finish"
        time.sleep(1)


def test_comfyuis_unload_models_frees_dittos_networks(comfy):
    """ComfyUI's "Unload Models" (``POST /free``) unloads Ditto's model set as it does any model's
    (``comfy.model_management`` logs each load): the next node that needs the set loads it again."""
    url, base = comfy
    log = base / "comfyui.log"

    def load_models(precision: str) -> int:
        # Changed inputs make Load Ditto Models run again; the disabled Unload node is the output.
        _run_prompt(url, {
            "1": {"class_type": "DittoLoadModels",
                  "inputs": {"model_folder": ".", "device": "cpu", "precision": precision, "download_missing": False}},
            "2": {"class_type": "DittoUnloadModels", "inputs": {"enabled": False, "models": ["1", 0]}},
        })
        return log.read_text().count("Requested to load DittoNetworks")

    loaded = load_models("fp32")
    assert loaded >= 1
    assert load_models("auto") == loaded, "the set was loaded again although nothing unloaded it"
    assert _request(f"{url}/free", {"unload_models": True})[0] == 200
    time.sleep(5)  # the prompt worker applies the flag between prompts, at least once a second
    assert load_models("fp32") == loaded + 1, "POST /free did not unload Ditto's networks"


def test_unload_wired_after_a_ditto_output_releases_the_models_once_it_is_made(comfy):
    """ComfyUI runs an output node as early as its inputs allow: Unload Ditto Models fed only by
    Load Ditto Models would release the set before the registration, which would load it again.
    With ``after`` connected to the avatar it runs last, so the next prompt loads the set anew."""
    url, base = comfy
    log = base / "comfyui.log"

    def register(crop_scale: float, unload: bool) -> int:
        # A new crop makes the registration run again; use_cache off makes it need the networks.
        _run_prompt(url, {
            **_registered_portrait(use_cache=False, crop_scale=crop_scale, max_size=512),
            "4": {"class_type": "DittoUnloadModels", "inputs": {"enabled": unload, "models": ["1", 0], "after": ["3", 0]}},
        })
        return log.read_text().count("Requested to load DittoNetworks")

    register(2.3, unload=False)  # the set is loaded now, whatever earlier tests left
    loaded = register(2.31, unload=True)
    assert register(2.32, unload=False) == loaded + 1, "Unload ran before the registration it was wired after"


def _registered_portrait(use_cache: bool, crop_scale: float, max_size: int) -> dict:
    """Prompt nodes 1-3: Load Ditto Models (ComfyUI's device: the CPU under --cpu, fp32 there), the
    example portrait, Register Avatar (no face detection)."""
    return {
        "1": {"class_type": "DittoLoadModels",
              "inputs": {"model_folder": ".", "device": "auto", "precision": "auto", "download_missing": False}},
        "2": {"class_type": "LoadImage", "inputs": {"image": "ditto_portrait.jpg"}},
        "3": {"class_type": "DittoRegisterAvatar",
              "inputs": {"models": ["1", 0], "image": ["2", 0], "detect_face": False, "use_cache": use_cache,
                         "crop_scale": crop_scale, "crop_vx_ratio": 0.0, "crop_vy_ratio": -0.125, "face_index": -1,
                         "max_size": max_size, "video_smoothing": 13}},
    }


def test_a_published_avatar_streams_from_comfyuis_own_server_until_its_models_are_unloaded(comfy):
    """Publish Live Avatar in a queued prompt: the avatar's runtime warms up in the background,
    /ditto/live/avatars says when it is ready, a WebSocket stream gets its first frames in order;
    ComfyUI's "Unload Models" then withdraws the avatar with its models."""
    import asyncio

    import aiohttp

    from ditto_core.live.server import unpack_frame

    url, _ = comfy
    _run_prompt(url, {
        **_registered_portrait(use_cache=True, crop_scale=2.3, max_size=1920),
        "4": {"class_type": "DittoPublishLiveAvatar",
              "inputs": {"models": ["1", 0], "source": ["3", 0], "avatar_id": "anna", "steps": 2}},
    })
    # On a GPU the warm-up compiles the runtime's engines and records its graphs (minutes with empty caches).
    deadline = time.monotonic() + (900 if ON_GPU else 120)
    while (status := _request(f"{url}/ditto/live/avatars")[1]) != {"avatars": ["anna"], "ready": True, "steps": [2]}:
        assert time.monotonic() < deadline, status
        time.sleep(0.5)

    async def stream() -> list[int]:
        async with aiohttp.ClientSession() as session:
            ws = await session.ws_connect(f"{url}/ditto/live/ws")
            await ws.send_str(json.dumps({"type": "open", "avatar": "anna", "idle": False, "max_size": 128,
                                          "options": {"steps": 2}}))
            assert json.loads((await ws.receive(timeout=60)).data)["type"] == "ready"
            await ws.send_bytes(b"\x00\x10" * 8000)  # the half second the first frames need
            indices = []
            while len(indices) < 5:
                msg = await ws.receive(timeout=RUN_TIMEOUT_S)
                assert msg.type == aiohttp.WSMsgType.BINARY, msg
                indices.append(unpack_frame(msg.data)[0])
            await ws.close()
            return indices

    assert asyncio.run(stream()) == list(range(5))
    assert _request(f"{url}/free", {"unload_models": True})[0] == 200
    deadline = time.monotonic() + 30
    while (status := _request(f"{url}/ditto/live/avatars")[1])["avatars"]:
        assert time.monotonic() < deadline, f"the avatar outlived its unloaded models: {status}"
        time.sleep(0.5)
