"""The command line: every option checked, by its flag's name, before anything loads; help for
every flag; one line for a machine without the asked-for GPU; progress with an ETA."""
import argparse
import gc
import io
import types
from pathlib import Path

import pytest
import torch

from ditto_core import __main__ as cli
from ditto_core.motion.motion_options import EMOTIONS
from ditto_core.pipeline import DittoPipeline


@pytest.fixture
def inputs(tmp_path):
    image, audio = tmp_path / "portrait.jpg", tmp_path / "speech.wav"
    image.write_bytes(b"not decoded before the options are checked")
    audio.write_bytes(b"nor this")
    return ["render", "--image", str(image), "--audio", str(audio), "--out", str(tmp_path / "out" / "talk.mp4"),
            "--models", str(tmp_path / "no_models")]


@pytest.fixture
def no_heavy_work(monkeypatch):
    """Fails the test if a pipeline is built: a refused option must stop before that."""
    def refuse(*args, **kwargs):
        raise AssertionError("the pipeline was built before the options were checked")

    monkeypatch.setattr(DittoPipeline, "from_model_dir", classmethod(refuse))
    monkeypatch.setattr(DittoPipeline, "random", classmethod(refuse))


def _refused(argv, capsys) -> str:
    with pytest.raises(SystemExit) as caught:
        cli.main(argv)
    err = capsys.readouterr().err
    assert caught.value.code == 2 and "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 2 and lines[1] == "(all options: python -m ditto_core render --help)", err
    return lines[0]


@pytest.mark.parametrize("flag, value, reason", [
    ("--crf", "60", "60 is out of range: 0 to 51"),
    ("--crf", "high", "'high' is not a whole number"),
    ("--preset", "fastest", "invalid choice: 'fastest'"),
    ("--steps", "0", "0 is out of range: 1 to 1000"),
    ("--seed", "-1", "-1 is out of range"),
    ("--emo", "joy", "'joy' is not an emotion"),
    ("--blinks", "-2", "-2 is out of range: -1 or more"),
    ("--batch-size", "-1", "-1 is out of range: 0 or more"),
    ("--max-seconds", "0", "must be a positive number of seconds"),
    ("--max-seconds", "nan", "must be a positive number of seconds"),
    ("--precision", "fp8", "invalid choice: 'fp8'"),
    ("--lmdm-precision", "fp16", "invalid choice: 'fp16'"),
    ("--out", "talk.avi", "does not end in .mp4"),
    # Permission bits pass /proc for root; the file it cannot create is what tells.
    ("--out", "/proc/ditto/talk.mp4", "cannot write into /proc ("),
    ("--device", "tpu", "is not a device"),
])
def test_a_bad_option_is_refused_by_its_flag_before_any_work(inputs, no_heavy_work, capsys, flag, value, reason):
    argv = list(inputs)
    if flag in argv:
        argv[argv.index(flag) + 1] = value
    else:
        argv += [flag, value]
    line = _refused(argv, capsys)
    assert line.startswith(f"python -m ditto_core render: error: argument {flag}: ") and reason in line, line
    assert "MotionOptions" not in line and "VideoWriter" not in line


def test_inputs_are_checked_before_the_model_files(inputs, no_heavy_work, capsys, tmp_path):
    argv = list(inputs)
    argv[argv.index("--image") + 1] = str(tmp_path / "missing.jpg")
    line = _refused(argv, capsys)
    assert "argument --image: " in line and "missing.jpg does not exist" in line and "model" not in line
    argv = list(inputs)
    argv[argv.index("--audio") + 1] = str(tmp_path)
    line = _refused(argv, capsys)
    assert "argument --audio: " in line and "is a folder" in line


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")
def test_cuda_without_cuda_is_one_line(inputs, no_heavy_work, capsys):
    line = _refused(inputs + ["--device", "cuda"], capsys)
    assert "argument --device: cuda was asked for, but PyTorch sees no CUDA GPU here" in line and "--device cpu" in line


def test_a_gpu_beyond_the_machines_is_one_line(inputs, no_heavy_work, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    line = _refused(inputs + ["--device", "cuda:2"], capsys)
    assert "argument --device: cuda:2 does not exist: this machine has 2 GPU(s), cuda:0 to cuda:1" in line


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the default device is CUDA")
def test_half_precision_on_the_cpu_is_refused(inputs, no_heavy_work, capsys):
    assert "argument --precision: fp16 is a GPU fast path" in _refused(inputs + ["--precision", "fp16"], capsys)


class _Built(Exception):
    """Raised in place of building the pipeline: the test has what it came for."""


@pytest.mark.parametrize("aot, warmup", [(False, "foreground"), (True, "aot_cached")])
def test_the_cli_renders_short_clips_without_compiling(inputs, monkeypatch, aot, warmup):
    """A one-clip process compiles the engine only for clips of ONE_CLIP_COMPILE_MIN_FRAMES or more
    (bench/measurements/2026-12-06-h100-s41: below that the compile costs a new process more than it
    saves); with --aot a cached package serves every clip."""
    from ditto_core.pipeline import ONE_CLIP_COMPILE_MIN_FRAMES

    asked = {}

    def build(cls, workdir, **kwargs):
        asked.update(kwargs)
        raise _Built

    monkeypatch.setattr(DittoPipeline, "random", classmethod(build))
    argv = inputs + ["--random-weights", "--device", "cpu", "--worker", "off"] + (["--aot"] if aot else [])
    with pytest.raises(_Built):
        cli.main(argv)
    assert asked["compile_min_frames"] == ONE_CLIP_COMPILE_MIN_FRAMES and asked["warmup"] == warmup


class _StandInPipeline:
    """What render_cli asks of a pipeline, without networks."""

    times = types.SimpleNamespace(seconds={})

    def start_warmup(self):
        pass

    def engine(self):
        return types.SimpleNamespace(will_compile=False)


@pytest.mark.parametrize("exit_fast", [True, False])
def test_a_render_that_ends_its_process_freezes_its_start_up_first(inputs, monkeypatch, thawed, exit_fast):
    """Its models live until the exit: the collections during its clip need not walk them
    (gc_pauses.freeze_for_the_process). A render run in-process (a caller's main()) freezes nothing."""
    from ditto_core.render_request import RenderRequest

    pipeline, seen, exits = _StandInPipeline(), {}, []
    monkeypatch.setattr(DittoPipeline, "random", classmethod(lambda cls, workdir, **kwargs: pipeline))

    def run(request, pipe, detect_face, progress=None, status=None):
        # Frozen objects are in no generation a collection walks (nor in gc.get_objects()).
        seen["walked"] = any(thing is pipe for thing in gc.get_objects())
        return Path(inputs[6])

    monkeypatch.setattr(RenderRequest, "run", run)
    monkeypatch.setattr(cli, "exit_now", exits.append)
    assert cli.main(inputs + ["--random-weights", "--device", "cpu", "--worker", "off"], exit_fast=exit_fast) == 0
    assert exits == ([0] if exit_fast else [])
    assert seen["walked"] != exit_fast


def test_emotions_by_name_or_number(inputs):
    for index, name in enumerate(EMOTIONS):
        for given in (name, str(index)):
            assert cli.build_parser().parse_args(inputs + ["--emo", given]).emo == index


def test_every_flag_has_help():
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) == {"render", "download", "convert-weights", "serve", "batch", "worker"}
    for name, command in sub.choices.items():
        for action in command._actions:
            if not isinstance(action, argparse._HelpAction):
                assert action.help and action.help != argparse.SUPPRESS, f"{name} {action.option_strings or action.dest}"
    # The help text lists the emotions the library knows, in its order.
    assert cli.EMOTION_HELP == ", ".join(f"{i} {e}" for i, e in enumerate(EMOTIONS))


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_progress_reports_stages_then_frames_with_rate_and_eta():
    clock, out = FakeClock(), io.StringIO()
    progress = cli.TerminalProgress(out, clock)
    compiles = [True]
    progress.compiling = lambda frames: compiles[0]
    clock.now += 2.5
    progress.status("loading the models from models/ditto")
    progress(4, 100)  # the eager first batch; the next one compiles
    compiles[0] = False
    for done in range(36, 101, 32):
        clock.now += 30.0 if done == 36 else 1.0  # the compile stalls the second report only
        progress(done, 100)
    lines = out.getvalue().splitlines()
    assert lines[0] == "[   2.5 s] loading the models from models/ditto..."
    assert "compiling the render engine" in lines[1] and sum("compiling" in x for x in lines) == 1
    # Into a file: one line per tenth reached, the last at 100 %.
    frames = [x for x in lines if x.startswith("rendering")]
    assert frames[0] == "rendering 4/100 frames (4%)" and frames[-1].startswith("rendering 100/100 frames (100%)")
    # 96 frames in 32 s, the compile still inside the window of reports -> 3 frames/s.
    assert frames[-1] == "rendering 100/100 frames (100%), 3.0 frames/s, ETA 0:00"


def test_eta_counts_only_the_recent_batches():
    clock, out = FakeClock(), io.StringIO()
    progress = cli.TerminalProgress(out, clock)
    progress(0, 1000)
    clock.now += 60.0  # a long compile
    for done in range(10, 110, 10):
        progress(done, 1000)
        clock.now += 1.0
    # The window has dropped the compile: 10 frames a second, 900 frames left.
    assert progress.line(100, 1000) == "rendering 100/1000 frames (10%), 10.0 frames/s, ETA 1:30"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("worker, terminal, aot, tip", [
    ("auto", True, False, True), ("off", True, False, False), ("auto", False, False, False), ("auto", True, True, False),
])
def test_a_render_at_a_terminal_that_found_no_worker_points_to_one(monkeypatch, tmp_path, capsys, worker,
                                                                  terminal, aot, tip):
    monkeypatch.setattr(cli, "render_cli", lambda args: tmp_path / "talk.mp4")
    err = _Terminal() if terminal else io.StringIO()
    monkeypatch.setattr(cli.sys, "stderr", err)
    assert cli._render(argparse.Namespace(worker=worker, aot=aot)) == 0
    assert ("python -m ditto_core worker" in err.getvalue()) == tip
    assert capsys.readouterr().out == f"wrote {tmp_path / 'talk.mp4'}\n"


@pytest.fixture
def batch_argv(tmp_path, monkeypatch):
    """A batch command line whose pool must never start: the flags are refused first."""
    from ditto_core.batch import cli as batch_cli

    def refuse(*args, **kwargs):
        raise AssertionError("a worker pool was made before the flags were checked")

    monkeypatch.setattr(batch_cli, "make_pool", refuse)
    (tmp_path / "jobs.jsonl").write_text("{}\n")
    return ["batch", str(tmp_path / "jobs.jsonl"), "--out", str(tmp_path / "out"), "--random-weights"]


@pytest.mark.parametrize("flag, value, reason", [
    ("--seed", "-1", "-1 is out of range"),
    ("--batch-size", "-5", "-5 is out of range: 0 or more"),
    ("--workers", "0", "0 is out of range: 1 or more"),
    ("--attempts", "0", "0 is out of range: 1 or more"),
])
def test_batch_flags_are_refused_by_name(batch_argv, capsys, flag, value, reason):
    with pytest.raises(SystemExit) as caught:
        cli.main(batch_argv + [flag, value])
    err = capsys.readouterr().err
    assert caught.value.code == 2 and f"batch: error: argument {flag}: " in err and reason in err, err


@pytest.mark.parametrize("case", ["out is a file", "out takes no files", "report takes no files", "report is a folder",
                                  "fp16 without a GPU"])
def test_batch_places_and_precision_are_checked_before_any_worker(batch_argv, capsys, tmp_path, case):
    if case == "out is a file":
        (tmp_path / "out").write_bytes(b"")
        extra, reason = [], "--out: "
    elif case == "out takes no files":
        at = batch_argv.index("--out") + 1
        batch_argv = batch_argv[:at] + ["/proc/ditto_out"] + batch_argv[at + 1:]
        extra, reason = [], "--out: cannot write into /proc ("
    elif case == "report takes no files":
        extra, reason = ["--report", "/proc/report.json"], "--report: cannot write into /proc ("
    elif case == "report is a folder":
        extra, reason = ["--report", str(tmp_path)], "--report: "
    else:
        if torch.cuda.is_available():
            pytest.skip("checks a machine without CUDA")
        extra, reason = ["--precision", "fp16"], "--precision fp16 is a GPU fast path"
    assert cli.main(batch_argv + extra) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and reason in err and "Traceback" not in err, err
