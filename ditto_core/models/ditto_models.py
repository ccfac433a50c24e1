"""The six Ditto networks as one loaded set, the object the pipeline and nodes pass around."""
from __future__ import annotations

import contextlib
import hashlib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import torch
from torch import Tensor, nn

from ..atomic_files import folder_lock
from ..errors import MissingModelError
from ..model_files import CONFIG_DIR, CONFIG_FILE, find_config, find_network_file, missing_networks_message
from .checkpoints import NETWORKS, build_network, file_identity, load_state
from .keypoints import EYE_KP, NUM_KP
from .official_config import blink_table, read_config

log = logging.getLogger(__name__)

# The LMDM and stitching network are tiny next to the image networks; they stay fp32 because the
# 25-step diffusion recurrence accumulates half-precision error into visible jitter.
ALWAYS_FP32 = ("lmdm", "stitch_network")


@dataclass
class DittoModels:
    """Loaded networks in eval mode on ``device``; image networks in ``dtype``."""

    appearance_extractor: nn.Module
    motion_extractor: nn.Module
    warp_network: nn.Module
    decoder: nn.Module
    stitch_network: nn.Module
    lmdm: nn.Module
    device: torch.device
    dtype: torch.dtype
    files: dict[str, Path] = field(default_factory=dict)
    identity: str = ""  # fingerprint of the files used: part of every avatar cache key
    blink_table: Optional[Tensor] = None
    """(K, 63) float32 on ``device``: Ditto's recorded blink, from the official config (None: no
    procedural blinks). The pipeline applies it unless the motion options bring their own table;
    with blinks off (-1) every frame shows its open row, as in Ditto."""

    @property
    def cond_dim(self) -> int:
        """Width of the per-frame LMDM condition, as the checkpoint defines it."""
        return self.lmdm.cond_projection.in_features


def load_ditto_models(
    model_dir: Path | str, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32
) -> DittoModels:
    """Load all six networks from ``model_dir`` (official ``.pth`` or converted ``.safetensors``).

    Every missing file is reported at once; every file is validated before any module is
    handed out. The blink table comes from the official config under ``ditto_cfg/`` when it is
    there (see :func:`~ditto_core.model_files.find_config`); without it blinks are off.
    """
    model_dir = Path(model_dir)
    device = torch.device(device)
    files = {name: find_network_file(name, model_dir) for name in NETWORKS}
    missing = [name for name, path in files.items() if path is None]
    if missing:
        raise MissingModelError(missing_networks_message(missing, model_dir))
    blinks = _load_blink_table(model_dir)  # small: a bad config fails before the heavy loads
    modules = {}
    with contextlib.ExitStack() as locks:  # a weights conversion into these folders waits, and vice versa
        for folder in sorted({path.parent for path in files.values()}):
            locks.enter_context(folder_lock(folder, shared=True))
        for name, path in files.items():
            module = build_network(name, load_state(name, path), path, device)
            modules[name] = module.to(dtype=torch.float32 if name in ALWAYS_FP32 else dtype)
    identity = hashlib.sha256("|".join(file_identity(files[n]) for n in NETWORKS).encode()).hexdigest()
    return DittoModels(**modules, device=device, dtype=dtype, files=files, identity=identity,
                       blink_table=None if blinks is None else blinks.to(device))


def _load_blink_table(model_dir: Path) -> Optional[Tensor]:
    path = find_config(model_dir)
    if path is None:
        log.info("Procedural blinks need Ditto's config %s (HuggingFace folder %s/); without it the eyes "
                 "follow the generated motion.", (model_dir / CONFIG_DIR / CONFIG_FILE).resolve(), CONFIG_DIR)
        return None
    table = blink_table(read_config(path), path)
    if table is None:
        log.warning("%s has no default_kwargs['delta_eye_arr'] blink table; procedural blinks are off.", path)
    return table


def synthetic_blink_table(rows: int = 7) -> Tensor:
    """(rows, 63) float32 stand-in for Ditto's recorded blink, for random-weights smoke runs.

    The eyelid keypoints move down and back up along a parabola (0 at the first and last row,
    so row 0 is "eyes open" like the real table); every other channel stays 0. The values
    mean nothing for random networks: the table only makes the blink code paths run.
    """
    bump = 1 - torch.linspace(-1, 1, rows) ** 2
    table = torch.zeros(rows, NUM_KP, 3)
    table[:, list(EYE_KP), 1] = 0.02 * bump[:, None]
    return table.reshape(rows, 3 * NUM_KP)


def random_ditto_models(
    device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32, seed: int = 0
) -> DittoModels:
    """The six networks with their default random initialisation: for smoke tests without files.

    They go through the same inference rewrites as loaded ones, and carry a
    :func:`synthetic_blink_table`, so every code path downstream is the real one.
    """
    device = torch.device(device)
    modules = {}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for name, spec in NETWORKS.items():
            module = spec.build({}).eval().requires_grad_(False)
            prepare = getattr(module, "prepare_for_inference", None)
            if callable(prepare):
                prepare()
            modules[name] = module.to(device=device, dtype=torch.float32 if name in ALWAYS_FP32 else dtype)
    return DittoModels(**modules, device=device, dtype=dtype, identity=f"random-seed-{seed}",
                       blink_table=synthetic_blink_table().to(device))
