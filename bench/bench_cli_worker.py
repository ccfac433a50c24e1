"""The render command as its user waits for it: in its own process, and handed to a warm worker.

Each timed run is ``python -m ditto_core render`` spawned as a user would (wall time from the
spawn to the process's exit, the MP4 in place), on the example portrait (``--cropped``: random
weights detect no face) with the real-architecture HuBERT-large, fp16, x264 ultrafast:

* ``own_process``: ``--worker off``, compile caches warm (a first-ever run fills them first);
* ``worker``: ``--worker auto`` with a worker (``python -m ditto_core worker``) already running,
  its engine compiled and one clip rendered (the state a worker is in all day).

Runs alternate (different speech each time, as the ComfyUI second prompt has), so a host that
drifts weighs on both alike. The worker's own start-up and first clip are reported too.

    python3 -m bench.bench_cli_worker --models $MODELS --hubert $HUBERT --repeats 3 --out $OUT/cli_worker.json
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

from .bench_time_to_video import REPO, add_input_arguments, cache_env, ensure_models, goal_verdict, speech_variants

GOALS = {"own_process.median_s": 5.0, "worker.median_s": 5.0}


def _render(args, env: dict, audio: Path, out: Path, worker: str, socket: Path) -> dict[str, Any]:
    command = [sys.executable, "-m", "ditto_core", "render", "--models", str(args.models), "--cropped",
               "--image", str(args.image), "--audio", str(audio), "--out", str(out), "--precision", args.precision,
               "--preset", args.preset, "--worker", worker, "--socket", str(socket)]
    start = time.time()
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=args.child_timeout)
    wall = time.time() - start
    stages = {}
    for line in done.stdout.splitlines():
        name, sep, value = line.partition(":")
        if sep and value.strip().endswith(" s"):
            stages[name.strip()] = float(value.strip()[:-2])
    ok = done.returncode == 0 and out.is_file()
    return {"wall_s": wall, "ok": ok, "handed_off": "handed to the warm worker" in done.stderr, "stages_s": stages,
            **({} if ok else {"stderr_tail": done.stderr[-3000:]})}


def _start_worker(args, env: dict, socket: Path, log: Path) -> tuple[subprocess.Popen, dict[str, Any]]:
    from ditto_core.worker import client

    command = [sys.executable, "-m", "ditto_core", "worker", "--models", str(args.models), "--cropped",
               "--precision", args.precision, "--socket", str(socket), "--idle-minutes", "30"]
    start = time.time()
    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT)
    timings: dict[str, Any] = {}
    deadline = start + args.child_timeout
    while time.time() < deadline and process.poll() is None:
        info = client.ask(socket, {"type": "info"})
        if info is not None:
            timings.setdefault("ready_s", time.time() - start)
            if info.get("engine") != "compiling":  # compiled, or eager for good (no CUDA)
                timings[f"engine_{info.get('engine')}_s"] = time.time() - start
                break
        time.sleep(0.1)
    return process, timings


def main(argv: Optional[list[str]] = None) -> None:
    from .scene import PORTRAIT_CANDIDATES, SPEECH_CANDIDATES

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_input_arguments(parser, PORTRAIT_CANDIDATES, SPEECH_CANDIDATES)
    parser.add_argument("--seconds", type=float, default=None, help="speech per clip (default: all of --audio)")
    parser.add_argument("--precision", default="fp16", choices=("fp32", "fp16", "bf16"))
    parser.add_argument("--preset", default="ultrafast")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child-timeout", type=float, default=300)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    ensure_models(args)
    result: dict[str, Any] = {"config": {k: str(v) for k, v in vars(args).items()}}
    with tempfile.TemporaryDirectory(prefix="cli_worker_") as tmp:
        work = Path(tmp)
        env = {**os.environ, **cache_env(work)}
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
        env.pop("DITTO_WORKER_SOCKET", None)
        seconds = args.seconds
        if seconds is None:
            import av

            with av.open(str(args.audio)) as container:
                seconds = float(container.duration / 1e6)
        speeches = speech_variants(args.audio, seconds, work)
        socket, log = work / "run" / "worker.sock", work / "worker.log"
        (work / "run").mkdir(mode=0o700)
        result["first_ever"] = _render(args, env, speeches[0], work / "first.mp4", "off", socket)
        process, result["worker_start"] = _start_worker(args, env, socket, log)
        try:
            result["worker_first_clip"] = _render(args, env, speeches[1], work / "warm.mp4", "auto", socket)
            runs: dict[str, list] = {"own_process": [], "worker": []}
            for repeat in range(args.repeats):
                for variant, mode in (("own_process", "off"), ("worker", "auto")):
                    audio = speeches[(repeat + (variant == "worker")) % 2]
                    runs[variant].append(_render(args, env, audio, work / f"{variant}{repeat}.mp4", mode, socket))
                    result[variant] = _summary(runs[variant])
                    if args.out:
                        args.out.parent.mkdir(parents=True, exist_ok=True)
                        args.out.write_text(json.dumps(result, indent=2) + "\n")
        finally:
            process.terminate()
            process.wait(60)
            result["worker_log_tail"] = log.read_text(errors="replace")[-2000:]
    result["goals"] = {k: {"op": "<=", "value": v} for k, v in GOALS.items()}
    for key, goal in GOALS.items():
        variant, metric = key.split(".")
        got = result.get(variant, {}).get(metric)
        print(f"goal {key} <= {goal}: {got} ({goal_verdict(got, goal)})")
    print(json.dumps({k: v for k, v in result.items() if k not in ("config", "worker_log_tail")}, indent=1)[:6000])
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.out}")


def _summary(runs: list[dict]) -> dict[str, Any]:
    walls = sorted(run["wall_s"] for run in runs if run["ok"])
    return {"median_s": walls[(len(walls) - 1) // 2] if walls else None, "runs": runs}


if __name__ == "__main__":
    main()
