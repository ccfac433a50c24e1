"""HuBERT windows of a live round in one batch (``encode_windows``, ``LiveWindowEncoder``).

CPU: a batch equals window by window on both backends, and bad shapes are refused. GPU
(marked): the CUDA-graph replays equal the eager batch for every padded size, a batch larger
than one graph is split, and fp16 rows that overflow are computed again in fp32.
"""
from __future__ import annotations

import logging

import pytest
import torch

from ditto_core.audio import HubertFeatureExtractor
from ditto_core.audio.window_graphs import MAX_GRAPH_BATCH, LiveWindowEncoder, padded_batch
from ditto_core.errors import InputError
from ditto_core.models.hubert_onnx_export import export_hubert_onnx, random_hubert
from tests.parity import rel_l2
from tests.test_hubert_torch import WIDE

SAMPLES = 6480


@pytest.fixture(scope="module")
def wide_path(tmp_path_factory):
    return export_hubert_onnx(random_hubert(WIDE, seed=3), tmp_path_factory.mktemp("wide") / "wide.onnx")


def _windows(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return 0.1 * torch.randn(n, SAMPLES, generator=g)


@pytest.mark.parametrize("backend", ["torch", "onnxruntime"])
def test_a_batch_of_windows_equals_window_by_window(wide_path, backend):
    extractor = HubertFeatureExtractor(wide_path, backend=backend, max_batch_windows=2)  # 5 = 2 + 2 + 1
    windows = _windows(5, seed=1)
    batched = extractor.encode_windows(windows)
    assert batched.shape == (5, 5, 1024) and batched.dtype == torch.float32
    for i in range(5):
        assert rel_l2(batched[i], extractor.encode_window(windows[i])) < 1e-6


def test_window_shapes_are_refused_with_the_expected_shape(wide_path):
    extractor = HubertFeatureExtractor(wide_path, backend="torch")
    with pytest.raises(InputError, match=r"\(n, 6480\)"):
        extractor.encode_windows(torch.zeros(6480))
    with pytest.raises(InputError, match="6480 samples"):
        extractor.encode_window(torch.zeros(6400))


def test_the_encoder_off_cuda_is_the_extractors_batch(wide_path):
    extractor = HubertFeatureExtractor(wide_path, backend="torch")
    encoder = LiveWindowEncoder(extractor)
    windows = _windows(3, seed=2)
    assert not encoder.graphed
    assert rel_l2(encoder.encode(windows), extractor.encode_windows(windows)) < 1e-7


def test_padded_batches_are_powers_of_two():
    assert [padded_batch(n) for n in (1, 2, 3, 4, 5, 9, 64)] == [1, 2, 4, 4, 8, 16, 64]


# ------------------------------------------------------------------------------ GPU


@pytest.mark.gpu
@pytest.mark.parametrize("n", [1, 3, 8, MAX_GRAPH_BATCH + 5])
def test_graph_replays_equal_the_eager_batch(wide_path, n):
    extractor = HubertFeatureExtractor(wide_path, device="cuda", backend="torch")
    encoder = LiveWindowEncoder(extractor)
    assert encoder.graphed
    windows = _windows(n, seed=n)
    eager = extractor.encode_windows(windows)
    for _ in range(2):  # the capture, then a replay
        got = encoder.encode(windows)
        assert got.shape == (n, 5, 1024) and got.device.type == "cuda"
        assert rel_l2(got, eager) < 1e-3
    other = _windows(n, seed=100 + n)  # new inputs reach the recorded graph
    assert rel_l2(encoder.encode(other), extractor.encode_windows(other)) < 1e-3


@pytest.mark.gpu
def test_graph_overflow_in_fp16_is_computed_again_in_fp32(wide_path, caplog):
    extractor = HubertFeatureExtractor(wide_path, device="cuda", backend="torch", precision="fp16")
    encoder = LiveWindowEncoder(extractor)
    windows = _windows(2, seed=7)
    encoder.encode(windows)  # recorded with weights in range
    with torch.no_grad():
        extractor.model.encoder.layers[0].feed_forward.fc1.weight.mul_(1e5)
    with caplog.at_level(logging.WARNING, logger="ditto_core.audio"):
        got = encoder.encode(windows)
    assert "overflowed in fp16" in caplog.text
    assert extractor.precision == "fp32" and bool(torch.isfinite(got).all())
    assert rel_l2(encoder.encode(windows), extractor.encode_windows(windows)) < 1e-6  # eager from now on
