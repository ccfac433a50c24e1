"""The benchmark's stall tracer (bench/stall_trace.py) and how bench_comfyui reads what it wrote."""
from __future__ import annotations

import json
import random
import threading
import time

from bench.bench_comfyui import prompt_stalls
from bench.stall_trace import watch


def _hold_the_interpreter(data: list[float]) -> list[float]:
    return sorted(data)  # one C call: the interpreter is not handed over until it returns


def test_a_thread_holding_the_interpreter_is_caught_with_its_stack(tmp_path):
    log, stop = tmp_path / "stalls.jsonl", threading.Event()
    data = [random.random() for _ in range(3_000_000)]
    tracer = threading.Thread(target=watch, args=(str(log), 0.002, 0.05, stop), daemon=True)
    tracer.start()
    time.sleep(0.1)  # the tracer ticking
    started = time.time()
    held = time.perf_counter()
    _hold_the_interpreter(data)
    held = time.perf_counter() - held
    stop.set()
    tracer.join(timeout=5)
    assert not tracer.is_alive()
    stalls = [json.loads(line) for line in log.read_text().splitlines()]
    assert held > 0.1, "the sort was too quick to stall anything on this machine"
    longest = max(stalls, key=lambda stall: stall["late_s"])
    assert longest["late_s"] > held / 2 and longest["at"] >= started
    assert any("test_a_thread_holding_the_interpreter" in frame for frame in longest["threads"]["MainThread"])
    assert "ditto-stall-trace" not in longest["threads"] and tracer.name not in longest["threads"]  # not itself


def test_a_prompts_stalls_are_the_longest_in_its_window_with_the_threads_that_were_busy(tmp_path):
    def line(at, late, threads):
        return json.dumps({"at": at, "late_s": late, "threads": threads})

    busy = {"ditto-engine-warmup": ["a.py:1 f", "subprocess.py:1 _execute_child"],
            "MainThread": ["main.py:1 main", "threading.py:9 wait"]}
    log = tmp_path / "stalls.jsonl"
    log.write_text("\n".join([
        line(99.0, 0.5, busy),  # before the prompt
        line(100.3, 0.03, busy), line(101.25, 0.25, busy),
        line(102.2, 0.3, busy),  # began inside (at 101.9), woke after the end: kept
        line(103.0, 0.04, busy),  # after the prompt
    ]) + "\n" + '{"at": 101.5, "late_s"')  # a line cut short as the server stopped
    got = prompt_stalls(log, start=100.0, end=102.0, top=2)
    assert [stall["late_s"] for stall in got] == [0.3, 0.25]
    assert [stall["t_s"] for stall in got] == [1.9, 1.0]
    assert got[0]["busy"] == {"ditto-engine-warmup": ["a.py:1 f", "subprocess.py:1 _execute_child"]}  # waiting ones left out
    assert prompt_stalls(tmp_path / "none.jsonl", 0, 1) == []  # a server that never stalled wrote nothing
