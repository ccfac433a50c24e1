"""Optional download of the official files with ``huggingface_hub`` (only if it is installed).

Each file is fetched into a staging folder inside the model folder, verified (network files
are loaded strictly into their modules, other files must be non-empty), then moved into place
with an atomic rename. An interrupted or failed download leaves no partial file behind.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Optional

from ditto_core.audio.hubert import HUBERT_ONNX_NAME
from ditto_core.errors import CheckpointError, MissingModelError
from ditto_core.models.checkpoints import HF_REPO, NETWORKS, build_network, find_network_file, load_state
from ditto_core.progress import ProgressCallback, report
from ditto_core.registration.aux_models import AUX_FILES

HF_FOLDER = "ditto_pytorch"


def missing_files(model_dir: Path, aux_dir: Path) -> dict[str, Path]:
    """Repository path -> local target of every official file absent from ``model_dir`` (networks)
    or ``aux_dir`` (face models and HuBERT)."""
    wanted = {
        f"{HF_FOLDER}/models/{spec.official_file}": model_dir / spec.official_file
        for name, spec in NETWORKS.items()
        if find_network_file(name, model_dir) is None
    }
    for file in (*AUX_FILES.values(), HUBERT_ONNX_NAME):
        if not (aux_dir / file).is_file():
            wanted[f"{HF_FOLDER}/aux_models/{file}"] = aux_dir / file
    return wanted


def download_missing(model_dir: Path, aux_dir: Path, progress: Optional[ProgressCallback] = None) -> list[Path]:
    """Fetch every missing official file: networks into ``model_dir``, the rest into ``aux_dir``.

    Returns the files written. Raises :class:`MissingModelError` when ``huggingface_hub`` is not
    installed, :class:`CheckpointError` when a downloaded network file does not verify.
    """
    wanted = missing_files(model_dir, aux_dir)
    if not wanted:
        return []
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        raise MissingModelError(
            f"download_missing needs the huggingface_hub package (pip install huggingface_hub). Or download "
            f"these files from HuggingFace {HF_REPO} by hand and put them in {model_dir}: "
            + ", ".join(sorted(wanted))
        ) from None
    model_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".ditto_download_", dir=model_dir))
    written = []
    try:
        for done, (remote, target) in enumerate(sorted(wanted.items()), start=1):
            try:
                local = Path(hf_hub_download(HF_REPO, remote, local_dir=staging))
            except Exception as exc:  # network, auth and disk errors of any kind
                raise MissingModelError(
                    f"downloading {remote} from HuggingFace {HF_REPO} failed ({type(exc).__name__}: {exc}). Check the "
                    f"connection and retry, or download it by hand into {target.parent}."
                ) from exc
            _verify(local)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(local, target)
            written.append(target)
            report(progress, done, len(wanted))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return written


def _verify(path: Path) -> None:
    network = next((name for name, spec in NETWORKS.items() if spec.official_file == path.name), None)
    if network is not None:
        build_network(network, load_state(network, path), path)
    elif path.stat().st_size == 0:
        raise CheckpointError(f"the download of {path.name} from {HF_REPO} is empty; try again later.")
