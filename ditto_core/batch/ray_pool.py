"""Workers as Ray actors: one long-lived pipeline actor per GPU of the cluster.

Ray places the actors (one GPU each), runs their tasks and restarts an actor whose process
died (``max_restarts``); the driver never lets Ray retry a task itself (``max_task_retries=0``)
but hands it to another actor (:mod:`~ditto_core.batch.scheduler`). Ray is optional: it is
imported here only, and a missing install says how to get it.

The actors read the job files and write the outputs themselves: on a cluster of several
hosts, the jobs' inputs, the output folder and the avatar cache must be on storage every host
mounts at the same path (see docs/BATCH.md).
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Optional

from ..errors import DittoError
from .runner import JobRunner, PipelineSettings, pick_device
from .scheduler import Event, Task

_REPROBE_SECONDS = 1.0  # how often to ask a restarting actor whether it is back
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # the folder holding ditto_core/


def import_ray():
    try:
        import ray
    except ImportError:
        raise DittoError("--ray needs Ray, which is not installed: pip install ray "
                         "(or run without --ray to use this machine's GPUs)") from None
    return ray


class PipelineActor:
    """The body of a Ray actor: builds its runner once; a failed build is reported, not raised,
    so the driver can say why (a raise in an actor's constructor only shows as a dead actor)."""

    def __init__(self, settings: PipelineSettings) -> None:
        try:
            self.runner: Optional[JobRunner] = JobRunner(settings, pick_device(0))  # Ray sets the visible GPU
            self.error = ""
        except Exception as error:
            self.runner, self.error = None, f"{type(error).__name__}: {error}"

    def ready(self) -> dict[str, Any]:
        return self.runner.describe() if self.runner is not None else {"error": self.error}

    def call(self, method: str, *args) -> tuple[str, Any]:
        return self.runner.call(method, *args)


class RayPool:
    """``workers`` actors (default: one per GPU of the cluster, or one on a CPU-only cluster)."""

    def __init__(self, settings: PipelineSettings, address: Optional[str] = None, workers: Optional[int] = None,
                 restarts: int = 2) -> None:
        self.ray = import_ray()
        self.settings = settings
        self.address = address
        self.workers = workers
        self.restarts = restarts
        self._actors: dict[str, Any] = {}
        self._pending: dict[Any, tuple[str, str]] = {}  # object ref -> (event kind, worker)
        self._reprobe: list[tuple[float, str]] = []  # (when, worker): restarting actors to ask again

    def start(self) -> list[str]:
        ray = self.ray
        if not ray.is_initialized():
            try:
                ray.init(address=self.address)
            except ConnectionError as error:
                raise DittoError(f"--ray {self.address}: no Ray cluster answered ({_first_line(error)}); start one "
                                 "with `ray start --head` (on every GPU host) or pass the head's address") from error
        gpus = int(ray.cluster_resources().get("GPU", 0))
        count = self.workers or max(gpus, 1)
        # The actors import ditto_core from this checkout (the same path on every host).
        actor_class = ray.remote(PipelineActor).options(
            num_gpus=1 if gpus else 0, num_cpus=1, max_restarts=self.restarts, max_task_retries=0,
            runtime_env={"env_vars": {"PYTHONPATH": _PACKAGE_ROOT}})
        for index in range(count):
            worker = f"actor-{index}"
            self._actors[worker] = actor_class.remote(self.settings)
            self._probe(worker)
        return list(self._actors)

    def submit(self, worker: str, task: Task) -> None:
        self._pending[self._actors[worker].call.remote(task.method, *task.args)] = ("done", worker)

    def wait(self, timeout: float) -> list[Event]:
        ray = self.ray
        now = time.monotonic()
        for when, worker in [r for r in self._reprobe if r[0] <= now]:
            self._reprobe.remove((when, worker))
            self._probe(worker)
        if not self._pending:
            time.sleep(timeout)
            return []
        ready, _ = ray.wait(list(self._pending), num_returns=1, timeout=timeout)
        if ready:  # and whatever else has finished meanwhile
            ready, _ = ray.wait(list(self._pending), num_returns=len(self._pending), timeout=0)
        events = []
        for ref in ready:
            kind, worker = self._pending.pop(ref)
            try:
                events.append(Event(kind, worker, ray.get(ref)))
            except ray.exceptions.RayActorError as error:
                if kind != "ready":  # the process died under the task; Ray restarts it
                    events.append(Event("died", worker, f"{worker}: {_first_line(error)}"))
                    self._probe(worker)
                elif isinstance(error, ray.exceptions.ActorUnavailableError):  # still restarting
                    self._reprobe.append((time.monotonic() + _REPROBE_SECONDS, worker))
                else:  # dead for good: restarts used up, or its node is gone
                    events.append(Event("gone", worker, f"{worker}: {_first_line(error)}"))
        return events

    def _probe(self, worker: str) -> None:
        """Ask ``worker`` whether it is up; the answer comes back as a ``ready`` event."""
        self._pending[self._actors[worker].ready.remote()] = ("ready", worker)

    def close(self) -> None:
        for actor in self._actors.values():
            self.ray.kill(actor, no_restart=True)
        self._actors.clear()
        self._pending.clear()
        self._reprobe.clear()


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
