"""``bench.kit_checkpoints``: the parity kit's script run for the tests and benchmarks, whose
status 3 (every file written, a digest differing on another CPU's LAPACK) is not a failure."""
from __future__ import annotations

import textwrap

import pytest

from bench.kit_checkpoints import OFFICIAL_FILES, write_kit_checkpoints


def _script(tmp_path, status: int, files=OFFICIAL_FILES, message: str = ""):
    script = tmp_path / "make_checkpoints.py"
    script.write_text(textwrap.dedent(f"""
        import sys, pathlib
        out = pathlib.Path(sys.argv[sys.argv.index("--out") + 1])
        assert sys.argv[sys.argv.index("--seed") + 1] == "0"
        out.mkdir(parents=True, exist_ok=True)
        for name in {list(files)!r}:
            (out / name).write_bytes(b"w")
        print({message!r}, file=sys.stderr)
        sys.exit({status})
    """))
    return script


def test_written_files_are_used_whatever_their_digests(tmp_path):
    assert write_kit_checkpoints(_script(tmp_path, 0), tmp_path / "a") == ""
    assert write_kit_checkpoints(_script(tmp_path, 3, message="decoder.pth: digest differs"), tmp_path / "b") \
        == "decoder.pth: digest differs"
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == sorted(OFFICIAL_FILES)


@pytest.mark.parametrize("status, files", [(1, OFFICIAL_FILES), (3, OFFICIAL_FILES[:-1]), (0, OFFICIAL_FILES[1:])])
def test_a_failed_or_partial_run_is_refused_with_the_scripts_words(tmp_path, status, files):
    with pytest.raises(RuntimeError, match=rf"make_checkpoints.py failed \(status {status}\): boom"):
        write_kit_checkpoints(_script(tmp_path, status, files, message="boom"), tmp_path / "out")
