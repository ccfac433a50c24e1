"""AOTInductor packages in the user cache: keyed, verified before loading, rebuilt when invalid.

A package (``torch._inductor.aoti_compile_and_package``) is a compiled shared library plus GPU
kernels: loading one costs milliseconds where ``torch.compile`` in a new process pays tracing,
cache lookups and graph capture again. Being code, packages live only where the user writes
(:func:`~.user_cache.user_cache_dir`), never in a models folder that a download may fill.

One cache entry is a folder named after its key's digest, holding ``package.pt2`` and
``manifest.json`` (format version, the full key, the package's size and SHA-256). An entry is
loaded only if its manifest names the same key and the package's bytes match the digest; one
that does not (stale, truncated, tampered with, or failing to load) is logged, deleted and
rebuilt. Entries appear whole (:func:`~.atomic_files.atomic_dir`); builders of one key are
serialised by a folder lock, so two processes asking at once end with one package built once;
readers hold the lock shared, so an entry is never deleted under one that is verifying it.

Packages carry no weights (``package_constants_in_so`` off): :func:`load_with_constants` hands
the module's own parameters and buffers to the loaded package, without a copy. One package thus
serves any checkpoint of the architecture, and the key needs no digest of the weights, only of
the architecture (names, shapes, dtypes and strides of the tensors, and the code). Inductor may
still bake a few tensors into the code (two tiny biases of the warp network, seen with torch
2.13): the manifest names them with a digest of their values, and a module whose values differ
is refused that package, which is then rebuilt from its own.
"""
from __future__ import annotations

import hashlib
import json
import logging
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Optional, TypeVar

import torch
from torch import Tensor, nn

from .atomic_files import atomic_dir, discard, file_sha256, folder_lock, reap_stale_temporaries
from .errors import DittoError
from .user_cache import user_cache_dir

__all__ = ["FORMAT_VERSION", "AotUnavailable", "PackageCache", "PackageKey", "architecture_digest",
           "build_package", "environment_key", "load_with_constants"]

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
"""Bumped whenever the entry layout or what a package is exported from changes meaning."""
PACKAGE_FILE = "package.pt2"
MANIFEST_FILE = "manifest.json"
_LOCKS = ".locks"

Loaded = TypeVar("Loaded")


class AotUnavailable(DittoError):
    """No usable package: building it failed, or the package just built does not load."""


def environment_key(device: torch.device) -> dict[str, str]:
    """What of this machine a compiled package depends on: the GPU (name and compute
    capability) or the CPU architecture, and the torch, CUDA, Triton and Python versions."""
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        target = f"{torch.cuda.get_device_name(device)} sm_{major}{minor}"
    else:
        import platform

        target = f"cpu {platform.machine()}"
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = "none"
    return {"device": target, "torch": torch.__version__, "cuda": str(torch.version.cuda),
            "triton": triton_version, "python": f"{sys.version_info.major}.{sys.version_info.minor}"}


def architecture_digest(module: nn.Module, sources: Iterable[Path] = ()) -> str:
    """SHA-256 of what a package compiled from ``module`` bakes in besides the weights' values:
    the module tree (``repr``), every parameter's and buffer's name, shape, dtype and strides,
    and the text of ``sources`` (files whose change may change the graph) and of the files
    that define the tree's classes."""
    import inspect

    digest = hashlib.sha256(repr(module).encode())
    for name, tensor in (*module.named_parameters(), *module.named_buffers()):
        digest.update(f"{name} {tuple(tensor.shape)} {tensor.dtype} {tensor.stride()}\n".encode())
    files = {Path(f).resolve() for f in sources}
    for cls in {type(m) for m in module.modules()}:
        try:
            files.add(Path(inspect.getsourcefile(cls)).resolve())
        except TypeError:  # defined where no file is (an interactive session): its name stands in
            digest.update(cls.__qualname__.encode())
    for path in sorted(files):
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()


@dataclass(frozen=True)
class PackageKey:
    """Everything that makes a package invalid when it changes: ``name`` (what it computes)
    and ``parts`` (machine, versions, dtype, shapes, architecture digest, ...)."""

    name: str
    parts: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, name: str, parts: dict[str, object]) -> "PackageKey":
        return cls(name, tuple(sorted((k, str(v)) for k, v in parts.items())))

    def as_json(self) -> dict[str, object]:
        return {"name": self.name, "format": FORMAT_VERSION, "parts": dict(self.parts)}

    @property
    def folder(self) -> str:
        text = json.dumps(self.as_json(), sort_keys=True)
        return f"{self.name}-{hashlib.sha256(text.encode()).hexdigest()[:24]}"


class PackageCache:
    """Packages under ``root`` (default: ``<user cache>/comfyui-ditto/aot``)."""

    def __init__(self, root: Optional[Path] = None) -> None:
        self._root = Path(root) if root is not None else None
        self.builds = 0  # packages this object built (the others were found)

    @property
    def root(self) -> Path:
        """The folder of the packages (the user cache's is checked, and made, at first use)."""
        if self._root is None:
            try:
                self._root = user_cache_dir("aot")
            except DittoError as error:
                raise AotUnavailable(str(error)) from error
        return self._root

    def entry(self, key: PackageKey) -> Path:
        return self.root / key.folder

    def problem(self, key: PackageKey) -> Optional[str]:
        """Why the entry of ``key`` must not be loaded ("absent" if there is none), None if it may."""
        entry = self.entry(key)
        package = entry / PACKAGE_FILE
        try:
            manifest = json.loads((entry / MANIFEST_FILE).read_text())
        except FileNotFoundError:
            return "absent" if not entry.exists() else "its manifest is missing"
        except (OSError, ValueError) as error:
            return f"its manifest is unreadable ({error})"
        if not isinstance(manifest, dict) or manifest.get("key") != key.as_json():
            return "its manifest was written for another key (stale)"
        try:
            size = package.stat().st_size
        except OSError:
            return "its package is missing"
        if size != manifest.get("bytes"):
            return f"its package has {size} bytes, the manifest says {manifest.get('bytes')} (truncated?)"
        if file_sha256(package) != manifest.get("sha256"):
            return "its package does not match the manifest's SHA-256 (corrupt or altered)"
        return None

    def load(self, key: PackageKey, load: Callable[[Path, dict], Loaded],
             build: Optional[Callable[[Path], dict]] = None) -> Optional[Loaded]:
        """``load(package path, manifest)`` of the valid entry of ``key``.

        Without a valid entry, ``build(path)`` writes a new package (the invalid entry is
        deleted first) and returns what to add to its manifest; that package is then loaded.
        With ``build`` None, None is returned. Raises
        :class:`AotUnavailable` when the build fails or the new package does not load.
        """
        with folder_lock(self._lock(key), shared=True):
            loaded = self._load_valid(key, load, may_delete=False)
        if loaded is not None or build is None:
            return loaded
        with folder_lock(self._lock(key)):
            # Another process may have built it while this one waited for the lock.
            loaded = self._load_valid(key, load, may_delete=True)
            if loaded is None:
                self._build(key, build)
                loaded = self._load_valid(key, load, may_delete=True)
        if loaded is None:
            raise AotUnavailable(f"the AOT package {self.entry(key)} was built but does not load")
        return loaded

    def _lock(self, key: PackageKey) -> Path:
        return self.root / _LOCKS / key.folder

    def _load_valid(self, key: PackageKey, load: Callable[[Path, dict], Loaded], may_delete: bool
                    ) -> Optional[Loaded]:
        entry = self.entry(key)
        why = self.problem(key)
        if why == "absent":
            return None
        if why is None:
            try:
                return load(entry / PACKAGE_FILE, json.loads((entry / MANIFEST_FILE).read_text()))
            except Exception as error:  # a package that verifies and still fails is as bad as a corrupt one
                why = f"it does not load ({type(error).__name__}: {error})"
        if may_delete:
            log.warning("Ditto: refusing the AOT package %s: %s; deleting it to rebuild it", entry, why)
            discard(entry)
        else:
            log.info("Ditto: the AOT package %s is not usable: %s", entry, why)
        return None

    def _build(self, key: PackageKey, build: Callable[[Path], dict]) -> None:
        reap_stale_temporaries(self.root)  # what builders killed mid-way left behind
        start = time.perf_counter()
        try:
            with atomic_dir(self.entry(key), replace=True) as folder:
                package = folder / PACKAGE_FILE
                extra = build(package)
                manifest = {"key": key.as_json(), "bytes": package.stat().st_size, "sha256": file_sha256(package),
                            "built_seconds": round(time.perf_counter() - start, 3), **extra}
                (folder / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n")
            self.builds += 1
        except Exception as error:
            raise AotUnavailable(f"building the AOT package {key.name} failed ({type(error).__name__}: {error})") \
                from error
        log.info("Ditto: built the AOT package %s in %.1f s", self.entry(key), time.perf_counter() - start)


def build_package(module: nn.Module, args: tuple[Tensor, ...], path: Path, single_threaded: bool = False
                  ) -> dict[str, object]:
    """Export ``module(*args)`` at these exact shapes and compile it into a package at ``path``
    (a ``.pt2``), without its weights (see :func:`load_with_constants`); returns the manifest's
    record of the tensors Inductor baked in anyway. The package is loaded once in a new process
    (as ``single_threaded``, as later loads will be) before it is published: a package whose
    loader crashes its process (seen on an H200 with torch 2.11) is refused here, in a child,
    rather than taking down the process that next loads it."""
    with torch.inference_mode(False), torch.no_grad():
        args = tuple(a.clone() for a in args)  # an inference tensor (made in inference mode) cannot be traced
        program = torch.export.export(module, args, strict=False)
    torch._inductor.aoti_compile_and_package(
        program, package_path=str(path), inductor_configs={"aot_inductor.package_constants_in_so": False})
    handed = set(_constant_names_in_a_new_process(path, args[0].device, single_threaded))
    baked = sorted(name for name in _named_tensors(module) if name not in handed)
    return {"baked": baked, "baked_sha256": _values_digest(module, baked)}


_LOAD_CHECK = """
import json, sys
import torch
import torch._inductor
loaded = torch._inductor.aoti_load_package(sys.argv[1], run_single_threaded=sys.argv[2] == "1",
                                           device_index=int(sys.argv[3]))
print(json.dumps(loaded.get_constant_fqns()))
"""
LOAD_CHECK_SECONDS = 180.0
"""How long the new process may take to load a package (a 200 MB CUDA one, imports included)."""


def _constant_names_in_a_new_process(path: Path, device: torch.device, single_threaded: bool) -> list[str]:
    """The tensors the package at ``path`` wants handed in, read by loading it in a child."""
    index = device.index if device.type == "cuda" and device.index is not None else -1
    # The fault handler reports where a crashing loader died (its "Fatal Python error" line is
    # what the refusal quotes).
    command = [sys.executable, "-X", "faulthandler", "-c", _LOAD_CHECK, str(path), "1" if single_threaded else "0",
               str(index)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=LOAD_CHECK_SECONDS)
    except subprocess.TimeoutExpired:
        raise AotUnavailable(f"the package did not load in a new process within {LOAD_CHECK_SECONDS:.0f} s") from None
    if done.returncode != 0:
        how = f"status {done.returncode}" if done.returncode > 0 else f"signal {_signal_name(-done.returncode)}"
        raise AotUnavailable(f"the package does not load in a new process (it ended with {how}: "
                             f"{_why_it_ended(done.stderr)})")
    try:
        names = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise AotUnavailable(f"the package's load check printed no tensor names ({done.stdout[-200:]!r})") from None
    return list(names)


def _why_it_ended(stderr: str) -> str:
    """The line of a failed child's error output that says what happened: Python's fault handler
    ends its report with a list of extension modules, so its "Fatal Python error" line is taken
    where there is one, else the last line."""
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    fatal = [line for line in lines if line.startswith("Fatal Python error")]
    return (fatal or lines[-1:] or ["no output"])[0]


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


def _named_tensors(module: nn.Module) -> dict[str, Tensor]:
    return {**dict(module.named_parameters()), **dict(module.named_buffers())}


def _values_digest(module: nn.Module, names: list[str]) -> str:
    tensors = _named_tensors(module)
    digest = hashlib.sha256()
    for name in names:
        digest.update(name.encode() + tensors[name].detach().contiguous().cpu().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def load_with_constants(path: Path, manifest: dict, module: nn.Module, device: torch.device,
                        single_threaded: bool = False) -> Callable[..., Tensor]:
    """Load the package at ``path`` onto ``device`` and point it at ``module``'s parameters and
    buffers (by name, not copied: the module must outlive it; their shapes, dtypes and strides
    are the key's :func:`architecture_digest`). ``single_threaded``: no locking or events around
    a run, which a CUDA-graph capture needs. Refused if the package wants a tensor the module
    lacks, or baked in values of tensors that differ from the module's (``manifest``)."""
    baked = manifest.get("baked", [])
    if not set(baked) <= set(_named_tensors(module)) or _values_digest(module, baked) != manifest.get("baked_sha256"):
        raise AotUnavailable(f"the package was built with other values of the tensors it bakes in ({baked})")
    index = device.index if device.type == "cuda" and device.index is not None else -1
    loaded = torch._inductor.aoti_load_package(str(path), run_single_threaded=single_threaded, device_index=index)
    tensors = _named_tensors(module)
    wanted = loaded.get_constant_fqns()
    missing = [name for name in wanted if name not in tensors]
    if missing:
        raise AotUnavailable(f"the package wants tensors the module does not have: {missing[:5]}")
    loaded.load_constants({name: tensors[name] for name in wanted}, check_full_update=True, user_managed=True)
    return loaded
