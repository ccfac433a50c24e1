"""ditto_core.triton_key: Triton's installation key from the user's cache, recomputed whenever
a file of the Triton package changes, refused when damaged, and installed where Triton reads it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from ditto_core.triton_key import cached_key, keep_triton_key, package_fingerprint


def test_the_key_is_computed_once_then_read_while_the_package_is_unchanged(tmp_path):
    package = tmp_path / "triton"
    (package / "_C").mkdir(parents=True)
    (package / "_C" / "libtriton.so").write_bytes(b"\0" * 1000)
    (package / "compiler.py").write_text("x = 1\n")
    entry = tmp_path / "cache" / "triton_key.json"
    computed = []

    def compute():
        computed.append(1)
        return f"key-{len(computed)}"

    def key():
        return cached_key(compute, lambda: package_fingerprint(package, "3.6.0"), entry)

    assert key() == "key-1" and key() == "key-1" and len(computed) == 1  # the second read the file
    # A changed file (a reinstall, an edit): size or modification time differ -> computed again.
    (package / "compiler.py").write_text("x = 22\n")
    assert key() == "key-2"
    later = time.time_ns() + 5_000_000_000
    os.utime(package / "_C" / "libtriton.so", ns=(later, later))  # same size, newer
    assert key() == "key-3"
    (package / "backend.py").write_text("")  # a file more
    assert key() == "key-4"
    assert key() == "key-4" and len(computed) == 4
    # Another Triton version over the same files is another fingerprint.
    assert cached_key(compute, lambda: package_fingerprint(package, "3.7.0"), entry) == "key-5"


@pytest.mark.parametrize("damage", [b"", b"{not json", b'{"fingerprint": 3}', b"[1, 2]", b'{"key": null}'])
def test_a_damaged_entry_is_computed_again_and_rewritten(tmp_path, damage):
    package = tmp_path / "triton"
    package.mkdir()
    (package / "a.py").write_text("")
    entry = tmp_path / "triton_key.json"
    entry.write_bytes(damage)
    fingerprint = package_fingerprint(package, "1")
    assert cached_key(lambda: "fresh", lambda: fingerprint, entry) == "fresh"
    assert json.loads(entry.read_text()) == {"fingerprint": fingerprint, "key": "fresh"}


def test_an_unwritable_cache_still_gives_the_key(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    entry = blocker / "triton_key.json"  # its folder cannot be made: a file is in the way
    assert cached_key(lambda: "k", lambda: "f", entry) == "k"


def test_keep_triton_key_replaces_what_triton_calls_with_the_same_key(tmp_path):
    """In a fresh interpreter: the key Triton's cache uses is its own, computed once and then
    read from the cache file by the next process, without hashing libtriton again."""
    pytest.importorskip("triton.runtime.cache")
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from triton.runtime import cache\n"
        "real, calls = cache.triton_key, []\n"
        "cache.triton_key = lambda: calls.append(1) or real()  # counts Triton's own computations\n"
        "from ditto_core.triton_key import keep_triton_key\n"
        "assert keep_triton_key(Path(sys.argv[1])) and keep_triton_key(Path(sys.argv[1]))\n"
        "assert cache.triton_key.kept_by_ditto\n"
        "key = cache.triton_key()\n"
        "assert key == cache.get_cache_key.__globals__['triton_key']() == real(), 'not Triton\\'s own key'\n"
        "print(len(calls))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}

    def computations() -> int:
        done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, env=env)
        assert done.returncode == 0, done.stderr
        return int(done.stdout.strip().splitlines()[-1])

    assert computations() == 1  # the first process computes it (and stores it)
    stored = json.loads((tmp_path / "triton_key.json").read_text())
    assert stored["key"].startswith(__import__("triton").__version__)
    assert computations() == 0  # the next reads it; get_cache_key (what compiles use) sees the kept one


def test_without_triton_nothing_is_replaced(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_triton(name, *args, **kwargs):
        if name == "triton" or name.startswith("triton."):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_triton)
    assert keep_triton_key() is False
