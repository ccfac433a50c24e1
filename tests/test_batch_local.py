"""The batch subcommand without Ray: one local CPU worker process, random weights."""
from __future__ import annotations

import json
import wave

import av
import numpy as np
import pytest

from ditto_core.__main__ import main


@pytest.mark.slow
def test_cli_batch_on_a_local_worker(tmp_path, capsys):
    from PIL import Image

    rng = np.random.default_rng(1)
    Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(tmp_path / "face.png")
    with wave.open(str(tmp_path / "speech.wav"), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(16000)
        f.writeframes((3000 * rng.standard_normal(4000)).astype(np.int16).tobytes())
    good = {"source": "face.png", "audio": "speech.wav", "output": "clip.mp4",
            "options": {"max_frames": 1, "steps": 2, "preset": "ultrafast"}}
    bad = {**good, "output": "bad.mp4", "options": {"preset": "warp-speed"}}
    (tmp_path / "jobs.jsonl").write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    out = tmp_path / "out"
    args = ["batch", str(tmp_path / "jobs.jsonl"), "--out", str(out), "--random-weights", "--no-compile",
            "--workers", "1", "--no-progress"]
    assert main(args) == 1  # one job failed
    captured = capsys.readouterr()
    assert "line 2" in captured.err and "preset" in captured.err and "1 done, 0 skipped, 1 failed" in captured.out
    with av.open(str(out / "clip.mp4")) as container:
        assert len([f for f in container.decode(video=0)]) == 1 and container.streams.audio
    report = json.loads((out / "batch_report.json").read_text())
    assert [j["status"] for j in report["jobs"]] == ["done", "failed"]
    assert report["jobs"][0]["details"]["device"] == "cpu" and not (out / "bad.mp4").exists()
    assert main(args) == 1
    assert "0 done, 1 skipped, 1 failed" in capsys.readouterr().out
