"""Threads of ours that ran compiled calls leave torch no thread-local Python objects to drop at
their C++ exit, where a process that is exiting would abort (``compilation.graph_tree_thread``)."""
from __future__ import annotations

import subprocess
import sys
import threading

import pytest
import torch

from ditto_core.compilation import graph_tree_thread

from tests.conftest import REPO_ROOT

KEYS = ("tree_manager_containers", "tree_manager_locks")

needs_tls_removal = pytest.mark.skipif(
    not hasattr(torch._C, "_remove_obj_from_tls"), reason="this torch cannot drop a thread's thread-local objects")


def _in_a_new_thread(work):
    """``work()``'s result, computed on a thread of its own (a fresh thread-local state)."""
    out = []
    thread = threading.Thread(target=lambda: out.append(work()))
    thread.start()
    thread.join(60)
    return out[0]


@needs_tls_removal
def test_a_graph_tree_thread_has_torchs_state_inside_and_none_after():
    def work():
        from torch._inductor import cudagraph_trees

        with graph_tree_thread(torch.device("cuda")):  # sets up without a GPU: only thread-local containers
            inside = [torch._C._is_key_in_tls(key) for key in KEYS]
            containers = getattr(cudagraph_trees.local, "tree_manager_containers", None)
        return inside, containers, [torch._C._is_key_in_tls(key) for key in KEYS]

    inside, containers, after = _in_a_new_thread(work)
    assert inside == [True, True] and containers == {}
    assert after == [False, False]


def test_off_cuda_a_graph_tree_thread_sets_nothing_up():
    def work():
        with graph_tree_thread(torch.device("cpu")):
            return [torch._C._is_key_in_tls(key) for key in KEYS]

    assert _in_a_new_thread(work) == [False, False]


# The race, made certain: the thread's last Python step hands the GIL to the main thread
# (a long switch interval: neither gives it up while running bytecode), which begins to
# finalize the interpreter, then frees the GIL in a finalizer. A thread-local object still
# held by the ending thread is dropped by its C++ exit in that window: torch takes the GIL
# there, the finalizing interpreter stops the thread inside that destructor, and the process
# aborts ("terminate called without an active exception").
_EXIT_RACE = """
import sys, threading, time
import torch
from ditto_core.compilation import graph_tree_thread
from ditto_core.priming import background_gpu_work

class FreesTheGilAtTeardown:
    def __del__(self):
        time.sleep(0.3)

keep = FreesTheGilAtTeardown()
done = threading.Event()

def body():
    with {wrapper}:
        torch._C._stash_obj_in_tls("tree_manager_containers", {{}})  # as a compiled call's graph tree does
        done.set()
        sum(range(200_000))  # the main thread now waits for the GIL

sys.setswitchinterval(1000.0)
threading.Thread(target=body, daemon=True).start()
done.wait()
"""


@needs_tls_removal
@pytest.mark.reliability(
    area="Soak and faults",
    case="a thread of ours that ran compiled calls (the live render thread, a priming run, an engine's warm-up) "
         "ends just as the interpreter finalizes (a live server stopped with Ctrl-C on a loaded machine)",
    behaviour="the thread drops torch's graph-tree thread-locals while it still holds the GIL, and serve, worker "
              "and render end without the interpreter's teardown, so the process exits with its status (it "
              "aborted: 'terminate called without an active exception', exit -6, in CI)")
@pytest.mark.parametrize("wrapper", ['graph_tree_thread(torch.device("cuda"))', "background_gpu_work()"],
                         ids=["graph_tree_thread", "background_gpu_work"])
def test_a_thread_ending_as_the_interpreter_finalizes_does_not_abort_it(wrapper):
    script = _EXIT_RACE.format(wrapper=wrapper)
    for _ in range(3):  # unguarded, every run aborted
        done = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and "terminate called" not in done.stderr, done.stderr[-2000:]
