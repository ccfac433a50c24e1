"""``python -m ditto_core serve``: its flags, read without importing PyTorch (the server itself,
:mod:`.server`, loads when the command runs)."""
from __future__ import annotations

import argparse
from pathlib import Path

from ..precision import NETWORK_PRECISIONS


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("serve", help="live avatar server (WebSocket; browser page at /ditto/live)")
    p.add_argument("--avatar", action="append", default=[], metavar="ID=IMAGE",
                   help="register a portrait (or a short video) under ID; repeatable")
    p.add_argument("--models", type=Path, default=Path("models/ditto"), help="folder with the official Ditto files")
    p.add_argument("--random-weights", action="store_true",
                   help="random networks, no face detector, stand-in HuBERT (protocol tests; the video is noise)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: this machine only)")
    p.add_argument("--port", type=int, default=8765, help="port to listen on (default: 8765)")
    p.add_argument("--token", default=None, help="secret clients must send (?token=...); required off loopback")
    p.add_argument("--max-streams", type=int, default=4, help="live streams admitted at once (bench_live.py "
                                                              "measures what a device sustains)")
    p.add_argument("--device", default=None, help="cuda, cuda:1, cpu (default: cuda when available)")
    p.add_argument("--precision", choices=NETWORK_PRECISIONS, default="fp16",
                   help="image networks' precision (fp16: the fast path)")
    p.add_argument("--no-compile", action="store_true", help="run warp+decode eagerly")
    p.add_argument("--cache-dir", type=Path, default=None, help="avatar cache folder (default: next to --models)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from .server import run as serve

    return serve(args)
