"""Renders each UI workflow's template thumbnail: the graph as ComfyUI's own canvas draws it.

ComfyUI's template browser shows a custom-node template under the UI file's name and asks for
``/api/workflow_templates/<pack folder>/<title>.jpg`` as its picture, so each ``<title>.json``
gets a ``<title>.jpg`` beside it. This script loads every workflow into a running ComfyUI (with
the pack installed) in headless Chromium, fits the graph to the view and saves what the canvas
draws::

    python example_workflows/make_thumbnails.py --url http://127.0.0.1:8188

It needs ``playwright`` (pip) and a Chromium binary (``apt-get install chromium``; another one
with ``--chromium``). The browser test (``tests/test_comfyui_browser.py``) drives the page with
the same helpers. Nothing leaves the machine: every request that is not to ComfyUI is aborted.
"""
from __future__ import annotations

import argparse
import importlib.util
import io
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CHROMIUM = "/usr/bin/chromium"
BROWSER_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run"]
THUMBNAIL_SIZE = (640, 480)
"""The template browser letterboxes a thumbnail into its card (object-contain)."""
APP_TIMEOUT_MS = 120_000


def open_comfyui(playwright, url: str, chromium: str = CHROMIUM, viewport: tuple[int, int] = (1600, 1000)):
    """(browser, page) with ComfyUI's frontend loaded and its app ready; only ``url`` is reachable."""
    browser = playwright.chromium.launch(executable_path=chromium, args=BROWSER_ARGS)
    page = browser.new_page(viewport={"width": viewport[0], "height": viewport[1]})
    page.route("**/*", lambda route: route.continue_() if route.request.url.startswith(url) else route.abort())
    page.goto(url)
    page.wait_for_function("window.app?.graph && window.app.canvas && window.app.extensionManager",
                           timeout=APP_TIMEOUT_MS)
    return browser, page


def load_workflow(page, workflow: dict) -> None:
    """Open ``workflow`` (UI format) on the canvas, as dropping its file would."""
    page.evaluate("async (workflow) => { await window.app.loadGraphData(workflow); }", workflow)


def redraw(page) -> None:
    """Draw the canvas now (headless, nothing else triggers a frame) and let the DOM widgets follow."""
    page.evaluate("() => new Promise((done) => { window.app.canvas.setDirty(true, true); "
                  "requestAnimationFrame(() => requestAnimationFrame(done)); })")


FIT_GRAPH_JS = """(margin) => {
  const canvas = window.app.canvas;
  let [left, top, right, bottom] = [Infinity, Infinity, -Infinity, -Infinity];
  for (const node of window.app.graph._nodes) {
    const [x, y] = node.pos, [w, h] = node.size;
    const above = LiteGraph.NODE_TITLE_HEIGHT + 24;  // the title bar and the badge row over it
    [left, top] = [Math.min(left, x), Math.min(top, y - above)];
    [right, bottom] = [Math.max(right, x + w), Math.max(bottom, y + h)];
  }
  const [width, height] = [canvas.canvas.width / devicePixelRatio, canvas.canvas.height / devicePixelRatio];
  const scale = Math.min((width - 2 * margin) / (right - left), (height - 2 * margin) / (bottom - top));
  canvas.ds.scale = scale;
  canvas.ds.offset[0] = (width / scale - (right - left)) / 2 - left;
  canvas.ds.offset[1] = (height / scale - (bottom - top)) / 2 - top;
  canvas.min_font_size_for_lod = 0;  // full detail at any zoom (low detail draws text-less boxes)
  canvas.show_info = false;
}"""


def fit_graph(page, margin: int = 16) -> None:
    """Scale and centre the canvas so the whole graph fills the view, drawn in full detail."""
    page.evaluate(FIT_GRAPH_JS, margin)
    redraw(page)


def thumbnail(page) -> bytes:
    """What the canvas draws (the graph, without the page's menus and panels on top of it),
    scaled to THUMBNAIL_SIZE, as JPEG."""
    import base64

    from PIL import Image

    data = page.evaluate("() => window.app.canvas.canvas.toDataURL('image/png')")
    shot = Image.open(io.BytesIO(base64.b64decode(data.split(",", 1)[1]))).convert("RGB")
    out = io.BytesIO()
    shot.resize(THUMBNAIL_SIZE, Image.LANCZOS).save(out, "JPEG", quality=85, optimize=True)
    return out.getvalue()


def examples() -> dict[str, str]:
    """API name -> title of every example (from build_workflows.py)."""
    spec = importlib.util.spec_from_file_location("build_workflows", HERE / "build_workflows.py")
    build = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = build
    spec.loader.exec_module(build)
    return {name: example.title for name, example in build.WORKFLOWS.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8188", help="a running ComfyUI with the pack installed")
    parser.add_argument("--chromium", default=CHROMIUM, help="the Chromium binary to drive")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        viewport = (2 * THUMBNAIL_SIZE[0], 2 * THUMBNAIL_SIZE[1])  # scaled down by half: crisp text
        browser, page = open_comfyui(playwright, args.url.rstrip("/"), args.chromium, viewport=viewport)
        try:
            for title in examples().values():
                load_workflow(page, json.loads((HERE / f"{title}.json").read_text()))
                fit_graph(page)
                (HERE / f"{title}.jpg").write_bytes(thumbnail(page))
                print(f"wrote example_workflows/{title}.jpg")
        finally:
            browser.close()


if __name__ == "__main__":
    main()
