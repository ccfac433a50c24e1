"""ditto_core.atomic_files: temporaries named for their owner, atomic publish with the umask's
mode, reaping what dead processes left, and disk-full errors with nothing half-written."""
from __future__ import annotations

import errno
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from ditto_core import atomic_files
from ditto_core.atomic_files import (
    DiskFullError, atomic_dir, atomic_target, atomic_write, atomic_write_bytes, parse_temp_name, publish,
    reap_stale_temporaries, temp_sibling,
)
from ditto_core.errors import DittoError
from tests.process_support import LiveTemp, stale_temp

AREA = "Files and processes"


@pytest.fixture
def umask():
    """Set the process umask for one test (restored afterwards)."""
    previous = os.umask(0o022)
    os.umask(previous)
    yield lambda mask: os.umask(mask)
    os.umask(previous)


def _listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_temp_names_parse_and_foreign_names_do_not():
    info = parse_temp_name(".clip.mp4.~ditto.42.1234.0123abcd.deadbeef.part.mp4")
    assert info is not None and (info.target_name, info.pid, info.start, info.host) == ("clip.mp4", 42, 1234, "0123abcd")
    for foreign in ("clip.mp4", ".clip.mp4.tmp", ".clip.mp4.~ditto.42.part.mp4", "clip.mp4.~ditto.42.1.0123abcd.deadbeef",
                    ".clip.~ditto.x.1.0123abcd.deadbeef"):
        assert parse_temp_name(foreign) is None, foreign


@pytest.mark.reliability(area=AREA, case="finished files and cache files under any umask (0o022, 0o002, 0o077)",
                         behaviour="get the mode a plain file would (0o666 less the umask), never the temporary's 0o600")
@pytest.mark.parametrize("mask", [0o022, 0o002, 0o077])
def test_published_file_gets_the_umask_mode(tmp_path, umask, mask):
    umask(mask)
    target = tmp_path / "clip.mp4"
    atomic_write_bytes(target, b"data")
    with atomic_target(tmp_path / "other.bin") as temp:
        assert (temp.stat().st_mode & 0o777) == 0o666 & ~mask  # already while being written
        temp.write_bytes(b"x")
    with atomic_dir(tmp_path / "entry") as folder:
        (folder / "a").write_bytes(b"a")
    assert (target.stat().st_mode & 0o777) == 0o666 & ~mask
    assert ((tmp_path / "other.bin").stat().st_mode & 0o777) == 0o666 & ~mask
    assert ((tmp_path / "entry").stat().st_mode & 0o777) == 0o777 & ~mask
    assert _listing(tmp_path) == ["clip.mp4", "entry", "other.bin"]


def test_temp_sibling_names_its_owner_and_target(tmp_path):
    temp = temp_sibling(tmp_path / "clip.mp4", suffix=".part.mp4")
    info = parse_temp_name(temp.name)
    assert temp.parent == tmp_path and temp.name.endswith(".part.mp4") and temp.stat().st_size == 0
    assert info.target_name == "clip.mp4" and info.pid == os.getpid()
    assert atomic_files.owner_is_alive(info) is True
    long_name = "n" * 250 + ".mp4"  # the temporary's name must still fit NAME_MAX
    assert parse_temp_name(temp_sibling(tmp_path / long_name).name) is not None
    with pytest.raises(ValueError, match="suffix"):
        temp_sibling(tmp_path / "clip.mp4", suffix="/../x")


def test_failed_write_leaves_target_and_folder_as_they_were(tmp_path):
    target = tmp_path / "weights.safetensors"
    target.write_bytes(b"old")

    def fail(temp: Path) -> None:
        temp.write_bytes(b"half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(target, fail)
    assert target.read_bytes() == b"old" and _listing(tmp_path) == ["weights.safetensors"]
    atomic_write(target, lambda temp: temp.write_bytes(b"new"))
    assert target.read_bytes() == b"new" and _listing(tmp_path) == ["weights.safetensors"]


def test_atomic_dir_first_writer_wins_unless_replacing(tmp_path):
    target = tmp_path / "entry"
    for content, replace in ((b"first", False), (b"second", False), (b"third", True)):
        with atomic_dir(target, replace=replace) as folder:
            (folder / "data").write_bytes(content)
            (folder / "meta").write_bytes(content)
        assert _listing(tmp_path) == ["entry"]
        assert _listing(target) == ["data", "meta"]
    assert (target / "data").read_bytes() == b"third" == (target / "meta").read_bytes()
    assert publish(temp_sibling(target, directory=True), target) is False
    assert _listing(tmp_path) == ["entry"]


@pytest.mark.reliability(area=AREA, case="temporaries left by killed processes (SIGKILL, power loss) in an output or "
                                          "cache folder",
                         behaviour="reap_stale_temporaries removes those of dead processes and of reused pids; keeps "
                                   "those of live processes, of owners it cannot check (until a day old) and every "
                                   "file not named by us")
def test_reap_removes_only_dead_processes_temporaries(tmp_path):
    with LiveTemp(tmp_path / "live.mp4") as live:
        dead_temp = stale_temp(tmp_path, "dead.mp4")
        info = parse_temp_name(live.path.name)
        pid, host = live.process.pid, info.host
        reused = tmp_path / f".reused.mp4.~ditto.{pid}.{info.start + 1}.{host}.00000000.tmp"
        foreign_host = tmp_path / f".remote.mp4.~ditto.{pid}.5.ffffffff.00000000.tmp"
        old_foreign = tmp_path / f".old.mp4.~ditto.{pid}.5.ffffffff.00000001.tmp"
        dead_folder = stale_temp(tmp_path, "entry", suffix="")
        dead_folder.unlink()
        dead_folder.mkdir()
        (dead_folder / "tensors").write_bytes(b"x")
        for path in (reused, foreign_host, old_foreign):
            path.write_bytes(b"x")
        day_ago = time.time() - atomic_files.FOREIGN_TEMP_AGE_S - 60
        os.utime(old_foreign, (day_ago, day_ago))
        mine = temp_sibling(tmp_path / "mine.mp4")
        foreign = ["clip.mp4", ".clip.mp4.tmp", ".x.~ditto.notapid.mp4", "ditto_abc"]
        for name in foreign:
            (tmp_path / name).write_bytes(b"user data")
        link = stale_temp(tmp_path, "link")
        link.unlink()
        os.symlink(dead_temp, link)

        reaped = reap_stale_temporaries(tmp_path)

        assert sorted(reaped) == sorted([dead_temp, reused, old_foreign, dead_folder])
        left = set(_listing(tmp_path))
        assert {live.path.name, foreign_host.name, mine.name, link.name, *foreign} <= left
        assert not {dead_temp.name, reused.name, old_foreign.name, dead_folder.name} & left
        assert reap_stale_temporaries(tmp_path) == []
        assert reap_stale_temporaries(tmp_path / "missing") == []
    assert reap_stale_temporaries(tmp_path) == [live.path]  # its owner has exited now


def test_reap_depth_searches_subfolders_without_following_links(tmp_path):
    (tmp_path / "videos" / "ditto").mkdir(parents=True)
    deep = stale_temp(tmp_path / "videos" / "ditto", "clip.mp4")
    outside = tmp_path.parent / f"{tmp_path.name}_elsewhere"
    outside.mkdir()
    behind_link = stale_temp(outside, "clip.mp4")
    os.symlink(outside, tmp_path / "linked", target_is_directory=True)
    assert reap_stale_temporaries(tmp_path, depth=1) == []
    assert reap_stale_temporaries(tmp_path, depth=5) == [deep]
    assert behind_link.exists()


@pytest.mark.reliability(area=AREA, case="disk full (ENOSPC) or quota exceeded (EDQUOT) while writing a file, "
                                          "injected",
                         behaviour="DiskFullError (a DittoError and an OSError) naming the folder, the space needed and "
                                   "the space free; the target keeps its old content, no temporary is left")
@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_injected_disk_full_is_reported_with_nothing_half_written(tmp_path, code):
    target = tmp_path / "entry.safetensors"
    target.write_bytes(b"old")

    def fill(temp: Path) -> None:
        temp.write_bytes(b"partial")
        raise OSError(code, os.strerror(code))

    with pytest.raises(DiskFullError) as caught:
        atomic_write(target, fill, needed=3 << 20)
    error = caught.value
    assert isinstance(error, DittoError) and isinstance(error, OSError) and error.errno == code
    message = str(error)
    assert str(tmp_path) in message and "3.0 MiB" in message and "free" in message, message
    assert ("quota" in message) == (code == errno.EDQUOT)
    again = pickle.loads(pickle.dumps(error))  # unsafe-ok: in memory, as a batch worker hands it to its parent
    assert type(again) is DiskFullError and str(again) == message and again.errno == code
    assert target.read_bytes() == b"old" and _listing(tmp_path) == ["entry.safetensors"]


def test_rust_io_error_text_counts_as_disk_full(tmp_path):
    def failing(code: int):
        def fail(temp: Path) -> None:
            raise RuntimeError(f"Error while serializing: I/O error: {os.strerror(code)} (os error {code})")
        return fail

    with pytest.raises(DiskFullError, match="out of disk space"):
        atomic_write(tmp_path / "w.safetensors", failing(errno.ENOSPC))
    with pytest.raises(RuntimeError, match="os error 13"):  # permission denied stays what it is
        atomic_write(tmp_path / "w.safetensors", failing(errno.EACCES))
    assert _listing(tmp_path) == []


def test_too_big_for_the_free_space_fails_before_writing(tmp_path, monkeypatch):
    monkeypatch.setattr(atomic_files, "free_bytes", lambda folder: 1000)
    with pytest.raises(DiskFullError, match=r"needs 2\.0 KiB, 1000 bytes free"):
        atomic_write_bytes(tmp_path / "x.bin", b"z" * 2000)
    assert _listing(tmp_path) == []


@pytest.fixture
def small_filesystem(tmp_path):
    """A 1 MiB tmpfs (needs root on Linux; skipped elsewhere: the injected tests cover the logic)."""
    mount = tmp_path / "small"
    mount.mkdir()
    if sys.platform != "linux" or os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root on Linux")
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


@pytest.mark.reliability(area=AREA, case="disk full while writing a file, on a real 1 MiB filesystem",
                         behaviour="DiskFullError naming the folder and the space needed; the filesystem holds only "
                                   "the complete files written before")
def test_real_disk_full(small_filesystem):
    atomic_write_bytes(small_filesystem / "small.bin", b"a" * 1000)

    def stream(temp: Path) -> None:  # a writer that does not know its size up front
        with open(temp, "wb") as f:
            for _ in range(64):
                f.write(b"b" * (64 << 10))

    with pytest.raises(DiskFullError, match=str(small_filesystem)):
        atomic_write(small_filesystem / "big.bin", stream)
    with pytest.raises(DiskFullError, match="needs 4.0 MiB"):
        atomic_write_bytes(small_filesystem / "big.bin", b"c" * (4 << 20))
    with pytest.raises(DiskFullError, match="big.safetensors"):  # safetensors' own (Rust) I/O error
        atomic_write(small_filesystem / "big.safetensors",
                     lambda temp: save_file({"w": torch.zeros(1 << 20)}, str(temp)))
    assert _listing(small_filesystem) == ["small.bin"]
    assert (small_filesystem / "small.bin").read_bytes() == b"a" * 1000


class _RecordedRanges:
    """Stands in for glibc's sync_file_range: records each call's file and arguments."""

    def __init__(self, result: int = 0) -> None:
        self.calls: list[tuple[int, int, int, int]] = []
        self.result = result

    def __call__(self, fd: int, offset: int, nbytes: int, flags: int) -> int:
        self.calls.append((os.fstat(fd).st_ino, offset, nbytes, flags))
        return self.result


def test_writeback_starts_the_writes_every_so_many_bytes(tmp_path, monkeypatch):
    recorded = _RecordedRanges()
    monkeypatch.setattr(atomic_files, "_sync_file_range", lambda: recorded)
    path = tmp_path / "growing.bin"
    writeback = atomic_files.Writeback(path, every=1000)
    with open(path, "wb") as out:
        for size in range(300, 3301, 300):
            out.write(b"x" * 300)
            out.flush()
            writeback.grown(size)
    inode = path.stat().st_ino
    # Started at 1200 (the first size >= 1000) and 2400 (the first >= 1000 bytes later; 3300 is
    # only 900 more), always for the whole file, without waiting (SYNC_FILE_RANGE_WRITE alone).
    assert recorded.calls == [(inode, 0, 0, 2)] * 2
    assert writeback._started == 2400
    assert writeback._fd is not None
    writeback.close()
    assert writeback._fd is None
    writeback.close()  # twice is harmless


def test_writeback_that_fails_stops_trying_and_the_file_still_publishes(tmp_path, monkeypatch):
    recorded = _RecordedRanges(result=-1)
    monkeypatch.setattr(atomic_files, "_sync_file_range", lambda: recorded)
    temp = temp_sibling(tmp_path / "clip.mp4", suffix=".part.mp4")
    temp.write_bytes(b"y" * 5000)
    writeback = atomic_files.Writeback(temp, every=1000)
    writeback.grown(2000)
    writeback.grown(4000)
    assert len(recorded.calls) == 1  # refused once: the final sync alone makes the file durable
    writeback.close()
    publish(temp, tmp_path / "clip.mp4")
    assert (tmp_path / "clip.mp4").read_bytes() == b"y" * 5000


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sync_file_range is Linux's")
def test_writeback_runs_the_real_call_on_linux(tmp_path):
    path = tmp_path / "real.bin"
    path.write_bytes(os.urandom(3 << 20))
    writeback = atomic_files.Writeback(path, every=1 << 20)
    assert writeback._call is not None
    writeback.grown(3 << 20)
    assert writeback._call is not None and writeback._started == 3 << 20  # the kernel accepted it
    writeback.close()
