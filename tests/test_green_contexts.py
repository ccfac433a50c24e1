"""SMs set apart for the live runtime's motion (``LiveRuntime(motion_sms=N)``): what is refused
before any GPU work. The partition itself runs in ``tests/test_live_gpu.py`` (marked gpu) and is
measured by ``bench/bench_live.py --motion-sms``."""
from __future__ import annotations

import ctypes

import pytest
import torch

from ditto_core.errors import InputError
from ditto_core.green_contexts import GreenContextUnavailable, SmPartition
from ditto_core.live import LiveRuntime
from ditto_core.render.warp_decode import WarpDecodeEngine
from tests.live_support import RecordingRenderer, light_pipeline
from tests.test_warp_decode import toy_networks


def _driver_present() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


@pytest.mark.parametrize("value", [0, -4, True, 2.5, "16"])
def test_motion_sms_must_be_a_positive_integer(tmp_path, value):
    with pytest.raises(InputError, match="motion_sms must be a positive integer"):
        LiveRuntime(light_pipeline(tmp_path), renderer=RecordingRenderer(), motion_sms=value)


def test_motion_sms_is_refused_off_cuda_before_the_workers_start(tmp_path):
    with pytest.raises(InputError, match="motion_sms sets SMs of a CUDA GPU apart.*runs on cpu"):
        LiveRuntime(light_pipeline(tmp_path), renderer=RecordingRenderer(), motion_sms=16)


def test_a_partition_needs_a_cuda_device():
    with pytest.raises(GreenContextUnavailable, match="CUDA device only"):
        SmPartition(torch.device("cpu"), 16)


@pytest.mark.skipif(_driver_present(), reason="this machine has a CUDA driver")
def test_without_a_cuda_driver_the_partition_says_what_to_do():
    with pytest.raises(GreenContextUnavailable, match="update the NVIDIA driver.*leave motion_sms unset"):
        SmPartition(torch.device("cuda"), 16)


@pytest.mark.parametrize("cuda_graphs", [True, False])
def test_an_engine_without_cuda_graphs_hands_out_outputs_it_never_overwrites(cuda_graphs):
    """The render in a green context runs its compiled steps as plain kernels: no graph tree
    (whose recording would run on every SM) and no output buffer reused by the next batch."""
    engine = WarpDecodeEngine(*toy_networks(0), batch_size=2, compile=False, cuda_graphs=cuda_graphs)
    assert engine._graph_trees is cuda_graphs and engine._outputs_reused is cuda_graphs
