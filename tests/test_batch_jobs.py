"""Batch jobs without models: the jobs file, job hashes and records, and the driver's retry loop."""
from __future__ import annotations

import json
import sys
from collections import deque

import pytest

from ditto_core.atomic_files import temp_sibling
from ditto_core.batch.driver import segment_ranges
from ditto_core.batch.jobs import Job, JobLineError, finished, parse_jobs, remove_partial_files, write_sidecar
from ditto_core.batch.scheduler import Event, Scheduler, Task
from ditto_core.errors import DittoError


@pytest.fixture
def inputs(tmp_path):
    (tmp_path / "face.png").write_bytes(b"portrait bytes")
    (tmp_path / "speech.wav").write_bytes(b"speech bytes")
    return tmp_path


def _write_jobs(folder, lines):
    path = folder / "jobs.jsonl"
    path.write_text("\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n")
    return path


def _job(output, **options):
    return {"source": "face.png", "audio": "speech.wav", "output": output, "options": options}


@pytest.mark.reliability(area="Batch", case="bad lines in jobs.jsonl (bad JSON, missing file, unknown or "
                         "out-of-range option, bad or duplicate output)",
                         behaviour="that line's job fails with a message naming the line and the field; the "
                         "other lines run")
def test_bad_lines_fail_alone_with_line_and_field(inputs, tmp_path):
    jobs_file = _write_jobs(inputs, [
        _job("a.mp4", steps=10),
        "{not json",
        {**_job("b.mp4"), "source": "missing.png"},
        _job("c.mp4", stepz=3),
        _job("d.mp4", steps=0),
        _job("e.mp4", crf=99),
        _job("../f.mp4"),
        _job("a.mp4"),
        {"audio": "speech.wav", "output": "g.mp4"},
        "",
        _job("h.mp4", max_frames=2, emo=[3, 4]),
    ])
    parsed = parse_jobs(jobs_file, tmp_path / "out", "settings")
    assert [p.line for p in parsed] == [1, 2, 3, 4, 5, 6, 7, 8, 9, 11]  # the blank line is no job
    good = [p for p in parsed if isinstance(p, Job)]
    assert [j.name for j in good] == ["a.mp4", "h.mp4"]
    assert good[0].output == (tmp_path / "out" / "a.mp4").resolve() and good[0].source == inputs / "face.png"
    errors = {p.line: p.message for p in parsed if isinstance(p, JobLineError)}
    expected = {2: "not valid JSON", 3: "field source", 4: "options.stepz", 5: "steps", 6: "crf",
                7: "field output", 8: "already written by line 1", 9: "field source: missing"}
    for line, fragment in expected.items():
        assert errors[line].startswith(f"jobs.jsonl line {line}") and fragment in errors[line], errors[line]
    assert str(inputs / "missing.png") in errors[3]


@pytest.mark.reliability(area="Batch", case="hostile jobs.jsonl lines (deep nesting, huge numbers, repeated "
                         "keys, unreadable or overlong paths, outputs nested in each other, infinite or wrong-typed "
                         "options)", behaviour="that line fails with a message naming the line and the field; "
                         "the other lines run")
def test_hostile_lines_fail_alone(inputs, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "taken").write_bytes(b"a file where a folder is needed")
    (out / "folder.mp4").mkdir()
    lines = {
        "nested": "[" * 100_000,
        "digits": '{"source": "face.png", "audio": "speech.wav", "output": "x.mp4", "options": {"seed": 1%s}}'
                  % ("0" * 5000),
        "repeated": '{"source": "face.png", "audio": "speech.wav", "output": "r.mp4", "output": "s.mp4"}',
        "no user": {**_job("u.mp4"), "source": "~no_such_user_zz/face.png"},
        "long source": {**_job("l.mp4"), "source": "a" * 300 + ".png"},
        "unreadable": {**_job("p.mp4"), "source": "/proc/self/mem"},
        "parent": _job("n.mp4"),
        "child": _job("n.mp4/inner.mp4"),
        "control": _job("tab\tname.mp4"),
        "long output": _job("L" * 250 + ".mp4"),
        "under a file": _job("taken/t.mp4"),
        "a folder": _job("folder.mp4"),
        "infinite": '{"source": "face.png", "audio": "speech.wav", "output": "i.mp4", "options": {"max_seconds": Infinity}}',
        "rotation": _job("o.mp4", crop_flag_do_rot="abc"),
        "scale type": _job("c.mp4", crop_scale="2"),
        "keys": _job("k.mp4", use_d_keys=[["exp"]]),
        "good": _job("good.mp4"),
        "outer": _job("m/inner.mp4"),
        "inner first": _job("m"),
    }
    parsed = parse_jobs(_write_jobs(inputs, lines.values()), out, "settings")
    by_case = dict(zip(lines, parsed))
    assert [p.name for p in parsed if isinstance(p, Job)] == ["n.mp4", "good.mp4", "inner.mp4"]
    expected = {
        "nested": "nested too deeply", "digits": "not valid JSON", "repeated": "'output' is given twice",
        "no user": "field source: cannot use", "long source": "field source: cannot use",
        "unreadable": "field source: cannot read /proc/self/mem",
        "child": "lies inside line 7's output n.mp4", "control": "control character",
        "long output": "longer than 200 bytes", "under a file": "is a file, not a folder",
        "a folder": "is a folder; give the name of an MP4", "infinite": "options.max_seconds",
        "rotation": "crop_flag_do_rot must be True or False", "scale type": "crop_scale must be a number",
        "keys": "MotionOptions.use_d_keys", "inner first": "must end in .mp4",
    }
    for case, fragment in expected.items():
        item = by_case[case]
        assert isinstance(item, JobLineError) and fragment in item.message, (case, item)
        assert item.message.startswith(f"jobs.jsonl line {item.line}"), item.message


def test_a_folder_of_a_later_output_is_refused_in_either_order(inputs, tmp_path):
    parsed = parse_jobs(_write_jobs(inputs, [_job("a.mp4/b.mp4"), _job("a.mp4")]), tmp_path / "out", "s")
    assert isinstance(parsed[0], Job)
    assert isinstance(parsed[1], JobLineError) and "is a folder of line 1's output" in parsed[1].message


def test_line_numbers_count_only_newlines_and_a_bom_is_skipped(inputs, tmp_path):
    jobs_file = inputs / "jobs.jsonl"
    spaced = json.dumps(_job("a.mp4", seed=1), ensure_ascii=False)
    split_char = json.dumps({**_job("b.mp4"), "note": "x\u2028y"}, ensure_ascii=False)  # an unknown field: line 3 fails
    jobs_file.write_text("\ufeff" + spaced + "\r\n\f\n" + split_char + "\n" + json.dumps(_job("c.mp4")) + "\n",
                         encoding="utf-8")
    parsed = parse_jobs(jobs_file, tmp_path / "out", "s")
    assert [(p.line, type(p).__name__) for p in parsed] == [(1, "Job"), (3, "JobLineError"), (4, "Job")]
    assert "unknown field 'note'" in parsed[1].message


def test_a_jobs_file_without_jobs_is_refused(inputs, tmp_path):
    with pytest.raises(DittoError, match="holds no jobs"):
        parse_jobs(_write_jobs(inputs, ["", "   "]), tmp_path / "out", "s")


def test_job_hash_covers_inputs_options_and_settings(inputs, tmp_path):
    jobs_file = _write_jobs(inputs, [_job("a.mp4", seed=1), _job("b.mp4", seed=2), _job("c.mp4", seed=1)])
    a, b, c = parse_jobs(jobs_file, tmp_path, "settings-1")
    assert a.job_hash == c.job_hash != b.job_hash  # the output name is not part of what is rendered
    assert parse_jobs(jobs_file, tmp_path, "settings-2")[0].job_hash != a.job_hash
    (inputs / "speech.wav").write_bytes(b"other speech")
    assert parse_jobs(jobs_file, tmp_path, "settings-1")[0].job_hash != a.job_hash


def test_finished_needs_the_record_and_the_same_mp4(inputs, tmp_path):
    job = parse_jobs(_write_jobs(inputs, [_job("a.mp4")]), tmp_path, "s")[0]
    assert finished(job) is None
    job.output.write_bytes(b"video")
    assert finished(job) is None  # an MP4 without its record: rendered again
    write_sidecar(job, {"frames": 3})
    assert finished(job)["frames"] == 3
    job.output.write_bytes(b"vidoe")  # same size, other bytes
    assert finished(job) is None
    job.output.write_bytes(b"video")
    other = parse_jobs(_write_jobs(inputs, [_job("a.mp4", seed=5)]), tmp_path, "s")[0]
    assert finished(other) is None  # another job now writes this output


def test_remove_partial_files_only_touches_its_own_output(tmp_path):
    mine = [temp_sibling(tmp_path / "a.mp4", suffix=".part.mp4"), temp_sibling(tmp_path / "a.mp4.json")]
    others = [temp_sibling(tmp_path / "a.b.mp4", suffix=".part.mp4"), tmp_path / "a.mp4", tmp_path / ".a.mp4.x"]
    for path in others[1:]:
        path.write_bytes(b"x")
    assert sorted(remove_partial_files(tmp_path / "a.mp4")) == sorted(mine)
    assert all(p.exists() for p in others) and not any(p.exists() for p in mine)


@pytest.mark.parametrize("frames, parts", [(10, 3), (2, 5), (15000, 2), (7, 1)])
def test_segment_ranges_cover_the_clip_in_order(frames, parts):
    ranges = segment_ranges(frames, parts)
    assert ranges[0][0] == 0 and ranges[-1][1] == frames and len(ranges) == min(parts, frames)
    assert all(a < b for a, b in ranges) and all(r[1] == s[0] for r, s in zip(ranges, ranges[1:]))
    sizes = [b - a for a, b in ranges]
    assert max(sizes) - min(sizes) <= 1


class FakePool:
    """Workers as plain objects: ``die`` lists (worker, task label) pairs whose worker dies instead of answering."""

    settings = None

    def __init__(self, workers, die=(), fail=()):
        self.names, self.die, self.fail = workers, list(die), set(fail)
        self.events = deque()
        self.handed = []

    def start(self):
        self.events.extend(Event("ready", w, {"pid": i}) for i, w in enumerate(self.names))
        return list(self.names)

    def submit(self, worker, task):
        self.handed.append((worker, task.label))
        if (worker, task.label) in self.die:
            self.die.remove((worker, task.label))
            self.events.extend([Event("died", worker, f"{worker} killed"), Event("ready", worker, {"pid": 9})])
        elif task.label in self.fail:
            self.events.append(Event("done", worker, ("error", f"{task.label} is bad")))
        else:
            self.events.append(Event("done", worker, ("ok", f"{task.label} by {worker}")))

    def wait(self, timeout):
        events, self.events = list(self.events), deque()
        return events

    def close(self):
        pass


def test_scheduler_reruns_a_dead_workers_task_elsewhere_and_never_retries_errors():
    pool = FakePool(["w0", "w1"], die=[("w0", "t0")], fail={"t2"})
    lost = []
    scheduler = Scheduler(pool, max_attempts=3)
    scheduler.on_lost_worker = lost.append
    outcomes = scheduler.run([Task(f"t{i}", "run_job", ()) for i in range(4)])
    assert [o.status for o in outcomes] == ["ok", "ok", "error", "ok"]
    assert outcomes[0].task.tried_on == ["w0", "w1"] and outcomes[0].value == "t0 by w1"
    assert [t.label for t in lost] == ["t0"]
    assert [label for _, label in pool.handed].count("t2") == 1


def test_scheduler_gives_up_after_max_attempts_and_reports_why():
    pool = FakePool(["w0", "w1"], die=[("w0", "t0"), ("w1", "t0"), ("w0", "t0")])
    outcome, = Scheduler(pool, max_attempts=2).run([Task("t0", "run_job", ())])
    assert outcome.status == "lost" and "died 2 times" in outcome.value and "killed" in outcome.value


def test_scheduler_with_no_worker_able_to_start_says_why():
    class Broken(FakePool):
        def start(self):
            self.events.append(Event("ready", "w0", {"error": "w0 on cuda:0: MissingModelError: decoder.pth"}))
            return ["w0"]

    with pytest.raises(DittoError, match="(?s)no worker could start:.*decoder.pth"):
        Scheduler(Broken(["w0"])).run([Task("t0", "run_job", ())])


def test_ray_missing_says_how_to_install(monkeypatch):
    from ditto_core.batch.ray_pool import import_ray

    monkeypatch.setitem(sys.modules, "ray", None)  # what `import ray` meets where Ray is not installed
    with pytest.raises(DittoError, match=r"--ray needs Ray.*pip install ray"):
        import_ray()


@pytest.mark.reliability(area="Batch", case="--shard: the driver cannot join a job's segments",
                         behaviour="that job fails with the reason, its segment folder is removed; the batch goes on")
def test_a_sharded_job_whose_join_fails_fails_alone(inputs, tmp_path):
    from ditto_core.batch.driver import _run_sharded

    class Planning(FakePool):
        def submit(self, worker, task):  # motion of 5 frames; the ranges "render" without writing a segment
            value = list(range(5)) if task.method == "plan_clip" else {"frames": 1}
            self.events.append(Event("done", worker, ("ok", value)))

    out = tmp_path / "out"
    first, second = parse_jobs(_write_jobs(inputs, [_job("a.mp4"), _job("b.mp4")]), out, "s")
    scheduler = Scheduler(Planning(["w0", "w1"]))
    records = [_run_sharded(job, scheduler, out) for job in (first, second)]
    assert [r.status for r in records] == ["failed", "failed"]
    assert records[0].error.startswith("line 1 (a.mp4): ") and records[1].error.startswith("line 2 (b.mp4): ")
    assert "speech.wav" in records[0].error  # the clip's speech could not be read for the join
    assert not list(out.iterdir())  # no segment folder, no partial MP4
