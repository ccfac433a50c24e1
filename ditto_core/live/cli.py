"""``python -m ditto_core serve``: its flags, read without importing PyTorch (the server itself,
:mod:`.server`, loads when the command runs)."""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from ..cli_types import int_in, seconds_or_zero
from ..precision import NETWORK_PRECISIONS
from .admission import MAX_LOAD, MAX_STREAM_STEPS, MAX_STREAMS, SILENT_TIMEOUT_S


def device_share(text: str) -> float:
    """``--max-load``: a share of the device's time in (0, 1], or 0 for no limit."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a share of the device's time between 0 and 1 (0: no limit), got {text!r}")
    return value


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("serve", help="live avatar server (WebSocket; browser page at /ditto/live)")
    p.add_argument("--avatar", action="append", default=[], metavar="ID=IMAGE",
                   help="register a portrait (or a short video) under ID; repeatable")
    p.add_argument("--models", type=Path, default=Path("models/ditto"), help="folder with the official Ditto files")
    p.add_argument("--random-weights", action="store_true",
                   help="random networks, no face detector, stand-in HuBERT (protocol tests; the video is noise)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: this machine only)")
    p.add_argument("--port", type=int, default=8765, help="port to listen on (default: 8765)")
    p.add_argument("--token", default=os.environ.get("DITTO_LIVE_TOKEN") or None,
                   help="secret clients must send (?token=...); required off loopback (default: $DITTO_LIVE_TOKEN, "
                        "which other users cannot read in the process list as they can a flag)")
    p.add_argument("--max-streams", type=int_in(1), default=MAX_STREAMS,
                   help=f"live streams admitted at once (default {MAX_STREAMS}; bench_live.py measures what a device "
                        "sustains)")
    p.add_argument("--max-load", type=device_share, default=MAX_LOAD, metavar="SHARE",
                   help="refuse a stream when the open ones and it would need more than this share of the device's "
                        f"time, at the cost per frame measured as they run (default {MAX_LOAD}; 0: no limit)")
    p.add_argument("--silent-timeout", type=seconds_or_zero, default=SILENT_TIMEOUT_S, metavar="SECONDS",
                   help="close a stream that is sent no speech for this long, freeing its place (default "
                        f"{SILENT_TIMEOUT_S:g}; 0: never)")
    p.add_argument("--steps", type=int_in(1, MAX_STREAM_STEPS), nargs="+", default=None, metavar="N",
                   help="DDIM steps the streams may use, each warmed up before serving (default: the motion "
                        "default, 25; e.g. --steps 25 10: 10 for lower latency); a stream asking for others is refused")
    p.add_argument("--device", default=None, help="cuda, cuda:1, cpu (default: cuda when available)")
    p.add_argument("--precision", choices=NETWORK_PRECISIONS, default="fp16",
                   help="image networks' precision (fp16: the fast path)")
    p.add_argument("--no-compile", action="store_true", help="run warp+decode eagerly")
    p.add_argument("--cache-dir", type=Path, default=None, help="avatar cache folder (default: next to --models)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from .server import run as serve

    return serve(args)
