"""Priming: one run ahead on a thread of its own, waited for before the real call, never raising."""
from __future__ import annotations

import logging
import threading

import torch

from ditto_core import priming
from ditto_core.priming import Priming


def test_priming_runs_once_on_its_own_thread_and_wait_blocks_until_it_ends():
    gate, ran = threading.Event(), []

    def work():
        ran.append(threading.current_thread().name)
        assert torch.is_inference_mode_enabled()
        gate.wait(10)

    prime = Priming("toy")
    assert not prime.started
    assert prime.wait() == 0.0  # nothing started: returns at once
    prime.start(work, torch.device("cpu"))
    prime.start(work, torch.device("cpu"))  # once per object
    assert prime.started and prime._thread.is_alive()
    waited = []
    waiter = threading.Thread(target=lambda: waited.append(prime.wait()))
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive()  # still waiting for the gated run
    gate.set()
    waiter.join(10)
    assert not waiter.is_alive() and ran == ["ditto-prime-toy"]
    assert waited[0] >= 0.2 > prime.wait()  # the seconds each call was held: the run is over now


def test_a_failed_priming_is_logged_not_raised(caplog):
    prime = Priming("toy")
    with caplog.at_level(logging.INFO, logger=priming.__name__):
        prime.start(lambda: (_ for _ in ()).throw(RuntimeError("boom")), torch.device("cpu"))
        prime.wait()
    assert "Ditto toy: priming failed (RuntimeError: boom)" in caplog.text
