"""Owned CUDA streams: no two live owners of this package share one of PyTorch's pool streams.

On the CPU the pool is a stand-in with PyTorch's behaviour (32 streams per priority, handed out
round-robin); the GPU test checks that behaviour and the rule on a real device.
"""
from __future__ import annotations

import gc
import itertools
import logging
import threading
from types import SimpleNamespace

import pytest
import torch

from ditto_core import cuda_streams
from ditto_core.cuda_streams import POOL_SIZE, owned_stream, side_stream


class Owner:  # anything an owner can be: a sampler, a runtime, HuBERT's window graphs
    pass


@pytest.fixture
def pool(monkeypatch):
    """PyTorch's pool as c10/cuda/CUDAStream.h describes it: per priority, 32 streams round-robin."""
    turns = {}

    def stream(device, priority=0):
        turn = turns.setdefault(priority, itertools.count())
        handle = 1000 * (1 + (priority < 0)) + next(turn) % POOL_SIZE
        return SimpleNamespace(device=torch.device("cuda", 0), cuda_stream=handle, priority=priority)

    monkeypatch.setattr(cuda_streams.torch.cuda, "Stream", stream)
    monkeypatch.setattr(cuda_streams, "_held", type(cuda_streams._held)())
    return stream


def test_two_owners_a_pool_turn_apart_get_different_streams(pool):
    a, b = Owner(), Owner()
    first = owned_stream(a, "cuda")
    for _ in range(POOL_SIZE - 1):  # other code's requests move the pool round to the owner's stream
        pool("cuda")
    assert pool("cuda").cuda_stream == first.cuda_stream  # the premise: the 33rd request is the first stream again
    for _ in range(POOL_SIZE - 1):
        pool("cuda")
    assert owned_stream(b, "cuda").cuda_stream != first.cuda_stream


def test_a_stream_is_free_again_once_its_owner_is_gone(pool):
    owner = Owner()
    held = owned_stream(owner, "cuda").cuda_stream
    assert held not in {side_stream("cuda").cuda_stream for _ in range(2 * POOL_SIZE)}  # skipped while it lives
    del owner
    gc.collect()
    assert held in {side_stream("cuda").cuda_stream for _ in range(POOL_SIZE)}


def test_side_streams_avoid_owned_ones_and_hold_nothing(pool):
    owners = [Owner() for _ in range(3)]
    owned = {owned_stream(owner, "cuda").cuda_stream for owner in owners}
    sides = {side_stream("cuda").cuda_stream for _ in range(3 * POOL_SIZE)}
    assert not sides & owned and len(sides) == POOL_SIZE - len(owned)
    assert set(cuda_streams._held) == {(0, handle) for handle in owned}


def test_priorities_are_separate_pools(pool):
    owners = [Owner() for _ in range(3)]
    low, high = owned_stream(owners[0], "cuda"), owned_stream(owners[1], "cuda", priority=-1)
    assert low.cuda_stream != high.cuda_stream and high.priority == -1
    assert owned_stream(owners[2], "cuda", priority=-1).cuda_stream != high.cuda_stream


def test_a_process_long_owner_keeps_its_stream(pool):
    kept = owned_stream(None, "cuda").cuda_stream
    gc.collect()
    assert all(side_stream("cuda").cuda_stream != kept for _ in range(2 * POOL_SIZE))


def test_a_pool_held_whole_is_shared_and_said(pool, caplog):
    owners = [Owner() for _ in range(POOL_SIZE)]
    streams = {owned_stream(owner, "cuda").cuda_stream for owner in owners}
    assert len(streams) == POOL_SIZE
    with caplog.at_level(logging.WARNING, logger="ditto_core.cuda_streams"):
        extra = owned_stream(owners[0], "cuda")
    assert extra.cuda_stream in streams
    assert "every CUDA stream of PyTorch's pool" in caplog.text


def test_an_owner_collected_while_a_stream_is_handed_out_does_not_deadlock(pool, monkeypatch):
    owner = Owner()
    owner.cycle = owner  # freed only by a collection, which any allocation may set off
    owned_stream(owner, "cuda")
    del owner

    def collecting(device, priority=0):
        gc.collect()  # inside the lock: the owner's finalizer releases its stream on this thread
        return pool(device, priority)

    monkeypatch.setattr(cuda_streams.torch.cuda, "Stream", collecting)
    handed = []
    thread = threading.Thread(target=lambda: handed.append(side_stream("cuda")), daemon=True)
    thread.start()
    thread.join(10)
    assert handed and not cuda_streams._held


@pytest.mark.gpu
def test_owners_made_a_pool_turn_apart_get_different_streams_on_cuda():
    a = Owner()
    first = owned_stream(a, "cuda")
    for _ in range(POOL_SIZE - 1):
        torch.cuda.Stream()
    assert torch.cuda.Stream() == first  # PyTorch's pool, as this module assumes it
    for _ in range(POOL_SIZE - 1):
        torch.cuda.Stream()
    b = Owner()
    assert owned_stream(b, "cuda") != first
