"""Time to video as users see it: from a request to the finished MP4, in three process states.

A user waits for the whole job, not for kernels: a CLI call is a new process, the first prompt
after a ComfyUI launch is a new process with warm on-disk caches, a later prompt runs in a warm
process. This benchmark times all three for the example portrait + speech and for a longer
clip, with the real-architecture HuBERT-large (``bench/make_hubert_large.py``; the stand-in
HuBERT only with ``--stub-hubert``, and the JSON says so):

* ``first_ever``: a new process with empty Inductor, Triton and avatar caches;
* ``new_process``: a new process with the caches the first one left (a ComfyUI relaunch, every
  CLI call after the first);
* ``warm_process``: a second job in the process of ``new_process``, with different audio and
  the same portrait (ComfyUI's second prompt; the avatar cache hits).

Every state runs in child processes (``--child``, spawned by this script) so imports and CUDA
start-up are measured as a user pays them. Wall time runs from the spawn of the child to the
MP4's rename into place; the breakdown lists imports, model loading, registration (cache miss,
then hit), audio features, motion, render (warp+decode, put-back, encoding) and the writer's
finalisation, and the engine's compile statistics.

    python3 -m bench.bench_time_to_video --models $MODELS --hubert $HUBERT --out $OUT/ttv.json
    python3 -m bench.bench_time_to_video --device cpu --stub-hubert --max-seconds 0.4 --clips example --no-compile

``--models`` is a folder of official-layout checkpoints (written with ``--make-checkpoints KIT``
from the parity kit's ``make_checkpoints.py`` when missing); face detection is off (random
weights detect no face), so registration covers the crop, the appearance and motion extractors
and the avatar cache.
"""
from __future__ import annotations

import time

_CHILD_START = time.time()  # before any import: the child's interpreter start-up is the parent's to time

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional

from bench.kit_checkpoints import write_kit_checkpoints  # imports no torch

REPO = Path(__file__).resolve().parents[1]  # not bench.scene's: importing it would import torch before the child times that

GOALS = {
    "example/foreground.warm_process.wall_s": ("<=", 1.5),
    "example/cli.new_process.wall_s": ("<=", 5.0),
    "example/cli.first_ever.wall_s": ("<=", 30.0),
    "example/aot.new_process.wall_s": ("<=", 5.0),
    "example/aot.first_ever.wall_s": ("<=", 30.0),
}


# ------------------------------------------------------------------------------------ child


def _child(args: argparse.Namespace) -> None:
    """One process: imports, models, then one job per ``--job`` (audio path), JSON on stdout."""
    from ditto_core.cuda_start import start_cuda_context  # imports no torch

    times: dict[str, Any] = {}
    engine_warmup, suffixes = parse_variant(args.warmup)
    start = time.time()
    if engine_warmup in ("cli", "aot") and "-latecuda" not in suffixes:  # as the CLI's flag check does
        start_cuda_context(args.device)
    import torch

    times["import_torch_s"] = time.time() - start
    start = time.time()
    from ditto_core.gc_pauses import CollectorPauses
    from ditto_core.motion.motion_options import MotionOptions
    from ditto_core.pipeline import ONE_CLIP_COMPILE_MIN_FRAMES, DittoPipeline
    from ditto_core.registration.options import RegistrationOptions

    from .bench_common import compile_breakdown

    times["import_ditto_s"] = time.time() - start
    device = torch.device(args.device)
    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[args.precision]
    start = time.time()
    ahead = "-ahead" in suffixes
    motion_options = MotionOptions(steps=args.steps, sampler_precision="fp32" if "-lmdmfp32" in suffixes else "auto")
    warmup, min_frames = {"background": ("background", 0), "foreground": ("foreground", 0),
                          "cli": ("foreground", ONE_CLIP_COMPILE_MIN_FRAMES),
                          "aot": ("aot_cached", ONE_CLIP_COMPILE_MIN_FRAMES)}[engine_warmup]
    one_clip = engine_warmup in ("cli", "aot")  # as the CLI's render, which exits after its clip
    pipeline = DittoPipeline.from_model_dir(args.models, device, dtype, cache_dir=Path(args.cache_root) / "avatars",
                                            detect_face=False, compile=not args.no_compile, warmup=warmup,
                                            compile_min_frames=min_frames, motion_ahead=ahead,
                                            lmdm_graph_span="window" if "-windowgraph" in suffixes else "step")
    # The compile thread (background), a cached AOT package's load (aot), the eager path's priming.
    pipeline.start_warmup(prime="off" if "-noprime" in suffixes else "full" if "-primefull" in suffixes else "first")
    if one_clip and "-nofreeze" not in suffixes:
        from ditto_core.gc_pauses import freeze_for_the_process

        times["frozen_objects"] = freeze_for_the_process()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    times["load_models_s"] = time.time() - start
    times["load_models_breakdown_s"] = dict(pipeline.load_times.seconds)
    times["hubert_backend"] = getattr(pipeline.hubert, "backend", "onnxruntime")
    jobs = []
    for index, audio in enumerate(args.job):
        out = Path(args.out_dir) / f"job{index}.mp4"
        start = time.time()
        with CollectorPauses() as pauses:  # Python's collections inside the job: after a compile they scan its many objects
            pipeline.run(args.image, audio, out, RegistrationOptions(detect_face=False), motion_options,
                         crf=args.crf, preset=args.preset)
        finished = time.time()
        engine = next(iter(pipeline._engines.values()), None)
        jobs.append({
            "audio": str(audio), "job_s": finished - start,
            "mp4_done_since_spawn_s": finished - args.spawned_at, "stages_s": dict(pipeline.times.seconds),
            "engine": None if engine is None else vars(engine.stats).copy(),
            "cuda_peak_mib": torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None,
            "gc_pauses": {"passes": pauses.passes, "total_s": round(pauses.seconds, 4), "full": pauses.full,
                          "full_s": round(pauses.full_seconds, 4)},
        })
    times["dynamo_imported"] = "torch._dynamo" in sys.modules  # by the jobs: only a trace needs it
    if engine_warmup == "aot":  # as the CLI does after its MP4; waited for, so the next child finds the package
        from ditto_core.render.aot_build import build_in_background

        start = time.time()
        builder = build_in_background(pipeline.engine(), Path(args.models), seed=0)
        if builder is not None:
            times["aot_background_build_exit"] = builder.wait()
            times["aot_background_build_s"] = time.time() - start
    times["child_started_since_spawn_s"] = _CHILD_START - args.spawned_at
    times["compile_breakdown"] = compile_breakdown() if not args.no_compile else None
    print("RESULT " + json.dumps({"process": times, "jobs": jobs}, default=str), flush=True)


WARMUPS = ("cli", "foreground", "background", "aot")
VARIANT_SUFFIXES = {
    "-ahead": "the motion generated ahead of the render (DittoPipeline motion_ahead)",
    "-latecuda": "cli / aot: the GPU's context made by PyTorch's first CUDA call, not while PyTorch imports "
                 "(before session 46)",
    "-lmdmfp32": "the LMDM sampled in fp32, the default before 'auto' (tf32 beside half-precision networks)",
    "-noprime": "the engine's eager path not primed while the clip is prepared (before session 16)",
    "-nofreeze": "cli / aot: the start-up's objects left to the collector, not frozen once the models are loaded "
                 "(before session 49)",
    "-primefull": "the engine's eager path primed at a full batch's shape too, not the first batch's only "
                  "(before session 57)",
    "-windowgraph": "the LMDM window recorded whole at its first window, not its prologue and one step "
                    "(before session 50 for cli / aot, session 51 for background / foreground)",
}


def parse_variant(name: str) -> tuple[str, set[str]]:
    """"foreground-ahead-lmdmfp32" -> ("foreground", {"-ahead", "-lmdmfp32"})."""
    found = set()
    for suffix in reversed(VARIANT_SUFFIXES):
        if name.endswith(suffix):
            name, found = name.removesuffix(suffix), found | {suffix}
    return name, found


# ----------------------------------------------------------------------------------- parent


def speech_variants(audio: Path, seconds: float, folder: Path) -> tuple[Path, Path]:
    """Two different speech files of ``seconds``: the example looped, and the same reversed."""
    import av
    import numpy as np

    with av.open(str(audio)) as container:
        stream = container.streams.audio[0]
        rate = stream.rate
        samples = np.concatenate([f.to_ndarray().reshape(-1) for f in container.decode(stream)])
    if samples.dtype != np.int16:
        samples = (np.clip(samples, -1, 1) * 32767).astype(np.int16)
    length = int(seconds * rate)
    looped = np.resize(samples, length)
    paths = []
    for name, data in (("a", looped), ("b", looped[::-1].copy())):
        path = folder / f"speech_{seconds:g}s_{name}.wav"
        with av.open(str(path), "w") as container:
            out = container.add_stream("pcm_s16le", rate=rate, layout="mono")
            frame = av.AudioFrame.from_ndarray(data[None], format="s16", layout="mono")
            frame.sample_rate = rate
            for packet in out.encode(frame):
                container.mux(packet)
            for packet in out.encode(None):
                container.mux(packet)
        paths.append(path)
    return paths[0], paths[1]


def _profiled_child(args: argparse.Namespace) -> None:
    """The child under cProfile, its pstats written before the child's exit (which skips the
    interpreter's shutdown, and with it ``python -m cProfile``'s own dump)."""
    import cProfile

    profile = cProfile.Profile()
    try:
        profile.runcall(_child, args)
    finally:
        profile.dump_stats(str(args.profile_out))


def cache_env(root: Path) -> dict[str, str]:
    """Environment that puts every on-disk cache a run fills (Inductor's, Triton's, the pack's
    under ``XDG_CACHE_HOME``) under ``root``: an empty ``root`` is a first-ever run."""
    return {"TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"), "TRITON_CACHE_DIR": str(root / "triton"),
            "XDG_CACHE_HOME": str(root / "xdg")}


def _run_child(args: argparse.Namespace, cache_root: Path, jobs: list[Path], work: Path, tag: str) -> dict[str, Any]:
    env = {**os.environ, **cache_env(cache_root)}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    out_dir = work / tag
    out_dir.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "bench.bench_time_to_video", "--child", "--models", str(args.models), "--image", str(args.image),
                "--device", args.device, "--precision", args.precision, "--preset", args.preset, "--crf", str(args.crf),
                "--steps", str(args.steps), "--cache-root", str(cache_root), "--out-dir", str(out_dir),
                "--warmup", args.warmup]
    if args.no_compile:
        command.append("--no-compile")
    if tag.endswith("profiled") and args.py_spy:
        # Sampled from outside, every thread, waits included: where the wall time goes, thread by thread.
        command = [str(args.py_spy), "record", "--threads", "--idle", "--nonblocking", "--rate", "250",
                   "--format", "speedscope", "--output", str(Path(args.profile_dir) / f"{tag}.speedscope.json"),
                   "--", *command]
    elif tag.endswith("profiled"):
        command += ["--profile-out", str(Path(args.profile_dir) / f"{tag}.pstats")]
        env["PYTHONPROFILEIMPORTTIME"] = "1"  # which module imports what, and how long each took
    for job in jobs:
        command += ["--job", str(job)]
    spawned = time.time()
    command += ["--spawned-at", repr(spawned)]
    try:
        done = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=args.child_timeout)
        stdout, stderr, code = done.stdout, done.stderr, done.returncode
    except subprocess.TimeoutExpired as timeout:  # its jobs may be done and only its exit hung
        stdout, stderr, code = _text(timeout.stdout), _text(timeout.stderr), None
    exited = time.time()
    if tag.endswith("profiled"):
        imports = [line for line in stderr.splitlines() if line.startswith("import time:")]
        (Path(args.profile_dir) / f"{tag}.importtime.txt").write_text("\n".join(imports) + "\n")
        stderr = "\n".join(line for line in stderr.splitlines() if not line.startswith("import time:"))
    lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    if code not in (0, None) or not lines:
        why = f"child exited {code}" if code is not None else f"child ran past --child-timeout {args.child_timeout} s"
        return {"error": why, "stderr_tail": stderr[-4000:]}
    result = json.loads(lines[-1][len("RESULT "):])
    result["process"]["exit_since_spawn_s"] = exited - spawned if code is not None else None
    return result


def _text(output) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else (output or "")


def _summarise(first: dict, seconds: list[dict]) -> dict[str, Any]:
    """The three states of one clip: the first-ever child, and of the later children (a new
    process, then a second job in it) the one with the median new-process time, every child's
    times beside it."""
    def state(run: dict, job: int) -> dict[str, Any]:
        if "error" in run:
            return run
        item = run["jobs"][job]
        wall = item["mp4_done_since_spawn_s"] if job == 0 else item["job_s"]
        return {"wall_s": wall, **({"process": run["process"]} if job == 0 else {}), **item}

    done = sorted((run for run in seconds if "error" not in run), key=lambda run: state(run, 0)["wall_s"])
    median = done[(len(done) - 1) // 2] if done else seconds[0]
    states = {"first_ever": state(first, 0), "new_process": state(median, 0), "warm_process": state(median, 1)}
    if len(seconds) > 1:
        for name, job in (("new_process", 0), ("warm_process", 1)):
            if "error" not in states[name]:
                states[name]["all_wall_s"] = [state(run, job).get("wall_s") for run in seconds]
                states[name]["all_gc_full_s"] = [state(run, job).get("gc_pauses", {}).get("full_s") for run in seconds]
    return states


def _print_table(result: dict[str, Any]) -> None:
    print(f"{'clip':<10} {'state':<14} {'wall s':>8}  breakdown")
    for clip, states in result["clips"].items():
        for name, state in states.items():
            if "error" in state:
                print(f"{clip:<10} {name:<14} {'error':>8}  {state['error']}")
                continue
            parts = dict(state.get("process", {}))
            parts.update(state["stages_s"])
            text = ", ".join(f"{k}={v:.2f}" for k, v in parts.items() if isinstance(v, float))
            if "gc_pauses" in state:
                text += f", gc full passes={state['gc_pauses']['full']} ({state['gc_pauses']['full_s']:.2f} s)"
            if "all_wall_s" in state:
                text = "every child: " + ", ".join(f"{v:.2f}" for v in state["all_wall_s"] if v is not None) + "; " + text
            print(f"{clip:<10} {name:<14} {state['wall_s']:8.2f}  {text}")
    for key, (op, goal) in GOALS.items():
        clip, name, metric = key.split(".")
        state = result["clips"].get(clip, {}).get(name, {})
        got = state.get(metric)
        print(f"goal {key} {op} {goal}: {got if got is None else round(got, 2)} ({goal_verdict(got, goal, 'error' in state)})")


def goal_verdict(got: Optional[float], goal: float, failed: bool = False) -> str:
    """A "<=" goal's verdict: "failed" for a run that raised, whatever its time (an error can come
    fast), "n/a" where nothing was measured, else "met" or "NOT met"."""
    if failed:
        return "failed"
    return "n/a" if got is None else ("met" if got <= goal else "NOT met")


def ensure_models(args: argparse.Namespace) -> None:
    models = Path(args.models)
    if not (models / "warp_network.pth").exists() and args.make_checkpoints:
        write_kit_checkpoints(args.make_checkpoints, models)
    aux = models / "aux_models"
    aux.mkdir(parents=True, exist_ok=True)
    target = aux / "hubert_streaming_fix_kv.onnx"
    if args.stub_hubert:
        from ditto_core.audio.hubert_stub import write_stub_hubert

        target.unlink(missing_ok=True)
        write_stub_hubert(target)
    else:
        if args.hubert is None:
            raise SystemExit("--hubert PATH (from bench/make_hubert_large.py) or --stub-hubert is required")
        if target.is_symlink() or target.exists():
            target.unlink()
        target.symlink_to(Path(args.hubert).resolve())


def add_input_arguments(parser: argparse.ArgumentParser, portraits, speeches) -> None:
    """What the time-to-video benchmarks render (``ensure_models`` reads the first four):
    the models folder, the HuBERT, the portrait and the speech (default: the first of the
    candidate files found)."""
    parser.add_argument("--models", type=Path, required=True, help="official-layout checkpoint folder")
    parser.add_argument("--make-checkpoints", type=Path, default=None,
                        help="the parity kit's make_checkpoints.py, to fill --models when it is empty")
    parser.add_argument("--hubert", type=Path, default=None, help="HuBERT-large ONNX (bench/make_hubert_large.py)")
    parser.add_argument("--stub-hubert", action="store_true", help="the stand-in HuBERT instead (not what users run)")
    parser.add_argument("--image", type=Path, default=next((p for p in portraits if p.is_file()), None))
    parser.add_argument("--audio", type=Path, default=next((p for p in speeches if p.is_file()), None))


def main(argv: Optional[list[str]] = None) -> None:
    if "--child" in (sys.argv[1:] if argv is None else argv):
        portraits = speeches = ()  # the child is told its inputs; it must not import torch before timing it
    else:
        from .scene import PORTRAIT_CANDIDATES as portraits, SPEECH_CANDIDATES as speeches
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_input_arguments(parser, portraits, speeches)
    parser.add_argument("--clips", nargs="+", default=["example", "60s"], help="example and/or <N>s")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--precision", default=None, choices=("fp32", "fp16", "bf16"),
                        help="the networks' precision (default fp16 on CUDA, fp32 on a CPU, which has no fp16 3-D pooling)")
    parser.add_argument("--preset", default="ultrafast")
    parser.add_argument("--crf", type=int, default=18)
    parser.add_argument("--steps", type=int, default=25)
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--warmups", nargs="+", default=["cli", "foreground", "background"], metavar="VARIANT",
                        choices=[w + "".join(s) for w in WARMUPS for n in range(len(VARIANT_SUFFIXES) + 1)
                                 for s in itertools.combinations(VARIANT_SUFFIXES, n)],
                        help="engine warm-up variants, each with its own caches, side by side: cli (the CLI's "
                             "default: no compile for a clip under ONE_CLIP_COMPILE_MIN_FRAMES), "
                             "foreground (compile at the first batch), background (a compile thread from model load "
                             "on, eager until ready), aot (the CLI's --aot: a cached AOT package, else as cli and the "
                             "package built by a detached process after the MP4, waited for before the next child); "
                             "suffixes (in this order): " + "; ".join(f"{k}: {v}" for k, v in VARIANT_SUFFIXES.items()))
    parser.add_argument("--max-seconds", type=float, default=None, help="trim every clip (CPU smoke runs)")
    parser.add_argument("--profile", action="store_true", help="after the timed runs, one more new-process child under cProfile (pstats into --profile-dir)")
    parser.add_argument("--py-spy", type=Path, default=None,
                        help="with --profile: sample the child with this py-spy (every thread, waits included; "
                             "a speedscope file in --profile-dir) instead of cProfile (its main thread only)")
    parser.add_argument("--profile-dir", type=Path, default=Path("bench/results"))
    parser.add_argument("--profile-out", type=Path, help=argparse.SUPPRESS)  # child: its pstats file
    parser.add_argument("--repeats", type=int, default=1,
                        help="new-process children per variant (the variants' in turn); the median one is reported")
    parser.add_argument("--child-timeout", type=float, default=400)
    parser.add_argument("--out", type=Path, default=None)
    # child-only
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--warmup", default="background", help=argparse.SUPPRESS)
    parser.add_argument("--job", type=Path, action="append", default=[], help=argparse.SUPPRESS)
    parser.add_argument("--cache-root", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--spawned-at", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.precision is None:
        args.precision = "fp32" if args.device == "cpu" else "fp16"
    if args.child:
        _profiled_child(args) if args.profile_out else _child(args)
        from ditto_core.process_exit import exit_now

        exit_now(0)  # as the CLI ends: the process's exit is part of what its user waits for
    ensure_models(args)
    args.profile_dir.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"config": {k: str(v) for k, v in vars(args).items()}, "clips": {}}
    with tempfile.TemporaryDirectory(prefix="ttv_") as tmp:
        work = Path(tmp)
        for clip in args.clips:
            seconds = None if clip == "example" else float(clip.rstrip("s"))
            if seconds is None:
                import av

                with av.open(str(args.audio)) as container:
                    seconds = float(container.duration / 1e6)
            jobs = list(speech_variants(args.audio, min(seconds, args.max_seconds or seconds), work))
            firsts, later = {}, {warmup: [] for warmup in args.warmups}
            caches = {warmup: work / f"cache_{clip}_{warmup}" for warmup in args.warmups}
            for warmup in args.warmups:
                args.warmup = warmup  # caches empty: the first child is a first-ever run
                firsts[warmup] = _run_child(args, caches[warmup], jobs[:1], work, f"{clip}_{warmup}_first_ever")
            # New processes of the variants in turn, so that a machine that drifts during the run
            # weighs on every variant alike.
            for _ in range(args.repeats):
                for warmup in args.warmups:
                    args.warmup = warmup
                    later[warmup].append(_run_child(args, caches[warmup], jobs, work, f"{clip}_{warmup}_new_process"))
                    result["clips"][f"{clip}/{warmup}"] = _summarise(firsts[warmup], later[warmup])
                    if args.out:  # after every child: a run stopped by its time limit keeps what it measured
                        args.out.parent.mkdir(parents=True, exist_ok=True)
                        args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
            if args.profile:  # one more child each, profiled: its times are inflated, only its call tree is kept
                for warmup in args.warmups:
                    args.warmup = warmup
                    _run_child(args, caches[warmup], jobs[:1], work, f"{clip}_{warmup}_profiled")
    result["goals"] = {k: {"op": op, "value": v} for k, (op, v) in GOALS.items()}
    _print_table(result)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
