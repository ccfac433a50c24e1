"""SMs of one GPU set apart: a CUDA green context over the others, and a stream that keeps to them.

Kernels launched on a green context's stream run only on its SMs. The live runtime renders in
one over all SMs but a few, so that the motion thread's LMDM windows (thousands of small
kernels, replayed from CUDA graphs recorded on ordinary streams, which run on any SM) always
find SMs free, where beside the render's long convolutions each of them waited for one.

Driver API through ctypes (drivers of CUDA 12.4 and newer): nothing to build, and the same on
every PyTorch release (``torch.cuda.green_contexts`` changed its interface between 2.9 and 2.13).
"""
from __future__ import annotations

import contextlib
import ctypes
import threading
from typing import Iterator

import torch

from .errors import DittoError

_RESOURCE_BYTES = 1024  # a CUdevResource, with room: the struct has grown between CUDA releases
_SM_RESOURCE = 1  # CU_DEV_RESOURCE_TYPE_SM
_SM_COUNT_OFFSET = 4 + 92  # CUdevResource: type (4 bytes), 92 reserved bytes, then sm.smCount
_DEFAULT_STREAM = 1  # CU_GREEN_CTX_DEFAULT_STREAM
_NON_BLOCKING = 1  # CU_STREAM_NON_BLOCKING
_made: dict[tuple[torch.device, int], "SmPartition"] = {}
_made_lock = threading.Lock()


class GreenContextUnavailable(DittoError):
    """This machine cannot set SMs apart (no CUDA driver with green contexts, or it refused)."""


class SmPartition:
    """All SMs of ``device`` but ``set_apart`` (or a few more: the driver rounds the split to
    its granularity, 8 SMs on Hopper), as a green context with one stream.

    Work launched on :attr:`stream`, or on any stream while :meth:`current` is entered on the
    thread, runs on :attr:`sms` SMs; the :attr:`set_apart_sms` others stay free of it.
    """

    def __init__(self, device: torch.device, set_apart: int) -> None:
        if device.type != "cuda":
            raise GreenContextUnavailable(f"SMs can be set apart on a CUDA device only, not {device}.")
        try:
            self._cu = ctypes.CDLL("libcuda.so.1")
            for name in ("cuDevSmResourceSplitByCount", "cuGreenCtxCreate", "cuGreenCtxStreamCreate",
                         "cuCtxFromGreenCtx", "cuCtxPushCurrent_v2", "cuCtxPopCurrent_v2"):
                getattr(self._cu, name)
        except (OSError, AttributeError) as error:
            raise GreenContextUnavailable(
                f"this CUDA driver has no green contexts ({error}): update the NVIDIA driver (CUDA 12.4 or newer) "
                "or leave motion_sms unset.") from error
        torch.cuda.init()  # the primary context, which the green one shares memory and modules with
        dev = ctypes.c_int()
        index = torch.cuda.current_device() if device.index is None else device.index
        self._check(self._cu.cuDeviceGet(ctypes.byref(dev), index), "cuDeviceGet")
        whole, apart, rest = (ctypes.create_string_buffer(_RESOURCE_BYTES) for _ in range(3))
        self._check(self._cu.cuDeviceGetDevResource(dev, whole, _SM_RESOURCE), "cuDeviceGetDevResource")
        groups = ctypes.c_uint(1)
        self._check(self._cu.cuDevSmResourceSplitByCount(apart, ctypes.byref(groups), whole, rest, 0, set_apart),
                    f"cuDevSmResourceSplitByCount ({set_apart} SMs)")
        self.total_sms, self.set_apart_sms, self.sms = (_sm_count(r) for r in (whole, apart, rest))
        if groups.value != 1 or self.sms < 1:
            raise GreenContextUnavailable(
                f"cannot set {set_apart} of this GPU's {self.total_sms} SMs apart and keep any for the render: "
                "ask for fewer.")
        desc, green, self._context, stream = (ctypes.c_void_p() for _ in range(4))
        self._check(self._cu.cuDevResourceGenerateDesc(ctypes.byref(desc), rest, 1), "cuDevResourceGenerateDesc")
        self._check(self._cu.cuGreenCtxCreate(ctypes.byref(green), desc, dev, _DEFAULT_STREAM), "cuGreenCtxCreate")
        self._green = green  # kept: the stream and the context live as long as the process
        self._check(self._cu.cuCtxFromGreenCtx(ctypes.byref(self._context), green), "cuCtxFromGreenCtx")
        self._check(self._cu.cuGreenCtxStreamCreate(ctypes.byref(stream), green, _NON_BLOCKING, 0),
                    "cuGreenCtxStreamCreate")
        self.stream = torch.cuda.ExternalStream(stream.value, device=device)

    @contextlib.contextmanager
    def current(self) -> Iterator[None]:
        """The green context current on this thread in the block: what launches here (cuBLAS,
        cuDNN and Triton kernels, copies) and the handles libraries make here belong to it."""
        self._check(self._cu.cuCtxPushCurrent_v2(self._context), "cuCtxPushCurrent")
        try:
            yield
        finally:
            popped = ctypes.c_void_p()
            self._check(self._cu.cuCtxPopCurrent_v2(ctypes.byref(popped)), "cuCtxPopCurrent")

    @classmethod
    def shared(cls, device: torch.device, set_apart: int) -> "SmPartition":
        """The process's partition of ``device`` with ``set_apart`` SMs apart, made on first use.

        Never destroyed: tensors made on its stream may be freed long after their user is gone
        (PyTorch's allocator then records an event on that stream), so a runtime made again
        (a server reloaded, models unloaded and loaded) takes the same one instead of a new one.
        """
        key = (torch.device(device.type, torch.cuda.current_device() if device.index is None else device.index),
               set_apart)
        with _made_lock:
            if key not in _made:
                _made[key] = cls(*key)
            return _made[key]

    def _check(self, status: int, call: str) -> None:
        if status:
            name = ctypes.c_char_p()
            self._cu.cuGetErrorName(status, ctypes.byref(name))
            raise GreenContextUnavailable(
                f"{call} failed ({(name.value or b'?').decode()}): this GPU or driver cannot set SMs apart; "
                "leave motion_sms unset.")


def _sm_count(resource: ctypes.Array) -> int:
    return int.from_bytes(resource.raw[_SM_COUNT_OFFSET : _SM_COUNT_OFFSET + 4], "little")
