"""The batch on a Ray cluster of this machine: two CPU pipeline actors, random weights.

One local cluster for the module, bound to 127.0.0.1 (no dashboard, no usage reporting), and
one pair of actors kept warm across the tests as the CLI keeps them across jobs. Jobs are
previews of a few frames of a small portrait: every stage runs, on the real code paths.
"""
from __future__ import annotations

import json
import os
import signal
import threading
import time
import wave
from pathlib import Path

import av
import numpy as np
import pytest

from ditto_core.atomic_files import parse_temp_name
from ditto_core.batch.driver import run_batch
from ditto_core.batch.jobs import sidecar_path
from ditto_core.batch.runner import PipelineSettings
from ditto_core.batch.scheduler import Scheduler
from tests.video_support import durations

# Read when Ray is imported: every Ray server of this machine then binds to 127.0.0.1 (Ray's
# switch for a cluster of one machine; without it Ray binds to the host's routable address).
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"  # nothing is reported anywhere
ray = pytest.importorskip("ray", reason="the Ray batch tests need `pip install ray`")
pytestmark = pytest.mark.slow

FPS = 25
PREVIEW = {"max_frames": 2, "steps": 2, "preset": "ultrafast"}
AAC_FRAME_S = 1024 / 16000  # the audio track ends on a whole AAC frame


@pytest.fixture(scope="module")
def cluster():
    ray.init(address="local", _node_ip_address="127.0.0.1", include_dashboard=False, num_cpus=2,
             log_to_driver=False, configure_logging=False)
    assert [node["NodeManagerAddress"] for node in ray.nodes()] == ["127.0.0.1"], "the cluster must stay on loopback"
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("inputs")
    rng = np.random.default_rng(0)
    from PIL import Image

    Image.fromarray(rng.integers(0, 256, (96, 80, 3), dtype=np.uint8)).save(folder / "face.png")
    samples = (3000 * rng.standard_normal(16000 * 6 // FPS)).astype(np.int16)  # 0.24 s, HuBERT's minimum is 0.2
    with wave.open(str(folder / "speech.wav"), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(16000)
        f.writeframes(samples.tobytes())
    return folder


@pytest.fixture(scope="module")
def scheduler(cluster, tmp_path_factory):
    from ditto_core.batch.ray_pool import RayPool

    settings = PipelineSettings(cache_dir=tmp_path_factory.mktemp("avatars"), random_weights=True, compile=False)
    scheduler = Scheduler(RayPool(settings, workers=2), max_attempts=3)
    assert len(scheduler.wait_ready()) == 2
    yield scheduler
    scheduler.pool.close()


@pytest.fixture
def events(scheduler):
    seen = []
    scheduler.on_event = lambda kind, info: seen.append((kind, info))
    yield seen
    scheduler.on_event = lambda kind, info: None


def _jobs(folder: Path, lines) -> Path:
    path = folder / "jobs.jsonl"
    path.write_text("\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n")
    return path


def _job(inputs, output, **options):
    return {"source": str(inputs / "face.png"), "audio": str(inputs / "speech.wav"), "output": output,
            "options": {**PREVIEW, **options}}


def _frames(path: Path) -> list[np.ndarray]:
    with av.open(str(path)) as container:
        return [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]


def _check_mp4(path: Path, frames: int) -> list[np.ndarray]:
    decoded = _frames(path)
    assert len(decoded) == frames and decoded[0].shape == (96, 80, 3)
    seconds = durations(path)
    assert seconds["video"] == pytest.approx(frames / FPS)
    assert frames / FPS <= seconds["audio"] <= frames / FPS + AAC_FRAME_S
    return decoded


def _temporaries(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if parse_temp_name(p.name) is not None]


def test_batch_renders_every_good_line_fails_bad_ones_and_a_rerun_skips(scheduler, inputs, tmp_path, events):
    jobs_file = _jobs(tmp_path, [
        _job(inputs, "a.mp4", seed=1),
        {**_job(inputs, "missing.mp4"), "audio": str(inputs / "nothing.wav")},
        _job(inputs, "b.mp4", seed=2, emo=3),
        _job(inputs, "bad_option.mp4", steps=-1),
        '{"source": ',
        _job(inputs, "c.mp4", seed=1, max_frames=1),
    ])
    out = tmp_path / "out"
    report = run_batch(jobs_file, out, scheduler)
    status = {job["line"]: job for job in report["jobs"]}
    assert {line: job["status"] for line, job in status.items()} == {
        1: "done", 2: "failed", 3: "done", 4: "failed", 5: "failed", 6: "done"}
    assert "line 2" in status[2]["error"] and "field audio" in status[2]["error"]
    assert "line 4" in status[4]["error"] and "steps" in status[4]["error"]
    assert "line 5" in status[5]["error"] and "JSON" in status[5]["error"]
    a, b, c = (_check_mp4(out / name, n) for name, n in (("a.mp4", 2), ("b.mp4", 2), ("c.mp4", 1)))
    assert not np.array_equal(a[1], b[1])  # other seed and emotion: other motion
    assert np.array_equal(a[0], c[0])  # a shorter preview of the same job
    for line in (1, 3, 6):
        assert status[line]["fps"] > 0 and status[line]["seconds"] > 0 and status[line]["attempts"] == 1
    assert report["summary"] == {**report["summary"], "done": 3, "failed": 3, "skipped": 0, "frames": 5}
    assert len({job["details"]["pid"] for job in report["jobs"] if job["status"] == "done"}) == 2, \
        "both actors should have taken jobs"
    assert json.loads((out / "batch_report.json").read_text())["summary"]["done"] == 3
    assert _temporaries(out) == []
    stamps = {p.name: p.stat().st_mtime_ns for p in out.glob("*.mp4")}

    events.clear()
    again = run_batch(jobs_file, out, scheduler)
    assert [job["status"] for job in again["jobs"]] == ["skipped", "failed", "skipped", "failed", "failed", "skipped"]
    assert not [e for e in events if e[0] == "dispatch"], "a rerun must not hand finished jobs to a worker"
    assert {p.name: p.stat().st_mtime_ns for p in out.glob("*.mp4")} == stamps


@pytest.mark.reliability(area="Batch", case="a Ray worker process killed (SIGKILL) in the middle of a job",
                         behaviour="the job reruns on the other actor; the output appears once, complete; no "
                         "temporary is left; the killed actor is restarted and works again")
def test_worker_killed_mid_job_reruns_elsewhere_without_partial_output(scheduler, inputs, tmp_path, events):
    out = tmp_path / "out"
    out.mkdir()
    killed = []

    def kill_when_encoding():
        # The writer's temporary names its owner: it exists only while the job is mid-render.
        deadline = time.monotonic() + 300
        while not killed and time.monotonic() < deadline:
            for path in out.iterdir():
                info = parse_temp_name(path.name)
                if info is not None and info.target_name == "victim.mp4":
                    os.kill(info.pid, signal.SIGKILL)
                    killed.append(info.pid)
                    break
            time.sleep(0.05)

    killer = threading.Thread(target=kill_when_encoding, daemon=True)
    killer.start()
    report = run_batch(_jobs(tmp_path, [_job(inputs, "victim.mp4", seed=7)]), out, scheduler)
    killer.join(timeout=1)
    job, = report["jobs"]
    assert killed, "the job finished before the test could kill its worker"
    assert job["status"] == "done" and job["attempts"] == 2
    assert job["workers"][0] != job["workers"][1], "the job must rerun on another actor"
    assert job["details"]["pid"] != killed[0]
    assert any(kind == "outcome" for kind, _ in events)
    _check_mp4(out / "victim.mp4", 2)
    assert sidecar_path(out / "victim.mp4").is_file() and _temporaries(out) == []

    # The killed actor came back (restarted by Ray) and takes work again.
    second = run_batch(_jobs(tmp_path, [_job(inputs, f"after{i}.mp4", seed=8 + i, max_frames=1) for i in range(2)]), out,
                       scheduler)
    assert [j["status"] for j in second["jobs"]] == ["done", "done"]
    assert len({j["workers"][0] for j in second["jobs"]}) == 2


def test_sharded_clip_equals_the_single_worker_render_frame_for_frame(scheduler, inputs, tmp_path):
    # Lossless: decoded frames are the rendered ones. Two frames: one segment per actor, the
    # fewest that make a join (each frame costs seconds on one CPU thread).
    lossless = dict(seed=3, max_frames=2, crf=0)
    single = run_batch(_jobs(tmp_path, [_job(inputs, "whole.mp4", **lossless)]), tmp_path / "single", scheduler)
    sharded = run_batch(_jobs(tmp_path, [_job(inputs, "sharded.mp4", **lossless)]), tmp_path / "sharded", scheduler,
                        shard=True)
    job, = sharded["jobs"]
    assert single["jobs"][0]["status"] == job["status"] == "done", sharded
    segments = job["details"]["segments"]
    assert [s["frames"] for s in segments] == [[0, 1], [1, 2]] and len({s["worker"] for s in segments}) == 2
    whole = _check_mp4(tmp_path / "single" / "whole.mp4", 2)
    joined = _check_mp4(tmp_path / "sharded" / "sharded.mp4", 2)
    for index, (a, b) in enumerate(zip(whole, joined)):
        assert np.array_equal(a, b), f"frame {index} differs between the sharded and the single render"
    assert not np.array_equal(whole[0], whole[1])  # the frames do move: the order is checked too
    assert not any(p.name.startswith(".segments") for p in (tmp_path / "sharded").iterdir())
