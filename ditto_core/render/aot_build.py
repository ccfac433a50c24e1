"""Build the warp+decode AOT packages a run found missing, in a detached process.

Why a process of its own: a first-ever CLI run must not wait for a build (it costs about a
cold compile, more than a short clip's whole render), and a build thread beside the render
would take the GIL from it. So the CLI renders as it always did and, once the MP4 is written,
starts this module with the engine's settings; the next run finds the package. It loads the
same networks (the models folder, or random ones of the same seed), so the key it builds is
the key the run looked up, and runs niced, its output appended to ``build.log`` in the cache.

    python -m ditto_core.render.aot_build --device cuda:0 --dtype float16 --batch-size 32 \\
        --models models/ditto --volume 1,32,16,64,64
"""
from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, Optional, Sequence

from .warp_decode import WarpDecodeEngine

_ROOT = Path(__file__).resolve().parents[2]  # the folder holding ditto_core, for the child's path


def build_in_background(engine: WarpDecodeEngine, model_dir: Optional[Path], seed: int,
                        status: Callable[[str], None] = lambda text: None) -> Optional[subprocess.Popen]:
    """Start building ``engine.aot_missing``; None when nothing is missing, or when the same
    build was tried before and did not finish (a build that crashes is not started again on
    every run: its attempt file stays until the user deletes it, or a new torch changes the
    key). ``status`` hears what happens."""
    if not engine.aot_missing:
        return None
    command = [sys.executable, "-m", "ditto_core.render.aot_build", "--device", str(engine.device),
               "--dtype", str(engine.dtype).removeprefix("torch."), "--batch-size", str(engine.batch_size),
               "--cache", str(engine.aot_cache.root)]
    command += ["--models", str(model_dir)] if model_dir is not None else ["--random-seed", str(seed)]
    for volume in engine.aot_missing:
        command += ["--volume", ",".join(map(str, volume))]
    root = engine.aot_cache.root
    root.mkdir(parents=True, exist_ok=True)
    attempt = _attempt_file(root, command[3:])
    if attempt.exists():
        status(f"the engine's AOT package is being built by another process (log {root / 'build.log'})"
               if _alive(attempt) else
               f"not building the engine's AOT package: an earlier build did not finish (see {root / 'build.log'}; "
               f"delete {attempt} to try again)")
        return None
    command += ["--attempt-file", str(attempt)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(_ROOT), os.environ.get("PYTHONPATH")])))
    with open(root / "build.log", "ab") as log:
        builder = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                                   start_new_session=True)  # outlives the CLI, untouched by its Ctrl-C
    attempt.write_text(f"{builder.pid}\n")
    status(f"building the render engine's package for the next runs in the background (pid {builder.pid}, "
           f"log {root / 'build.log'})")
    return builder


def _attempt_file(root: Path, settings: Sequence[str]) -> Path:
    """Where a build of these settings (and this torch) marks that it is under way."""
    import torch

    digest = hashlib.sha256("\0".join([torch.__version__, *settings]).encode()).hexdigest()[:16]
    return root / f"build-attempt-{digest}.pid"


def builds_under_way(folder: Path) -> list[Path]:
    """The attempt files anywhere under ``folder`` whose builder still runs (a run that wants
    the packages, such as a benchmark's next process, waits for them)."""
    return [attempt for attempt in folder.rglob("build-attempt-*.pid") if _alive(attempt)]


def _alive(attempt: Path) -> bool:
    """Whether the builder named in ``attempt`` still runs (then the attempt has not failed)."""
    try:
        os.kill(int(attempt.read_text().split()[0]), 0)
    except (OSError, ValueError, IndexError):
        return False
    return True


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", required=True)
    parser.add_argument("--dtype", choices=("float32", "float16", "bfloat16"), required=True)
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--cache", type=Path, required=True, help="the package cache folder")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--models", type=Path, help="the models folder the run loaded")
    source.add_argument("--random-seed", type=int, help="the run used random networks of this seed")
    parser.add_argument("--volume", action="append", required=True, help="f_s shape, e.g. 1,32,16,64,64")
    parser.add_argument("--attempt-file", type=Path, help="deleted once every package is built")
    args = parser.parse_args(argv)
    if hasattr(os, "nice"):
        os.nice(10)  # the user's next render comes first
    import logging

    import torch

    from ..aot_packages import PackageCache
    from ..models.ditto_models import load_ditto_models, random_ditto_models
    from .aot_package import load_step

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(process)d %(message)s")
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    models = (load_ditto_models(args.models, device, dtype) if args.models is not None
              else random_ditto_models(device, dtype, args.random_seed))
    engine = WarpDecodeEngine(models.warp_network, models.decoder, batch_size=args.batch_size, warmup="aot",
                              aot_cache=PackageCache(args.cache))
    for text in args.volume:
        volume = tuple(int(size) for size in text.split(","))
        load_step(engine.aot_cache, engine.warp_network, engine.decoder, volume, engine.batch_size,
                  engine.stats.triton_kernels, build=True)
    if args.attempt_file is not None:
        args.attempt_file.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
