"""The Reliability table (docs/RELIABILITY.md) is generated from the marked tests, and stays in step with them."""
from __future__ import annotations

import ast
import json
import subprocess
import sys

import pytest

from tests import reliability_table as table


@pytest.fixture(scope="module")
def rows() -> list[table.Row]:
    """The marked tests as the generator sees them (collected by pytest in a separate process,
    so this session's imports and plugins cannot influence the result)."""
    done = subprocess.run([sys.executable, "-m", "tests.reliability_table", "--json"], cwd=table.REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    return [table.Row(**row) for row in json.loads(done.stdout)]


def test_reliability_doc_matches_the_marked_tests(rows):
    doc = table.TABLE_DOC.read_text(encoding="utf-8")
    assert table.current_block(doc) == table.block(rows), (
        f"docs/RELIABILITY.md's table is stale (a reliability-marked test was added, changed or removed); "
        f"run `{table.COMMAND}` and commit docs/RELIABILITY.md"
    )


def _test_functions(tree: ast.Module) -> list[str]:
    names = [node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test")]
    for cls in (node for node in tree.body if isinstance(node, ast.ClassDef) and node.name.startswith("Test")):
        names += [f"{cls.name}::{node.name}" for node in cls.body
                  if isinstance(node, ast.FunctionDef) and node.name.startswith("test")]
    return names


def test_every_hardening_test_is_in_the_table(rows):
    """A hardening test without a marker would silently drop out of the table."""
    marked = {row.test for row in rows}
    unmarked = []
    for path in sorted(table.TESTS_DIR.glob("test_hardening_*.py")):
        relative = path.relative_to(table.REPO).as_posix()
        names = _test_functions(ast.parse(path.read_text(encoding="utf-8")))
        unmarked += [f"{relative}::{name}" for name in names if f"{relative}::{name}" not in marked]
    assert not unmarked, f"hardening tests without @pytest.mark.reliability(area=, case=, behaviour=): {unmarked}"
    assert len(rows) >= 20 and {row.area for row in rows} >= {"Models", "Safety", "Soak and faults"}


def test_rows_are_ordered_by_area_and_escape_pipes():
    late = table.make_row((), {"area": "Safety", "case": "a | b", "behaviour": "refused"}, "tests/test_b.py::t", 5)
    early = table.make_row((), {"area": "Images", "case": "grey", "behaviour": "converted  to\n RGB"},
                           "tests/test_z.py::t", 9)
    other = table.make_row((), {"area": "Zebra", "case": "c", "behaviour": "d"}, "tests/test_a.py::t", 1)
    assert table.order([other, late, early]) == [early, late, other]
    assert early.behaviour == "converted to RGB"  # whitespace normalised: one table line per test
    assert "| Safety | a \\| b | refused | `tests/test_b.py::t` |" in table.render([late])


@pytest.mark.parametrize("args, kwargs, problem", [
    (("Images", "x", "y"), {}, "by keyword"),
    ((), {"area": "Images", "case": "x"}, "lacks a text for behaviour"),
    ((), {"area": "Images", "case": " ", "behaviour": "y"}, "lacks a text for case"),
    ((), {"area": "Images", "case": "x", "behaviour": "y", "behavior": "y"}, "unknown reliability field"),
])
def test_malformed_markers_are_refused(args, kwargs, problem):
    with pytest.raises(table.MarkerError, match=problem):
        table.make_row(args, kwargs, "tests/test_x.py::test_a", 1)


def test_write_touches_only_the_marked_block():
    text = f"# T\n\nbefore\n{table.START}\nold rows\n{table.END}\nafter\n"
    new = table.replace_block(text, "new rows\n")
    assert new == f"# T\n\nbefore\n{table.START}\nnew rows\n{table.END}\nafter\n"
    assert table.current_block(new) == "new rows\n"
    with pytest.raises(table.MarkerError, match="reliability:start"):
        table.replace_block("# no markers\n", "x")
