"""Who records while the graph-tree test's compiled call synchronises? (session 46, call 2)

Runs tests/test_warp_decode.py's graph-tree test in this process with every CUDA-graph
recording's start and end, every device synchronise and every compiled call logged with its
thread, and prints the log's end when the test fails. ``all``: every graph-tree call takes the
recording turn (GraphTreeCalls.RECORDING_CALLS huge), to tell "a call after the second still
warms up or records" from "something records outside the turns".

    python graph_tree_probe.py {branch,all}   (run from the patched tree's root)
"""
from __future__ import annotations

import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

import pytest
import torch
from torch.cuda import graphs as cuda_graph_module

from ditto_core import compilation
from ditto_core.render import warp_decode
from tests import test_warp_decode

events: list[tuple[float, str, str]] = []
T0 = time.perf_counter()


def note(what: str) -> None:
    events.append((round(time.perf_counter() - T0, 4), threading.current_thread().name, what))


def wrap_graph_context() -> None:
    enter, exit_ = cuda_graph_module.graph.__enter__, cuda_graph_module.graph.__exit__

    def entered(self):
        note("graph enter")
        result = enter(self)
        note("capture begun")
        return result

    def exited(self, *exc):
        note(f"capture ending (error: {exc[0] is not None})")
        return exit_(self, *exc)

    cuda_graph_module.graph.__enter__, cuda_graph_module.graph.__exit__ = entered, exited


def wrap_synchronize() -> None:
    synchronize = torch.cuda.synchronize

    def logged(device=None):
        where = "".join(traceback.format_stack(limit=4)[:-1]).replace("\n", " | ")[-300:]
        note(f"synchronize from {where}")
        return synchronize(device)

    torch.cuda.synchronize = logged


def wrap_compiled_calls() -> None:
    run = warp_decode.WarpDecodeEngine._run_compiled
    calls = [0]

    def logged(self, args, compiling=False):
        calls[0] += 1
        index = calls[0]
        shapes = tuple(tuple(a.shape) for a in args)
        note(f"compiled call {index} start (may record: {self._tree_calls.may_record(shapes)})")
        try:
            out = run(self, args, compiling)
        except BaseException as error:
            note(f"compiled call {index} raised {type(error).__name__}")
            raise
        from torch._dynamo.utils import counters

        note(f"compiled call {index} end (None: {out is None}; Dynamo graphs so far: "
             f"{counters['stats'].get('unique_graphs', 0)})")
        return out

    warp_decode.WarpDecodeEngine._run_compiled = logged


def wrap_graph_trees() -> None:
    """The tree manager's own steps: made (its first recording), a warm-up, a recording, a replay."""
    from torch._inductor import cudagraph_trees

    manager = cudagraph_trees.CUDAGraphTreeManager
    for name in ("__init__", "run_eager", "record_function", "execute_node"):
        method = getattr(manager, name)

        def logged(self, *args, _method=method, _name=name, **kwargs):
            note(f"tree {_name} start")
            try:
                return _method(self, *args, **kwargs)
            finally:
                note(f"tree {_name} end")

        setattr(manager, name, logged)


def main() -> int:
    variant = sys.argv[1]
    if variant == "all":
        compilation.GraphTreeCalls.RECORDING_CALLS = 10**9
    wrap_graph_context()
    wrap_synchronize()
    wrap_compiled_calls()
    wrap_graph_trees()
    torch._logging.set_logs(recompiles=True)
    status = 0
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as monkeypatch:
        try:
            test_warp_decode.test_a_graph_tree_records_while_other_threads_synchronise_and_record(Path(tmp), monkeypatch)
            print(f"{variant}: PASSED")
        except BaseException as error:
            status = 1
            print(f"{variant}: FAILED {type(error).__name__}: {str(error)[:200]}")
    interesting = [e for e in events if "compiled call" in e[2] or "capture" in e[2] or "graph enter" in e[2]
                   or e[1] == "MainThread"]
    print(f"{len(events)} events; the main thread's and every recording's, last 120:")
    for event in interesting[-120:]:
        print(*event, sep="  ")
    return status


if __name__ == "__main__":
    sys.exit(main())
