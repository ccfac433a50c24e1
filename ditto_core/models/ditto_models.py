"""The six Ditto networks as one loaded set, the object the pipeline and nodes pass around."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from ..errors import MissingModelError
from .checkpoints import NETWORKS, build_network, file_identity, find_network_file, load_state, missing_files_message

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

    @property
    def cond_dim(self) -> int:
        """Width of the per-frame LMDM condition, as the checkpoint defines it."""
        return self.lmdm.cond_projection.in_features


def load_ditto_models(
    model_dir: Path | str, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32
) -> DittoModels:
    """Load all six networks from ``model_dir`` (official ``.pth`` or converted ``.safetensors``).

    Every missing file is reported at once; every file is validated before any module is
    handed out.
    """
    model_dir = Path(model_dir)
    device = torch.device(device)
    files = {name: find_network_file(name, model_dir) for name in NETWORKS}
    missing = [name for name, path in files.items() if path is None]
    if missing:
        raise MissingModelError(missing_files_message(missing, model_dir))
    modules = {}
    for name, path in files.items():
        module = build_network(name, load_state(name, path), path)
        modules[name] = module.to(device=device, dtype=torch.float32 if name in ALWAYS_FP32 else dtype)
    identity = hashlib.sha256("|".join(file_identity(files[n]) for n in NETWORKS).encode()).hexdigest()
    return DittoModels(**modules, device=device, dtype=dtype, files=files, identity=identity)


def random_ditto_models(
    device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32, seed: int = 0
) -> DittoModels:
    """The six networks with their default random initialisation: for smoke tests without files.

    They go through the same inference rewrites as loaded ones, so every code path downstream
    is the real one.
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
    return DittoModels(**modules, device=device, dtype=dtype, identity=f"random-seed-{seed}")
