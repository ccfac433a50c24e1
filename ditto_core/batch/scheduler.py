"""The driver's loop: tasks handed one at a time to idle workers, retried when a worker dies.

Both backends (local processes, Ray actors) are a :class:`WorkerPool`: they start workers,
accept one task per worker, and report what happened as :class:`Event` s. A worker holds at
most one task, so a worker that dies costs only the task it held: that task goes back to the
front of the queue for another worker (the dead one is restarted by its pool and may take
other work later). A task that fails with an error (bad input, a bug) is not retried: it
would fail again.
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Protocol

from ..errors import DittoError


@dataclass
class Task:
    """A method of :class:`~ditto_core.batch.runner.JobRunner` to call with ``args`` on a worker."""

    label: str  # for messages and the report (a job's output name, a clip's frame range)
    method: str
    args: tuple
    tried_on: list[str] = field(default_factory=list)  # workers it was handed to, in order

    @property
    def attempts(self) -> int:
        return len(self.tried_on)


@dataclass
class Outcome:
    task: Task
    status: str  # "ok", "error" (the worker reported a failure) or "lost" (its workers kept dying)
    value: Any  # the method's result, or the error message
    seconds: float  # dispatch to result, as the driver saw it (includes scheduling and transfers)
    worker: str


@dataclass(frozen=True)
class Event:
    """What a pool reports: ``ready`` (payload: the worker's description, or ``{"error": msg}``
    when it could not start), ``done`` (payload: ``("ok", result)`` or ``("error", message)``),
    ``died`` (payload: why; the pool restarts the worker and reports ``ready`` again) or
    ``gone`` (the worker is dead for good)."""

    kind: str
    worker: str
    payload: Any = None


class WorkerPool(Protocol):
    settings: Any  # the PipelineSettings every worker builds

    def start(self) -> list[str]:
        """Begin starting the workers; returns their ids."""

    def submit(self, worker: str, task: Task) -> None:
        """Hand ``task`` to the idle ``worker``."""

    def wait(self, timeout: float) -> list[Event]:
        """Events that happened, waiting up to ``timeout`` seconds for the first."""

    def close(self) -> None:
        """Stop every worker."""


EventHook = Callable[[str, dict], None]
"""``hook(kind, info)``: ``"ready"`` (worker, description), ``"queued"`` (tasks: how many),
``"dispatch"`` (task, worker, info: the worker's description),
``"outcome"`` (outcome). The progress bar and the tests listen here."""


class Scheduler:
    """Runs lists of tasks on the workers of one pool, keeping the workers warm between lists
    (the caller closes the pool)."""

    def __init__(self, pool: WorkerPool, max_attempts: int = 3, on_event: Optional[EventHook] = None) -> None:
        self.pool = pool
        self.max_attempts = max_attempts
        self.on_event = on_event or (lambda kind, info: None)
        self.on_lost_worker: Callable[[Task], None] = lambda task: None  # cleans what a dead worker left
        self.workers: list[str] = []  # started on first use: a batch of finished jobs starts none
        self.info: dict[str, dict] = {}  # ready workers' descriptions
        self._idle: list[str] = []
        self._starting: set[str] = set()
        self._gone: dict[str, str] = {}  # worker -> why it cannot work

    @property
    def usable(self) -> list[str]:
        return [w for w in self.workers if w not in self._gone]

    def wait_ready(self) -> dict[str, dict]:
        """Start the workers if need be and wait until each has started (or failed to); raise if none could."""
        if not self.workers:
            self.workers = self.pool.start()
            self._starting = set(self.workers)
        while self._starting:
            for event in self.pool.wait(1.0):
                self._handle(event, {}, deque())
        self._check_any_usable()
        return self.info

    def run(self, tasks: list[Task]) -> list[Outcome]:
        """Every task's outcome, in the order of ``tasks``."""
        self.wait_ready()
        self.on_event("queued", {"tasks": len(tasks)})
        pending = deque(tasks)
        busy: dict[str, tuple[Task, float]] = {}
        outcomes: dict[int, Outcome] = {}
        while pending or busy:
            self._dispatch(pending, busy)
            if not busy and pending:
                if not self.usable:
                    why = "; ".join(sorted(set(self._gone.values())))
                    for task in pending:
                        outcomes[id(task)] = Outcome(task, "lost", f"no worker left to run it ({why})", 0.0, "")
                    break
                if not self._starting and not self._idle:
                    raise DittoError("batch: internal scheduling error, workers neither idle nor busy")
            for event in self.pool.wait(0.5):
                done = self._handle(event, busy, pending)
                if done is not None:
                    outcomes[id(done.task)] = done
                    self.on_event("outcome", {"outcome": done})
        return [outcomes[id(task)] for task in tasks]

    def _dispatch(self, pending: deque, busy: dict) -> None:
        for worker in list(self._idle):
            task = self._next_for(worker, pending)
            if task is None:
                continue
            pending.remove(task)
            self._idle.remove(worker)
            task.tried_on.append(worker)
            busy[worker] = (task, time.perf_counter())
            self.on_event("dispatch", {"task": task, "worker": worker, "info": self.info.get(worker, {})})
            self.pool.submit(worker, task)

    def _next_for(self, worker: str, pending: deque) -> Optional[Task]:
        """The first pending task not yet tried on ``worker``, or on a worker that is the only choice."""
        for task in pending:
            if worker not in task.tried_on or set(self.usable) <= set(task.tried_on):
                return task
        return None

    def _handle(self, event: Event, busy: dict, pending: deque) -> Optional[Outcome]:
        worker = event.worker
        if event.kind == "ready":
            self._starting.discard(worker)
            if "error" in event.payload:
                self._gone[worker] = event.payload["error"]
                return self._requeue(worker, busy, pending, event.payload["error"])
            self.info[worker] = event.payload
            self._idle.append(worker)
            self.on_event("ready", {"worker": worker, "info": event.payload})
            return None
        if event.kind == "done":
            task, began = busy.pop(worker)
            self._idle.append(worker)
            status, value = event.payload
            return Outcome(task, status, value, time.perf_counter() - began, worker)
        if event.kind == "died":
            self._starting.add(worker)  # the pool restarts it
        elif event.kind == "gone":
            self._starting.discard(worker)
            self._gone[worker] = str(event.payload)
        if worker in self._idle:
            self._idle.remove(worker)
        return self._requeue(worker, busy, pending, str(event.payload))

    def _requeue(self, worker: str, busy: dict, pending: deque, why: str) -> Optional[Outcome]:
        """The task a dead worker held goes back to the front of the queue (or is lost after its last attempt)."""
        if worker not in busy:
            return None
        task, began = busy.pop(worker)
        self.on_lost_worker(task)
        if task.attempts >= self.max_attempts:
            message = f"its worker died {task.attempts} times (last: {why}); giving up on it"
            return Outcome(task, "lost", message, time.perf_counter() - began, worker)
        pending.appendleft(task)
        return None

    def _check_any_usable(self) -> None:
        if not self.usable:
            reasons = "\n  ".join(sorted(set(self._gone.values())))
            raise DittoError(f"batch: no worker could start:\n  {reasons}")
