"""Official Ditto checkpoint files -> our modules.

Users download ``ditto_pytorch/models/*.pth`` from HuggingFace
(``digital-avatar/ditto-talkinghead``) and may convert them once to ``.safetensors`` with
``python -m ditto_core convert-weights``. Both load here, strictly: every key and shape must
match, otherwise the error names the file and the first mismatching key with both shapes.
Nothing is returned until every requested network has loaded, so a bad file never leaves a
half-loaded set behind.
"""
from __future__ import annotations

import hashlib
import json
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

import torch
from torch import Tensor, nn

from ..atomic_files import atomic_write, file_sha256, folder_lock, reap_stale_temporaries
from ..errors import CheckpointError, MissingModelError
from ..model_files import (
    HF_NETWORK_FOLDER, HF_REPO, NETWORK_STEMS, find_network_file, missing_networks_message,
)
FORMAT_VERSION = "1"
StateDict = dict[str, Tensor]


def _bare(obj: Any, path: Path) -> Any:
    return obj


def _stitch(obj: Any, path: Path) -> Any:
    # The file is LivePortrait's retargeting checkpoint: three heads saved from DDP-wrapped
    # modules. Ditto only uses the shoulder head.
    head = _entry(obj, "retarget_shoulder", path)
    return {key.replace("module.", ""): value for key, value in head.items()} if isinstance(head, Mapping) else head


def _lmdm(obj: Any, path: Path) -> Any:
    return _entry(obj, "model_state_dict", path)


def _entry(obj: Any, key: str, path: Path) -> Any:
    if not isinstance(obj, Mapping) or key not in obj:
        found = ", ".join(map(str, list(obj)[:5])) if isinstance(obj, Mapping) else type(obj).__name__
        raise CheckpointError(
            f"{path} is not the expected Ditto checkpoint: it has no '{key}' entry (found: {found}). "
            f"Re-download {path.name} from HuggingFace {HF_REPO} ({HF_NETWORK_FOLDER}/)."
        )
    return obj[key]


def _build_lmdm(state: StateDict) -> nn.Module:
    from .lmdm import LMDM

    # The released model was trained with 1103-wide conditions; the reference code default
    # (1059) is wrong for it, so the width is read from the checkpoint itself.
    weight = state.get("cond_projection.weight")
    return LMDM(cond_dim=weight.shape[1]) if weight is not None and weight.ndim == 2 else LMDM()


def _builder(module: str, cls: str) -> Callable[[StateDict], nn.Module]:
    def build(state: StateDict) -> nn.Module:
        import importlib

        return getattr(importlib.import_module(f".{module}", __package__), cls)()

    return build


@dataclass(frozen=True)
class NetworkSpec:
    """How one official file becomes one module."""

    name: str  # our name for the network (also the DittoModels attribute)
    unwrap: Callable[[Any, Path], Any]  # container -> the state dict the module loads
    build: Callable[[StateDict], nn.Module]

    @property
    def stem(self) -> str:
        """Official file name without extension (see :data:`~ditto_core.model_files.NETWORK_STEMS`)."""
        return NETWORK_STEMS[self.name]

    @property
    def official_file(self) -> str:
        return f"{self.stem}.pth"


NETWORKS: dict[str, NetworkSpec] = {
    spec.name: spec
    for spec in (
        NetworkSpec("appearance_extractor", _bare, _builder("appearance_extractor", "AppearanceFeatureExtractor")),
        NetworkSpec("motion_extractor", _bare, _builder("motion_extractor", "MotionExtractor")),
        NetworkSpec("warp_network", _bare, _builder("warp_network", "WarpingNetwork")),
        NetworkSpec("decoder", _bare, _builder("decoder", "SPADEDecoder")),
        NetworkSpec("stitch_network", _stitch, _builder("stitch_network", "StitchingNetwork")),
        NetworkSpec("lmdm", _lmdm, _build_lmdm),
    )
}


def read_checkpoint(path: Path) -> Any:
    """Read a ``.pth`` (``weights_only=True``, never arbitrary unpickling) or ``.safetensors`` file."""
    path = Path(path)
    hint = f"Re-download {path.name} from HuggingFace {HF_REPO} ({HF_NETWORK_FOLDER}/) or re-run convert-weights."
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            return load_file(str(path), device="cpu")
        return _torch_load(path)
    except (RuntimeError, OSError, EOFError, ValueError, zipfile.BadZipFile, KeyError) as exc:
        raise CheckpointError(
            f"{path} could not be read ({type(exc).__name__}: {(str(exc).splitlines() or ['no detail'])[0][:200]}); "
            f"the file is truncated, corrupt or not a checkpoint. {hint}"
        ) from exc
    except Exception as exc:  # safetensors raises its own error type; the pickle guard raises UnpicklingError
        raise CheckpointError(f"{path} could not be read safely ({type(exc).__name__}: {exc}). {hint}") from exc


def _torch_load(path: Path) -> Any:
    try:
        # Memory-mapped: a 200 MB checkpoint is not read twice (file -> buffer -> tensors).
        return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except RuntimeError as exc:
        if "mmap" not in str(exc):
            raise
        # Files written by the legacy (pre-zip) serializer cannot be memory-mapped.
        return torch.load(path, map_location="cpu", weights_only=True)


def _float32_state(raw: Any, path: Path) -> StateDict:
    if not isinstance(raw, Mapping) or not all(isinstance(v, Tensor) for v in raw.values()):
        raise CheckpointError(f"{path} does not hold a state dict of tensors; it is not a Ditto network file.")
    # Files may be stored in half precision; parity and all rewrites are defined in fp32.
    return {k: v.float() if v.is_floating_point() else v for k, v in raw.items()}


def _guess_network(state: StateDict) -> Optional[str]:
    keys = set(state)
    for spec in NETWORKS.values():
        try:
            expected = set(spec.build(state).state_dict())
        except Exception:  # a builder needing keys this state lacks cannot be the match
            continue
        if expected == keys:
            return spec.name
    return None


def check_state_dict(module: nn.Module, state: StateDict, path: Path, name: str) -> None:
    """Raise :class:`CheckpointError` naming the first mismatch, before anything is copied."""
    expected = module.state_dict()
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    if missing and unexpected and len(missing) == len(expected):
        other = _guess_network(state)
        looks_like = f" It looks like {NETWORKS[other].official_file}." if other else ""
        raise CheckpointError(
            f"{path} does not hold the {name} network: none of its {len(expected)} keys are present "
            f"(first expected: '{missing[0]}', first found: '{unexpected[0]}').{looks_like} "
            f"Put the right file under this name."
        )
    if missing:
        raise CheckpointError(
            f"{path} is missing {len(missing)} key(s) of the {name} network, first '{missing[0]}' "
            f"(expected shape {tuple(expected[missing[0]].shape)}). The file is incomplete or from another model version."
        )
    if unexpected:
        raise CheckpointError(
            f"{path} has {len(unexpected)} key(s) the {name} network does not have, first '{unexpected[0]}' "
            f"(shape {tuple(state[unexpected[0]].shape)}). The file is from another model or version."
        )
    for key, want in expected.items():
        if tuple(state[key].shape) != tuple(want.shape):
            raise CheckpointError(
                f"{path}: tensor '{key}' has shape {tuple(state[key].shape)} but the {name} network needs "
                f"{tuple(want.shape)}. The file is from another model version or was modified."
            )


def load_state(name: str, path: Path) -> StateDict:
    """The fp32 state dict network ``name`` loads from ``path`` (container unwrapped)."""
    spec = NETWORKS[name]
    raw = read_checkpoint(path)
    if path.suffix == ".safetensors":
        return _float32_state(raw, path)  # converted files already hold the unwrapped state
    return _float32_state(spec.unwrap(raw, path), path)


def build_network(name: str, state: StateDict, path: Path, device: torch.device | str = "cpu") -> nn.Module:
    """Build network ``name`` on ``device``, load ``state`` strictly and apply the exact inference rewrites.

    The module is built on the meta device and takes the checkpoint's tensors, moved to
    ``device``, as its own (``assign``): a normal build would draw a random initialisation for
    every weight only to overwrite it. The rewrites (folding BatchNorms and spectral norms in
    float64) then run where the weights are, on the GPU when that is the target.
    """
    with torch.device("meta"):
        module = NETWORKS[name].build(state)
    check_state_dict(module, state, path, name)
    # Copies: the rewrites below edit weights in place, and the caller's state must stay as read.
    module.load_state_dict({k: v.to(device, copy=True) for k, v in state.items()}, strict=True, assign=True)
    _init_non_persistent_buffers(module, name, torch.device(device))
    module.eval().requires_grad_(False)
    prepare = getattr(module, "prepare_for_inference", None)
    if callable(prepare):
        prepare()
    return module


def _init_non_persistent_buffers(module: nn.Module, name: str, device: torch.device) -> None:
    """Compute the buffers a checkpoint does not carry, which the meta build left empty.

    A submodule holding such a buffer provides ``init_non_persistent_buffers()``; any other
    tensor still on the meta device is a bug in the network's definition, reported as such.
    """
    for owner in module.modules():
        own = [t for t in owner.buffers(recurse=False) if t.is_meta]
        if own:
            init = getattr(owner, "init_non_persistent_buffers", None)
            if init is None:
                raise RuntimeError(
                    f"{type(owner).__name__} in the {name} network has a buffer no checkpoint fills and no "
                    "init_non_persistent_buffers() to compute it"
                )
            init()
            owner.to(device)  # init() computes on the CPU; only that submodule's own tensors move
    left = [n for n, t in [*module.named_parameters(), *module.named_buffers()] if t.is_meta]
    if left:
        raise RuntimeError(f"the {name} network still has uninitialised tensors after loading: {left[:3]}")


def load_network(
    name: str, model_dir: Path | str, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32
) -> nn.Module:
    """Load one official network from ``model_dir`` (see :func:`find_network_file`)."""
    if name not in NETWORKS:
        raise KeyError(f"unknown network '{name}'; expected one of {sorted(NETWORKS)}")
    path = find_network_file(name, Path(model_dir))
    if path is None:
        raise MissingModelError(missing_networks_message([name], Path(model_dir)))
    return build_network(name, load_state(name, path), path, device).to(dtype=dtype)


def file_identity(path: Path) -> str:
    """A cheap, stable fingerprint of a model file: size plus hashes of its first and last MiB.

    Hashing whole 200 MB files on every start would cost seconds; head, tail and size change
    whenever a file is replaced by a different download or conversion.
    """
    size = path.stat().st_size
    h = hashlib.sha256(f"{path.name}:{size}".encode())
    with open(path, "rb") as f:
        h.update(f.read(1 << 20))
        if size > 2 << 20:
            f.seek(-(1 << 20), os.SEEK_END)
            h.update(f.read())
    return h.hexdigest()


def convert_weights(src: Path | str, dst: Path | str) -> list[Path]:
    """Convert every official ``.pth`` found under ``src`` into ``.safetensors`` files in ``dst``.

    Each file is unwrapped and strictly validated against its network first, so a converted
    file is known to load. Writes are atomic (temp file + rename); a JSON sidecar lists what
    was converted. Conversions into one ``dst`` from several processes run one after the
    other (:func:`~ditto_core.atomic_files.folder_lock`), so the sidecar always describes the
    files beside it. Returns the written paths.
    """
    src, dst = Path(src), Path(dst)
    found = {name: find_network_file(name, src, suffixes=(".pth",)) for name in NETWORKS}
    found = {name: path for name, path in found.items() if path is not None}
    if not found:
        raise MissingModelError(missing_networks_message(NETWORKS, src))
    dst.mkdir(parents=True, exist_ok=True)
    with folder_lock(dst):
        reap_stale_temporaries(dst)  # what a conversion killed outright left
        return _convert_locked(found, dst)


def _convert_locked(found: dict[str, Path], dst: Path) -> list[Path]:
    from safetensors.torch import save_file

    written, index = [], {}
    for name, path in found.items():
        state = load_state(name, path)
        build_network(name, state, path)  # validates; raises before anything is written
        # safetensors refuses aliased storage (the LMDM's rotary buffer is stored 11 times).
        tensors = {k: v.contiguous().clone() for k, v in state.items()}
        out = dst / f"{NETWORKS[name].stem}.safetensors"
        meta = {"ditto_network": name, "source_file": path.name, "format_version": FORMAT_VERSION}
        size = sum(t.nbytes for t in tensors.values())  # the header adds a few KiB: checked at write time
        atomic_write(out, lambda tmp: save_file(tensors, str(tmp), metadata=meta), needed=size)
        index[out.name] = {**meta, "sha256": file_sha256(out), "num_tensors": len(tensors)}
        written.append(out)
    atomic_write(dst / "ditto_models.json", lambda tmp: tmp.write_text(json.dumps(index, indent=2)))
    return written

