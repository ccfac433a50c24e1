"""Safety: no unsafe deserialisation anywhere in the pack, output names that cannot leave
ComfyUI's output folder, and a downloader that never leaves a bad or partial file behind.

(Avatar-cache verification is covered by ``tests/test_registration_cache.py``; its
reliability-marked tests are listed in the same table, docs/RELIABILITY.md.)
"""
from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest
import torch

from tests.comfy_stubs import REPO, load_pack

pack = load_pack()

import folder_paths  # noqa: E402
from ditto_core.errors import CheckpointError  # noqa: E402
from ditto_core.model_files import CONFIG_DIR  # noqa: E402
from ditto_core.render.rendered_frames import VideoFrames  # noqa: E402
from ditto_core.download import download_missing  # noqa: E402
from tests.fake_hub import fake_hub, linked_networks  # noqa: E402,F401 (fixture)
from comfyui_ditto_pack.nodes.output_nodes import output_file, save_mp4  # noqa: E402

SCANNED = ("ditto_core", "nodes", "bench", "__init__.py")
"""Everything that ships or runs outside the tests."""
UNSAFE_MODULES = {"pickle", "cPickle", "_pickle", "dill", "cloudpickle", "joblib", "shelve", "marshal"}


# ------------------------------------------------------------------------------ deserialisation


def _keyword(call: ast.Call, name: str):
    """The constant value of keyword ``name`` (``...`` when given as an expression), or None if absent."""
    for keyword in call.keywords:
        if keyword.arg == name:
            return keyword.value.value if isinstance(keyword.value, ast.Constant) else ...
    return None


def _dotted(node: ast.expr) -> str:
    """``torch.load`` for ``torch.load``; '' for anything that is not a dotted name."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else ""
    return ""


def unsafe_deserialisation(source: str, filename: str = "<source>") -> list[str]:
    """Every place in ``source`` that could unpickle untrusted data, as ``file:line: what``.

    Flags imports of pickle-family modules, ``torch.load`` (or a bare ``load`` imported from
    torch) without a literal ``weights_only=True``, ``numpy.load``/``np.load`` with
    ``allow_pickle`` other than a literal False, and pandas' ``read_pickle``. Parsed, not
    grepped: comments and strings that mention pickle are not findings.
    """
    findings = []
    torch_load_names = {"torch.load", "torch.serialization.load"}
    for node in ast.walk(ast.parse(source, filename=filename)):
        where = f"{filename}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            findings += [f"{where}: import {a.name}" for a in node.names if a.name.split(".")[0] in UNSAFE_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.split(".")[0] in UNSAFE_MODULES:
                findings.append(f"{where}: from {node.module} import ...")
            elif node.module in ("torch", "torch.serialization"):
                torch_load_names |= {a.asname or a.name for a in node.names if a.name == "load"}
    for node in ast.walk(ast.parse(source, filename=filename)):
        if not isinstance(node, ast.Call):
            continue
        name, where = _dotted(node.func), f"{filename}:{node.lineno}"
        if name in torch_load_names and _keyword(node, "weights_only") is not True:
            findings.append(f"{where}: {name}(...) without weights_only=True")
        elif name in ("np.load", "numpy.load") and _keyword(node, "allow_pickle") not in (None, False):
            findings.append(f"{where}: {name}(..., allow_pickle=...) may unpickle")
        elif name.endswith("read_pickle"):
            findings.append(f"{where}: {name}(...) unpickles")
    return findings


def _shipped_python_files() -> list[Path]:
    files = []
    for entry in SCANNED:
        path = REPO / entry
        files += [path] if path.is_file() else sorted(path.rglob("*.py"))
    return files


@pytest.mark.reliability(area="Safety", case="pickle / torch.load without weights_only=True / np.load(allow_pickle=True) "
                                              "anywhere in ditto_core, nodes, bench or the entry point",
                         behaviour="none present: every Python file is parsed and any such call or import fails the test")
def test_package_never_unpickles_untrusted_data():
    files = _shipped_python_files()
    assert len(files) > 40 and REPO / "ditto_core" / "models" / "checkpoints.py" in files
    findings = [f for path in files for f in unsafe_deserialisation(path.read_text(encoding="utf-8"),
                                                                     str(path.relative_to(REPO)))]
    assert not findings, "unsafe deserialisation:\n" + "\n".join(findings)


@pytest.mark.reliability(area="Safety", case="the deserialisation scan itself",
                         behaviour="flags each unsafe form and passes the safe ones and mere mentions in comments")
def test_scan_catches_every_unsafe_form():
    unsafe = [
        "import pickle",
        "import dill as d",
        "from joblib import load",
        "import torch\ntorch.load(p)",  # unsafe-ok: a sample for the scanner, never run
        "import torch\ntorch.load(p, weights_only=False)",  # unsafe-ok: a sample for the scanner, never run
        "import torch\ntorch.load(p, weights_only=flag)",  # unsafe-ok: a sample for the scanner, never run
        "from torch import load as tl\ntl(p)",
        "import numpy as np\nnp.load(p, allow_pickle=True)",
        "import pandas as pd\npd.read_pickle(p)",
    ]
    for source in unsafe:
        assert len(unsafe_deserialisation(source)) == 1, source
    safe = "# pickle is never used\nimport torch, numpy as np\ntorch.load(p, weights_only=True, mmap=True)\nnp.load(p)\n" \
           "np.load(p, allow_pickle=False)\ns = 'import pickle'\n"
    assert unsafe_deserialisation(safe) == []


# ------------------------------------------------------------------------------ output names

HOSTILE_PREFIXES = [
    "../escaped",
    "../../../../../../tmp/ditto_escape",
    "ditto/../../escaped",
    "/etc/cron.d/ditto",
    "//server/share/clip",
    "\\\\server\\share\\clip",
    "C:\\Windows\\System32\\clip",
    "C:clip",
    "..\\..\\escaped",
    "ok\x00/../../escaped",
    "\x00",
    ". ./. ./escaped",
    "....//....//escaped",
    " ../ ../escaped",
]


@pytest.fixture
def output_dir(tmp_path, monkeypatch):
    out = tmp_path / "ComfyUI" / "output"
    out.mkdir(parents=True)
    monkeypatch.setattr(folder_paths, "get_output_directory", lambda: str(out))
    return out


@pytest.mark.reliability(area="Safety", case="filename prefix with ../, absolute paths, UNC paths, NUL bytes, "
                                              "Windows drive letters or backslashes",
                         behaviour="the MP4 path always resolves inside ComfyUI's output folder (hostile parts dropped)")
@pytest.mark.parametrize("prefix", HOSTILE_PREFIXES)
def test_output_path_stays_in_the_output_folder(output_dir, prefix):
    path, saved = output_file(prefix, 64, 64)
    resolved = Path(os.path.realpath(path))
    assert resolved.is_relative_to(output_dir.resolve()), f"{prefix!r} -> {resolved}"
    assert "\x00" not in path and "\\" not in os.path.relpath(path, output_dir)
    assert resolved.name == saved["filename"] and resolved.suffix == ".mp4"


@pytest.mark.reliability(area="Safety", case="saving through a hostile prefix end to end",
                         behaviour="the video is written inside the output folder and nothing appears outside it")
def test_save_with_hostile_prefix_writes_only_inside(output_dir):
    outside = output_dir.parent
    before = {p for p in outside.rglob("*") if not p.is_relative_to(output_dir)}
    frames = VideoFrames(frames=torch.zeros(3, 32, 32, 3, dtype=torch.uint8), fps=25.0)
    saved = save_mp4(frames, None, "../../escaped/\x00clip", crf=23, preset="ultrafast", progress=None)
    after = {p for p in outside.rglob("*") if not p.is_relative_to(output_dir)}
    assert after == before, f"written outside the output folder: {sorted(after - before)}"
    written = output_dir / saved["subfolder"] / saved["filename"]
    assert written.is_file() and written.stat().st_size > 0


# ------------------------------------------------------------------------------ downloader


def _truncate(data: bytes) -> bytes:
    return data[: len(data) // 2]


def _empty(data: bytes) -> bytes:
    return b""


def _flip_a_byte(data: bytes) -> bytes:
    middle = len(data) // 2
    return data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1:]


def _append_garbage(data: bytes) -> bytes:
    return data + b"\x00" * 100


@pytest.fixture
def model_dir(tmp_path, official_ckpt_dir):
    """Every network present but the stitching network; no aux folder yet."""
    return linked_networks(tmp_path / "ditto", official_ckpt_dir)


def _debris(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.name.startswith("."))


@pytest.mark.reliability(area="Safety", case="downloader served a truncated, empty or corrupted file (network .pth, "
                                              "face-model/HuBERT .onnx, MediaPipe .task, Ditto config .pkl)",
                         behaviour="the file is refused with an error naming it; nothing is left at its target or "
                                   "beside it; files verified before it are kept, and a retry completes the set")
@pytest.mark.parametrize("file, damage", [
    ("stitch_network.pth", _truncate),
    ("stitch_network.pth", _flip_a_byte),  # same size, still loads: only the hash can tell
    ("stitch_network.pth", _append_garbage),
    ("det_10g.onnx", _truncate),
    ("hubert_streaming_fix_kv.onnx", _empty),
    ("face_landmarker.task", _truncate),
    ("face_landmarker.task", _flip_a_byte),
    ("v0.4_hubert_cfg_pytorch.pkl", _truncate),
])
def test_bad_download_leaves_nothing_behind(fake_hub, model_dir, file, damage):
    aux_dir = model_dir / "aux_models"
    fake_hub.damage[file] = damage
    with pytest.raises(CheckpointError, match=file.replace(".", r"\.")):
        download_missing(model_dir, aux_dir)
    folder = {".pth": model_dir, ".pkl": model_dir / CONFIG_DIR}.get(Path(file).suffix, aux_dir)
    assert not (folder / file).exists(), "a refused download was left at its target"
    assert _debris(model_dir) == [], "partial or temporary files left behind"
    served = fake_hub.names_served()
    kept = [p for p in (*model_dir.glob("*.pth"), *aux_dir.glob("*"), *(model_dir / CONFIG_DIR).glob("*"))
            if not p.is_symlink()]
    assert all(p.name in served[:-1] for p in kept), "only files verified before the failure may stay"

    fake_hub.damage.clear()
    fake_hub.served.clear()
    download_missing(model_dir, aux_dir)
    served = fake_hub.names_served()
    assert file in served and [p.name for p in kept if p.name in served] == []  # kept files are not fetched again
    assert download_missing(model_dir, aux_dir) == [] and _debris(model_dir) == []


@pytest.mark.reliability(area="Safety", case="a download in progress, seen from another process",
                         behaviour="the target never exists until the verified file is renamed into place")
def test_download_target_appears_only_complete(fake_hub, model_dir):
    aux_dir = model_dir / "aux_models"
    seen_early = []

    def check_not_yet_visible(name: str):
        target = (model_dir if name.endswith(".pth") else aux_dir) / name

        def serve(data: bytes) -> bytes:
            seen_early.append(target.exists())
            return data

        return serve

    for name in ("stitch_network.pth", "det_10g.onnx", "face_landmarker.task"):
        fake_hub.damage[name] = check_not_yet_visible(name)
    written = download_missing(model_dir, aux_dir)
    assert seen_early == [False, False, False]
    assert {p.name for p in written} >= {"stitch_network.pth", "det_10g.onnx", "face_landmarker.task"}
