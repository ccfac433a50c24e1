"""Optional download of the official files with ``huggingface_hub`` (only if it is installed).

Each file is fetched into a staging folder inside the model folder, checked against the size
and SHA-256 the Hub reports, verified by kind (network files are loaded strictly into their
modules, ONNX graphs are parsed by onnxruntime, the MediaPipe bundle's zip checksums are
checked), then moved into place with an atomic rename. An interrupted or failed download
leaves no partial file behind.
"""
from __future__ import annotations

import os
import re
import zipfile
from pathlib import Path
from typing import Optional

from ditto_core.atomic_files import discard, file_sha256, temp_sibling
from ditto_core.audio.hubert import HUBERT_ONNX_NAME
from ditto_core.errors import CheckpointError, MissingModelError
from ditto_core.models.checkpoints import HF_REPO, NETWORKS, build_network, find_network_file, load_state
from ditto_core.models.official_config import CONFIG_DIR, CONFIG_FILE, blink_table, find_config, read_config
from ditto_core.progress import ProgressCallback, report
from ditto_core.registration.aux_models import AUX_FILES

HF_FOLDER = "ditto_pytorch"
_SHA256 = re.compile(r"[0-9a-f]{64}")


def missing_files(model_dir: Path, aux_dir: Path) -> dict[str, Path]:
    """Repository path -> local target of every official file absent from ``model_dir`` (networks,
    and the config with the blink table under ``ditto_cfg/``) or ``aux_dir`` (face models and HuBERT)."""
    wanted = {
        f"{HF_FOLDER}/models/{spec.official_file}": model_dir / spec.official_file
        for name, spec in NETWORKS.items()
        if find_network_file(name, model_dir) is None
    }
    for file in (*AUX_FILES.values(), HUBERT_ONNX_NAME):
        if not (aux_dir / file).is_file():
            wanted[f"{HF_FOLDER}/aux_models/{file}"] = aux_dir / file
    if find_config(model_dir) is None:
        wanted[f"{CONFIG_DIR}/{CONFIG_FILE}"] = model_dir / CONFIG_DIR / CONFIG_FILE
    return wanted


def download_missing(model_dir: Path, aux_dir: Path, progress: Optional[ProgressCallback] = None) -> list[Path]:
    """Fetch every missing official file: networks into ``model_dir``, the rest into ``aux_dir``.

    Returns the files written. Raises :class:`MissingModelError` when ``huggingface_hub`` is not
    installed or a download fails, :class:`CheckpointError` when a downloaded file does not verify.
    """
    wanted = missing_files(model_dir, aux_dir)
    if not wanted:
        return []
    try:
        from huggingface_hub import get_hf_file_metadata, hf_hub_download, hf_hub_url
    except ImportError:
        raise MissingModelError(
            f"download_missing needs the huggingface_hub package (pip install huggingface_hub). Or download "
            f"these files from HuggingFace {HF_REPO} by hand and put them in {model_dir}: "
            + ", ".join(sorted(wanted))
        ) from None
    model_dir.mkdir(parents=True, exist_ok=True)
    staging = temp_sibling(model_dir / "download", directory=True)  # reaped on the next start if we are killed
    written = []
    try:
        for done, (remote, target) in enumerate(sorted(wanted.items()), start=1):
            try:
                expected = get_hf_file_metadata(hf_hub_url(HF_REPO, remote))
                local = Path(hf_hub_download(HF_REPO, remote, local_dir=staging))
            except Exception as exc:  # network, auth and disk errors of any kind
                raise MissingModelError(
                    f"downloading {remote} from HuggingFace {HF_REPO} failed ({type(exc).__name__}: {exc}). Check the "
                    f"connection and retry, or download it by hand into {target.parent}."
                ) from exc
            _verify_size_and_hash(local, expected.size, expected.etag)
            _verify(local)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(local, target)
            written.append(target)
            report(progress, done, len(wanted))
    finally:
        discard(staging)
    return written


def _verify_size_and_hash(path: Path, size: Optional[int], etag: Optional[str]) -> None:
    """Compare with what the Hub reports: the size, and the SHA-256 (a large file's ETag is its SHA-256)."""
    actual = path.stat().st_size
    if size is not None and actual != size:
        raise CheckpointError(f"the download of {path.name} from {HF_REPO} has {actual} bytes, the Hub lists "
                              f"{size}; it was discarded, try again.")
    if etag and _SHA256.fullmatch(etag):
        if file_sha256(path) != etag:
            raise CheckpointError(f"the download of {path.name} from {HF_REPO} does not match the Hub's SHA-256 "
                                  f"(corrupted in transit); it was discarded, try again.")


def _verify(path: Path) -> None:
    """Refuse a download that is not a whole, readable file of its kind, before it is moved into place."""
    if path.stat().st_size == 0:
        raise CheckpointError(f"the download of {path.name} from {HF_REPO} is empty; try again later.")
    network = next((name for name, spec in NETWORKS.items() if spec.official_file == path.name), None)
    if network is not None:
        build_network(network, load_state(network, path), path)
    elif path.suffix == ".onnx":
        _verify_onnx(path)
    elif path.suffix == ".task":
        _verify_bundle(path)
    elif path.suffix == ".pkl":
        blink_table(read_config(path), path)  # read as data, never unpickled


def _verify_onnx(path: Path) -> None:
    # Parsing the graph catches a truncated or foreign file; a size check alone would not.
    import onnxruntime as ort

    try:
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own untyped errors
        raise CheckpointError(
            f"the download of {path.name} from {HF_REPO} is not a readable ONNX model ({type(exc).__name__}); "
            f"it was discarded, try again."
        ) from exc


def _verify_bundle(path: Path) -> None:
    # MediaPipe's .task is a zip bundle: every member's CRC must check out.
    try:
        with zipfile.ZipFile(path) as bundle:
            damaged = bundle.testzip()
    except (zipfile.BadZipFile, OSError) as exc:
        raise CheckpointError(
            f"the download of {path.name} from {HF_REPO} is not a MediaPipe task bundle ({exc}); "
            f"it was discarded, try again."
        ) from exc
    if damaged is not None:
        raise CheckpointError(f"the download of {path.name} from {HF_REPO} is damaged (member {damaged}); "
                              f"it was discarded, try again.")
