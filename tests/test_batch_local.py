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


def _example_jobs(folder, example_dir, names, **options):
    lines = [{"source": str(example_dir / "portrait.jpg"), "audio": str(example_dir / "speech_24k_mono.wav"),
              "output": name, "options": {"max_seconds": 2, "seed": i, **options}} for i, name in enumerate(names)]
    path = folder / "jobs.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return path


@pytest.mark.gpu
def test_batch_on_every_gpu_and_sharded_clip(tmp_path, example_dir):
    """One worker process per GPU: a batch, then one clip sharded over all of them (equal frame count and sync)."""
    import torch

    from ditto_core.batch.driver import run_batch
    from ditto_core.batch.local_pool import LocalPool, local_devices
    from ditto_core.batch.runner import PipelineSettings
    from ditto_core.batch.scheduler import Scheduler

    settings = PipelineSettings(cache_dir=tmp_path / "avatars", random_weights=True, precision="fp16")
    pool = LocalPool(settings, local_devices(None))
    scheduler = Scheduler(pool)
    try:
        assert len(scheduler.wait_ready()) == torch.cuda.device_count()
        report = run_batch(_example_jobs(tmp_path, example_dir, ["a.mp4", "b.mp4", "c.mp4"]), tmp_path / "out",
                           scheduler)
        assert [j["status"] for j in report["jobs"]] == ["done"] * 3, report["jobs"]
        assert {j["details"]["device"] for j in report["jobs"]} == {f"cuda:{i}" for i in range(torch.cuda.device_count())}
        whole = tmp_path / "out" / "a.mp4"
        sharded = run_batch(_example_jobs(tmp_path, example_dir, ["a.mp4"]), tmp_path / "sharded", scheduler,
                            shard=True)
        assert sharded["jobs"][0]["status"] == "done", sharded["jobs"]
    finally:
        pool.close()
    with av.open(str(whole)) as a, av.open(str(tmp_path / "sharded" / "a.mp4")) as b:
        assert a.streams.video[0].frames == b.streams.video[0].frames == 50
        assert b.streams.audio and abs(float(a.duration - b.duration)) < 1e5  # microseconds: within 0.1 s
