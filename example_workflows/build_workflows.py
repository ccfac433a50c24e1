"""Writes the example workflows, each in ComfyUI's UI format (drag onto the canvas) and API format
(``POST /prompt``), from one description per graph so the two never drift apart.

    python example_workflows/build_workflows.py        # rewrites example_workflows/*.json

(``make_thumbnails.py`` beside it renders each UI workflow's template thumbnail.)

Widget order and socket types come from the nodes' own schemas (the pack is imported with the
test stand-ins for ComfyUI, so this runs without ComfyUI); the few core nodes used are
described in :data:`CORE_NODES`. ``tests/test_nodes_workflows.py`` checks the files are current.
"""
from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
WIDGET_TYPES = {"INT", "FLOAT", "STRING", "BOOLEAN", "COMBO"}
PORTRAIT, SPEECH, SOURCE_VIDEO = "ditto_portrait.jpg", "ditto_speech.wav", "ditto_source.mp4"
"""Input-folder file names the workflows load (put your own files there under these names, or pick others)."""


@dataclass(frozen=True)
class Socket:
    name: str
    type: str
    widget: bool = False
    optional: bool = False
    control_after_generate: bool = False
    options: Optional[list] = None
    minimum: Optional[float] = None
    maximum: Optional[float] = None


@dataclass(frozen=True)
class NodeSpec:
    """What the workflows need to know about a node type."""

    inputs: tuple[Socket, ...]
    outputs: tuple[Socket, ...]
    extra_widget_values: tuple = ()  # values of frontend-only widgets (upload buttons), appended
    title: str = ""


# Core ComfyUI nodes used by the examples (comfy_extras/nodes_video.py, nodes_audio.py, nodes.py).
CORE_NODES: dict[str, NodeSpec] = {
    "LoadImage": NodeSpec((Socket("image", "COMBO", widget=True),),
                          (Socket("IMAGE", "IMAGE"), Socket("MASK", "MASK")), ("image",), "Load Image"),
    "LoadAudio": NodeSpec((Socket("audio", "COMBO", widget=True),), (Socket("AUDIO", "AUDIO"),), (None, None),
                          "Load Audio"),
    "LoadVideo": NodeSpec((Socket("file", "COMBO", widget=True),), (Socket("VIDEO", "VIDEO"),), ("image",),
                          "Load Video"),
    "GetVideoComponents": NodeSpec((Socket("video", "VIDEO"),),
                                   (Socket("images", "IMAGE"), Socket("audio", "AUDIO"), Socket("fps", "FLOAT")),
                                   title="Get Video Components"),
    "CreateVideo": NodeSpec((Socket("images", "IMAGE"), Socket("fps", "FLOAT", widget=True, minimum=1.0, maximum=120.0),
                             Socket("audio", "AUDIO", optional=True)), (Socket("VIDEO", "VIDEO"),), title="Create Video"),
    "SaveVideo": NodeSpec((Socket("video", "VIDEO"), Socket("filename_prefix", "STRING", widget=True),
                           Socket("format", "COMBO", widget=True, options=["auto", "mp4"]),
                           Socket("codec", "COMBO", widget=True, options=["auto", "h264"])), (), title="Save Video"),
}


def load_pack():
    """The pack, imported as ComfyUI imports it (ComfyUI's modules if installed, else the test stand-ins)."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from tests.comfy_stubs import load_pack as load

    return load()


def ditto_node_specs() -> dict[str, NodeSpec]:
    """NodeSpec of every Ditto node, read from its schema."""
    pack = load_pack()
    extension = asyncio.run(pack.comfy_entrypoint())
    specs = {}
    for node in asyncio.run(extension.get_node_list()):
        schema = node.GET_SCHEMA()
        inputs = tuple(
            Socket(i.id, i.get_io_type(), widget=i.get_io_type() in WIDGET_TYPES, optional=bool(i.optional),
                   control_after_generate=bool(getattr(i, "control_after_generate", False)),
                   options=getattr(i, "options", None), minimum=getattr(i, "min", None), maximum=getattr(i, "max", None))
            # ComfyUI lists required inputs before optional ones, whatever the schema's order.
            for i in sorted(schema.inputs, key=lambda i: bool(i.optional))
        )
        outputs = tuple(Socket(o.display_name or o.io_type, o.io_type) for o in schema.outputs)
        specs[schema.node_id] = NodeSpec(inputs, outputs, title=schema.display_name)
    return specs


def all_specs() -> dict[str, NodeSpec]:
    return {**CORE_NODES, **ditto_node_specs()}


@dataclass
class Node:
    id: int
    type: str
    pos: tuple[int, int]
    values: dict[str, Any] = field(default_factory=dict)  # widget values and links (Out)

    def __getitem__(self, slot: int) -> "Out":
        return Out(self, slot)


@dataclass(frozen=True)
class Out:
    node: Node
    slot: int


class Graph:
    """A workflow under construction: ``g.add(type, (x, y), input=value_or_Out, ...)``."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []

    def add(self, type: str, pos: tuple[int, int], **values: Union[Any, Out]) -> Node:
        node = Node(len(self.nodes) + 1, type, pos, values)
        self.nodes.append(node)
        return node

    def api(self, specs: dict[str, NodeSpec]) -> dict:
        """API format: ``{id: {class_type, inputs, _meta}}``; links are ``[source id, output slot]``."""
        prompt = {}
        for node in self.nodes:
            inputs = {k: [str(v.node.id), v.slot] if isinstance(v, Out) else v for k, v in node.values.items()}
            prompt[str(node.id)] = {"class_type": node.type, "inputs": inputs, "_meta": {"title": specs[node.type].title}}
        return prompt

    def ui(self, specs: dict[str, NodeSpec]) -> dict:
        """UI (LiteGraph) format, version 0.4."""
        links, ui_nodes = [], []
        outgoing: dict[tuple[int, int], list[int]] = {}
        for node in self.nodes:
            spec = specs[node.type]
            for target_slot, sock in enumerate(s for s in spec.inputs if not s.widget):
                value = node.values.get(sock.name)
                if isinstance(value, Out):
                    link_id = len(links) + 1
                    links.append([link_id, value.node.id, value.slot, node.id, target_slot, sock.type])
                    outgoing.setdefault((value.node.id, value.slot), []).append(link_id)
        link_of = {(l[3], l[4]): l[0] for l in links}
        for order, node in enumerate(self.nodes):
            spec = specs[node.type]
            sockets = [s for s in spec.inputs if not s.widget]
            widgets = []
            for sock in (s for s in spec.inputs if s.widget):
                widgets.append(node.values[sock.name])
                if sock.control_after_generate:
                    widgets.append("fixed")
            ui_nodes.append({
                "id": node.id, "type": node.type, "pos": list(node.pos), "size": [320, 60 + 26 * (len(widgets) + len(sockets))],
                "flags": {}, "order": order, "mode": 0,
                "inputs": [{"name": s.name, "type": s.type, "link": link_of.get((node.id, i))}
                           for i, s in enumerate(sockets)],
                "outputs": [{"name": o.name, "type": o.type, "links": outgoing.get((node.id, slot)), "slot_index": slot}
                            for slot, o in enumerate(spec.outputs)],
                "properties": {"Node name for S&R": node.type},
                "widgets_values": widgets + list(spec.extra_widget_values),
                "title": spec.title,
            })
        return {"last_node_id": len(self.nodes), "last_link_id": len(links), "nodes": ui_nodes, "links": links,
                "groups": [], "config": {}, "extra": {}, "version": 0.4}


# ---- the graphs -------------------------------------------------------------------------------

MODELS = dict(model_folder=".", device="auto", precision="auto", download_missing=False)
REGISTER = dict(detect_face=True, use_cache=True, crop_scale=2.3, crop_vx_ratio=0.0, crop_vy_ratio=-0.125,
                face_index=-1, max_size=1920, video_smoothing=13)
SAMPLER = dict(steps=25, seed=0, overlap=10, smoothing=3, precision="auto (fp32, tf32 with fp16/bf16 models)")
RENDER = dict(batch_size=0, compile=True)
SAVE = dict(crf=18, preset="medium")


def _inputs(g: Graph, x: int = 0) -> tuple[Node, Node, Node]:
    models = g.add("DittoLoadModels", (x, 0), **MODELS)
    image = g.add("LoadImage", (x, 260), image=PORTRAIT)
    audio = g.add("LoadAudio", (x, 620), audio=SPEECH)
    return models, image, audio


def _analysed(g: Graph, models: Node, image: Node, audio: Node) -> tuple[Node, Node]:
    """Register Avatar + Audio Features: the first column of every stage-node graph."""
    source = g.add("DittoRegisterAvatar", (360, 0), models=models[0], image=image[0], **REGISTER)
    features = g.add("DittoAudioFeatures", (360, 420), models=models[0], audio=audio[0])
    return source, features


def _frames(g: Graph, models: Node, source: Node, features: Node, x: int, y: int, options: Optional[Node] = None,
            steps: int = 25) -> Node:
    sampler = g.add("DittoLMDMSampler", (x, y), models=models[0], source=source[0], audio_features=features[0],
                    **{**SAMPLER, "steps": steps}, **({"options": options[0]} if options else {}))
    renders = g.add("DittoWarpDecode", (x + 360, y), models=models[0], source=source[0], motion=sampler[0], **RENDER)
    return g.add("DittoPutBack", (x + 720, y), renders=renders[0], source=source[0], backend="auto")


def portrait_to_mp4() -> Graph:
    """Image + speech -> MP4 through every stage node."""
    g = Graph()
    models, image, audio = _inputs(g)
    source, features = _analysed(g, models, image, audio)
    frames = _frames(g, models, source, features, 720, 0)
    g.add("DittoSaveVideo", (1800, 0), frames=frames[0], audio=audio[0], filename_prefix="ditto/portrait", **SAVE)
    return g


def eye_lock_steps_comparison() -> Graph:
    """Eye lock on, the same seed sampled with 25 and with 50 DDIM steps, saved side by side."""
    g = Graph()
    models, image, audio = _inputs(g)
    source, features = _analysed(g, models, image, audio)
    options = g.add("DittoMotionOptions", (360, 560), emotion="neutral", eye_lock=True, drive_eye="off", blinks="off",
                    pitch_offset=0.0, yaw_offset=0.0, roll_offset=0.0, fade_to="none", fade_in=0, fade_out=0,
                    stitching=True)
    for row, steps in enumerate((25, 50)):
        frames = _frames(g, models, source, features, 720, 520 * row, options=options, steps=steps)
        g.add("DittoSaveVideo", (1800, 520 * row), frames=frames[0], audio=audio[0],
              filename_prefix=f"ditto/eye_lock_{steps}_steps", **SAVE)
    return g


def video_source() -> Graph:
    """A video as the source: its frames (core Load Video + Get Video Components) drive the
    avatar, the speech comes from a separate audio file."""
    g = Graph()
    models = g.add("DittoLoadModels", (0, 0), **MODELS)
    video = g.add("LoadVideo", (0, 260), file=SOURCE_VIDEO)
    parts = g.add("GetVideoComponents", (0, 520), video=video[0])
    audio = g.add("LoadAudio", (0, 700), audio=SPEECH)
    source, features = _analysed(g, models, parts, audio)
    frames = _frames(g, models, source, features, 720, 0)
    g.add("DittoSaveVideo", (1800, 0), frames=frames[0], audio=audio[0], filename_prefix="ditto/video_source", **SAVE)
    return g


def core_interop() -> Graph:
    """Ditto frames handed to core nodes: as IMAGE into Create Video, and as VIDEO into Save Video."""
    g = Graph()
    models, image, audio = _inputs(g)
    source, features = _analysed(g, models, image, audio)
    frames = _frames(g, models, source, features, 720, 0)
    images = g.add("DittoFramesToImage", (1800, 0), frames=frames[0])
    created = g.add("CreateVideo", (2160, 0), images=images[0], fps=25.0, audio=audio[0])
    g.add("SaveVideo", (2520, 0), video=created[0], filename_prefix="ditto/interop_create_video", format="auto",
          codec="auto")
    video = g.add("DittoFramesToVideo", (1800, 300), frames=frames[0], audio=audio[0])
    g.add("SaveVideo", (2160, 300), video=video[0], filename_prefix="ditto/interop_frames_to_video", format="auto",
          codec="auto")
    return g


def all_in_one() -> Graph:
    """The single-box node."""
    g = Graph()
    models, image, audio = _inputs(g)
    g.add("DittoTalkingHead", (360, 0), models=models[0], image=image[0], audio=audio[0], steps=25, seed=0,
          detect_face=True, filename_prefix="ditto/all_in_one", **SAVE)
    return g


@dataclass(frozen=True)
class Example:
    title: str
    """The UI file's name, which ComfyUI's template browser shows as the template's title (its
    thumbnail is ``<title>.jpg`` beside it)."""
    build: Any


WORKFLOWS: dict[str, Example] = {
    "ditto_portrait_to_mp4": Example("Portrait to talking-head MP4", portrait_to_mp4),
    "ditto_eye_lock_25_vs_50_steps": Example("Eye lock, 25 vs 50 steps", eye_lock_steps_comparison),
    "ditto_video_source": Example("Video as the avatar", video_source),
    "ditto_core_interop": Example("Ditto frames into core video nodes", core_interop),
    "ditto_all_in_one": Example("All in one node", all_in_one),
}
"""API name -> example: the API file is ``api/<name>.json``, the UI file ``<title>.json``."""


def render_all() -> dict[str, str]:
    """File name -> JSON text of every example, UI format as ``<title>.json`` and API format as
    ``api/<name>.json``."""
    specs = all_specs()
    files = {}
    for name, example in WORKFLOWS.items():
        graph = example.build()
        files[f"{example.title}.json"] = json.dumps(graph.ui(specs), indent=1) + "\n"
        files[f"api/{name}.json"] = json.dumps(graph.api(specs), indent=1) + "\n"
    return files


def main() -> None:
    for name, text in render_all().items():
        path = HERE / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path.relative_to(REPO)}")


if __name__ == "__main__":
    main()
