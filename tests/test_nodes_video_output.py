"""Save Talking Head Video as ComfyUI's own Save Video behaves: the frontend's video preview, and
the workflow in the MP4 so that dropping the file on the canvas restores the graph."""
from __future__ import annotations

import asyncio
import json

import av
import pytest
import torch

from tests.comfy_stubs import load_pack

pack = load_pack()

import comfy.cli_args  # noqa: E402
import folder_paths  # noqa: E402
from comfy_api.latest import io  # noqa: E402
from ditto_core.render.rendered_frames import VideoFrames  # noqa: E402

NODES = {n.GET_SCHEMA().node_id: n for n in asyncio.run(asyncio.run(pack.comfy_entrypoint()).get_node_list())}
SAVE = NODES["DittoSaveVideo"]
WORKFLOW = {"last_node_id": 2, "nodes": [{"id": 1, "type": "DittoSaveVideo", "widgets_values": ["ditto/x", 18]}],
            "links": [], "version": 0.4, "extra": {"note": "ünïcode"}}
PROMPT = {"1": {"class_type": "DittoSaveVideo", "inputs": {"filename_prefix": "ditto/x", "crf": 18}}}


@pytest.fixture
def output_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(folder_paths, "_output_directory", str(tmp_path))
    monkeypatch.setattr(SAVE, "hidden", io.HiddenHolder({io.Hidden.prompt: PROMPT,
                                                         io.Hidden.extra_pnginfo: {"workflow": WORKFLOW}}))
    return tmp_path


def _save(prefix: str) -> dict:
    frames = VideoFrames(frames=torch.randint(0, 255, (3, 32, 48, 3), dtype=torch.uint8), fps=25.0)
    return SAVE.execute(frames=frames, filename_prefix=prefix, crf=30, preset="ultrafast").ui


def _tags(path) -> dict:
    with av.open(str(path)) as container:
        assert sum(1 for _ in container.decode(video=0)) == 3
        return dict(container.metadata)


def test_save_reports_the_video_as_core_save_video_does(output_dir):
    ui = _save("ditto/clip")
    assert ui["images"] == [{"filename": "clip_00001_.mp4", "subfolder": "ditto", "type": "output"}]
    assert list(ui["animated"]) == [True]
    assert ui["ditto_stats"][0]["frames"] == 3


def test_the_mp4_carries_the_workflow_and_prompt(output_dir):
    saved = _save("ditto/clip")["images"][0]
    tags = _tags(output_dir / saved["subfolder"] / saved["filename"])
    assert json.loads(tags["workflow"]) == WORKFLOW
    assert json.loads(tags["prompt"]) == PROMPT


def test_disable_metadata_leaves_the_graph_out(output_dir, monkeypatch):
    monkeypatch.setattr(comfy.cli_args.args, "disable_metadata", True)
    saved = _save("ditto/private")["images"][0]
    tags = _tags(output_dir / saved["subfolder"] / saved["filename"])
    assert "workflow" not in tags and "prompt" not in tags
