"""Fetch the official files a model folder lacks from HuggingFace (or a mirror), verified, atomically.

The files wanted are :func:`~ditto_core.model_files.missing_downloads`. Each one is streamed into
``.<name>.part`` beside its target. An interrupted transfer keeps that part, and the next run
resumes it with an HTTP range request. A finished file is checked against the size and SHA-256
the Hub lists for it, then by kind (network files are loaded strictly into their modules, ONNX
graphs are parsed by onnxruntime, the MediaPipe bundle's zip checksums are checked, the config
is read as data), synced to disk, and only then renamed onto its target: the target name never
holds a partial or unverified file. A file that fails verification is deleted, part included.

Plain ``urllib``: no HuggingFace client is needed. ``HF_ENDPOINT`` (HuggingFace's own variable)
or the ``endpoint`` argument points at a mirror.
"""
from __future__ import annotations

import http.client
import os
import re
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from .atomic_files import file_sha256
from .errors import CheckpointError, MissingModelError
from .model_files import HF_REPO, missing_downloads
from .models.checkpoints import NETWORKS, build_network, load_state
from .models.official_config import blink_table, read_config
from .progress import ProgressCallback, report

DEFAULT_ENDPOINT = "https://huggingface.co"
REVISION = "main"
TIMEOUT_S = 60.0
_CHUNK = 1 << 20
_SHA256 = re.compile(r"[0-9a-f]{64}")

BytesCallback = Callable[[str, int, Optional[int]], None]
"""``callback(file name, bytes on disk, bytes in all or None)``, called as a transfer proceeds."""


@dataclass(frozen=True)
class RemoteFile:
    """What the Hub says about one file before it is fetched."""

    url: str  # where the bytes are (the Hub redirects large files to its CDN)
    size: Optional[int]
    sha256: Optional[str]  # the Hub lists it for files stored with Git LFS (every network and model)


def file_url(remote: str, endpoint: Optional[str] = None) -> str:
    """The Hub URL of ``remote`` (a path inside the repository) at :data:`REVISION`."""
    base = (endpoint or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")
    return f"{base}/{HF_REPO}/resolve/{REVISION}/{remote}"


def download_missing(
    model_dir: Path | str,
    aux_dir: Optional[Path | str] = None,
    progress: Optional[ProgressCallback] = None,
    endpoint: Optional[str] = None,
    on_bytes: Optional[BytesCallback] = None,
) -> list[Path]:
    """Fetch every official file ``model_dir`` lacks: networks into it, face models and HuBERT
    into ``aux_dir`` (default: its aux folder), the config into ``ditto_cfg/``.

    Returns the files written. ``progress(files done, files wanted)`` after each file (it may
    raise to cancel); ``on_bytes`` as bytes arrive. Raises :class:`MissingModelError` when a file
    cannot be fetched (what was received is kept for the next run to resume), and
    :class:`CheckpointError` when a fetched file does not verify (it is deleted). Files verified
    before a failure stay in place.
    """
    model_dir = Path(model_dir)
    wanted = sorted(missing_downloads(model_dir, aux_dir).items())
    written = []
    for done, (remote, target) in enumerate(wanted, start=1):
        url = file_url(remote, endpoint)
        target.parent.mkdir(parents=True, exist_ok=True)
        part = target.with_name(f".{target.name}.part")
        remote_file = _metadata(url, target)
        _fetch(remote_file, part, target, on_bytes)
        try:
            _verify_size_and_hash(part, remote_file, target.name)
            _verify(part, target.name)
        except BaseException:
            part.unlink(missing_ok=True)
            raise
        os.replace(part, target)  # same folder: atomic, and the part was synced by _fetch
        written.append(target)
        report(progress, done, len(wanted))
    return written


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    # The Hub answers a large file's HEAD with a redirect to its CDN that carries the file's size
    # and SHA-256 (X-Linked-Size / X-Linked-Etag); following it would lose them.
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


def _metadata(url: str, target: Path) -> RemoteFile:
    request = urllib.request.Request(url, method="HEAD", headers={"Accept-Encoding": "identity"})
    try:
        response = urllib.request.build_opener(_NoRedirect).open(request, timeout=TIMEOUT_S)
        headers, location, redirected = response.headers, url, False
    except urllib.error.HTTPError as exc:
        if exc.code not in (301, 302, 303, 307, 308):
            raise _http_error(exc, url, target) from None
        headers, redirected = exc.headers, True
        location = urllib.parse.urljoin(url, headers.get("Location", url))
    except (OSError, http.client.HTTPException) as exc:
        raise _network_error(exc, url, target) from exc
    # A redirect's own Content-Length and ETag describe the redirect, not the file.
    size = headers.get("X-Linked-Size") or (None if redirected else headers.get("Content-Length"))
    etag = (headers.get("X-Linked-Etag") or ("" if redirected else headers.get("ETag")) or "")
    etag = etag.removeprefix("W/").strip('"')
    return RemoteFile(location, int(size) if size and size.isdigit() else None,
                      etag if _SHA256.fullmatch(etag) else None)


def _fetch(remote: RemoteFile, part: Path, target: Path, on_bytes: Optional[BytesCallback]) -> None:
    """Bring ``part`` to the whole file, resuming what an earlier run left; synced to disk."""
    have = part.stat().st_size if part.is_file() else 0
    if remote.size is not None and have > remote.size:
        have = 0  # not a prefix of this file (the Hub's copy changed): start again
    if remote.size is not None and have == remote.size:
        return
    headers = {"Accept-Encoding": "identity", **({"Range": f"bytes={have}-"} if have else {})}
    try:
        with urllib.request.urlopen(urllib.request.Request(remote.url, headers=headers),
                                    timeout=TIMEOUT_S) as response:
            if response.status != 206:
                have = 0  # the server sent the whole file, not the rest
            with open(part, "ab" if have else "wb") as out:
                while block := response.read(_CHUNK):
                    out.write(block)
                    have += len(block)
                    if on_bytes is not None:
                        on_bytes(target.name, have, remote.size)
                out.flush()
                os.fsync(out.fileno())
            if response.length:  # http.client returns a cut-off body without complaint
                raise ConnectionError(f"the connection closed {response.length} bytes before the end")
    except urllib.error.HTTPError as exc:
        if exc.code == 416:  # the part is already whole (the Hub listed no size)
            return
        raise _http_error(exc, remote.url, target) from None
    except (OSError, http.client.HTTPException) as exc:
        raise _network_error(exc, remote.url, target, kept=part.stat().st_size if part.is_file() else 0) from exc


def _http_error(exc: urllib.error.HTTPError, url: str, target: Path) -> MissingModelError:
    why = {401: "the server asks for a login", 403: "access is refused",
           404: "there is no such file"}.get(exc.code, exc.reason)
    return MissingModelError(
        f"downloading {target.name} from {url} failed: HTTP {exc.code} ({why}). Check the address (HF_ENDPOINT "
        f"or --endpoint) or download it by hand from HuggingFace {HF_REPO} into {target.parent}."
    )


def _network_error(exc: BaseException, url: str, target: Path, kept: int = 0) -> MissingModelError:
    resume = f" {kept} bytes were kept, and the next run resumes from there." if kept else ""
    return MissingModelError(
        f"downloading {target.name} from {url} failed ({type(exc).__name__}: {exc}). Check the connection and "
        f"run the download again, or download it by hand into {target.parent}.{resume}"
    )


def _verify_size_and_hash(path: Path, remote: RemoteFile, name: str) -> None:
    actual = path.stat().st_size
    if remote.size is not None and actual != remote.size:
        raise CheckpointError(f"the download of {name} from {HF_REPO} has {actual} bytes, the Hub lists "
                              f"{remote.size}; it was discarded, try again.")
    if remote.sha256 is not None and file_sha256(path) != remote.sha256:
        raise CheckpointError(f"the download of {name} from {HF_REPO} does not match the Hub's SHA-256 "
                              f"(corrupted in transit); it was discarded, try again.")


def _verify(path: Path, name: str) -> None:
    """Refuse a download that is not a whole, readable file of its kind, before it is moved into place."""
    if path.stat().st_size == 0:
        raise CheckpointError(f"the download of {name} from {HF_REPO} is empty; try again later.")
    network = next((key for key, spec in NETWORKS.items() if spec.official_file == name), None)
    suffix = Path(name).suffix
    if network is not None:
        build_network(network, load_state(network, path), Path(name))
    elif suffix == ".onnx":
        _verify_onnx(path, name)
    elif suffix == ".task":
        _verify_bundle(path, name)
    elif suffix == ".pkl":
        blink_table(read_config(path), name)  # read as data, never unpickled


def _verify_onnx(path: Path, name: str) -> None:
    # Parsing the graph catches a truncated or foreign file; a size check alone would not.
    import onnxruntime as ort

    try:
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own untyped errors
        raise CheckpointError(
            f"the download of {name} from {HF_REPO} is not a readable ONNX model ({type(exc).__name__}); "
            f"it was discarded, try again."
        ) from exc


def _verify_bundle(path: Path, name: str) -> None:
    # MediaPipe's .task is a zip bundle: every member's CRC must check out.
    try:
        with zipfile.ZipFile(path) as bundle:
            damaged = bundle.testzip()
    except (zipfile.BadZipFile, OSError) as exc:
        raise CheckpointError(
            f"the download of {name} from {HF_REPO} is not a MediaPipe task bundle ({exc}); "
            f"it was discarded, try again."
        ) from exc
    if damaged is not None:
        raise CheckpointError(f"the download of {name} from {HF_REPO} is damaged (member {damaged}); "
                              f"it was discarded, try again.")
