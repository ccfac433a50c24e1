"""A new process's CUDA context made on a thread while PyTorch imports.

A process that renders on the GPU pays two start-up costs one after the other: importing
PyTorch (Python work, holding the GIL) and creating the GPU's context at its first CUDA call
(driver work that needs no Python). The driver API can make the device's primary context
before PyTorch is loaded: it is the context PyTorch's runtime then adopts, so its own first
CUDA call finds the work done. :func:`start_cuda_context` runs that on a thread through
``ctypes`` (which releases the GIL for the call), overlapping the import.

Importing this module imports no PyTorch. Everything here is an optimisation only: without a
driver, without a GPU, or on any failure, nothing happens and PyTorch makes the context itself
as before.
"""
from __future__ import annotations

import ctypes
import importlib.util
import logging
import os
import sys
import threading
from pathlib import Path
from typing import Callable, Optional

__all__ = ["start_cuda_context", "torch_build_has_cuda"]

log = logging.getLogger(__name__)

CUDA_SUCCESS = 0
DRIVER_LIBRARY = "libcuda.so.1"  # the driver's soname on Linux; other systems keep PyTorch's own start


def start_cuda_context(device: Optional[str], load_driver: Optional[Callable[[], object]] = None
                       ) -> Optional[threading.Thread]:
    """Retain the primary context of the GPU a ``--device`` value names (None: the default GPU,
    ``cuda:0``) on a daemon thread; the thread, or None when there is nothing to start (a CPU
    device, not Linux, a PyTorch without CUDA). ``load_driver`` stands in for loading the
    driver (tests)."""
    if device is not None and not device.startswith("cuda"):
        return None
    if load_driver is None:
        if not sys.platform.startswith("linux") or not torch_build_has_cuda():
            return None
        load_driver = _load_driver
    ordinal = int(device.partition(":")[2] or 0) if device is not None else 0
    # PyTorch sets this before its first CUDA call, and the driver reads it at cuInit: set it as
    # PyTorch would, so the context is the one PyTorch would have made (kernels loaded lazily).
    os.environ.setdefault("CUDA_MODULE_LOADING", "LAZY")
    thread = threading.Thread(target=_retain_primary_context, args=(load_driver, ordinal), daemon=True,
                              name="ditto-cuda-start")
    thread.start()
    return thread


def torch_build_has_cuda() -> bool:
    """Whether the installed PyTorch is a CUDA build, seen from its files without importing it: a
    CPU build beside a GPU would leave a context it never uses holding the GPU's memory."""
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return False
    return any((Path(spec.origin).parent / "lib").glob("libtorch_cuda*"))


def _load_driver() -> object:
    return ctypes.CDLL(DRIVER_LIBRARY)


def _retain_primary_context(load_driver: Callable[[], object], ordinal: int) -> None:
    """cuInit, then the device's primary context retained for the life of the process (PyTorch
    uses the same context and never releases it either)."""
    try:
        driver = load_driver()
        device = ctypes.c_int()
        context = ctypes.c_void_p()
        for call, args in (("cuInit", (0,)), ("cuDeviceGet", (ctypes.byref(device), ordinal)),
                           ("cuDevicePrimaryCtxRetain", (ctypes.byref(context), device))):
            status = getattr(driver, call)(*args)
            if status != CUDA_SUCCESS:  # no GPU, a bad ordinal: PyTorch reports it properly later
                log.debug("early CUDA start stopped: %s returned %s", call, status)
                return
    except (OSError, AttributeError) as error:  # no driver installed: a CPU machine
        log.debug("early CUDA start skipped: %s", error)
