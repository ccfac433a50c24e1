"""Workers as local processes: one per GPU (or N on the CPU), started with ``spawn``.

Each process builds one :class:`~ditto_core.batch.runner.JobRunner` and serves tasks from its
own queue, so the driver always knows which task a process holds. A process that exits
without answering (killed, out of memory, a crash in native code) is reported as ``died`` and
started again, up to ``restarts`` times.
"""
from __future__ import annotations

import multiprocessing as mp
import queue
from typing import Optional

import torch

from .runner import JobRunner, PipelineSettings
from .scheduler import Event, Task


def _serve(settings: PipelineSettings, device: str, worker: str, inbox, outbox) -> None:
    try:
        runner = JobRunner(settings, device)
    except Exception as error:  # reported to the driver, which says why no worker could start
        outbox.put(("ready", worker, {"error": f"{worker} on {device}: {type(error).__name__}: {error}"}))
        return
    outbox.put(("ready", worker, runner.describe()))
    while (item := inbox.get()) is not None:
        method, args = item
        outbox.put(("done", worker, runner.call(method, *args)))


def local_devices(workers: Optional[int]) -> list[str]:
    """Every GPU of the machine once; on a CPU-only machine ``workers`` CPU workers (default 1)."""
    if torch.cuda.is_available():
        count = torch.cuda.device_count()
        return [f"cuda:{i % count}" for i in range(workers or count)]
    return ["cpu"] * (workers or 1)


class LocalPool:
    def __init__(self, settings: PipelineSettings, devices: list[str], restarts: int = 2) -> None:
        self.settings = settings
        self.devices = {f"local-{i}": device for i, device in enumerate(devices)}
        self.restarts = restarts
        self._context = mp.get_context("spawn")  # CUDA cannot be used in a forked child
        self._outbox = self._context.Queue()
        self._processes: dict[str, mp.Process] = {}
        self._inboxes: dict[str, mp.Queue] = {}
        self._restarted: dict[str, int] = {}

    def start(self) -> list[str]:
        for worker in self.devices:
            self._restarted[worker] = 0
            self._launch(worker)
        return list(self.devices)

    def _launch(self, worker: str) -> None:
        inbox = self._context.Queue()
        process = self._context.Process(target=_serve, name=f"ditto-{worker}", daemon=True,
                                        args=(self.settings, self.devices[worker], worker, inbox, self._outbox))
        process.start()
        self._processes[worker], self._inboxes[worker] = process, inbox

    def pid(self, worker: str) -> Optional[int]:
        return self._processes[worker].pid

    def submit(self, worker: str, task: Task) -> None:
        self._inboxes[worker].put((task.method, task.args))

    def wait(self, timeout: float) -> list[Event]:
        events = []
        try:
            events.append(Event(*self._outbox.get(timeout=timeout)))
            while True:
                events.append(Event(*self._outbox.get_nowait()))
        except queue.Empty:
            pass
        for event in events:
            if event.kind == "ready" and "error" in event.payload:  # it could not start: not restarted
                self._processes[event.worker].join()
                self._processes[event.worker] = None
        answered = {e.worker for e in events}
        for worker, process in self._processes.items():
            if process is None or process.is_alive() or worker in answered:
                continue
            why = f"{worker} (pid {process.pid}) exited with code {process.exitcode}"
            process.join()
            self._processes[worker] = None
            if self._restarted[worker] < self.restarts:
                self._restarted[worker] += 1
                self._launch(worker)
                events.append(Event("died", worker, why))
            else:
                events.append(Event("gone", worker, why))
        return events

    def close(self) -> None:
        for worker, process in self._processes.items():
            if process is not None and process.is_alive():
                self._inboxes[worker].put(None)
        for process in self._processes.values():
            if process is not None:
                process.join(timeout=10)
                if process.is_alive():
                    process.kill()
                    process.join()
        for channel in (*self._inboxes.values(), self._outbox):
            channel.close()
