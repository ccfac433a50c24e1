"""The pack in ComfyUI's real frontend: headless Chromium against a live ComfyUI on the CPU.

Uses the live test's server (``tests/test_comfyui_live.py``: random official-layout weights, a
stand-in HuBERT, short inputs, no face models) and drives the page the way a user would: every
UI workflow opens without missing nodes and with its input files found; the template browser
lists each one under its title with a thumbnail that loads; one workflow (the all-in-one node,
1 DDIM step, no face detection) is queued from the page, its video preview has a real size,
sits inside its node and plays, the MP4 dropped back on the canvas restores the graph, and the
stage-timing badges never overlap the frontend's node-source pill at any zoom.

Skipped without ``COMFYUI_DIR`` (see the live test), without ``playwright`` (pip) or without
Chromium (``apt-get install chromium``; another binary with ``DITTO_CHROMIUM``). Screenshots go
to ``DITTO_BROWSER_SHOTS`` (default: the test's temporary folder)::

    COMFYUI_DIR=/path/to/ComfyUI COMFYUI_PYTHON=/path/to/ComfyUI/venv/bin/python \\
        DITTO_BROWSER_SHOTS=/tmp/shots python -m pytest tests/test_comfyui_browser.py
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import time
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from tests.conftest import REPO_ROOT
from tests.test_comfyui_live import COMFYUI_DIR, _request, comfy  # noqa: F401  (comfy: the server fixture)

CHROMIUM = os.environ.get("DITTO_CHROMIUM", "/usr/bin/chromium")
pytestmark = [
    pytest.mark.skipif(not COMFYUI_DIR, reason="set COMFYUI_DIR to a ComfyUI checkout to run the browser test"),
    pytest.mark.skipif(importlib.util.find_spec("playwright") is None,
                       reason="needs playwright (pip install playwright)"),
    pytest.mark.skipif(not shutil.which(CHROMIUM), reason=f"needs Chromium at {CHROMIUM} (or set DITTO_CHROMIUM)"),
    pytest.mark.slow,
]
WORKFLOW_DIR = REPO_ROOT / "example_workflows"
RUN_TIMEOUT_S = float(os.environ.get("DITTO_LIVE_TIMEOUT_S", 3600))
ZOOMS = (0.35, 0.6, 1.0, 1.6, 2.5)


def _module(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file executes
    spec.loader.exec_module(module)
    return module


browser_helpers = _module(WORKFLOW_DIR / "make_thumbnails.py")
TITLES = browser_helpers.examples()
"""API name -> UI title of every example."""


def _workflow(name: str) -> dict:
    return json.loads((WORKFLOW_DIR / f"{TITLES[name]}.json").read_text())


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    folder = Path(os.environ.get("DITTO_BROWSER_SHOTS") or tmp_path_factory.mktemp("browser_shots"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def page(comfy):  # noqa: F811  (the imported server fixture)
    from playwright.sync_api import sync_playwright

    url, _ = comfy
    # A returning user: no first-run template dialog over the canvas.
    assert _request(f"{url}/settings/Comfy.TutorialCompleted", True)[0] == 200
    with sync_playwright() as playwright:
        browser, page = browser_helpers.open_comfyui(playwright, url, CHROMIUM)
        errors = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        try:
            yield page
        finally:
            browser.close()
        assert not errors, f"uncaught errors in the page: {errors}"


def test_every_ui_workflow_opens_with_its_nodes_and_input_files(page):
    for name in TITLES:
        workflow = _workflow(name)
        browser_helpers.load_workflow(page, workflow)
        loaded = page.evaluate("""() => window.app.graph._nodes.map((node) => ({
            type: node.type, registered: !!LiteGraph.registered_node_types[node.type],
            files: (node.widgets || []).filter((w) => ['image', 'audio', 'file'].includes(w.name))
                .map((w) => ({value: w.value, known: (w.options?.values || []).includes(w.value)})),
        }))""")
        assert sorted(n["type"] for n in loaded) == sorted(n["type"] for n in workflow["nodes"]), name
        assert all(n["registered"] for n in loaded), f"{name}: missing node types {loaded}"
        files = [f for n in loaded for f in n["files"]]
        assert files and all(f["known"] for f in files), f"{name}: input files not in ComfyUI's lists: {files}"


def test_template_browser_lists_each_workflow_with_a_thumbnail(page, shots):
    answers = {}
    page.on("response", lambda response: answers.__setitem__(unquote(urlparse(response.url).path), response.status))
    page.evaluate("() => window.app.extensionManager.command.execute('Comfy.BrowseTemplates')")
    page.get_by_text("ComfyUI-Ditto", exact=True).first.click()
    # The frontend fetches each thumbnail and shows it from a blob, titled by the template's name.
    page.wait_for_function("""(titles) => titles.every((title) => [...document.querySelectorAll('img')]
        .some((img) => img.alt === title && img.complete && img.naturalWidth > 0))""",
                           arg=list(TITLES.values()), timeout=60_000)
    images = page.evaluate("""(titles) => [...document.querySelectorAll('img')]
        .filter((img) => titles.includes(img.alt))
        .map((img) => ({title: img.alt, width: img.naturalWidth, shown: img.getBoundingClientRect().width}))""",
                           list(TITLES.values()))
    page.screenshot(path=str(shots / "template_browser.png"))
    for title in TITLES.values():
        assert answers.get(f"/api/workflow_templates/ComfyUI-Ditto/{title}.jpg") == 200, f"{title}.jpg: {answers}"
    assert sorted(i["title"] for i in images) == sorted(TITLES.values())
    assert all(i["width"] >= 400 and i["shown"] > 50 for i in images), images
    page.keyboard.press("Escape")


def _queue_all_in_one(page) -> None:
    browser_helpers.load_workflow(page, _workflow("ditto_all_in_one"))
    # No face models here (no detection), and one DDIM step: the CPU renders a frame in seconds.
    page.evaluate("""() => { for (const node of window.app.graph._nodes) for (const w of node.widgets || []) {
        if (w.name === 'detect_face') w.value = false;
        if (w.name === 'steps') w.value = 1;
    } }""")
    page.evaluate("() => window.app.queuePrompt(0, 1)")
    page.wait_for_function("() => window.app.graph._nodes.find((n) => n.type === 'DittoTalkingHead')?.dittoStats",
                           timeout=RUN_TIMEOUT_S * 1000, polling=2000)
    # The frontend adds its video preview once the saved file has loaded.
    page.wait_for_function("""() => window.app.graph._nodes.find((n) => n.type === 'DittoTalkingHead')
        .widgets.find((w) => w.name === 'video-preview')?.element.querySelector('video')?.readyState >= 2""",
                           timeout=120_000)


PREVIEW_JS = """async () => {
  const node = window.app.graph._nodes.find((n) => n.type === 'DittoTalkingHead');
  const widget = node.widgets.find((w) => w.name === 'video-preview');
  const video = widget?.element.querySelector('video');
  if (!video) return {found: false};
  const box = video.getBoundingClientRect();
  const canvas = window.app.canvas;
  const rect = canvas.canvas.getBoundingClientRect();
  const {offset, scale} = canvas.ds;  // page position = canvas position + offset, times scale
  const nodeBox = {left: rect.left + (node.pos[0] + offset[0]) * scale,
                   top: rect.top + (node.pos[1] + offset[1]) * scale,
                   right: rect.left + (node.pos[0] + node.size[0] + offset[0]) * scale,
                   bottom: rect.top + (node.pos[1] + node.size[1] + offset[1]) * scale};
  video.muted = true;
  await video.play();
  await new Promise((r) => setTimeout(r, 1500));
  return {found: true, width: box.width, height: box.height, box: [box.left, box.top, box.right, box.bottom],
          node: nodeBox, src: video.src, playing: !video.paused, advanced: video.played.length > 0 &&
          video.played.end(0) > 0, frames: video.getVideoPlaybackQuality().totalVideoFrames};
}"""

CENTRE_JS = """const centre = (node, zoom) => {
  // Zoom to ``zoom`` with the node's title bar in the middle of the view.
  const canvas = window.app.canvas;
  canvas.ds.scale = zoom;
  canvas.ds.offset[0] = canvas.canvas.width / devicePixelRatio / zoom / 2 - (node.pos[0] + node.size[0] / 2);
  canvas.ds.offset[1] = canvas.canvas.height / devicePixelRatio / zoom / 2 - node.pos[1];
};"""

BADGES_JS = """(zooms) => {
""" + CENTRE_JS + """
  const canvas = window.app.canvas;
  const nodes = window.app.graph._nodes.filter((n) => n.dittoStats);
  const drawn = [];
  let current = null;
  const wrapped = new Set();
  const wrap = (badge) => {
    const proto = Object.getPrototypeOf(badge);
    if (wrapped.has(proto)) return;
    wrapped.add(proto);
    const draw = proto.draw;
    proto.draw = function (ctx, x, y) {
      if (current && this.visible) drawn.push({node: current.id, scale: canvas.ds.scale, stats: !!this.isDittoStats,
          text: this.text ?? '', x, y, w: this.getWidth(ctx), h: this.height});
      return draw.apply(this, arguments);
    };
  };
  for (const node of nodes) {
    for (const badge of node.badges) wrap(typeof badge === 'function' ? badge() : badge);
    const drawBadges = node.drawBadges;
    node.drawBadges = function () {
      current = this;
      try { return drawBadges.apply(this, arguments); } finally { current = null; }
    };
  }
  const [scale, offset] = [canvas.ds.scale, [...canvas.ds.offset]];
  for (const zoom of zooms) {
    centre(window.app.graph._nodes.find((n) => n.type === 'DittoTalkingHead'), zoom);
    canvas.draw(true, true);
  }
  canvas.ds.scale = scale;
  [canvas.ds.offset[0], canvas.ds.offset[1]] = offset;
  canvas.draw(true, true);
  return {nodes: nodes.map((n) => ({id: n.id, type: n.type, stats: n.dittoStats})), drawn};
}"""


def _overlap(a: dict, b: dict) -> bool:
    return (a["x"] < b["x"] + b["w"] and b["x"] < a["x"] + a["w"]
            and a["y"] < b["y"] + b["h"] and b["y"] < a["y"] + a["h"])


def test_a_queued_workflow_previews_plays_restores_and_badges_clear_the_pill(page, comfy, shots):  # noqa: F811
    url, base = comfy
    start = time.monotonic()
    _queue_all_in_one(page)
    ran_for = time.monotonic() - start
    browser_helpers.redraw(page)
    page.screenshot(path=str(shots / "all_in_one_after_run.png"))

    preview = page.evaluate(PREVIEW_JS)
    assert preview["found"], "no video preview widget on Ditto Talking Head"
    assert preview["width"] > 100 and preview["height"] > 100, f"preview has no real size: {preview}"
    left, top, right, bottom = preview["box"]
    node = preview["node"]
    assert node["left"] - 1 <= left and right <= node["right"] + 1 and bottom <= node["bottom"] + 1, \
        f"the preview is not inside its node: {preview}"
    assert preview["playing"] and preview["advanced"] and preview["frames"] > 0, f"the preview does not play: {preview}"
    assert "all_in_one_" in preview["src"] and ".mp4" in preview["src"]

    # The badges, at every zoom: the stats badge is drawn wherever the frontend draws badges at
    # all (not in its low-detail mode), and never over the node-source pill or another badge.
    badges = page.evaluate(BADGES_JS, list(ZOOMS))
    assert {n["type"] for n in badges["nodes"]} == {"DittoLoadModels", "DittoTalkingHead"}
    drawn = badges["drawn"]
    for zoom in ZOOMS:
        at_zoom = [d for d in drawn if abs(d["scale"] - zoom) < 1e-6]
        for node_info in badges["nodes"]:
            mine = [d for d in at_zoom if d["node"] == node_info["id"]]
            stats = [d for d in mine if d["stats"]]
            others = [d for d in mine if not d["stats"]]
            if not mine:
                continue  # low-detail zoom: the frontend draws no badges at all
            assert len(stats) == 1 and stats[0]["text"] == node_info["stats"], f"zoom {zoom}: {mine}"
            assert any(o["text"].strip() == "Ditto" for o in others), f"zoom {zoom}: no node-source pill drawn: {mine}"
            assert not [o for o in others if _overlap(stats[0], o)], f"zoom {zoom}: badges overlap: {mine}"
    talking_head = next(n["id"] for n in badges["nodes"] if n["type"] == "DittoTalkingHead")
    drawn_at = {round(d["scale"], 2) for d in drawn if d["node"] == talking_head and d["stats"]}
    assert drawn_at >= {0.6, 1.0, 1.6, 2.5}, f"the stats badge was drawn only at zooms {drawn_at}"
    for zoom in (1.0, 2.5):
        page.evaluate("(zoom) => { " + CENTRE_JS + " centre(window.app.graph._nodes.find((n) => "
                      "n.type === 'DittoTalkingHead'), zoom); }", zoom)
        browser_helpers.redraw(page)
        page.screenshot(path=str(shots / f"badges_zoom_{zoom}.png"))

    # The saved MP4 carries the workflow: dropping it on the canvas brings the graph back.
    restored = page.evaluate("""async (src) => {
        const blob = await (await fetch(src)).blob();
        window.app.graph.clear();
        await window.app.handleFile(new File([blob], 'talking_head.mp4', {type: 'video/mp4'}));
        // handleFile reads the file's metadata, then loads the graph without waiting for it.
        for (let i = 0; i < 100 && !window.app.graph._nodes.length; i++) await new Promise((r) => setTimeout(r, 100));
        return window.app.graph._nodes.map((n) => [n.type, (n.widgets || []).find((w) => w.name === 'steps')?.value]);
    }""", preview["src"])
    assert sorted(t for t, _ in restored) == sorted(n["type"] for n in _workflow("ditto_all_in_one")["nodes"])
    assert [steps for t, steps in restored if t == "DittoTalkingHead"] == [1], "the restored graph is not the one run"
    print(f"all-in-one run from the page: {ran_for:.0f} s; screenshots in {shots}")
