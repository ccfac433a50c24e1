"""The GPU's context made on a thread while PyTorch imports (``ditto_core.cuda_start``).

On the CPU a stand-in driver records the calls; the GPU test checks, in a fresh process, that
PyTorch adopts the context the thread made.
"""
from __future__ import annotations

import argparse
import ctypes
import importlib.util
import os
import threading
from types import SimpleNamespace

import pytest

from ditto_core import __main__ as cli
from ditto_core import cuda_start

from tests.process_support import child_json


class FakeDriver:
    """Records the driver calls; each returns ``fail.get(name, 0)`` and fills its out-arguments."""

    def __init__(self, fail: dict[str, int] | None = None, device_handle: int = 7) -> None:
        self.calls: list[tuple] = []
        self.fail = fail or {}
        self.device_handle = device_handle

    def __getattr__(self, name: str):
        def call(*args):
            self.calls.append((name, *[getattr(a, "_obj", a) for a in args]))
            if name == "cuDeviceGet":
                args[0]._obj.value = self.device_handle
            if name == "cuDevicePrimaryCtxRetain":
                args[0]._obj.value = 0x1000
            return self.fail.get(name, 0)
        return call


def started(device, driver) -> list[tuple]:
    thread = cuda_start.start_cuda_context(device, load_driver=lambda: driver)
    assert thread is not None and thread.daemon
    thread.join(10)
    return [(name, *[a.value if isinstance(a, ctypes._SimpleCData) else a for a in args])
            for name, *args in driver.calls]


def test_the_named_gpus_primary_context_is_retained_after_the_driver_starts(monkeypatch):
    monkeypatch.delenv("CUDA_MODULE_LOADING", raising=False)
    driver = FakeDriver(device_handle=7)
    assert started("cuda:1", driver) == [("cuInit", 0), ("cuDeviceGet", 7, 1), ("cuDevicePrimaryCtxRetain", 0x1000, 7)]
    # Read by the driver at cuInit, and set by PyTorch only at its own first CUDA call.
    assert os.environ["CUDA_MODULE_LOADING"] == "LAZY"


def test_the_default_device_is_the_first_gpu_and_a_users_module_loading_is_kept(monkeypatch):
    monkeypatch.setenv("CUDA_MODULE_LOADING", "EAGER")
    assert started(None, FakeDriver())[1] == ("cuDeviceGet", 7, 0)
    assert started("cuda", FakeDriver())[1] == ("cuDeviceGet", 7, 0)
    assert os.environ["CUDA_MODULE_LOADING"] == "EAGER"


@pytest.mark.reliability(area="Files and processes", case="render on a GPU the driver refuses (no device, --device cuda:N beyond the GPUs)",
                         behaviour="The early context start stops at the refused call and raises nothing; the --device "
                                   "check then names the flag and the GPUs there are.")
def test_a_failing_driver_call_stops_the_start_quietly():
    driver = FakeDriver(fail={"cuInit": 100})  # CUDA_ERROR_NO_DEVICE
    assert [call[0] for call in started("cuda", driver)] == ["cuInit"]
    driver = FakeDriver(fail={"cuDeviceGet": 101})  # CUDA_ERROR_INVALID_DEVICE: a --device beyond the GPUs
    assert [call[0] for call in started("cuda:5", driver)] == ["cuInit", "cuDeviceGet"]


@pytest.mark.reliability(area="Files and processes", case="render on a machine without an NVIDIA driver or with a CPU-only PyTorch",
                         behaviour="No context is started (a CPU build never loads the driver); the render runs on the "
                                   "CPU as before.")
def test_a_machine_without_a_driver_starts_nothing_and_raises_nothing(monkeypatch):
    errors = []
    monkeypatch.setattr(threading, "excepthook", errors.append)

    def missing():
        raise OSError("libcuda.so.1: cannot open shared object file")

    thread = cuda_start.start_cuda_context("cuda", load_driver=missing)
    thread.join(10)
    assert not thread.is_alive() and errors == []


def test_a_cpu_device_starts_no_thread():
    def never():
        raise AssertionError("the driver was loaded for a CPU render")

    assert cuda_start.start_cuda_context("cpu", load_driver=never) is None


def test_a_pytorch_without_cuda_starts_no_context(tmp_path, monkeypatch):
    def torch_at(folder):
        return lambda name: SimpleNamespace(origin=str(folder / "__init__.py")) if name == "torch" else None

    cpu_build, cuda_build = tmp_path / "cpu", tmp_path / "cuda"
    for folder in (cpu_build, cuda_build):
        (folder / "lib").mkdir(parents=True)
        (folder / "lib" / "libtorch_cpu.so").touch()
    (cuda_build / "lib" / "libtorch_cuda.so").touch()
    monkeypatch.setattr(importlib.util, "find_spec", torch_at(cpu_build))
    assert not cuda_start.torch_build_has_cuda()
    monkeypatch.setattr(cuda_start, "_load_driver", lambda: pytest.fail("the driver was loaded for a CPU build"))
    assert cuda_start.start_cuda_context("cuda") is None
    monkeypatch.setattr(importlib.util, "find_spec", torch_at(cuda_build))
    assert cuda_start.torch_build_has_cuda()
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert not cuda_start.torch_build_has_cuda()


def test_the_cli_starts_the_context_before_its_flag_check_imports_pytorch(monkeypatch, tmp_path):
    order = []
    monkeypatch.setattr(cli, "start_cuda_context", lambda device: order.append(("start", device)))
    monkeypatch.setattr(cli, "check_device", lambda device, parser: order.append(("import torch", device))
                        or SimpleNamespace(type="cuda"))
    args = argparse.Namespace(device="cuda:1", precision="fp16", cache_dir=None)
    cli.check_pipeline_flags(args, argparse.ArgumentParser())
    assert order == [("start", "cuda:1"), ("import torch", "cuda:1")]


_ADOPTED = """
    import ctypes, json
    from ditto_core.cuda_start import start_cuda_context

    thread = start_cuda_context("cuda")
    import torch
    thread.join()
    x = torch.ones(4, device="cuda") * 2
    torch.cuda.synchronize()
    driver = ctypes.CDLL("libcuda.so.1")
    current, primary = ctypes.c_void_p(), ctypes.c_void_p()
    device = ctypes.c_int()
    driver.cuCtxGetCurrent(ctypes.byref(current))
    driver.cuDeviceGet(ctypes.byref(device), 0)
    driver.cuDevicePrimaryCtxRetain(ctypes.byref(primary), device)
    print(json.dumps({"thread": thread is not None, "sum": x.sum().item(),
                      "same": current.value == primary.value and current.value is not None}))
"""


@pytest.mark.gpu
def test_pytorch_adopts_the_context_made_while_it_imports():
    result = child_json(_ADOPTED)
    assert result == {"thread": True, "sum": 8.0, "same": True}
