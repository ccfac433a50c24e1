"""Timing and reporting helpers shared by the benchmark scripts (run as ``python -m bench.<script>``)."""
from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any, Callable, Optional

import av
import torch


def sync(device: torch.device | str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def wall_times(fn: Callable[[], object], reps: int, device: torch.device | str = "cpu", warmup: int = 1) -> list[float]:
    """Seconds per call of ``fn``, the device synchronised around each call, after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        sync(device)
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return times


def cuda_event_times(fn: Callable[[], object], reps: int, warmup: int = 1) -> list[float]:
    """Milliseconds per call of ``fn`` measured with CUDA events (no host clock in the loop)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return times


def rel_l2(got: torch.Tensor, ref: torch.Tensor) -> float:
    """||got - ref|| / ||ref||, computed in float64."""
    got, ref = got.double(), ref.double()
    return ((got - ref).norm() / ref.norm()).item()


def summary_ms(times_ms: list[float]) -> dict[str, float]:
    ordered = sorted(times_ms)
    return {"median_ms": statistics.median(ordered), "p90_ms": ordered[int(len(ordered) * 0.9)],
            "min_ms": ordered[0], "reps": len(ordered)}


def emit(result: dict[str, Any], out: Optional[Path], quiet: bool = False) -> None:
    """Print the result as JSON and, with ``out``, write it there too.

    ``quiet``: print only where the file went (for scripts that printed a table already).
    """
    text = json.dumps(result, indent=2, default=str)
    if not quiet:
        print(text)
    if out is not None:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text + "\n")
        if quiet:
            print(f"wrote {out}")


def compile_breakdown() -> dict:
    """Where this process's compile time went (Dynamo's own timers) and which caches hit."""
    from torch._dynamo.utils import compile_times, counters

    names, seconds = compile_times(repr="csv", aggregate=True)
    timers = dict(zip(names, (float(s) for s in seconds)))
    phases = ("_compile.compile_inner", "bytecode_tracing", "OutputGraph.call_user_compiler",
              "create_aot_dispatcher_function", "compile_fx_inner", "fx_codegen_and_compile",
              "PyCodeCache.load_by_key_path", "async_compile.wait", "build_guards")
    caches = {f"{group}.{key}": value for group in ("aot_autograd", "inductor")
              for key, value in counters[group].items() if "cache" in key}
    return {**{phase: round(timers[phase], 3) for phase in phases if phase in timers}, **caches}


def count_frames(path: Path) -> int:
    """Frames in the MP4 as its container records them (a check that nothing was dropped)."""
    with av.open(str(path)) as container:
        return container.streams.video[0].frames
