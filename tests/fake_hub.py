"""A HuggingFace-like file server on 127.0.0.1 for the downloader's tests.

As the Hub does for files stored with Git LFS, ``HEAD /<repo>/resolve/main/<path>`` answers
with a redirect to a CDN address carrying the file's size and SHA-256 (``X-Linked-Size``,
``X-Linked-Etag``); ``GET`` of that address serves the bytes and honours ``Range``. Each file's
served bytes can be damaged (``damage[name]``, a function of the bytes) or the connection cut
after a number of bytes (``cut_after[name]``), while the listed size and hash stay the
original's, which is what a downloader sees when a transfer goes wrong.
"""
from __future__ import annotations

import hashlib
import io
import re
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable

import pytest

from ditto_core.audio.hubert_stub import write_stub_hubert
from ditto_core.model_files import HF_REPO, missing_downloads
from tests.official_config_support import official_shaped_config


class FakeHub:
    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files  # repository path -> bytes
        self.damage: dict[str, Callable[[bytes], bytes]] = {}
        self.cut_after: dict[str, int] = {}
        self.plain: set[str] = set()  # names served as the Hub serves small non-LFS files: no redirect, a git ETag
        self.served: list[tuple[str, int]] = []  # (file name, first byte sent) per GET
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep the test output clean
                pass

            def do_HEAD(self) -> None:
                remote = self._remote(f"/{HF_REPO}/resolve/main/")
                if remote is None:
                    return
                data = hub.files[remote]
                if remote.rsplit("/", 1)[-1] in hub.plain:
                    self.send_response(200)
                    self.send_header("ETag", f'"{hashlib.sha1(data).hexdigest()}"')
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    return
                self.send_response(302)
                self.send_header("Location", f"/cdn/{remote}")
                self.send_header("X-Linked-Size", str(len(data)))
                self.send_header("X-Linked-Etag", f'"{hashlib.sha256(data).hexdigest()}"')
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_GET(self) -> None:
                resolve = f"/{HF_REPO}/resolve/main/"
                remote = self._remote(resolve if self.path.startswith(resolve) else "/cdn/")
                if remote is None:
                    return
                name = remote.rsplit("/", 1)[-1]
                data = hub.damage.get(name, lambda b: b)(hub.files[remote])
                match = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range", ""))
                start = int(match.group(1)) if match else 0
                hub.served.append((name, start))
                self.send_response(206 if match else 200)
                if match:
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                self.send_header("Content-Length", str(len(data) - start))
                self.end_headers()
                body = data[start:]
                if name in hub.cut_after:
                    body = body[: hub.cut_after[name]]
                    self.close_connection = True
                self.wfile.write(body)

            def _remote(self, prefix: str):
                path = self.path.split("?")[0]
                remote = path[len(prefix):] if path.startswith(prefix) else None
                if remote not in hub.files:
                    self.send_error(404)
                    return None
                return remote

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def names_served(self) -> list[str]:
        return [name for name, _ in self.served]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def official_like_files(official_ckpt_dir: Path, workdir: Path) -> dict[str, bytes]:
    """Every official file, as a repository path -> bytes that pass the downloader's checks:
    the seed-0 networks, a stand-in ONNX graph for each ONNX model, a zip for the MediaPipe
    bundle, a config shaped like the official one."""
    stub = write_stub_hubert(workdir / "stub.onnx").read_bytes()
    bundle = io.BytesIO()
    with zipfile.ZipFile(bundle, "w") as archive:
        archive.writestr("face_landmarks_detector.tflite", bytes(range(256)) * 16)
    files = {}
    for remote in missing_downloads(workdir / "empty"):
        name = remote.rsplit("/", 1)[-1]
        if name.endswith(".pth"):
            files[remote] = (Path(official_ckpt_dir) / name).read_bytes() if name == "stitch_network.pth" else b""
        elif name.endswith(".onnx"):
            files[remote] = stub
        elif name.endswith(".pkl"):
            files[remote] = official_shaped_config()
        else:
            files[remote] = bundle.getvalue()
    return files


@pytest.fixture
def fake_hub(official_ckpt_dir, tmp_path, monkeypatch):
    """A :class:`FakeHub` serving every official file, with ``HF_ENDPOINT`` pointing at it.

    Only the stitching network (under 1 MB) is served whole; the other networks' entries are
    empty, so tests give their model folders those networks as links (see ``linked_networks``).
    """
    hub = FakeHub(official_like_files(official_ckpt_dir, tmp_path))
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    yield hub
    hub.close()


def linked_networks(model_dir: Path, official_ckpt_dir: Path, leave_out: tuple[str, ...] = ("stitch_network.pth",)):
    """``model_dir`` with every seed-0 network linked in but ``leave_out`` (to be downloaded)."""
    model_dir.mkdir(parents=True, exist_ok=True)
    for file in Path(official_ckpt_dir).glob("*.pth"):
        if file.name not in leave_out:
            (model_dir / file.name).symlink_to(file)
    return model_dir
