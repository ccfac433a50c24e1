"""The warm worker (``python -m ditto_core worker``) and the render command's hand-off to it.

Protocol, queueing, cancellation and refusals run against a worker in a thread whose pipeline
is a stand-in that writes its MP4 the way the writer does (a temporary, renamed when complete,
deleted on any exception); the end-to-end tests run the real commands as processes with random
weights on the CPU.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from ditto_core.errors import DittoError, InputError
from ditto_core.render_request import RenderRequest, RenderSettings
from ditto_core.worker import client, protocol
from ditto_core.worker.server import Worker, listening, work_folder
from tests.test_signals import _tiny_clip

REPO = Path(__file__).resolve().parents[1]
AREA = "warm worker"
posix_only = pytest.mark.skipif(not protocol.supported(), reason="Unix sockets and user ids (POSIX)")
pytestmark = posix_only

SETTINGS = RenderSettings(models=None, random_weights=True, detect_face=False, device="cpu")


class StandInPipeline:
    """Writes ``out`` as the video writer does; each batch waits for ``batches`` to allow it."""

    batch_size, compile = 0, True

    def __init__(self) -> None:
        self.times = SimpleNamespace(seconds={})
        self.requests: list[dict] = []
        self.batches = threading.Semaphore(1000)
        self.fail: Exception | None = None

    def engine(self):
        return SimpleNamespace(compiled_ready=lambda: True, stats=SimpleNamespace(compiled=True))

    def run(self, image, audio, out, registration, motion, crf, preset, max_seconds, progress, status, encoders):
        self.requests.append({"image": image, "audio": audio, "steps": motion.steps, "seed": motion.seed,
                              "crf": crf, "preset": preset, "max_seconds": max_seconds})
        status("rendering")
        partial = out.with_name(out.name + ".part")
        partial.write_bytes(b"frames")
        try:
            for done in range(1, 5):
                self.batches.acquire()
                progress(done, 4)
            if self.fail is not None:
                raise self.fail
            partial.rename(out)
        finally:
            partial.unlink(missing_ok=True)
        self.times.seconds["render_video"] = 0.25
        return out


@pytest.fixture
def worker(tmp_path):
    """A worker on a stand-in pipeline in a thread: (socket path, Worker, pipeline)."""
    path = tmp_path / "run" / "w.sock"
    pipeline = StandInPipeline()
    started = threading.Event()
    holder = {}

    def serve():
        with listening(path) as listener:
            holder["worker"] = Worker(SETTINGS, pipeline, listener)
            started.set()
            holder["worker"].serve()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert started.wait(10)
    yield path, holder["worker"], pipeline
    holder["worker"].stop(cancel=True)
    thread.join(10)
    assert not thread.is_alive()
    assert not path.exists(), "a stopped worker removes its socket"


def _request(tmp_path, name="talk.mp4", **options) -> RenderRequest:
    image, audio = tmp_path / "portrait.png", tmp_path / "speech.wav"
    image.write_bytes(b"png")
    audio.write_bytes(b"wav")
    (tmp_path / "out").mkdir(exist_ok=True)
    return RenderRequest(image=image, audio=audio, out=tmp_path / "out" / name, **options)


def _release_when_cancelled(w: Worker, pipeline: StandInPipeline) -> threading.Thread:
    """Let the stand-in's batches go on once the worker has seen its job's cancel (not before:
    the job would finish first)."""
    def wait_then_release():
        deadline = time.monotonic() + 10
        while not (w._cancels and all(event.is_set() for event in w._cancels)) and time.monotonic() < deadline:
            time.sleep(0.01)
        for _ in range(4):
            pipeline.batches.release()

    thread = threading.Thread(target=wait_then_release)
    thread.start()
    return thread


def _hand_off(path, request, settings=SETTINGS, on_progress=None):
    statuses, progress = [], []

    def report(done, total):
        progress.append((done, total))
        if on_progress:
            on_progress(done, total)

    done = client.hand_off(path, settings, request, statuses.append, report)
    return done, statuses, progress


@pytest.mark.reliability(area=AREA, case="a render handed to a running worker",
                         behaviour="the worker renders it with the request's options; the client relays every "
                                   "status and progress report and gets the MP4's path and stage times")
def test_a_job_is_rendered_by_the_worker_with_its_options(worker, tmp_path):
    path, _, pipeline = worker
    request = _request(tmp_path, steps=7, seed=11, crf=23, preset="superfast", max_seconds=1.5)
    done, statuses, progress = _hand_off(path, request)
    assert done["out"] == str(request.out) and request.out.read_bytes() == b"frames"
    assert done["times"] == {"render_video": 0.25}
    assert pipeline.requests == [{"image": request.image, "audio": request.audio, "steps": 7, "seed": 11, "crf": 23,
                                  "preset": "superfast", "max_seconds": 1.5}]
    assert any("handed to the warm worker" in s for s in statuses) and "rendering" in statuses
    assert progress == [(1, 4), (2, 4), (3, 4), (4, 4)]


def test_no_worker_means_the_caller_renders(tmp_path):
    assert client.hand_off(tmp_path / "none.sock", SETTINGS, _request(tmp_path), print, print) is None
    stale = tmp_path / "stale.sock"  # a dead worker's socket file: nothing accepts on it
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(stale))
    listener.close()
    assert stale.exists() and client.hand_off(stale, SETTINGS, _request(tmp_path), print, print) is None


def test_a_default_socket_folder_that_cannot_be_trusted_means_the_caller_renders(tmp_path, monkeypatch):
    """No $XDG_RUNTIME_DIR and a user cache of another user's: `--worker auto` renders here
    (and says why); `--worker start` cannot start a worker there and says so."""
    from ditto_core.worker import cli as worker_cli

    monkeypatch.delenv("DITTO_WORKER_SOCKET", raising=False)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    (tmp_path / "xdg" / "comfyui-ditto").mkdir(parents=True, mode=0o700)
    uid = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: uid + 1)
    statuses = []
    progress = SimpleNamespace(status=statuses.append)
    args = SimpleNamespace(socket=None, worker="auto")
    assert worker_cli.hand_off(args, SETTINGS, _request(tmp_path), progress) is None
    assert len(statuses) == 1 and "another user" in statuses[0] and "rendering here" in statuses[0]
    with pytest.raises(DittoError, match="another user"):
        worker_cli.hand_off(SimpleNamespace(socket=None, worker="start"), SETTINGS, _request(tmp_path), progress)


@pytest.mark.parametrize("change", ["settings", "code"])
def test_a_worker_for_other_settings_or_code_refuses_and_the_caller_renders(worker, tmp_path, monkeypatch, change):
    path, _, pipeline = worker
    settings = SETTINGS
    if change == "settings":
        settings = RenderSettings(models=None, random_weights=True, detect_face=False, device="cpu", precision="bf16")
    else:
        monkeypatch.setattr(protocol, "code_identity", lambda: "another checkout")
    done, statuses, _ = _hand_off(path, _request(tmp_path), settings)
    assert done is None and pipeline.requests == []
    why = "other precision" if change == "settings" else "another version of ditto_core"
    assert len(statuses) == 1 and why in statuses[0] and "rendering here" in statuses[0]


@pytest.mark.reliability(area=AREA, case="Ctrl-C in `render` while the worker renders its clip",
                         behaviour="the worker stops the job at its next batch and deletes the partial MP4 before the "
                                   "client exits; the worker serves the next job")
def test_an_interrupted_client_cancels_its_job_and_nothing_is_left(worker, tmp_path):
    path, w, pipeline = worker
    request = _request(tmp_path)
    pipeline.batches = threading.Semaphore(2)  # the job waits at its third batch until the cancel is in

    def interrupt(done, total):
        if done == 2:
            _release_when_cancelled(w, pipeline)
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _hand_off(path, request, on_progress=interrupt)
    # hand_off returned only after the worker confirmed: its clean-up is done already.
    assert list((tmp_path / "out").iterdir()) == []
    pipeline.batches = threading.Semaphore(1000)
    done, _, _ = _hand_off(path, _request(tmp_path, "next.mp4"))
    assert Path(done["out"]).exists() and w.jobs == 2


def test_a_cancel_that_comes_after_the_mp4_is_done_reports_the_mp4(worker, tmp_path):
    path, _, pipeline = worker
    request = _request(tmp_path)

    def interrupt(done, total):
        if done == 4:
            time.sleep(0.2)  # the worker publishes the MP4 meanwhile
            raise KeyboardInterrupt

    done, _, _ = _hand_off(path, request, on_progress=interrupt)
    assert done["type"] == "done" and request.out.read_bytes() == b"frames"


@pytest.mark.reliability(area=AREA, case="the client process dies (its connection drops) mid-render",
                         behaviour="the worker cancels the job at its next batch; no MP4 and no temporary remain")
def test_a_client_that_disconnects_cancels_its_job(worker, tmp_path):
    path, w, pipeline = worker
    request = _request(tmp_path)
    pipeline.batches = threading.Semaphore(1)  # the job waits at its second batch
    connection = client.connect(path)
    with connection.makefile("rb") as reader:
        protocol.send(connection, {"type": "job", "code": protocol.code_identity(), "settings": SETTINGS.to_json(),
                                   "request": request.to_json()})
        while protocol.receive(reader)["type"] != "progress":
            pass
    connection.close()
    _release_when_cancelled(w, pipeline).join()
    deadline = time.monotonic() + 10
    while w.jobs < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert w.jobs == 1 and list((tmp_path / "out").iterdir()) == []


@pytest.mark.reliability(area=AREA, case="two renders handed to one worker at once",
                         behaviour="the second waits (told how many jobs are ahead) and runs after the first; both "
                                   "MP4s complete")
def test_jobs_queue_one_at_a_time(worker, tmp_path):
    path, w, pipeline = worker
    pipeline.batches = threading.Semaphore(0)  # the first job waits at its first batch
    results = {}

    def first():
        results["first"] = _hand_off(path, _request(tmp_path, "first.mp4"))

    thread = threading.Thread(target=first)
    thread.start()
    deadline = time.monotonic() + 10
    while not pipeline.requests and time.monotonic() < deadline:
        time.sleep(0.01)
    second_statuses = []

    def second():
        results["second"] = client.hand_off(path, SETTINGS, _request(tmp_path, "second.mp4"), second_statuses.append,
                                            lambda done, total: None)

    other = threading.Thread(target=second)
    other.start()
    while not any("job(s) ahead" in s for s in second_statuses) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert "waiting for the warm worker: 1 job(s) ahead" in second_statuses
    assert len(pipeline.requests) == 1  # the second has not started
    for _ in range(8):
        pipeline.batches.release()
    thread.join(10)
    other.join(10)
    assert results["first"][0]["out"].endswith("first.mp4") and results["second"]["out"].endswith("second.mp4")
    assert [r["image"] for r in pipeline.requests] == [tmp_path / "portrait.png"] * 2 and w.jobs == 2


@pytest.mark.reliability(area=AREA, case="the worker is stopped (SIGTERM, Ctrl-C) while it renders a clip",
                         behaviour="the clip stops at its next batch, its partial MP4 is deleted, and the render "
                                   "command reports that the worker stopped and nothing was written")
def test_a_worker_stopped_mid_clip_reports_it_and_leaves_nothing(worker, tmp_path):
    path, w, pipeline = worker
    pipeline.batches = threading.Semaphore(1)
    request = _request(tmp_path)

    def stop_the_worker(done, total):
        w.stop(cancel=True)  # what its SIGTERM does
        pipeline.batches.release()

    with pytest.raises(client.WorkerError) as caught:
        _hand_off(path, request, on_progress=stop_the_worker)
    assert caught.value.kind == "cancelled" and "the warm worker was stopped before talk.mp4" in str(caught.value)
    assert list(request.out.parent.iterdir()) == []


@pytest.mark.reliability(area=AREA, case="a clip queued behind another when the worker stops",
                         behaviour="the worker sends it back and the render command renders it in its own process")
def test_a_clip_queued_when_the_worker_stops_is_sent_back(worker, tmp_path):
    path, w, pipeline = worker
    pipeline.batches = threading.Semaphore(0)  # the first clip holds the pipeline
    first = threading.Thread(target=lambda: pytest.raises(client.WorkerError, _hand_off, path, _request(tmp_path)))
    first.start()
    deadline = time.monotonic() + 10
    while not pipeline.requests and time.monotonic() < deadline:
        time.sleep(0.01)
    statuses = []

    def stop_when_queued(text):
        statuses.append(text)
        if "job(s) ahead" in text:
            w.stop(cancel=True)
            for _ in range(4):
                pipeline.batches.release()

    assert client.hand_off(path, SETTINGS, _request(tmp_path, "queued.mp4"), stop_when_queued,
                           lambda done, total: None) is None
    assert "cannot take this job (it is stopping); rendering here" in statuses[-1]
    first.join(10)
    assert list((tmp_path / "out").iterdir()) == [] and len(pipeline.requests) == 1


@pytest.mark.reliability(area=AREA, case="`worker --stop` while the worker renders a clip",
                         behaviour="the clip finishes and is delivered; then the worker exits and removes its socket")
def test_a_stop_lets_the_running_clip_finish(tmp_path):
    path = tmp_path / "run" / "w.sock"
    pipeline = StandInPipeline()
    pipeline.batches = threading.Semaphore(1)
    with listening(path) as listener:
        w = Worker(SETTINGS, pipeline, listener)
        serving = threading.Thread(target=w.serve)
        serving.start()

        def stop_then_go_on(done, total):
            if done == 1:
                assert client.ask(path, {"type": "stop"})["type"] == "stopping"
                for _ in range(3):
                    pipeline.batches.release()

        done, _, progress = _hand_off(path, _request(tmp_path), on_progress=stop_then_go_on)
        serving.join(10)
        assert not serving.is_alive()
    assert done["type"] == "done" and progress[-1] == (4, 4) and (tmp_path / "out" / "talk.mp4").exists()
    assert not path.exists()


def _one_shot_server(path: Path, answers: list[dict]) -> threading.Thread:
    """A socket at ``path`` that takes one connection, sends ``answers`` and closes it (with no
    answers: never accepts, and closes the listener, as a worker that dies while loading)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(1)

    def serve():
        if answers:
            connection, _ = listener.accept()
            with connection:
                connection.makefile("rb").readline()
                for answer in answers:
                    protocol.send(connection, answer)
        else:
            time.sleep(0.5)
        listener.close()

    thread = threading.Thread(target=serve)
    thread.start()
    return thread


@pytest.mark.reliability(area=AREA, case="the worker dies before or after taking the clip (killed while loading, "
                         "or mid-render)", behaviour="before: the render command renders the clip itself, saying "
                         "why; after: a one-line error that nothing was written, never a traceback")
@pytest.mark.parametrize("when", ["before", "after"])
def test_a_worker_that_goes_away_is_reported_by_what_it_had_taken(tmp_path, when):
    path = tmp_path / "w.sock"
    server = _one_shot_server(path, [] if when == "before" else [{"type": "accepted", "pid": 123}])
    request = _request(tmp_path)
    if when == "before":
        done, statuses, _ = _hand_off(path, request)
        assert done is None and "went away before taking the job" in statuses[-1] and "rendering here" in statuses[-1]
    else:
        with pytest.raises(client.WorkerError, match=r"pid 123\) stopped before the video was finished") as caught:
            _hand_off(path, request)
        assert caught.value.kind == "lost"
    server.join(10)


def test_a_failed_job_is_reported_and_the_worker_goes_on(worker, tmp_path):
    path, w, pipeline = worker
    pipeline.fail = InputError("speech.wav: no audio stream; give a file with speech")
    with pytest.raises(client.WorkerError) as caught:
        _hand_off(path, _request(tmp_path))
    assert caught.value.kind == "input" and "no audio stream" in str(caught.value)
    pipeline.fail = RuntimeError("a library bug")
    with pytest.raises(client.WorkerError) as caught:
        _hand_off(path, _request(tmp_path))
    assert caught.value.kind == "failed" and "RuntimeError: a library bug" in str(caught.value)
    assert list((tmp_path / "out").iterdir()) == []
    pipeline.fail = None
    assert _hand_off(path, _request(tmp_path))[0] is not None and w.jobs == 3


def test_a_request_is_checked_field_by_field(worker, tmp_path):
    path, _, pipeline = worker
    good = _request(tmp_path).to_json()
    for bad, why in ((dict(good, steps="25"), "field steps must be int"), (dict(good, image="relative.png"),
                     "must be an absolute path"), (dict(good, colour=1), "unknown field(s) colour")):
        connection = client.connect(path)
        with connection, connection.makefile("rb") as reader:
            protocol.send(connection, {"type": "job", "code": protocol.code_identity(), "settings": SETTINGS.to_json(),
                                       "request": bad})
            answer = protocol.receive(reader)
        assert answer["type"] == "error" and answer["kind"] == "input" and why in answer["message"], answer
    assert pipeline.requests == []


def test_garbage_and_oversized_messages_end_only_their_connection(worker, tmp_path):
    path, _, _ = worker
    for junk in (b"not json\n", b"[1, 2]\n", b"[" * 60_000 + b"\n", b"x" * (protocol.MAX_MESSAGE_BYTES + 10) + b"\n"):
        connection = client.connect(path)
        with connection, connection.makefile("rb") as reader:
            connection.sendall(junk)
            answer = protocol.receive(reader)
            assert answer["type"] == "error" and answer["kind"] == "input", answer
            assert answer["message"].startswith("not a worker message"), answer
            assert protocol.receive(reader) is None  # then closed
    assert client.ask(path, {"type": "info"})["jobs"] == 0


def test_a_silent_client_is_dropped(worker, monkeypatch):
    path, w, _ = worker
    monkeypatch.setattr("ditto_core.worker.server.FIRST_MESSAGE_S", 0.2)
    connection = client.connect(path)
    with connection, connection.makefile("rb") as reader:
        assert protocol.receive(reader) is None  # closed by the worker, not left waiting
    assert client.ask(path, {"type": "info"})["type"] == "info"


def test_info_and_stop(worker, tmp_path):
    path, w, _ = worker
    info = client.ask(path, {"type": "info"})
    assert info["pid"] == os.getpid() and info["settings"] == SETTINGS.to_json() and info["engine"] == "compiled"
    assert client.ask(path, {"type": "stop"})["type"] == "stopping"
    deadline = time.monotonic() + 10
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not path.exists()


@pytest.mark.reliability(area=AREA, case="a second worker started on the socket of a running one",
                         behaviour="refused, naming the running worker's pid and how to stop it; the first keeps "
                                   "serving")
def test_one_worker_per_socket(worker):
    path, _, _ = worker
    with pytest.raises(InputError, match=rf"a worker already serves .*\(pid {os.getpid()}\).*--stop"):
        with listening(path):
            pass
    assert client.ask(path, {"type": "info"}) is not None


@pytest.mark.reliability(area=AREA, case="two `render --worker start` at once (two workers started for one socket)",
                         behaviour="the second worker stops at once (the socket's lock is taken before any model "
                                   "loads) and its render waits for the first worker, which serves both")
def test_a_start_beside_a_starting_worker_waits_for_it(tmp_path):
    path = tmp_path / "run" / "w.sock"
    with listening(path) as listener:  # a worker still loading its models: it holds the socket, answers nothing yet
        w = Worker(SETTINGS, StandInPipeline(), listener)
        serving = threading.Timer(4.0, w.serve)  # ... until its models are loaded
        serving.start()
        try:
            log = client.start_worker(path, SETTINGS, idle_minutes=1, wait_s=120)
        finally:
            w.stop()
            serving.join(10)
    deadline = time.monotonic() + 60
    while "a worker already serves" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "a worker already serves" in log.read_text()  # the one started here gave way


@pytest.mark.reliability(area=AREA, case="the worker's socket folder can be entered by other users",
                         behaviour="neither the worker nor a client uses it; the message names the folder and "
                                   "`chmod 700`")
def test_a_folder_other_users_can_enter_is_refused(tmp_path):
    folder = tmp_path / "shared"
    folder.mkdir(mode=0o777)
    folder.chmod(0o777)
    with pytest.raises(InputError, match="must belong to you alone.*chmod 700"):
        with listening(folder / "w.sock"):
            pass
    assert client.connect(folder / "w.sock") is None  # no socket there: nothing to distrust, the caller renders
    planted = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    planted.bind(str(folder / "w.sock"))  # one that anybody could have put there
    planted.listen(1)
    with planted, pytest.raises(InputError, match="must belong to you alone"):
        client.connect(folder / "w.sock")


@pytest.mark.reliability(area=AREA, case="the socket's folder is ours but lies in a folder others can write",
                         behaviour="refused naming that folder (they could put a folder of theirs in its place); "
                                   "under a sticky folder such as /tmp it is used")
def test_a_private_folder_inside_one_others_write_is_refused(tmp_path):
    shared = tmp_path / "shared"
    mine = shared / "mine"
    mine.mkdir(parents=True, mode=0o700)
    shared.chmod(0o777)
    with pytest.raises(InputError, match=rf"--socket .*lies in {shared} \(mode 777\)"):
        with listening(mine / "w.sock"):
            pass
    planted = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    planted.bind(str(mine / "w.sock"))
    planted.listen(1)
    with planted, pytest.raises(InputError, match="lies in"):
        client.connect(mine / "w.sock")
    shared.chmod(0o1777)
    with listening(mine / "w.sock"):
        assert (mine / "w.sock").exists()


def test_a_socket_path_too_long_for_the_system_is_refused_by_its_flag(tmp_path):
    path = tmp_path / ("w" * protocol.MAX_SOCKET_PATH_BYTES) / "w.sock"
    with pytest.raises(InputError, match=r"--socket .* bytes long; a Unix socket's path may have at most"):
        with listening(path):
            pass
    assert not path.parent.exists()  # nothing made
    assert client.hand_off(path, SETTINGS, _request(tmp_path), print, print) is None  # no worker there: render here


@pytest.mark.reliability(area=AREA, case="--socket names an existing file that is not a socket (or its lock file "
                         "is not a worker's)", behaviour="refused by the flag; the file is left as it was")
@pytest.mark.parametrize("which", ["socket", "lock"])
def test_a_file_in_the_sockets_place_is_never_touched(tmp_path, which):
    folder = tmp_path / "run"
    folder.mkdir(mode=0o700)
    path = folder / "notes.txt"
    victim = path if which == "socket" else protocol.lock_file(path)
    victim.write_text("precious\n")
    with pytest.raises(InputError, match=r"--socket .*notes.txt.* exists and is not a .*; it is left alone"):
        with listening(path):
            pass
    assert victim.read_text() == "precious\n"


def test_a_socket_under_a_file_is_refused_by_its_flag(tmp_path):
    (tmp_path / "afile").write_bytes(b"")
    path = tmp_path / "afile" / "sub" / "w.sock"
    with pytest.raises(InputError, match=r"--socket .*: cannot use the folder"):
        with listening(path):
            pass
    assert client.connect(path) is None  # nothing can listen there: the caller renders


def test_a_shared_folder_gets_advice_that_works(tmp_path, monkeypatch):
    """A sticky world-writable folder (like /tmp) cannot be made private with chmod: the advice is a
    folder of one's own, naming the variable that chose the path; `--worker auto` renders here."""
    from ditto_core.worker import cli as worker_cli

    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    monkeypatch.setenv("DITTO_WORKER_SOCKET", str(shared / "w.sock"))
    with pytest.raises(InputError, match=r"DITTO_WORKER_SOCKET .*mode 1777.*mkdir -m 700 .*--socket .*worker.sock"):
        with listening(shared / "w.sock", protocol.socket_source(None)):
            pass
    statuses = []
    args = SimpleNamespace(socket=None, worker="auto")
    assert worker_cli.hand_off(args, SETTINGS, _request(tmp_path), SimpleNamespace(status=statuses.append)) is None
    assert "DITTO_WORKER_SOCKET" in statuses[0] and "rendering here" in statuses[0]


def test_a_stale_pid_in_the_lock_file_is_no_live_worker(tmp_path):
    path = tmp_path / "w.sock"
    protocol.lock_file(path).write_text(str(os.getpid()))  # a live pid, but nobody holds the lock
    assert not client._lock_holder_alive(path)
    with listening(path):
        assert client._lock_holder_alive(path)
    assert not client._lock_holder_alive(path)


@pytest.mark.parametrize("value, reason", [("-1", "must be 0 (never) or a positive number of minutes"),
                                           ("nan", "must be 0 (never) or a positive number of minutes"),
                                           ("soon", "is not a number of minutes")])
def test_a_bad_idle_time_is_refused_by_its_flag(capsys, value, reason):
    from ditto_core.__main__ import main

    with pytest.raises(SystemExit) as caught:
        main(["worker", "--random-weights", "--idle-minutes", value])
    line = capsys.readouterr().err.splitlines()[0]
    assert caught.value.code == 2 and "argument --idle-minutes: " in line and reason in line, line


def test_an_idle_worker_exits_and_removes_its_socket(tmp_path):
    path = tmp_path / "w.sock"
    start = time.monotonic()
    with listening(path) as listener:
        Worker(SETTINGS, StandInPipeline(), listener, idle_s=0.3).serve()
    assert 0.3 <= time.monotonic() - start < 10 and not path.exists()


def test_changed_model_files_make_the_worker_refuse_and_exit(tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    (models / "decoder.pth").write_bytes(b"old")
    settings = RenderSettings(models=models, device="cpu", cache_dir=models / "avatars")
    path = tmp_path / "w.sock"
    with listening(path) as listener:
        w = Worker(settings, StandInPipeline(), listener)
        thread = threading.Thread(target=w.serve)
        thread.start()
        (models / "avatars").mkdir()  # the avatar cache growing, under any name, is no change of the models
        (models / "avatars" / "avatar.safetensors").write_bytes(b"cached")
        assert _hand_off(path, _request(tmp_path), settings)[0] is not None
        (models / "decoder.pth").write_bytes(b"new download")
        done, statuses, _ = _hand_off(path, _request(tmp_path, "b.mp4"), settings)
        thread.join(10)
    assert done is None and "model files changed" in statuses[0] and not thread.is_alive()


def test_settings_and_requests_round_trip_through_json(tmp_path):
    request = _request(tmp_path, steps=3, emo=2, eye_lock=True, preset="medium", encoders=2, max_seconds=4)
    assert RenderRequest.from_json(json.loads(json.dumps(request.to_json()))) == request
    settings = RenderSettings(models=tmp_path, device="cuda:1", precision="fp16", batch_size=8, cache_dir=tmp_path / "c")
    assert RenderSettings.from_json(json.loads(json.dumps(settings.to_json()))) == settings
    args = SimpleNamespace(random_weights=False, models=Path("models/ditto"), cache_dir=None, seed=5, cropped=True,
                           device=None, precision="fp16", batch_size=0)
    settings = RenderSettings.from_args(args)
    assert settings.models == Path("models/ditto").absolute() and settings.cache_dir == settings.models / "cache"
    assert settings.detect_face is False and settings.weights_seed == 0  # the seed is the motion's, not the weights'


@pytest.mark.parametrize("settings", [
    RenderSettings(models=Path("/m"), detect_face=False, device="cuda:1", precision="fp16", batch_size=8,
                   cache_dir=Path("/c")),
    RenderSettings(models=Path("/m"), cache_dir=Path("/m/cache")),
    RenderSettings(models=None, random_weights=True, weights_seed=7, detect_face=False, device="cpu"),
])
def test_a_started_worker_loads_the_settings_of_the_render_that_started_it(settings):
    from ditto_core.__main__ import build_parser

    args = build_parser().parse_args(["worker", *client.settings_flags(settings)])
    assert RenderSettings.from_args(args) == settings


# -- the real commands --------------------------------------------------------------------------


RENDER_WITHOUT_TORCH = """
import sys
from ditto_core.__main__ import main
status = main(sys.argv[1:])
print("torch imported:", "torch" in sys.modules, file=sys.stderr)
sys.exit(status)
"""


@pytest.mark.slow
@pytest.mark.reliability(area=AREA, case="`render --worker start` with no worker, `render` again with bad input, SIGTERM",
                         behaviour="the first call starts a detached worker that renders its clip; the second's error "
                                   "comes back from the worker as the command's own (exit 2); neither render process "
                                   "imports torch; SIGTERM stops the worker and removes its socket")
def test_render_commands_hand_their_clips_to_a_worker(tmp_path):
    image, audio = _tiny_clip(tmp_path)
    socket_path = tmp_path / "run" / "w.sock"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    common = ["render", "--image", str(image), "--audio", str(audio), "--random-weights", "--device", "cpu",
              "--steps", "2", "--preset", "ultrafast", "--batch-size", "1", "--socket", str(socket_path)]
    runs = [subprocess.run([sys.executable, "-c", RENDER_WITHOUT_TORCH, *common, "--out", str(tmp_path / name),
                            "--worker", mode, "--max-seconds", seconds],
                           cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
            for name, mode, seconds in (("a.mp4", "start", "0.2"), ("b.mp4", "auto", "0.1"))]
    info = client.ask(socket_path, {"type": "info"})
    try:
        assert runs[0].returncode == 0 and "starting a warm worker" in runs[0].stderr, runs[0].stderr
        assert f"wrote {tmp_path / 'a.mp4'}" in runs[0].stdout and (tmp_path / "a.mp4").stat().st_size > 0
        assert runs[1].returncode == 2 and "starting a warm worker" not in runs[1].stderr, runs[1].stderr
        assert "error: speech for HuBERT: the audio lasts 0.100 s, too short to animate" in runs[1].stderr
        assert not (tmp_path / "b.mp4").exists()
        for run in runs:
            assert "handed to the warm worker" in run.stderr and "torch imported: False" in run.stderr, run.stderr
        assert info["jobs"] == 2
        assert work_folder(socket_path).is_dir()  # its scratch files lie beside its socket, in the private folder
    finally:
        os.kill(info["pid"], signal.SIGTERM)
    deadline = time.monotonic() + 30
    while socket_path.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not socket_path.exists() and not work_folder(socket_path).exists()
    assert "worker stopped (terminated by SIGTERM)" in (socket_path.parent / "worker.log").read_text()
