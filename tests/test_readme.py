"""The README's first commands work from a plain clone, and what it links to exists."""
import re
import shlex
from pathlib import Path

import pytest

from ditto_core import __main__ as cli

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")


def _opening_commands() -> list[str]:
    head = README.split("```bash\n", 1)
    assert head[0].strip() == "# ComfyUI-Ditto", "the README must open with its commands"
    block = head[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line and not line.startswith("#")]


def test_opening_commands_use_only_files_of_the_clone(monkeypatch):
    setup, tests = _opening_commands()
    assert "../shared" not in setup + tests and "requirements-test.txt" in tests and "pytest" in tests
    # The render follows the download with ";": offline, it still runs and names every missing file.
    steps = [step.strip() for part in setup.split("&&") for step in part.split(";")]
    monkeypatch.chdir(REPO)
    parsed = [cli.build_parser().parse_args(shlex.split(step)[3:]) for step in steps
              if step.startswith("python -m ditto_core ")]
    # The render reads the sample inputs shipped in the repository (argparse checks they exist).
    assert [args.command for args in parsed] == ["download", "render"]
    render = parsed[1]
    assert render.image.is_file() and render.audio.is_file()
    assert parsed[0].models == render.models


@pytest.mark.parametrize("target", sorted(set(re.findall(r"\]\(((?:docs|example_workflows|bench)/[^)#]+)\)", README))))
def test_linked_files_exist(target):
    assert (REPO / target).is_file(), target
