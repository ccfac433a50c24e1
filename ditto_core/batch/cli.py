"""``python -m ditto_core batch jobs.jsonl --out DIR``: many talking heads on every GPU.

Without ``--ray`` the workers are processes of this machine (one per GPU); with
``--ray auto|ADDRESS`` they are actors of a Ray cluster (one per GPU of the cluster).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ..atomic_files import cannot_write_under
from ..cli_types import int_in
from ..errors import InputError
from ..motion.option_values import MAX_SEED
from ..precision import NETWORK_PRECISIONS

EPILOG = """\
jobs.jsonl holds one JSON object a line, e.g.
  {"source": "portrait.jpg", "audio": "speech.wav", "output": "talk.mp4", "options": {"seed": 1, "crf": 20}}
options: MotionOptions / RegistrationOptions fields by name, crf, preset, max_seconds, max_frames.
Finished jobs (output + matching <output>.json) are skipped on a rerun. See docs/BATCH.md."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("batch", help="many jobs (jobs.jsonl) on every GPU, locally or on a Ray cluster",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("jobs", type=Path, help="jobs file: one JSON job a line")
    p.add_argument("--out", required=True, type=Path, help="output folder (MP4s, their .json records, the report)")
    p.add_argument("--models", type=Path, default=Path("models/ditto"),
                   help="folder with the official Ditto files (default: models/ditto)")
    p.add_argument("--random-weights", action="store_true",
                   help="smoke mode: random networks, no face detector (see `render --help`)")
    p.add_argument("--seed", type=int_in(0, MAX_SEED), default=0, help="seed of the random weights")
    p.add_argument("--precision", choices=NETWORK_PRECISIONS, default="fp32",
                   help="image networks' precision: fp32, or fp16 / bf16 on a GPU (the fast path)")
    p.add_argument("--batch-size", type=int_in(0), default=0, help="frames per warp+decode batch (0: from free VRAM)")
    p.add_argument("--no-compile", action="store_true", help="run warp+decode eagerly (no torch.compile)")
    p.add_argument("--cache-dir", type=Path, default=None,
                   help="avatar cache shared by the workers (default: <models>/cache, with --random-weights "
                        "<out>/.avatar_cache); on a multi-host cluster a folder every host mounts")
    p.add_argument("--ray", metavar="ADDRESS", default=None,
                   help="run on a Ray cluster: auto (the cluster this machine belongs to) or its address "
                        "(needs `pip install ray`)")
    p.add_argument("--workers", type=int_in(1), default=None,
                   help="number of workers (default: one per GPU; on a machine or cluster without GPUs, 1)")
    p.add_argument("--attempts", type=int_in(1), default=3,
                   help="workers a job may be handed to when its worker dies under it (default 3)")
    p.add_argument("--shard", action="store_true",
                   help="render each job across all workers in turn (one long clip: frame ranges in parallel)")
    p.add_argument("--report", type=Path, default=None, help="JSON report (default: <out>/batch_report.json)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def settings_from_args(args: argparse.Namespace):
    from .runner import PipelineSettings

    cache = args.cache_dir or (args.out / ".avatar_cache" if args.random_weights else args.models / "cache")
    return PipelineSettings(cache_dir=cache.resolve(), models=None if args.random_weights else args.models.resolve(),
                            random_weights=args.random_weights, seed=args.seed, precision=args.precision,
                            batch_size=args.batch_size, compile=not args.no_compile)


def make_pool(args: argparse.Namespace, settings):
    if args.ray is not None:
        from .ray_pool import RayPool

        return RayPool(settings, address=args.ray, workers=args.workers)
    from .local_pool import LocalPool, local_devices

    return LocalPool(settings, local_devices(args.workers))


def run(args: argparse.Namespace) -> int:
    from .driver import run_batch
    from .scheduler import Scheduler

    check_places(args)
    pool = make_pool(args, settings_from_args(args))
    bar = None if args.no_progress else ProgressBar()
    try:
        report = run_batch(args.jobs, args.out, Scheduler(pool, args.attempts, on_event=bar), shard=args.shard,
                           report_path=args.report)
    finally:
        pool.close()
        if bar is not None:
            bar.finish()
    summary = report["summary"]
    for job in report["jobs"]:
        if job["status"] == "failed":
            print(f"failed: {job['error']}", file=sys.stderr)
    print(f"{summary['done']} done, {summary['skipped']} skipped, {summary['failed']} failed in "
          f"{summary['seconds']:.1f} s; report: {args.report or args.out / 'batch_report.json'}")
    return 1 if summary["failed"] else 0


def check_places(args: argparse.Namespace) -> None:
    """Refuse, before any worker starts, an output folder or report path that cannot be written
    and fp16/bf16 on a machine whose workers would run on the CPU."""
    if args.out.exists() and not args.out.is_dir():
        raise InputError(f"--out: {args.out} is a file; give a folder for the MP4s and their records")
    _check_can_write("--out", args.out)
    if args.report is not None:
        if args.report.is_dir():
            raise InputError(f"--report: {args.report} is a folder; give the path of a .json file")
        try:
            args.report.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise InputError(f"--report: cannot create the folder {args.report.parent} ({error})") from None
        _check_can_write("--report", args.report.parent)
    if args.precision != "fp32" and args.ray is None:
        import torch

        if not torch.cuda.is_available():
            raise InputError(f"--precision {args.precision} is a GPU fast path and this machine's workers run on the "
                             "CPU (PyTorch sees no CUDA GPU); use --precision fp32")


def _check_can_write(flag: str, folder: Path) -> None:
    """Refuse ``flag`` now, not after the renders, when nothing can be written in ``folder``."""
    problem = cannot_write_under(folder)
    if problem is not None:
        raise InputError(f"{flag}: {problem}")


class ProgressBar:
    """One terminal line: finished tasks, failures, workers ready, time (an event hook of the scheduler)."""

    def __init__(self, stream=sys.stderr) -> None:
        self.stream = stream
        self.started = time.perf_counter()
        self.total = self.done = self.failed = self.ready = 0

    def __call__(self, kind: str, info: dict) -> None:
        if kind == "ready":
            self.ready += 1
        elif kind == "queued":
            self.total += info["tasks"]
        elif kind == "outcome":
            self.done += 1
            self.failed += info["outcome"].status != "ok"
        self._draw()

    def _draw(self) -> None:
        width = 30
        filled = width * self.done // max(self.total, 1)
        elapsed = time.perf_counter() - self.started
        self.stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} tasks "
                          f"({self.failed} failed), {self.ready} workers, {elapsed:.0f} s")
        self.stream.flush()

    def finish(self) -> None:
        self.stream.write("\n")
