"""Command line: ``python -m ditto_core {render,download,convert-weights,serve,batch} ...``.

Headless use without ComfyUI: the same library calls the nodes make. Every option is checked
while the command line is parsed, so a bad value is refused, naming its flag, before any model,
image or speech is loaded. Parsing imports no PyTorch: a render handed to a warm worker
(``worker``, :mod:`ditto_core.worker`) never loads it.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Callable, Optional, Sequence, TextIO

from .atomic_files import cannot_write_under
from .batch import cli as batch_cli
from .cli_types import int_in, positive_seconds
from .cuda_start import start_cuda_context
from .errors import DittoError
from .gc_pauses import freeze_for_the_process
from .live import cli as live_cli
from .motion.option_values import EMOTIONS, MAX_SEED, MAX_STEPS
from .precision import LMDM_PRECISION_CHOICES, NETWORK_PRECISIONS
from .process_exit import exit_now
from .render_request import RenderRequest, RenderSettings
from .signals import exit_status, terminate_as_interrupt
from .video.x264_presets import X264_PRESETS
from .worker import cli as worker_cli

log = logging.getLogger(__name__)
MAX_CRF = 51


class _Parser(argparse.ArgumentParser):
    """Refuses a bad command line in one line (argparse's default adds the whole usage above it)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n(all options: {self.prog} --help)\n")


# -- option types: each refuses a bad value with the reason; argparse adds the flag's name --------


def _emotion(text: str) -> int:
    if text in EMOTIONS:
        return EMOTIONS.index(text)
    if text.isdigit() and int(text) < len(EMOTIONS):
        return int(text)
    raise argparse.ArgumentTypeError(f"{text!r} is not an emotion: use one of {EMOTION_HELP}")


EMOTION_HELP = ", ".join(f"{i} {name}" for i, name in enumerate(EMOTIONS))


def _input_file(text: str) -> Path:
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{path} is a folder; give a file")
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{path} does not exist")
    if not os.access(path, os.R_OK):
        raise argparse.ArgumentTypeError(f"{path} cannot be read (check its permissions)")
    return path


def _output_mp4(text: str) -> Path:
    path = Path(text)
    if path.suffix.lower() != ".mp4":
        raise argparse.ArgumentTypeError(f"{path} does not end in .mp4 (the video is written as an MP4)")
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{path} is a folder; give a file name ending in .mp4")
    problem = cannot_write_under(path.parent)  # now, not after the render; the missing folders are created
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return path


DEVICE_TYPES = ("cpu", "cuda")


def _device(text: str) -> str:
    """``cpu``, ``cuda`` or ``cuda:N`` by its spelling; whether this machine has it is
    :func:`check_device`'s (it needs PyTorch)."""
    kind, _, index = text.partition(":")
    if kind not in DEVICE_TYPES or (index and not index.isdigit()) or text.endswith(":"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a device this pack runs on: use cpu, cuda or cuda:N")
    return text


def check_device(text: Optional[str], parser: argparse.ArgumentParser):
    """The torch device for a ``--device`` value (None: CUDA when available), refused by its flag
    when this machine lacks it."""
    import torch

    if text is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(text)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            why = ("this PyTorch build has no CUDA support; install a CUDA build of torch" if torch.version.cuda is None
                   else "no GPU or driver was found")
            parser.error(f"argument --device: {text} was asked for, but PyTorch sees no CUDA GPU here ({why}); "
                         f"use --device cpu")
        if device.index is not None and device.index >= torch.cuda.device_count():
            parser.error(f"argument --device: {text} does not exist: this machine has {torch.cuda.device_count()} "
                         f"GPU(s), cuda:0 to cuda:{torch.cuda.device_count() - 1}")
    return device


def add_pipeline_flags(p: argparse.ArgumentParser) -> None:
    """The flags that decide what a render loads (:class:`~ditto_core.render_request.RenderSettings`),
    shared by ``render`` and ``worker``."""
    p.add_argument("--models", type=Path, default=Path("models/ditto"),
                   help="folder with the official Ditto files (default: models/ditto; fill it with "
                        "`python -m ditto_core download`)")
    p.add_argument("--random-weights", action="store_true",
                   help="smoke mode: random networks, no face detector, stand-in audio encoder; the output is "
                        "noise but every stage of the pipeline runs")
    p.add_argument("--cropped", action="store_true",
                   help="portraits are face crops already: used whole, no face detection (the face models are "
                        "then not needed)")
    p.add_argument("--device", type=_device, default=None, help="cuda, cuda:1, cpu (default: cuda when available)")
    p.add_argument("--precision", choices=NETWORK_PRECISIONS, default="fp32",
                   help="image networks' precision: fp32 reproduces Ditto, fp16 and bf16 are the GPU fast paths "
                        "(default: fp32)")
    p.add_argument("--batch-size", type=int_in(0), default=0,
                   help="frames per warp+decode batch (default: 0, chosen from free VRAM)")
    p.add_argument("--cache-dir", type=Path, default=None, help="avatar cache folder (default: <--models>/cache)")


def check_pipeline_flags(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """What no single pipeline flag's type can see: the machine's devices, combinations.

    Called only when this process renders, before its first import of PyTorch: the GPU's
    context is made meanwhile (:mod:`.cuda_start`)."""
    start_cuda_context(args.device)
    device = check_device(args.device, parser)
    if device.type == "cpu" and args.precision != "fp32":
        parser.error(f"argument --precision: {args.precision} is a GPU fast path; on the CPU use fp32 "
                     f"(or --device cuda on a machine with a GPU)")
    if args.cache_dir is not None and args.cache_dir.exists() and not args.cache_dir.is_dir():
        parser.error(f"argument --cache-dir: {args.cache_dir} is a file, not a folder")


# -- render ------------------------------------------------------------------------------------


def _add_render(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("render", help="portrait + speech -> talking-head MP4",
                       description="Animate one portrait with one speech track into an MP4. Every option is "
                                   "checked before anything loads; the MP4 appears only when it is complete.")
    p.add_argument("--image", required=True, type=_input_file,
                   help="portrait image (or a short video) with one visible face")
    p.add_argument("--audio", required=True, type=_input_file, help="speech track (wav, mp3, flac, m4a, ...)")
    p.add_argument("--out", required=True, type=_output_mp4,
                   help="output .mp4 path (written atomically; missing folders are created)")
    add_pipeline_flags(p)
    p.add_argument("--steps", type=int_in(1, MAX_STEPS), default=25,
                   help=f"DDIM steps of the motion diffusion, 1 to {MAX_STEPS} (default: 25; the reference uses 50)")
    p.add_argument("--lmdm-precision", choices=LMDM_PRECISION_CHOICES, default="auto",
                   help="motion diffusion arithmetic: fp32 reproduces Ditto; tf32 and bf16 are faster; auto is fp32 "
                        "with --precision fp32 and tf32 with fp16 or bf16 (default: auto)")
    p.add_argument("--lmdm-compile", action="store_true",
                   help="torch.compile the motion diffusion steps (pays off with --lmdm-precision bf16 on long clips)")
    p.add_argument("--seed", type=int_in(0, MAX_SEED), default=0,
                   help="seed of the motion diffusion's noise, 0 to 2**64-1 (default: 0)")
    p.add_argument("--emo", type=_emotion, default="neutral",
                   help=f"emotion the face shows while speaking, by name or number: {EMOTION_HELP} (default: neutral)")
    p.add_argument("--blinks", type=int_in(-1), default=0,
                   help="procedural blinks (need ditto_cfg/v0.4_hubert_cfg_pytorch.pkl under --models): -1 off, "
                        "0 random 60-100 open-eye frames between blinks (Ditto's default), N > 0 exactly N")
    p.add_argument("--eye-lock", action="store_true",
                   help="condition every frame on the eye state of the source's first frame (steadier eyes)")
    p.add_argument("--crf", type=int_in(0, MAX_CRF), default=18,
                   help=f"x264 quality, 0 (lossless) to {MAX_CRF}: lower is better and larger (default: 18)")
    p.add_argument("--preset", choices=X264_PRESETS, default=None,
                   help="x264 speed preset; slower presets make smaller files (default: chosen from the CPU count)")
    p.add_argument("--encoders", type=int_in(1), default=None,
                   help="x264 instances encoding segments of the clip in parallel (default: 1, the fastest on the "
                        "hosts measured; more can pay on many-core hosts with slow presets)")
    p.add_argument("--aot", action="store_true",
                   help="experimental: render with an AOTInductor package of the engine from the user cache (no "
                        "compile in a new process); a missing one is built after the run by a detached process. "
                        "Off by default: on the H200 with torch 2.11 loading a CUDA package crashed (docs/PERFORMANCE.md)")
    p.add_argument("--max-seconds", type=positive_seconds, default=None,
                   help="render only the first N seconds of speech (default: all of it)")
    worker_cli.add_hand_off_flags(p)
    p.set_defaults(run=_render, check=check_pipeline_flags, hand_off=_hand_off, skip_teardown=True)


def _hand_off(args: argparse.Namespace) -> Optional[int]:
    """The render done by a warm worker (its exit status), or None: this process renders it."""
    from .atomic_files import reap_stale_temporaries

    reap_stale_temporaries(args.out.parent)  # what renders killed outright (SIGKILL) left there
    if args.worker == "off" or args.aot:
        return None
    progress = TerminalProgress()
    done = worker_cli.hand_off(args, RenderSettings.from_args(args), RenderRequest.from_args(args), progress)
    if done is None:
        return None
    _print_times(done["times"])
    print(f"wrote {done['out']}")
    return 0


def _render(args: argparse.Namespace) -> int:
    out = render_cli(args)
    print(f"wrote {out}")
    if args.worker == "auto" and not args.aot and sys.stderr.isatty() and worker_cli.protocol.supported():
        # Found no worker: a person at a terminal learns that the next renders need not pay the start-up.
        print("tip: `python -m ditto_core worker` keeps the models loaded, and renders started while it runs "
              "skip this start-up (README: Warm worker)", file=sys.stderr)
    return 0


def _print_times(times: dict[str, float]) -> None:
    for stage, seconds in times.items():
        print(f"{stage:>15}: {seconds:7.2f} s")


def render_cli(args: argparse.Namespace, stream: TextIO = sys.stderr) -> Path:
    """``python -m ditto_core render``: build the pipeline from checked CLI arguments and run it."""
    from .pipeline import ONE_CLIP_COMPILE_MIN_FRAMES

    progress = TerminalProgress(stream)
    settings, request = RenderSettings.from_args(args), RenderRequest.from_args(args)
    with tempfile.TemporaryDirectory(prefix="ditto_") as workdir:
        if settings.random_weights:
            log.warning("random weights: every stage runs, but the video shows noise, not a face")
            progress.status("building random networks")
        else:
            progress.status(f"loading the models from {args.models}")
        # Clips too short to repay a compile render eagerly. With --aot a cached AOT package renders
        # any clip compiled at once, and a missing one is built after the MP4 (below).
        pipeline = settings.build_pipeline(Path(workdir), compile_min_frames=ONE_CLIP_COMPILE_MIN_FRAMES,
                                           warmup="aot_cached" if args.aot else "foreground")
        pipeline.start_warmup()  # the eager path primed while the avatar, audio and motion are made
        engine = pipeline.engine()
        if args.process_ends_after:  # its imports and models live until the exit: no collection need walk them
            freeze_for_the_process()
        progress.compiling = engine.will_compile
        out = request.run(pipeline, settings.detect_face, progress=progress, status=progress.status)
    _print_times(pipeline.times.seconds)
    if args.aot:
        from .render.aot_build import build_in_background

        build_in_background(engine, settings.models, args.seed, progress.status)
    return out


class TerminalProgress:
    """Start-up stages as status lines, then the render as one line with frames/s and an ETA.

    On a terminal the render line rewrites itself; into a file or pipe it is printed at every
    tenth of the clip. The rate is taken over the last few batches, so the one-off compile of the
    first batches does not stretch the estimate for the rest.
    """

    WINDOW = 8  # progress reports the rate is measured over

    def __init__(self, stream: TextIO = sys.stderr, clock: Callable[[], float] = time.monotonic) -> None:
        self.stream, self.clock = stream, clock
        self.start = clock()
        self.compiling: Callable[[int], bool] = lambda frames: False  # whether rendering a clip of frames compiles
        self._reports: deque[tuple[float, int]] = deque(maxlen=self.WINDOW)
        self._shown_tenth = -1
        self._tty = hasattr(stream, "isatty") and stream.isatty()

    def status(self, text: str) -> None:
        print(f"[{self.clock() - self.start:6.1f} s] {text}...", file=self.stream, flush=True)

    def __call__(self, done: int, total: int) -> None:
        now = self.clock()
        if not self._reports and self.compiling(total):
            self.status("compiling the render engine for this GPU (up to a minute the first time, seconds "
                        "once cached)")
        self._reports.append((now, done))
        line = self.line(done, total)
        if self._tty:
            print(f"\r{line}", end="\n" if done >= total else "", file=self.stream, flush=True)
        elif done >= total or 10 * done // max(total, 1) > self._shown_tenth:
            self._shown_tenth = 10 * done // max(total, 1)
            print(line, file=self.stream, flush=True)

    def line(self, done: int, total: int) -> str:
        text = f"rendering {done}/{total} frames ({100 * done // max(total, 1)}%)"
        (t0, d0), (t1, d1) = self._reports[0], self._reports[-1]
        if d1 > d0 and t1 > t0:
            rate = (d1 - d0) / (t1 - t0)
            eta = round((total - done) / rate)
            text += f", {rate:.1f} frames/s, ETA {eta // 60}:{eta % 60:02d}"
        return text


# -- download and convert-weights ----------------------------------------------------------------


def _add_download(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("download", help="fetch the official model files a folder lacks (verified, resumable)",
                       description="Download every official Ditto file missing from --models from HuggingFace "
                                   "(or a mirror): checked against the Hub's size and SHA-256 and by kind, "
                                   "written atomically, resumed where an interrupted run stopped.")
    p.add_argument("--models", type=Path, default=Path("models/ditto"),
                   help="model folder to fill (default: models/ditto)")
    p.add_argument("--aux-dir", type=Path, default=None,
                   help="folder for the face models and HuBERT (default: the model folder's aux_models/)")
    p.add_argument("--endpoint", default=None,
                   help="HuggingFace address or a mirror (default: $HF_ENDPOINT, else https://huggingface.co)")
    p.set_defaults(run=_download)


def _download(args: argparse.Namespace) -> int:
    from .download import download_missing
    from .model_files import missing_downloads

    wanted = missing_downloads(args.models, args.aux_dir)
    if not wanted:
        print(f"nothing to download: every official file is in {args.models}")
        return 0
    print(f"downloading {len(wanted)} file(s) into {args.models}")
    shown = {}

    def on_bytes(name: str, have: int, size: Optional[int]) -> None:
        step = have * 20 // size if size else have >> 24  # a twentieth of the file, or every 16 MiB
        if shown.get(name) != step:
            shown[name] = step
            of = f" of {size / 1e6:.1f}" if size else ""
            print(f"  {name}: {have / 1e6:.1f}{of} MB", file=sys.stderr, flush=True)

    for path in download_missing(args.models, args.aux_dir, endpoint=args.endpoint, on_bytes=on_bytes):
        print(f"wrote {path}")
    return 0


def _add_convert(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("convert-weights", help="official .pth files -> .safetensors (+ JSON index)")
    p.add_argument("src", type=Path, help="folder with the official ditto_pytorch/models/*.pth files")
    p.add_argument("dst", type=Path, help="folder to write <name>.safetensors and ditto_models.json into")
    p.set_defaults(run=_convert)


def _convert(args: argparse.Namespace) -> int:
    from .models.checkpoints import convert_weights

    for path in convert_weights(args.src, args.dst):
        print(f"wrote {path}")
    return 0


def _add_batch(sub: argparse._SubParsersAction) -> None:
    batch_cli.add_parser(sub)
    sub.choices["batch"].set_defaults(run=batch_cli.run)


def _add_serve(sub: argparse._SubParsersAction) -> None:
    live_cli.add_parser(sub)
    sub.choices["serve"].set_defaults(skip_teardown=True)


def _add_worker(sub: argparse._SubParsersAction) -> None:
    worker_cli.add_parser(sub, add_pipeline_flags)
    sub.choices["worker"].set_defaults(check=check_pipeline_flags, skip_teardown=True)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m ditto_core", description=__doc__,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (_add_render, _add_download, _add_convert, _add_serve, _add_batch, _add_worker):
        add(sub)
    return parser


def main(argv: Optional[Sequence[str]] = None, exit_fast: bool = False) -> int:
    """Run one command; its exit status. ``exit_fast`` (the ``python -m ditto_core`` entry
    point, never a caller in-process): a command that cleans up within its ``run`` (render: the
    MP4 published, temporaries removed; serve and worker: their servers stopped, their threads
    told to end) ends its process as soon as its messages are out, skipping Python's teardown
    (:mod:`.process_exit`): faster, and no thread still ending is cut short by the teardown,
    which can abort the process (:func:`~ditto_core.compilation.graph_tree_thread`). Such a
    render also freezes its start-up's objects once the models are loaded
    (:func:`~ditto_core.gc_pauses.freeze_for_the_process`). ``batch`` keeps the teardown, where
    Ray's clusters shut down."""
    parser = build_parser()
    args = parser.parse_args(argv)
    args.process_ends_after = exit_fast and getattr(args, "skip_teardown", False)
    status = _run_command(args.hand_off, args) if hasattr(args, "hand_off") else None
    if status is None:  # not handed to a warm worker: this process does the work
        if hasattr(args, "check"):
            args.check(args, _subparser(parser, args.command))
        status = _run_command(args.run, args)
    if args.process_ends_after:
        exit_now(status)
    return status


def _run_command(run: Callable[[argparse.Namespace], Optional[int]], args: argparse.Namespace) -> Optional[int]:
    try:
        with terminate_as_interrupt():  # SIGTERM / SIGHUP clean up as Ctrl-C does
            return run(args)
    except DittoError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        print(f"interrupted ({str(exc) or 'Ctrl-C'}): nothing was written", file=sys.stderr)
        return exit_status(exc)


def _subparser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[command]


if __name__ == "__main__":
    sys.exit(main(exit_fast=True))
