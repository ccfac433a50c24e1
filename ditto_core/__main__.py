"""Command line: ``python -m ditto_core {render,convert-weights,batch} ...``.

Headless use without ComfyUI: the same library calls the nodes make.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional, Sequence

from .batch import cli as batch_cli
from .errors import DittoError


def _add_render(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("render", help="portrait + speech -> talking-head MP4")
    p.add_argument("--image", required=True, type=Path, help="portrait image (or a short video) with one visible face")
    p.add_argument("--audio", required=True, type=Path, help="speech track (wav, mp3, flac, m4a, ...)")
    p.add_argument("--out", required=True, type=Path, help="output .mp4 path (written atomically)")
    p.add_argument("--models", type=Path, default=Path("models/ditto"),
                   help="folder with the official Ditto files (default: models/ditto)")
    p.add_argument("--random-weights", action="store_true",
                   help="smoke mode: random networks, no face detector, stand-in audio encoder; the output is "
                        "noise but every stage of the pipeline runs")
    p.add_argument("--device", default=None, help="cuda, cuda:1, cpu (default: cuda when available)")
    p.add_argument("--precision", choices=("fp32", "fp16", "bf16"), default="fp32")
    p.add_argument("--steps", type=int, default=25, help="DDIM steps of the motion diffusion (reference: 50)")
    p.add_argument("--lmdm-precision", choices=("fp32", "tf32", "bf16"), default="fp32",
                   help="motion diffusion arithmetic: fp32 reproduces Ditto; tf32 / bf16 are faster (README)")
    p.add_argument("--lmdm-compile", action="store_true", help="torch.compile the motion diffusion steps")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--emo", type=int, default=4, help="emotion 0-7 (4: neutral)")
    p.add_argument("--blinks", type=int, default=0,
                   help="procedural blinks (need ditto_cfg/v0.4_hubert_cfg_pytorch.pkl under --models): -1 off, "
                        "0 random 60-100 open-eye frames between blinks (Ditto's default), N > 0 exactly N")
    p.add_argument("--eye-lock", action="store_true", help="lock eye state to the source's frame 0")
    p.add_argument("--batch-size", type=int, default=0, help="frames per warp+decode batch (0: chosen from free VRAM)")
    p.add_argument("--crf", type=int, default=18)
    p.add_argument("--preset", default="medium", help="x264 preset (ultrafast ... veryslow)")
    p.add_argument("--max-seconds", type=float, default=None, help="render only the first N seconds of speech")
    p.add_argument("--cache-dir", type=Path, default=None, help="avatar cache folder (default: next to --models)")


def _add_convert(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("convert-weights", help="official .pth files -> .safetensors (+ JSON index)")
    p.add_argument("src", type=Path, help="folder with the official ditto_pytorch/models/*.pth files")
    p.add_argument("dst", type=Path, help="folder to write <name>.safetensors and ditto_models.json into")


def _render(args: argparse.Namespace) -> int:
    from .pipeline import render_cli

    out = render_cli(args)
    print(f"wrote {out}")
    return 0


def _convert(args: argparse.Namespace) -> int:
    from .models.checkpoints import convert_weights

    for path in convert_weights(args.src, args.dst):
        print(f"wrote {path}")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ditto_core", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    _add_render(sub)
    _add_convert(sub)
    batch_cli.add_parser(sub)
    args = parser.parse_args(argv)
    try:
        return {"render": _render, "convert-weights": _convert, "batch": batch_cli.run}[args.command](args)
    except DittoError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: nothing was written", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
