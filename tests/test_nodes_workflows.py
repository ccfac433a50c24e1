"""Every example workflow validates against the nodes' schemas, without ComfyUI.

UI format: node types exist, every link joins an output and an input of the same type and is
recorded on both ends, widget values match the widgets in count, range and options. API format:
every input is known, every required one is given, links point at existing outputs of the
right type. The files must also be exactly what ``example_workflows/build_workflows.py`` writes.
"""
from __future__ import annotations

import copy
import importlib.util
import json
import sys

import pytest
from PIL import Image

from tests.comfy_stubs import REPO

WORKFLOW_DIR = REPO / "example_workflows"
spec = importlib.util.spec_from_file_location("build_workflows", WORKFLOW_DIR / "build_workflows.py")
build = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = build  # dataclasses look their module up while the file executes
spec.loader.exec_module(build)
SPECS = build.all_specs()
UI_FILES = sorted(WORKFLOW_DIR.glob("*.json"))
API_FILES = sorted((WORKFLOW_DIR / "api").glob("*.json"))
# Dropdowns filled from the user's folders at run time: any file name is acceptable here.
DYNAMIC_COMBOS = {("LoadImage", "image"), ("LoadAudio", "audio"), ("LoadVideo", "file")}


def check_value(node_type: str, sock, value) -> list[str]:
    where = f"{node_type}.{sock.name}={value!r}"
    if sock.type == "COMBO":
        if (node_type, sock.name) in DYNAMIC_COMBOS:
            return [] if isinstance(value, str) and value else [f"{where}: needs a file name"]
        return [] if value in sock.options else [f"{where}: not one of {sock.options}"]
    kinds = {"INT": int, "FLOAT": (int, float), "STRING": str, "BOOLEAN": bool}[sock.type]
    if not isinstance(value, kinds) or (sock.type in ("INT", "FLOAT") and isinstance(value, bool)):
        return [f"{where}: not a {sock.type}"]
    if sock.minimum is not None and value < sock.minimum or sock.maximum is not None and value > sock.maximum:
        return [f"{where}: outside [{sock.minimum}, {sock.maximum}]"]
    return []


def ui_problems(workflow: dict) -> list[str]:
    problems = []
    nodes = {n["id"]: n for n in workflow["nodes"]}
    for node in nodes.values():
        spec = SPECS.get(node["type"])
        if spec is None:
            problems.append(f"node {node['id']}: unknown type {node['type']}")
            continue
        sockets = [s for s in spec.inputs if not s.widget]
        if [(i["name"], i["type"]) for i in node["inputs"]] != [(s.name, s.type) for s in sockets]:
            problems.append(f"node {node['id']} ({node['type']}): inputs do not match the schema")
        for sock, entry in zip(sockets, node["inputs"]):
            if entry["link"] is None and not sock.optional:
                problems.append(f"node {node['id']} ({node['type']}): required input {sock.name} is not connected")
        values = list(node["widgets_values"])
        for sock in (s for s in spec.inputs if s.widget):
            if not values:
                problems.append(f"node {node['id']} ({node['type']}): no value for widget {sock.name}")
                break
            problems += check_value(node["type"], sock, values.pop(0))
            if sock.control_after_generate and values.pop(0) not in ("fixed", "increment", "decrement", "randomize"):
                problems.append(f"node {node['id']}: bad control_after_generate value for {sock.name}")
        if values != list(spec.extra_widget_values):
            problems.append(f"node {node['id']} ({node['type']}): unexpected widget values {values}")
    for link_id, origin, origin_slot, target, target_slot, link_type in workflow["links"]:
        if origin not in nodes or target not in nodes:
            problems.append(f"link {link_id}: joins a missing node")
            continue
        out = SPECS[nodes[origin]["type"]].outputs[origin_slot]
        entry = nodes[target]["inputs"][target_slot]
        if not out.type == entry["type"] == link_type:
            problems.append(f"link {link_id}: {out.type} output into {entry['type']} input (link says {link_type})")
        if entry["link"] != link_id or link_id not in (nodes[origin]["outputs"][origin_slot]["links"] or []):
            problems.append(f"link {link_id}: not recorded on both ends")
    return problems


def api_problems(prompt: dict) -> list[str]:
    problems = []
    for node_id, node in prompt.items():
        spec = SPECS.get(node["class_type"])
        if spec is None:
            problems.append(f"node {node_id}: unknown type {node['class_type']}")
            continue
        known = {s.name: s for s in spec.inputs}
        problems += [f"node {node_id}: unknown input {name}" for name in node["inputs"] if name not in known]
        for sock in spec.inputs:
            value = node["inputs"].get(sock.name)
            if value is None:
                if not sock.optional:
                    problems.append(f"node {node_id} ({node['class_type']}): required input {sock.name} missing")
            elif isinstance(value, list):
                source, slot = value
                origin = prompt.get(source)
                if origin is None or slot >= len(SPECS[origin["class_type"]].outputs):
                    problems.append(f"node {node_id}.{sock.name}: link to a missing output {value}")
                elif SPECS[origin["class_type"]].outputs[slot].type != sock.type:
                    problems.append(f"node {node_id}.{sock.name}: {SPECS[origin['class_type']].outputs[slot].type} "
                                    f"linked into {sock.type}")
            elif sock.widget:
                problems += check_value(node["class_type"], sock, value)
            else:
                problems.append(f"node {node_id}.{sock.name}: socket input given a literal")
    return problems


def test_each_example_exists_in_both_formats_with_a_thumbnail():
    assert {p.stem for p in UI_FILES} == {e.title for e in build.WORKFLOWS.values()}
    assert {p.stem for p in API_FILES} == set(build.WORKFLOWS)
    for example in build.WORKFLOWS.values():
        # The template browser asks for <title>.jpg (custom-node templates are always JPEG there).
        with Image.open(WORKFLOW_DIR / f"{example.title}.jpg") as thumbnail:
            assert thumbnail.format == "JPEG" and thumbnail.width >= 400 and thumbnail.height >= 250


def test_files_are_what_the_builder_writes():
    for name, text in build.render_all().items():
        assert (WORKFLOW_DIR / name).read_text() == text, f"{name} is stale: run example_workflows/build_workflows.py"


@pytest.mark.parametrize("path", UI_FILES, ids=lambda p: p.stem)
def test_ui_workflow_validates(path):
    assert ui_problems(json.loads(path.read_text())) == []


@pytest.mark.parametrize("path", API_FILES, ids=lambda p: p.stem)
def test_api_workflow_validates(path):
    prompt = json.loads(path.read_text())
    assert api_problems(prompt) == []
    assert any(n["class_type"] in ("DittoSaveVideo", "DittoTalkingHead", "SaveVideo") for n in prompt.values())


def test_validators_catch_broken_graphs():
    ui = json.loads((WORKFLOW_DIR / f"{build.WORKFLOWS['ditto_portrait_to_mp4'].title}.json").read_text())
    bad_link = copy.deepcopy(ui)
    bad_link["links"][0][5] = "IMAGE"
    bad_widget = copy.deepcopy(ui)
    sampler = next(n for n in bad_widget["nodes"] if n["type"] == "DittoLMDMSampler")
    sampler["widgets_values"][0] = 5000  # steps above the maximum
    assert ui_problems(bad_link) and ui_problems(bad_widget)

    api = json.loads((WORKFLOW_DIR / "api" / "ditto_portrait_to_mp4.json").read_text())
    missing = copy.deepcopy(api)
    del next(n for n in missing.values() if n["class_type"] == "DittoWarpDecode")["inputs"]["motion"]
    wrong = copy.deepcopy(api)
    save = next(n for n in wrong.values() if n["class_type"] == "DittoSaveVideo")
    save["inputs"]["frames"] = [next(k for k, n in wrong.items() if n["class_type"] == "DittoWarpDecode"), 0]
    bad_combo = copy.deepcopy(api)
    next(n for n in bad_combo.values() if n["class_type"] == "DittoSaveVideo")["inputs"]["preset"] = "fastest"
    assert api_problems(missing) and api_problems(wrong) and api_problems(bad_combo)


def test_comparison_workflow_differs_only_in_steps():
    prompt = json.loads((WORKFLOW_DIR / "api" / "ditto_eye_lock_25_vs_50_steps.json").read_text())
    samplers = [n["inputs"] for n in prompt.values() if n["class_type"] == "DittoLMDMSampler"]
    assert sorted(s["steps"] for s in samplers) == [25, 50]
    assert samplers[0]["seed"] == samplers[1]["seed"] and samplers[0]["options"] == samplers[1]["options"]
    options = next(n["inputs"] for n in prompt.values() if n["class_type"] == "DittoMotionOptions")
    assert options["eye_lock"] is True
