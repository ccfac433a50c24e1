"""The official Ditto file set: what each file is called, where it sits on HuggingFace and on
disk, and which of them a model folder lacks.

Every other module asks here: ``models/checkpoints.py`` (the six networks),
``registration/aux_models.py`` (the face models), ``audio/hubert.py`` (HuBERT),
``models/official_config.py`` (the config with the blink table), ``download.py`` (what to
fetch), the CLI and the ComfyUI nodes (what to report). It imports nothing heavy, so a
missing-files message costs no torch import.

A *model folder* holds the networks flat, in ``models/`` or in ``ditto_pytorch/models/``
(HuggingFace's layout), the face models and HuBERT flat, in ``aux_models/`` or in
``ditto_pytorch/aux_models/``, and the config in ``ditto_cfg/``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Optional

from .errors import MissingModelError

HF_REPO = "digital-avatar/ditto-talkinghead"
HF_NETWORK_FOLDER = "ditto_pytorch/models"
HF_AUX_FOLDER = "ditto_pytorch/aux_models"
AUX_SOURCE = f"HuggingFace {HF_REPO}, folder {HF_AUX_FOLDER}/"
"""Where a face model or HuBERT comes from, as error messages say it."""

NETWORK_STEMS = {
    "appearance_extractor": "appearance_extractor",
    "motion_extractor": "motion_extractor",
    "warp_network": "warp_network",
    "decoder": "decoder",
    "stitch_network": "stitch_network",
    "lmdm": "lmdm_v0.4_hubert",
}
"""Our name of each network (the ``DittoModels`` attribute) -> its official file name without
the extension (``.pth`` as downloaded, ``.safetensors`` once converted)."""
AUX_FILES = {
    "face_detector": "det_10g.onnx",
    "landmark106": "2d106det.onnx",
    "landmark203": "landmark203.onnx",
    "landmark478": "face_landmarker.task",
}
"""Attribute of :class:`~ditto_core.registration.aux_models.AuxModels` -> official file name."""
HUBERT_ONNX_NAME = "hubert_streaming_fix_kv.onnx"
CONFIG_DIR = "ditto_cfg"
"""Folder of the model directory (and of the HuggingFace repository) holding the configs."""
CONFIG_FILE = "v0.4_hubert_cfg_pytorch.pkl"
"""The official PyTorch config; the TensorRT configs carry the same ``default_kwargs``."""


def network_dirs(model_dir: Path | str) -> list[Path]:
    """Where the networks may sit under a model folder: flat, or the HuggingFace layouts."""
    model_dir = Path(model_dir)
    return [model_dir, model_dir / "models", model_dir / "ditto_pytorch" / "models"]


def aux_dirs(model_dir: Path | str) -> list[Path]:
    """Where the face models and HuBERT may sit: flat, or the HuggingFace layouts."""
    model_dir = Path(model_dir)
    return [model_dir, model_dir / "aux_models", model_dir / "ditto_pytorch" / "aux_models"]


def find_network_file(name: str, model_dir: Path | str, suffixes: tuple[str, ...] = (".safetensors", ".pth")
                      ) -> Optional[Path]:
    """The file for network ``name`` under ``model_dir``: in the first folder of :func:`network_dirs`
    holding one, the first of ``suffixes`` (by default a converted ``.safetensors`` wins over ``.pth``)."""
    stem = NETWORK_STEMS[name]
    for folder in network_dirs(model_dir):
        for suffix in suffixes:
            path = folder / f"{stem}{suffix}"
            if path.is_file():
                return path
    return None


def _find_aux(file: str, model_dir: Path | str) -> Optional[Path]:
    for folder in aux_dirs(model_dir):
        if (folder / file).is_file():
            return folder / file
    return None


def find_aux_file(name: str, model_dir: Path | str) -> Optional[Path]:
    """The face model ``name`` (a key of :data:`AUX_FILES`) under ``model_dir``, or None."""
    return _find_aux(AUX_FILES[name], model_dir)


def find_hubert(model_dir: Path | str) -> Optional[Path]:
    """HuBERT sits with the face models, in any of :func:`aux_dirs`."""
    return _find_aux(HUBERT_ONNX_NAME, model_dir)


def find_config(model_dir: Path | str) -> Optional[Path]:
    """The config to read under ``<model_dir>/ditto_cfg/``: the official PyTorch one, else any
    ``*.pkl`` whose name contains "pytorch", then "trt" (same blink table), else None."""
    folder = Path(model_dir) / CONFIG_DIR
    if (folder / CONFIG_FILE).is_file():
        return folder / CONFIG_FILE
    for word in ("pytorch", "trt"):
        found = sorted(p for p in folder.glob(f"*{word}*.pkl") if p.is_file())
        if found:
            return found[0]
    return None


def render_files(model_dir: Path | str, detect_face: bool = True) -> list[Path]:
    """Every file under ``model_dir`` a render loads, as found now (missing ones left out): the
    networks, the face models (with ``detect_face``), HuBERT and the config."""
    found = [find_network_file(name, model_dir) for name in NETWORK_STEMS]
    if detect_face:
        found += [find_aux_file(name, model_dir) for name in AUX_FILES]
    found += [find_hubert(model_dir), find_config(model_dir)]
    return [path for path in found if path is not None]


def missing_networks_message(names: Iterable[str], model_dir: Path | str) -> str:
    files = ", ".join(f"{NETWORK_STEMS[n]}.pth" for n in names)
    return (
        f"Missing Ditto model file(s): {files}. Looked in {Path(model_dir).resolve()} "
        f"(and its models/ and ditto_pytorch/models/ subfolders). Download them from HuggingFace "
        f"{HF_REPO} (folder {HF_NETWORK_FOLDER}/) and put them in that folder, or run "
        f"`python -m ditto_core download --models {model_dir}`; inside ComfyUI this is ComfyUI/models/ditto/."
    )


def check_model_files(model_dir: Path | str, detect_face: bool = True) -> None:
    """Raise one :class:`MissingModelError` listing every file a render needs and lacks."""
    model_dir = Path(model_dir)
    missing = [f"{NETWORK_STEMS[name]}.pth -> {model_dir}/" for name in NETWORK_STEMS
               if find_network_file(name, model_dir) is None]
    aux_needed = [AUX_FILES[n] for n in AUX_FILES if detect_face and find_aux_file(n, model_dir) is None]
    if find_hubert(model_dir) is None:
        aux_needed.append(HUBERT_ONNX_NAME)
    missing += [f"{name} -> {model_dir}/aux_models/" for name in aux_needed]
    if missing:
        lines = "\n  ".join(missing)
        optional = ""
        if find_config(model_dir) is None:
            optional = (f"Optional, for Ditto's procedural blinks: {CONFIG_FILE} -> {model_dir}/{CONFIG_DIR}/ "
                        f"(from {CONFIG_DIR}/ on HuggingFace).\n")
        raise MissingModelError(
            f"Ditto needs these model files, which are not in {model_dir.resolve()}:\n  {lines}\n{optional}"
            f"Download them with `python -m ditto_core download --models {model_dir}`, or by hand from "
            f"HuggingFace {HF_REPO} (the .pth files from {HF_NETWORK_FOLDER}/, the others from "
            f"{HF_AUX_FOLDER}/). Inside ComfyUI the folder is ComfyUI/models/ditto/. To try the pipeline "
            f"without them, add --random-weights."
        )


def aux_download_dir(model_dir: Path | str) -> Path:
    """Where downloaded face models and HuBERT go: the model folder's existing aux folder, else
    ``<model_dir>/aux_models``."""
    model_dir = Path(model_dir)
    existing = [folder for folder in aux_dirs(model_dir)[1:] if folder.is_dir()]
    return existing[0] if existing else model_dir / "aux_models"


def missing_downloads(model_dir: Path | str, aux_dir: Optional[Path | str] = None) -> dict[str, Path]:
    """Repository path -> local target of every official file ``model_dir`` lacks: networks into
    ``model_dir``, face models and HuBERT into ``aux_dir`` (default :func:`aux_download_dir`), the
    config into ``<model_dir>/ditto_cfg/``."""
    model_dir = Path(model_dir)
    aux_dir = aux_download_dir(model_dir) if aux_dir is None else Path(aux_dir)
    wanted = {}
    for name, stem in NETWORK_STEMS.items():
        if find_network_file(name, model_dir) is None:
            wanted[f"{HF_NETWORK_FOLDER}/{stem}.pth"] = model_dir / f"{stem}.pth"
    for file in (*AUX_FILES.values(), HUBERT_ONNX_NAME):
        if not (aux_dir / file).is_file():
            wanted[f"{HF_AUX_FOLDER}/{file}"] = aux_dir / file
    if find_config(model_dir) is None:
        wanted[f"{CONFIG_DIR}/{CONFIG_FILE}"] = model_dir / CONFIG_DIR / CONFIG_FILE
    return wanted
