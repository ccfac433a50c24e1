"""``python -m ditto_core worker`` and the render command's hand-off flags (no PyTorch here)."""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from ..cli_logging import log_to_stderr
from ..errors import DittoError
from ..signals import exit_status
from ..render_request import RenderRequest, RenderSettings
from . import client, protocol

DEFAULT_IDLE_MINUTES = 30.0
_SOCKET_DEFAULT = "$DITTO_WORKER_SOCKET, else worker.sock in $XDG_RUNTIME_DIR/comfyui-ditto or the user cache"

WORKER_HELP = ("warm worker for render: loads the models once and renders the clips `render` hands it, each "
               "without a new process's start-up (torch import, model load, engine warm-up)")


def add_hand_off_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--worker", choices=("auto", "off", "start"), default="auto",
                   help="auto: hand the clip to a warm worker (`python -m ditto_core worker`) when one with the same "
                        "models, device, precision and batch size is running, else render here; off: always render "
                        f"here; start: start such a worker first if none runs (it exits after "
                        f"{DEFAULT_IDLE_MINUTES:g} idle minutes) (default: auto)")
    p.add_argument("--socket", type=Path, default=None,
                   help=f"the warm worker's socket (default: {_SOCKET_DEFAULT})")


def _socket(args: argparse.Namespace) -> Path:
    return args.socket or protocol.default_socket()


def hand_off(args: argparse.Namespace, settings: RenderSettings, request: RenderRequest,
             progress: Any) -> Optional[dict[str, Any]]:
    """The worker's ``done`` message for ``request``, or None when this process is to render it."""
    try:
        path = _socket(args)
        if args.worker == "auto" and path.parent.is_dir():  # a worker can only be there if it is private
            protocol.private_folder(path, create=False, source=protocol.socket_source(args.socket))
    except DittoError as error:  # no private folder for the socket: no worker of ours can be there
        if args.worker == "start":
            raise
        progress.status(f"no warm worker ({error}); rendering here")
        return None
    if args.worker == "start" and client.ask(path, {"type": "info"}) is None:
        client.start_worker(path, settings, DEFAULT_IDLE_MINUTES, status=progress.status)
    return client.hand_off(path, settings, request, progress.status, progress)


def add_parser(sub: argparse._SubParsersAction, add_pipeline_flags: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser("worker", help=WORKER_HELP, description=WORKER_HELP + ". It listens on a Unix socket only "
                       "this user can reach, renders one clip at a time (others queue) and exits after --idle-minutes "
                       "without a job, on --stop, Ctrl-C or SIGTERM.")
    add_pipeline_flags(p)
    p.add_argument("--seed", type=int, default=0, help="with --random-weights: the random networks' seed (default: 0)")
    p.add_argument("--socket", type=Path, default=None,
                   help=f"where to listen (default: {_SOCKET_DEFAULT})")
    p.add_argument("--idle-minutes", type=_minutes, default=DEFAULT_IDLE_MINUTES,
                   help=f"exit after this long without a job, freeing the GPU; 0: never (default: {DEFAULT_IDLE_MINUTES:g})")
    p.add_argument("--status", action="store_true", help="print the running worker's state as JSON and exit")
    p.add_argument("--stop", action="store_true", help="ask the running worker to exit once its job is done")
    p.set_defaults(run=run, hand_off=_question)


def _minutes(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of minutes") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"{text} must be 0 (never) or a positive number of minutes")
    return value


def _question(args: argparse.Namespace) -> Optional[int]:
    """``--status`` / ``--stop``: answered without loading anything; None for the worker itself."""
    if not (args.status or args.stop):
        return None
    path = _socket(args)
    answer = client.ask(path, {"type": "stop" if args.stop else "info"})
    if answer is None:
        print(f"no worker is running at {path}", file=sys.stderr)
        return 1
    print(json.dumps(answer, indent=2))
    return 0


def run(args: argparse.Namespace) -> int:
    from .server import Worker, listening, work_folder

    log_to_stderr()
    settings = RenderSettings.from_args(args)
    path = _socket(args)
    # The socket is taken before the models load: a second worker for it stops at once, and a
    # render arriving meanwhile waits for this one rather than loading the models itself.
    with listening(path, protocol.socket_source(args.socket)) as listener, _scratch(work_folder(path)) as workdir:
        # A worker serves many clips: the engine compiles once, in the background from the start
        # (under cudaMallocAsync after the first clip, in a pause between clips: see warp_decode's
        # "background" and "deferred"), and clips render eagerly until its graph is ready (the
        # render command's own process compiles only for long clips).
        pipeline = settings.build_pipeline(workdir, warmup="background")
        pipeline.start_warmup()
        print(f"worker {path} ready (pid {os.getpid()}); models {settings.models or 'random'}, "
              f"{settings.precision} on {pipeline.device}", flush=True)
        try:
            Worker(settings, pipeline, listener, idle_s=args.idle_minutes * 60 or None).serve()
        except KeyboardInterrupt as stop:  # Ctrl-C or SIGTERM: the job in progress was cancelled and cleaned up
            print(f"worker stopped ({str(stop) or 'Ctrl-C'})", flush=True)
            return exit_status(stop)
    print("worker stopped", flush=True)
    return 0


@contextmanager
def _scratch(folder: Path) -> Iterator[Path]:
    """``folder`` emptied and made for this worker (the socket's lock is held), removed after."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(mode=0o700)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
