"""A torch.profiler Chrome trace -> where the GPU's time went: how much of the window any kernel
ran, each CUDA stream's kernel time and busiest kernels, and the idle gaps between kernels.

    python -m bench.kernel_timeline TRACE.json [--top 8]

The live benchmark's ``profile`` part calls :func:`summarise` on the trace it writes: at many
streams it tells whether the device idles between render passes (host-bound) or is full, and
what share the motion stream's kernels take beside the render stream's.
"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
GAP_BUCKETS_MS = (0.1, 1.0, 5.0)


def _intervals(events: list[dict]) -> list[tuple[float, float]]:
    """The union of the events' [ts, ts + dur) intervals (µs), sorted and disjoint."""
    merged: list[list[float]] = []
    for start, end in sorted((e["ts"], e["ts"] + e["dur"]) for e in events):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def _overlap(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Total length (µs) where two sorted, disjoint interval lists overlap."""
    total, i, j = 0.0, 0, 0
    while i < len(a) and j < len(b):
        total += max(0.0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def summarise(trace: dict | Path | str, top: int = 8) -> dict:
    """Summary of a Chrome trace's GPU activity (times in ms; shares of the window from the first
    GPU event's start to the last one's end)."""
    if not isinstance(trace, dict):
        trace = json.loads(Path(trace).read_text())
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and e.get("cat") in GPU_CATEGORIES
              and "dur" in e]
    if not events:
        return {"gpu_events": 0}
    kernels = [e for e in events if e["cat"] == "kernel"]
    busy = _intervals(kernels)
    window_start = min(e["ts"] for e in events)
    window = max(e["ts"] + e["dur"] for e in events) - window_start
    gaps = [b[0] - a[1] for a, b in zip(busy, busy[1:])]
    by_stream: dict[object, list[dict]] = defaultdict(list)
    for e in kernels:
        by_stream[e.get("args", {}).get("stream")].append(e)
    streams = {}
    for stream, mine in sorted(by_stream.items(), key=lambda kv: -sum(e["dur"] for e in kv[1])):
        totals: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
        for e in mine:
            totals[e["name"]][0] += 1
            totals[e["name"]][1] += e["dur"]
        busiest = sorted(totals.items(), key=lambda kv: -kv[1][1])[:top]
        streams[str(stream)] = {
            "kernels": len(mine), "kernel_ms": round(sum(e["dur"] for e in mine) / 1000, 3),
            # Its kernels' time while another stream's kernel ran: the two sharing the SMs.
            "beside_other_streams_ms": round(_overlap(_intervals(mine), _intervals(
                [e for e in kernels if e.get("args", {}).get("stream") != stream])) / 1000, 3),
            "busiest": [{"name": name[:120], "count": count, "ms": round(us / 1000, 3)}
                        for name, (count, us) in busiest],
        }
    copies = [e for e in events if e["cat"] != "kernel"]
    return {
        "gpu_events": len(events), "window_ms": round(window / 1000, 3),
        "kernel_busy_ms": round(sum(b - a for a, b in busy) / 1000, 3),
        "kernel_busy_share": round(sum(b - a for a, b in busy) / window, 4) if window else None,
        "memcpy_memset_ms": round(sum(e["dur"] for e in copies) / 1000, 3),
        "idle_gaps": {f"over_{limit}_ms": {"count": sum(g > 1000 * limit for g in gaps),
                                           "ms": round(sum(g for g in gaps if g > 1000 * limit) / 1000, 3)}
                      for limit in GAP_BUCKETS_MS},
        "streams": streams,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("--top", type=int, default=8)
    args = parser.parse_args()
    print(json.dumps(summarise(args.trace, args.top), indent=1))


if __name__ == "__main__":
    main()
