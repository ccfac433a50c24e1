"""CUDA graphs (``ditto_core.cuda_graphs``): two owners replayed at once, recordings put off
while background threads allocate under ``cudaMallocAsync``, and device-wide calls taking turns
with recordings (GPU tests marked).

A live runtime replays its HuBERT graphs and its LMDM graphs on two streams at the same time;
both were recorded on one thread. cuBLAS hands each (thread, stream) pair a workspace that a
graph keeps using, so graphs recorded on one stream would share it and overwrite each other's
partial sums when they overlap: each owner records on a stream of its own.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

from ditto_core import cuda_graphs
from ditto_core.cuda_graphs import CapturedCall, beside_captures, between_recordings, recording_turn
from tests.recording_turns import recording_elsewhere, started_and_waiting

REPO = Path(__file__).resolve().parents[1]
REPLAYS = 150


def _turn(device) -> bool:
    with recording_turn(device) as allowed:
        return allowed


def test_recordings_and_background_work_take_turns_only_under_cuda_malloc_async(monkeypatch):
    cuda = torch.device("cuda")
    entered, leave = threading.Event(), threading.Event()

    def background():
        with beside_captures():
            entered.set()
            assert leave.wait(10)

    monkeypatch.setattr(cuda_graphs, "uses_cuda_malloc_async", lambda device: True)
    assert _turn(cuda)
    thread = threading.Thread(target=background)
    thread.start()
    try:
        assert entered.wait(10)
        assert not _turn(cuda)  # another thread's block counts, wherever it runs
        monkeypatch.setattr(cuda_graphs, "uses_cuda_malloc_async", lambda device: False)
        assert _turn(cuda)  # the native allocator keeps a recording's memory apart
        monkeypatch.setattr(cuda_graphs, "uses_cuda_malloc_async", lambda device: True)
    finally:
        leave.set()
        thread.join()
    assert _turn(cuda)
    with pytest.raises(RuntimeError):  # a block that raises is left all the same
        with beside_captures():
            raise RuntimeError("priming failed")
    assert _turn(cuda)


def test_background_work_starting_during_a_recording_waits_for_its_end(monkeypatch):
    monkeypatch.setattr(cuda_graphs, "uses_cuda_malloc_async", lambda device: True)
    order, started = [], threading.Event()

    def background():
        started.set()
        with beside_captures():
            order.append("background")

    with recording_turn(torch.device("cuda")) as allowed:
        assert allowed
        thread = threading.Thread(target=background)
        thread.start()
        assert started.wait(10)
        thread.join(0.2)
        assert thread.is_alive() and order == []  # held at the door while the graph is recorded
        with recording_turn(torch.device("cuda")) as nested, beside_captures():
            order.append("recording")  # the recording thread itself is never held (no deadlock), nested or not
        assert nested
    thread.join(10)
    assert order == ["recording", "background"]


def test_a_warm_up_that_must_record_waits_for_its_turn_instead_of_being_put_off(monkeypatch):
    """A live runtime's warm-up records every graph before streams are served: beside another
    thread's background work (an offline compile) its recordings wait for the work to end, and
    a recording inside this thread's own background block is not held by that block."""
    from ditto_core.cuda_graphs import recordings_wait

    monkeypatch.setattr(cuda_graphs, "uses_cuda_malloc_async", lambda device: True)
    cuda, entered, leave, got = torch.device("cuda"), threading.Event(), threading.Event(), []

    def background():
        with beside_captures():
            entered.set()
            assert leave.wait(10)

    def warm_up():
        with recordings_wait(), recording_turn(cuda) as allowed:
            got.append(allowed)

    worker = threading.Thread(target=background)
    worker.start()
    assert entered.wait(10)
    waiting = threading.Thread(target=warm_up)
    waiting.start()
    waiting.join(0.2)
    assert waiting.is_alive() and got == []  # waiting for the background work, not put off
    assert not _turn(cuda)  # outside recordings_wait: put off at once
    leave.set()
    worker.join()
    waiting.join(10)
    assert got == [True]
    with beside_captures():
        assert _turn(cuda)  # this thread's own block does not hold its recording


@pytest.mark.reliability(
    area="Soak and faults",
    case="a device synchronize or cache flush of ours (a stage timer, a node's timer, Unload, an engine's OOM retry) "
         "while another thread records a CUDA graph (a live runtime warming up beside an offline workflow)",
    behaviour="the call waits for the recording to end and no recording starts during it, under either allocator "
              "(unguarded, the synchronize fails, the recording breaks and the process aborts: seen in session 43 "
              "with a recording on a priming thread)")
@pytest.mark.parametrize("malloc_async", [False, True])
def test_a_device_wide_call_waits_for_a_recording_on_another_thread(monkeypatch, malloc_async):
    """A device synchronize while another thread records fails the recording and aborts the process
    (session 43), whichever allocator: the call waits for the recording to end."""
    monkeypatch.setattr(cuda_graphs, "uses_cuda_malloc_async", lambda device: malloc_async)
    order = []

    def synchronize():
        with between_recordings():
            order.append("synchronized")

    with recording_elsewhere():
        syncing, = started_and_waiting(synchronize)
        assert order == []  # held while the graph is recorded
        order.append("recorded")
    syncing.join(10)
    assert order == ["recorded", "synchronized"]


@pytest.mark.parametrize("malloc_async", [False, True])
def test_a_recording_waits_for_a_device_wide_call_on_another_thread(monkeypatch, malloc_async):
    """Not put off (that is for allocations under cudaMallocAsync): a synchronize ends by itself."""
    monkeypatch.setattr(cuda_graphs, "uses_cuda_malloc_async", lambda device: malloc_async)
    order, inside, leave = [], threading.Event(), threading.Event()

    def synchronize():
        with between_recordings():
            inside.set()
            assert leave.wait(10)
            order.append("synchronized")

    def record():
        with recording_turn(torch.device("cuda")) as allowed:
            order.append(("recorded", allowed))

    syncing = threading.Thread(target=synchronize)
    syncing.start()
    assert inside.wait(10)
    recorder = threading.Thread(target=record)
    recorder.start()
    recorder.join(0.2)
    assert recorder.is_alive() and order == []
    leave.set()
    for thread in (syncing, recorder):
        thread.join(10)
    assert order == ["synchronized", ("recorded", True)]


@pytest.mark.parametrize("malloc_async", [False, True])
def test_recordings_on_two_threads_take_turns(monkeypatch, malloc_async):
    """``torch.cuda.graph`` synchronises the device as it starts: a second recording must not start
    while a first runs on another thread."""
    monkeypatch.setattr(cuda_graphs, "uses_cuda_malloc_async", lambda device: malloc_async)
    order = []
    with recording_elsewhere():  # the first, given its turn
        second, = started_and_waiting(lambda: order.append(("second", _turn(torch.device("cuda")))))
        assert order == []
        order.append("first")
    second.join(10)
    assert order == ["first", ("second", True)]


def test_a_thread_is_never_held_by_its_own_recording_or_device_wide_call(monkeypatch):
    monkeypatch.setattr(cuda_graphs, "uses_cuda_malloc_async", lambda device: False)
    with recording_turn(torch.device("cuda")) as allowed, between_recordings():
        assert allowed
    with between_recordings(), recording_turn(torch.device("cuda")) as allowed:
        assert allowed
    assert cuda_graphs._recordings == 0 and cuda_graphs._running["device_wide"] == 0  # every block left


def test_device_synchronize_synchronizes_inside_its_turn(monkeypatch):
    seen = []
    monkeypatch.setattr(cuda_graphs.torch.cuda, "synchronize",
                        lambda device=None: seen.append((device, cuda_graphs._running["device_wide"])))
    cuda_graphs.device_synchronize(torch.device("cuda", 1))
    assert seen == [(torch.device("cuda", 1), 1)] and cuda_graphs._running["device_wide"] == 0


def _stage_timer(device: torch.device) -> None:
    from ditto_core.pipeline import StageTimes

    StageTimes().record("stage", 0.0, device)


def _comfyuis_empty_cache(device: torch.device) -> None:
    """ComfyUI's ``soft_empty_cache`` as the pack leaves it after its load: ComfyUI's CUDA branch
    (empty the cache, collect IPC handles) inside the pack's wrapper."""
    from tests.comfy_stubs import load_pack

    load_pack()
    import comfy.model_management as mm
    from comfyui_ditto_pack.nodes.comfy_housekeeping import empty_cache_takes_turns

    original = mm.soft_empty_cache
    mm.soft_empty_cache = lambda force=False: (torch.cuda.empty_cache(), torch.cuda.ipc_collect())
    try:
        empty_cache_takes_turns()
        mm.soft_empty_cache()
    finally:
        mm.soft_empty_cache = original


@pytest.mark.gpu
@pytest.mark.parametrize("device_wide_call", [_stage_timer, _comfyuis_empty_cache])
def test_a_device_wide_call_beside_a_recording_on_another_thread_waits_instead_of_aborting(device_wide_call):
    """Session 43's abort, made certain: a graph recording held open on one thread while the
    pipeline's stage timer synchronises the device, or ComfyUI empties the allocator's cache, on
    another. The call waits; the recording replays what eager code computes."""
    device = torch.device("cuda")
    x = torch.randn(256, 256, device=device)
    recording, leave, calls = threading.Event(), threading.Event(), []

    def held_open(t):
        calls.append(t)
        if len(calls) == 2:  # the recording (the first call is capture()'s eager warm-up)
            recording.set()
            assert leave.wait(30)  # Python waits inside the recording: nothing is launched meanwhile
        return t @ t

    captured = CapturedCall(held_open, (x,), torch.cuda.Stream(device))
    raised = []

    def record():
        try:
            captured.capture()
        except BaseException as error:
            raised.append(error)

    recorder = threading.Thread(target=record)
    recorder.start()
    done = []
    caller = threading.Thread(target=lambda: done.append(device_wide_call(device)))
    try:
        assert recording.wait(30)
        caller.start()
        caller.join(0.3)
        assert caller.is_alive()  # waiting for the recording, not failing it
    finally:
        leave.set()
        recorder.join(30)
        if caller.ident is not None:  # started
            caller.join(30)
    assert not raised and done == [None]
    y = torch.randn(256, 256, device=device)
    torch.testing.assert_close(captured.replay((y,)), y @ y, rtol=1e-5, atol=1e-4)


def test_releasing_a_recording_empties_its_outputs_and_leaves_copies_and_views_intact():
    """``CapturedCall.release`` (also run when its owner goes) frees the graph's outputs through
    ``set_()``; what a caller kept (a copy, a view) still reads the values."""
    from types import SimpleNamespace

    with torch.inference_mode():  # the owners record under inference mode or no_grad
        features, flag = torch.arange(12.0).view(3, 4), torch.tensor(True)
    kept_view, kept_copy = features[:2], features.clone()
    call = SimpleNamespace(outputs=(features, [flag]))
    CapturedCall.release(call)
    assert call.outputs is None and features.numel() == 0 and flag.numel() == 0
    assert kept_view.tolist() == [[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0]]
    assert torch.equal(kept_copy, torch.arange(12.0).view(3, 4))


@pytest.mark.reliability(
    area="Soak and faults",
    case="an owner of CUDA graphs (an LMDM sampler of an earlier setting) dropped in a reference cycle while "
         "another graph is being recorded under cudaMallocAsync",
    behaviour="no garbage collection runs inside a recording, and a recording keeps no reference to its owner, so "
              "owners are freed when dropped: nothing frees graph memory mid-recording (that aborted the process)")
def test_a_recording_holds_the_collector_and_then_keeps_no_reference_to_its_owner(monkeypatch):
    """The abort of session 50's GPU run under the real cudaMallocAsync: a collection during a
    recording freed samplers dropped earlier, whose graphs' memory may not be freed there."""
    import contextlib
    import gc
    import weakref

    monkeypatch.setattr(cuda_graphs.torch.cuda, "CUDAGraph", lambda: type("Graph", (), {"replay": lambda self: None})())
    monkeypatch.setattr(cuda_graphs.torch.cuda, "graph", lambda graph, **kwargs: contextlib.nullcontext())
    monkeypatch.setattr(cuda_graphs, "recording_turn", lambda device, wait=None: contextlib.nullcontext(True))
    monkeypatch.setattr(cuda_graphs, "uses_cuda_malloc_async", lambda device: True)
    seen = []

    class Owner:  # as a sampler: it keeps its recording, which was made of its own method
        def run(self, x):
            seen.append(gc.isenabled())
            return x * 2

    owner = Owner()
    owner.recording = CapturedCall(owner.run, (torch.ones(3),), stream=None)
    assert owner.recording.capture(warm_up=False).tolist() == [2.0, 2.0, 2.0]
    assert seen == [False] and gc.isenabled()  # held for the recording only
    gone = weakref.ref(owner)
    gc.disable()  # what frees the owner now must be its last reference going, not a collection
    try:
        del owner
        assert gone() is None
    finally:
        gc.enable()


@pytest.mark.reliability(
    area="Soak and faults",
    case="a recording's owner dropped (models unloaded, a setting evicted) while a graph is being recorded on "
         "another thread (a live runtime warming up)",
    behaviour="its outputs and graph are freed once no recording runs, never in the middle of one (under "
              "cudaMallocAsync that aborted the process)")
@pytest.mark.parametrize("malloc_async", [False, True])
def test_a_recording_released_while_another_is_made_is_freed_after_it(monkeypatch, malloc_async):
    from types import SimpleNamespace

    monkeypatch.setattr(cuda_graphs, "uses_cuda_malloc_async", lambda device: malloc_async)
    with torch.inference_mode():
        features = torch.arange(12.0)
    graph = object()
    call = SimpleNamespace(outputs=(features,), graph=graph)
    with recording_elsewhere():
        CapturedCall.release(call)
        assert call.outputs is None and features.numel() == 12  # parked: the recording is still being made
        assert cuda_graphs._released_mid_recording == [([features], graph)]
    assert features.numel() == 0 and cuda_graphs._released_mid_recording == []  # freed as it ended


def _chain(weight):
    def run(x):
        for _ in range(30):  # small-M products, the shape cuBLAS splits over K through its workspace
            x = torch.tanh(x @ weight)
        return x
    return run


@pytest.mark.gpu
def test_graphs_of_two_owners_replayed_at_once_from_two_threads_stay_exact():
    g = torch.Generator(device="cuda").manual_seed(0)
    weights = [torch.randn(4096, 4096, device="cuda", dtype=torch.half, generator=g) / 64 for _ in range(2)]
    inputs = [torch.randn(16, 4096, device="cuda", dtype=torch.half, generator=g) for _ in range(2)]
    owners = [CapturedCall(_chain(w), (x,), torch.cuda.Stream()) for w, x in zip(weights, inputs)]
    for owner, w, x in zip(owners, weights, inputs):
        warm = owner.capture()
        assert torch.allclose(warm.float(), _chain(w)(x).float(), atol=1e-2)
    alone = [owner.replay((x,)).clone() for owner, x in zip(owners, inputs)]
    torch.cuda.synchronize()
    outputs: list[list[torch.Tensor]] = [[], []]

    def replay(k):
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            for _ in range(REPLAYS):
                outputs[k].append(owners[k].replay((inputs[k],)).clone())
        stream.synchronize()

    threads = [threading.Thread(target=replay, args=(k,)) for k in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for k in range(2):
        assert len(outputs[k]) == REPLAYS
        differing = sum(not torch.equal(out, alone[k]) for out in outputs[k])
        assert differing == 0, f"owner {k}: {differing} of {REPLAYS} concurrent replays differ from its replay alone"


@pytest.mark.gpu
def test_a_graph_stays_exact_after_later_recordings_and_a_full_allocator():
    """The capture stream's cuBLAS workspace is made inside the first recording (the graph's own
    pool): had the warm-up made it in the ordinary pool, a later recording would clear it and the
    memory handed out below would be where the first graph keeps writing (session 14's fault)."""
    g = torch.Generator(device="cuda").manual_seed(1)
    weight = torch.randn(4096, 4096, device="cuda", dtype=torch.half, generator=g) / 64
    x = torch.randn(16, 4096, device="cuda", dtype=torch.half, generator=g)
    first = CapturedCall(_chain(weight), (x,), torch.cuda.Stream())
    first.capture()
    expected = first.replay((x,)).clone()
    for size in (1, 2, 4):  # other owners record after it, each on a stream of its own
        CapturedCall(_chain(weight), (x[:size],), torch.cuda.Stream()).capture()
    torch.cuda.empty_cache()
    filler = [torch.full((8 << 20,), 7.0, device="cuda") for _ in range(32)]  # reuses whatever was freed
    got = first.replay((x,)).clone()
    torch.cuda.synchronize()
    assert all(bool((f == 7.0).all()) for f in filler), "a replay wrote into memory the allocator handed out"
    assert torch.equal(got, expected)


BESIDE_A_RECORDING = """
import contextlib, json, sys, threading, warnings
import torch
from ditto_core.cuda_graphs import beside_captures
from ditto_core.models.keypoints import MOTION_DIM
from ditto_core.models.lmdm import LMDM, WINDOW
from ditto_core.motion.lmdm_sampler import DDIMSampler
from tests.parity import rel_l2

warnings.simplefilter("always")  # every such warning, not the first per line
lmdm = LMDM().cuda().eval().requires_grad_(False)
plain = DDIMSampler(lmdm, 5, cuda_graph=False)
gen = torch.Generator(device="cuda").manual_seed(0)
inputs = (torch.randn(1, MOTION_DIM, device="cuda", generator=gen), torch.randn(1, WINDOW, 1103, device="cuda", generator=gen),
          torch.randn(1, WINDOW, MOTION_DIM, device="cuda", generator=gen), torch.randn(plain.noise_shape(1), device="cuda", generator=gen))
expected = plain.sample(*inputs)

def allocate(stop, marked):  # a priming run's pattern: new tensors made and dropped on another stream
    with torch.cuda.stream(torch.cuda.Stream()), (beside_captures() if marked else contextlib.nullcontext()):
        while not stop.is_set():
            x = torch.full((256, 256), 0.01, device="cuda")  # no random numbers: the generator is the recording's
            for _ in range(20):
                x = torch.tanh(x @ x)
            torch.cuda.current_stream().synchronize()

report = {}
for phase, marked in (("unmarked", False), ("marked", True)):
    sys.stderr.write(f"=== {phase}\\n"); sys.stderr.flush()
    sampler, stop = DDIMSampler(lmdm, 5, cuda_graph=True), threading.Event()
    thread = threading.Thread(target=allocate, args=(stop, marked))
    thread.start()
    during = [rel_l2(sampler.sample(*inputs), expected) for _ in range(3)]
    graphs_during = len(sampler._graphs)
    stop.set(); thread.join()
    after = [rel_l2(sampler.sample(*inputs), expected) for _ in range(2)]
    torch.cuda.synchronize()
    report[phase] = {"during": during, "graphs_during": graphs_during, "after": after, "graphs_after": len(sampler._graphs)}
    sys.stderr.flush()
sys.stderr.write("=== dropped\\n"); sys.stderr.flush()
del sampler  # its recorded window's memory freed (a setting evicted, the models unloaded)
torch.cuda.synchronize()
sys.stderr.flush()
print(json.dumps(report))
"""


@pytest.mark.gpu
def test_a_recording_under_cuda_malloc_async_waits_for_marked_background_work(tmp_path):
    """ComfyUI's allocator counts any thread's allocation during a recording as the recording's
    and warns when it is freed (dozens of lines in a real ComfyUI's first prompt: the LMDM window
    recorded beside the warp+decode priming). Unmarked background work shows the warning here;
    marked work (``beside_captures``) puts the sampler's recording off: its windows run eagerly
    until the work ends, then it records, and no warning is printed, nor when a sampler with a
    recorded window is dropped. Same samples throughout."""
    env = {**os.environ, "PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}
    done = subprocess.run([sys.executable, "-c", BESIDE_A_RECORDING], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    unmarked, marked = done.stderr.split("=== unmarked")[1].split("=== marked")
    warning = "uncaptured free of a captured allocation"
    assert report["unmarked"]["graphs_during"] == 1 and warning in unmarked, (report, unmarked[-2000:])
    assert report["marked"]["graphs_during"] == 0 and report["marked"]["graphs_after"] == 1, report
    assert warning not in marked, marked[-2000:]
    for phase in report.values():
        assert max(phase["during"] + phase["after"]) < 1e-5, report


ONE_RECORDED_WINDOW = """
import gc, torch
from ditto_core.models.keypoints import MOTION_DIM
from ditto_core.models.lmdm import LMDM, WINDOW
from ditto_core.motion.lmdm_sampler import DDIMSampler
lmdm = LMDM().cuda().eval().requires_grad_(False)
sampler = DDIMSampler(lmdm, 5, cuda_graph=True)
zeros = lambda *shape: torch.zeros(*shape, device="cuda")
sampler.sample(zeros(1, MOTION_DIM), zeros(1, WINDOW, 1103), zeros(1, WINDOW, MOTION_DIM), zeros(*sampler.noise_shape(1)))
assert len(sampler._graphs) == 1  # recorded at its only window: a clip of at most 80 frames
del sampler  # the models unloaded, or the setting evicted
gc.collect()
torch.cuda.synchronize()
torch.cuda.empty_cache()
print("dropped")
"""


@pytest.mark.gpu
def test_an_owner_dropped_after_its_only_recorded_call_frees_the_recording_cleanly():
    """Session 33 (call 4): under ComfyUI's allocator a pipeline dropped after a one-window clip
    aborted the process ("uncaptured free of a captured allocation", then "CUDA error: invalid
    argument" from the allocator's free and ``terminate``): the recording's outputs are a CUDA
    graph allocation, which does not exist until the graph has run, and its graph had never
    been replayed. The recording now runs once as it is made."""
    env = {**os.environ, "PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}
    done = subprocess.run([sys.executable, "-c", ONE_RECORDED_WINDOW], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("dropped"), done.stderr[-3000:]


OWNERS_DROPPED_IN_CYCLES = """
import gc, torch
from ditto_core.models.keypoints import MOTION_DIM
from ditto_core.models.lmdm import LMDM, WINDOW
from ditto_core.motion.lmdm_sampler import DDIMSampler
lmdm = LMDM().cuda().eval().requires_grad_(False)
gen = torch.Generator(device="cuda").manual_seed(0)
args = lambda steps: (torch.randn(1, MOTION_DIM, device="cuda", generator=gen),
                      torch.randn(1, WINDOW, 1103, device="cuda", generator=gen),
                      torch.randn(1, WINDOW, MOTION_DIM, device="cuda", generator=gen),
                      torch.randn(steps - 1, 1, WINDOW, MOTION_DIM, device="cuda", generator=gen))
gc.set_threshold(1)  # a collection at almost every allocation, inside recordings too if they allowed it
for round_ in range(3):
    for span in ("window", "step"):
        for steps in (2, 5):
            sampler = DDIMSampler(lmdm, steps, graph_span=span)
            sampler.sample(*args(steps))
            cycle = [sampler]
            cycle.append(cycle)  # dropped in a cycle: only a collection frees it
            del sampler, cycle
torch.cuda.synchronize()
gc.collect()
torch.cuda.synchronize()
print("recorded and dropped")
"""


@pytest.mark.gpu
def test_owners_dropped_in_cycles_are_never_freed_inside_another_recording():
    """Session 50 (call 6): under ComfyUI's allocator a GPU test aborted in the middle of a
    recording, where an automatic collection freed the samplers of an earlier setting, left in
    cycles, and with them their recordings' memory. Recordings now hold the collector; here
    collections are due at almost every allocation and every sampler is dropped in a cycle."""
    env = {**os.environ, "PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}
    done = subprocess.run([sys.executable, "-c", OWNERS_DROPPED_IN_CYCLES], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("recorded and dropped"), done.stderr[-3000:]
