"""A whole batch: parse the jobs, skip the finished ones, run the rest on a pool, report.

Two ways to use the workers:

* ``run_batch``: one job per worker at a time (throughput: many clips).
* ``run_batch(..., shard=True)``: every job in turn across all workers (latency: one long clip).
  One worker samples the clip's motion; the frames are split into one contiguous range per
  worker, each range is rendered and encoded as a segment file, and the segments are joined
  with the speech into the output MP4 without re-encoding. Frame ``i`` of the result is frame
  ``i`` of the motion whatever the split, and the audio is muxed once over the whole clip.
"""
from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ..atomic_files import atomic_write_bytes, reap_stale_temporaries
from ..errors import InputError
from .jobs import Job, JobLineError, finished, parse_jobs, remove_partial_files, write_sidecar
from .runner import PipelineSettings, clip_audio
from .scheduler import Outcome, Scheduler, Task

REPORT_FORMAT = "ditto-batch-report"


@dataclass
class JobRecord:
    """One line of the report."""

    line: int
    output: Optional[str]
    status: str  # "done", "skipped" (finished by an earlier run) or "failed"
    seconds: float = 0.0  # wall time of the job as the driver saw it
    frames: int = 0
    fps: float = 0.0  # frames / seconds
    error: str = ""
    attempts: int = 0  # workers it was handed to (more than one: a worker died under it)
    workers: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)  # stage times, pid, device of the worker


def segment_ranges(frames: int, parts: int) -> list[tuple[int, int]]:
    """[0, frames) cut into ``parts`` contiguous ranges differing by at most one frame (none empty)."""
    parts = max(1, min(parts, frames))
    size, extra = divmod(frames, parts)
    bounds = [0]
    for index in range(parts):
        bounds.append(bounds[-1] + size + (index < extra))
    return list(zip(bounds[:-1], bounds[1:]))


def run_batch(jobs_file: Path, out_dir: Path, scheduler: Scheduler, *, shard: bool = False,
              report_path: Optional[Path] = None) -> dict[str, Any]:
    """Run every unfinished job of ``jobs_file`` into ``out_dir`` on the workers of ``scheduler``
    (started on first need, left running); returns (and writes) the report."""
    settings: PipelineSettings = scheduler.pool.settings
    began = time.perf_counter()
    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise InputError(f"batch: cannot create the output folder {out_dir} ({error})") from None
    reap_stale_temporaries(out_dir)  # what workers of a killed earlier run left behind
    records: dict[int, JobRecord] = {}
    todo: list[Job] = []
    for item in parse_jobs(jobs_file, out_dir, settings.identity()):
        if isinstance(item, JobLineError):
            records[item.line] = JobRecord(item.line, item.output, "failed", error=item.message)
        elif (record := finished(item)) is not None:
            records[item.line] = JobRecord(item.line, item.name, "skipped", frames=record.get("frames", 0))
        else:
            remove_partial_files(item.output)  # left by a run that was killed
            todo.append(item)
    if todo:
        scheduler.on_lost_worker = clean_after_lost_worker
        scheduler.wait_ready()
        if shard:
            for job in todo:
                records[job.line] = _run_sharded(job, scheduler, out_dir)
        else:
            tasks = [Task(job.name, "run_job", (job,)) for job in todo]
            for job, outcome in zip(todo, scheduler.run(tasks)):
                records[job.line] = _job_record(job, outcome)
    report = _report(jobs_file, out_dir, settings, scheduler.info, [records[k] for k in sorted(records)],
                     time.perf_counter() - began)
    target = Path(report_path) if report_path is not None else out_dir / "batch_report.json"
    atomic_write_bytes(target, json.dumps(report, indent=1).encode())
    return report


def clean_after_lost_worker(task: Task) -> None:
    """A worker died holding ``task``: remove the temporary files it left for its output."""
    job = task.args[0]
    if task.method == "render_range":
        Path(task.args[4]).unlink(missing_ok=True)
    remove_partial_files(job.output)


def _job_record(job: Job, outcome: Outcome) -> JobRecord:
    record = JobRecord(job.line, job.name, "done" if outcome.status == "ok" else "failed", seconds=outcome.seconds,
                       attempts=outcome.task.attempts, workers=list(outcome.task.tried_on))
    if outcome.status == "ok":
        record.frames = outcome.value["frames"]
        record.fps = record.frames / outcome.seconds if outcome.seconds > 0 else 0.0
        record.details = {k: v for k, v in outcome.value.items() if k != "frames"}
    else:
        record.error = f"line {job.line} ({job.name}): {outcome.value}"
    return record


def _run_sharded(job: Job, scheduler: Scheduler, out_dir: Path) -> JobRecord:
    began = time.perf_counter()
    planned = scheduler.run([Task(f"{job.name} motion", "plan_clip", (job,))])[0]
    if planned.status != "ok":
        return _job_record(job, planned)
    folder = out_dir / f".segments-{job.output.stem}-{job.job_hash[:12]}"
    try:
        outcomes = _render_and_join(job, planned.value, scheduler, folder)
        failed = next((o for o in outcomes if o.status != "ok"), None)
        if failed is None:
            frames = len(planned.value)
            seconds = time.perf_counter() - began
            segments = [{"frames": list(o.task.args[2:4]), "seconds": o.seconds, "worker": o.worker,
                         "attempts": o.task.attempts} for o in outcomes]
            details = {"motion_seconds": planned.seconds, "segments": segments}
            write_sidecar(job, {"frames": frames, "seconds": seconds, "sharded": details})
    except Exception as error:  # noqa: BLE001 - the driver's share of one job fails that job, not the batch
        remove_partial_files(job.output)
        return JobRecord(job.line, job.name, "failed", seconds=time.perf_counter() - began,
                         error=f"line {job.line} ({job.name}): {type(error).__name__}: {error}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if failed is not None:
        return _job_record(job, failed)
    return JobRecord(job.line, job.name, "done", seconds=seconds, frames=frames, fps=frames / seconds,
                     attempts=max(o.task.attempts for o in outcomes),
                     workers=sorted({w for o in outcomes for w in o.task.tried_on}), details=details)


def _render_and_join(job: Job, plan, scheduler: Scheduler, folder: Path) -> list[Outcome]:
    """Render ``plan`` in one frame range per worker into ``folder`` and, when every range
    succeeded, join the segments into the job's MP4; the outcomes of the ranges."""
    from ..video.joiner import join_segments

    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    ranges = segment_ranges(len(plan), len(scheduler.usable))
    tasks = [Task(f"{job.name} frames {a}-{b}", "render_range", (job, plan, a, b, folder / f"part-{i:04d}.mp4"))
             for i, (a, b) in enumerate(ranges)]
    outcomes = scheduler.run(tasks)
    if all(o.status == "ok" for o in outcomes):
        join_segments([t.args[4] for t in tasks], job.output, audio=clip_audio(job))
    return outcomes


def _report(jobs_file: Path, out_dir: Path, settings: PipelineSettings, workers: dict, records: list[JobRecord],
            seconds: float) -> dict[str, Any]:
    done = [r for r in records if r.status == "done"]
    return {
        "format": REPORT_FORMAT,
        "jobs_file": str(jobs_file),
        "out": str(out_dir),
        "settings": {k: str(v) for k, v in vars(settings).items()},
        "workers": workers,
        "summary": {
            "jobs": len(records),
            "done": len(done),
            "skipped": sum(r.status == "skipped" for r in records),
            "failed": sum(r.status == "failed" for r in records),
            "seconds": seconds,
            "frames": sum(r.frames for r in done),
            "jobs_per_hour": 3600 * len(done) / seconds if done and seconds > 0 else 0.0,
        },
        "jobs": [vars(r) for r in records],
    }

