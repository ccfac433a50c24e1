"""bench/kernel_timeline.py: a Chrome trace's GPU kernels -> busy share, per-stream time, idle gaps."""
from __future__ import annotations

import json

import pytest

from bench.kernel_timeline import summarise


def _kernel(name, ts, dur, stream):
    return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "args": {"stream": stream}}


def _trace():
    # Render stream 7: conv 0-4 ms and 10-14 ms; motion stream 13: a 2-ms gemm
    # overlapping the first conv (3-5 ms), then three 0.05-ms kernels in the idle span (20-20.15 ms).
    events = [_kernel("conv", 0, 4000, 7), _kernel("conv", 10_000, 4000, 7), _kernel("gemm", 3000, 2000, 13)]
    events += [_kernel("small", 20_000 + 50 * i, 50, 13) for i in range(3)]
    events += [{"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH", "ts": 14_000, "dur": 1000, "args": {"stream": 7}},
               {"ph": "X", "cat": "cpu_op", "name": "aten::conv", "ts": 0, "dur": 99_000},  # host: not counted
               {"ph": "i", "cat": "kernel", "name": "marker", "ts": 1}]
    return {"traceEvents": events}


def test_busy_share_streams_and_gaps_of_a_known_trace(tmp_path):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(_trace()))
    s = summarise(path, top=1)
    assert s["gpu_events"] == 7
    assert s["window_ms"] == pytest.approx(20.15)
    # Kernel union: 0-5 (conv and the overlapping gemm), 10-14, 20-20.15 ms.
    assert s["kernel_busy_ms"] == pytest.approx(9.15)
    assert s["kernel_busy_share"] == pytest.approx(9.15 / 20.15, abs=1e-4)
    assert s["memcpy_memset_ms"] == pytest.approx(1.0)
    # Gaps between kernels: 5 ms (5-10) and 6 ms (14-20); the small kernels touch each other.
    assert s["idle_gaps"]["over_1.0_ms"] == {"count": 2, "ms": pytest.approx(11.0)}
    assert s["idle_gaps"]["over_5.0_ms"] == {"count": 1, "ms": pytest.approx(6.0)}
    render, motion = s["streams"]["7"], s["streams"]["13"]
    assert list(s["streams"]) == ["7", "13"]  # the busier stream first
    assert render["kernels"] == 2 and render["kernel_ms"] == pytest.approx(8.0)
    assert motion["kernels"] == 4 and motion["kernel_ms"] == pytest.approx(2.15)
    assert motion["busiest"] == [{"name": "gemm", "count": 1, "ms": pytest.approx(2.0)}]
    # The gemm ran 3-5 ms, beside the first conv for its first 1 ms only.
    assert motion["beside_other_streams_ms"] == pytest.approx(1.0)
    assert render["beside_other_streams_ms"] == pytest.approx(1.0)


def test_a_trace_without_gpu_events():
    assert summarise({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "x", "ts": 0, "dur": 5}]}) == {"gpu_events": 0}
