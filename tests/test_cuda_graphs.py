"""CUDA graphs of two owners replayed at once (``ditto_core.cuda_graphs``; GPU only, marked).

A live runtime replays its HuBERT graphs and its LMDM graphs on two streams at the same time;
both were recorded on one thread. cuBLAS hands each (thread, stream) pair a workspace that a
graph keeps using, so graphs recorded on one stream would share it and overwrite each other's
partial sums when they overlap: each owner records on a stream of its own.
"""
from __future__ import annotations

import threading

import pytest
import torch

from ditto_core.cuda_graphs import CapturedCall

pytestmark = pytest.mark.gpu
REPLAYS = 150


def _chain(weight):
    def run(x):
        for _ in range(30):  # small-M products, the shape cuBLAS splits over K through its workspace
            x = torch.tanh(x @ weight)
        return x
    return run


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
