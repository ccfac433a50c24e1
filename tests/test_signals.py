"""SIGTERM / SIGHUP unwind like Ctrl-C: real processes signalled while they hold temporaries
(a bare writer, and the CLI mid-render), and the CLI reaping what killed renders left."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from ditto_core.__main__ import main
from ditto_core.signals import Terminated, terminate_as_interrupt
from tests.process_support import REPO, LiveTemp, python_child, stale_temp

AREA = "Files and processes"
posix_only = pytest.mark.skipif(os.name != "posix", reason="POSIX signals")

HOLD_A_TEMPORARY = """
    import os, signal, sys, time
    from ditto_core.atomic_files import atomic_target
    from ditto_core.signals import exit_status, terminate_as_interrupt

    try:
        with terminate_as_interrupt():
            with atomic_target(sys.argv[1]) as temp:
                try:
                    print(temp, flush=True)
                    sys.stdin.readline()  # blocks until the signal interrupts it
                finally:
                    os.kill(os.getpid(), signal.SIGTERM)  # a second signal during clean-up: ignored
                    time.sleep(0.2)
                    print("cleaned", flush=True)
    except KeyboardInterrupt as exc:
        print(exc, flush=True)
        sys.exit(exit_status(exc))
"""


@posix_only
@pytest.mark.reliability(area=AREA, case="SIGTERM or SIGHUP (twice) while a file is being written",
                         behaviour="raised as an interrupt that unwinds like Ctrl-C: the temporary is removed, the "
                                   "second signal does not cut the clean-up short, exit status 128 + signal")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_termination_signal_unwinds_and_cleans_up(tmp_path, signum):
    child = python_child(HOLD_A_TEMPORARY, str(tmp_path / "o.mp4"))
    temp = Path(child.stdout.readline().strip())
    assert temp.is_file()
    child.send_signal(signum)
    out, _ = child.communicate(timeout=60)
    assert child.returncode == 128 + signum
    assert out.split("\n")[:2] == ["cleaned", f"terminated by {signal.Signals(signum).name}"]
    assert list(tmp_path.iterdir()) == []


def test_handlers_are_restored_and_other_threads_untouched():
    before = signal.getsignal(signal.SIGTERM)
    with terminate_as_interrupt():
        assert signal.getsignal(signal.SIGTERM) is not before
    assert signal.getsignal(signal.SIGTERM) is before

    def in_a_thread(seen: list) -> None:
        with terminate_as_interrupt():  # Python refuses handlers here: the block just runs
            seen.append(signal.getsignal(signal.SIGTERM))

    seen = []
    thread = threading.Thread(target=in_a_thread, args=(seen,))
    thread.start()
    thread.join()
    assert seen == [before]


def _tiny_clip(folder: Path) -> tuple[Path, Path]:
    """A 96 px noise portrait and a second of speech-like noise at 16 kHz."""
    import numpy as np
    import soundfile as sf
    from PIL import Image

    rng = np.random.default_rng(0)
    image, audio = folder / "portrait.png", folder / "speech.wav"
    Image.fromarray((rng.random((96, 96, 3)) * 255).astype(np.uint8)).save(image)
    sf.write(audio, 0.1 * rng.standard_normal(16000).astype(np.float32), 16000)
    return image, audio


@posix_only
@pytest.mark.slow
@pytest.mark.reliability(area=AREA, case="SIGTERM to `python -m ditto_core render` mid-render (its partial MP4 exists)",
                         behaviour="exit status 143; no .part.mp4 beside the target, no ditto_* temporary folder, "
                                   "no output file")
def test_cli_killed_by_sigterm_mid_render_leaves_nothing(tmp_path):
    image, audio = _tiny_clip(tmp_path)
    out_dir, temp_dir = tmp_path / "out", tmp_path / "tmp"
    out_dir.mkdir()
    temp_dir.mkdir()
    env = {**os.environ, "TMPDIR": str(temp_dir), "OMP_NUM_THREADS": "1"}
    child = subprocess.Popen(
        [sys.executable, "-m", "ditto_core", "render", "--image", str(image), "--audio", str(audio),
         "--out", str(out_dir / "clip.mp4"), "--random-weights", "--device", "cpu", "--steps", "2",
         "--preset", "ultrafast", "--max-seconds", "0.2", "--batch-size", "1"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        shown = b""
        while not re.search(rb"rendering \d+/", shown):  # the first frames are in the writer: mid-render
            chunk = os.read(child.stderr.fileno(), 256)
            assert chunk, f"the render ended before it could be signalled: {shown.decode()}"
            shown += chunk
        assert any(out_dir.iterdir()), "the partial MP4 should exist while the render runs"
        assert _work_folders(temp_dir), "the CLI's ditto_* work folder should exist while it renders"
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=240)
        err = err.decode()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 143, err
    assert "terminated by SIGTERM" in err and "Traceback" not in err, err
    assert list(out_dir.iterdir()) == [] and _work_folders(temp_dir) == []


def _work_folders(folder: Path) -> list[Path]:
    return [path for path in folder.iterdir() if path.name.startswith("ditto_")]


@pytest.mark.reliability(area=AREA, case="the CLI starts where killed renders left partial MP4s (SIGKILL, power loss)",
                         behaviour="those of dead processes are removed from the output folder before rendering; a "
                                   "live render's partial file and the user's files stay")
def test_cli_reaps_dead_renders_temporaries_in_its_output_folder(tmp_path, capsys):
    (tmp_path / "earlier.mp4").write_bytes(b"a finished video")
    stale = stale_temp(tmp_path, "clip.mp4")
    (tmp_path / "face.png").write_bytes(b"inputs exist: the CLI gets past its argument checks")
    (tmp_path / "speech.wav").write_bytes(b"")
    with LiveTemp(tmp_path / "other.mp4") as live:
        code = main(["render", "--image", str(tmp_path / "face.png"), "--audio", str(tmp_path / "speech.wav"),
                     "--out", str(tmp_path / "clip.mp4"), "--models", str(tmp_path / "no_models")])
        assert code == 2  # no models: fails after the clean-up, before any rendering
        assert not stale.exists() and live.path.exists() and (tmp_path / "earlier.mp4").exists()
    capsys.readouterr()


@pytest.mark.parametrize("interrupt, status, says", [(KeyboardInterrupt(), 130, "Ctrl-C"),
                                                     (Terminated(signal.SIGTERM), 143, "SIGTERM")])
def test_cli_exit_status_names_the_interrupt(monkeypatch, capsys, interrupt, status, says):
    import ditto_core.__main__ as cli

    def interrupted(args):
        raise interrupt

    monkeypatch.setattr(cli, "_convert", interrupted)
    assert main(["convert-weights", "src", "dst"]) == status
    assert says in capsys.readouterr().err.split(":")[0]
