"""The README's Reliability table, generated from the tests that prove it.

Every hardening test carries ``@pytest.mark.reliability(area=..., case=..., behaviour=...)``.
This module finds those markers by parsing the test files (no test module is imported, so it
runs in well under a second and cannot be broken by a test's import-time side effects) and
renders them as a Markdown table::

    python -m tests.reliability_table            # print the table
    python -m tests.reliability_table --write    # rewrite the README block in place
    python -m tests.reliability_table --check    # exit 1 when the README block is stale

Only the text between ``<!-- reliability:start -->`` and ``<!-- reliability:end -->`` is
ever touched.
"""
from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Optional

TESTS_DIR = Path(__file__).resolve().parent
README = TESTS_DIR.parent / "README.md"
START, END = "<!-- reliability:start -->", "<!-- reliability:end -->"
FIELDS = ("area", "case", "behaviour")
AREA_ORDER = ("Images", "Audio", "Models", "Options", "Safety", "Soak and faults")
"""Areas in the order of issue 7; any other area follows, alphabetically."""
COMMAND = "python -m tests.reliability_table --write"


class MarkerError(ValueError):
    """A reliability marker the table cannot be built from."""


@dataclass(frozen=True)
class Row:
    """One marked test: what it covers and where it lives."""

    area: str
    case: str
    behaviour: str
    file: str  # relative to the repository root, posix form
    test: str  # function name, ``Class::method`` inside a class
    line: int

    @property
    def node_id(self) -> str:
        return f"{self.file}::{self.test}"


def _is_reliability_marker(node: ast.expr) -> bool:
    """``pytest.mark.reliability(...)`` or ``mark.reliability(...)``."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "reliability" and isinstance(node.func.value, ast.Attribute)
            and node.func.value.attr == "mark")


def _marker_fields(call: ast.Call, where: str) -> dict[str, str]:
    if call.args:
        raise MarkerError(f"{where}: pass the reliability marker's fields by keyword ({', '.join(FIELDS)})")
    fields = {}
    for keyword in call.keywords:
        if keyword.arg not in FIELDS:
            raise MarkerError(f"{where}: unknown reliability field {keyword.arg!r}; use {', '.join(FIELDS)}")
        if not (isinstance(keyword.value, ast.Constant) and isinstance(keyword.value.value, str)):
            raise MarkerError(f"{where}: reliability field {keyword.arg!r} must be a string literal "
                              "(the table is built without importing the tests)")
        fields[keyword.arg] = " ".join(keyword.value.value.split())
    missing = [name for name in FIELDS if not fields.get(name)]
    if missing:
        raise MarkerError(f"{where}: reliability marker lacks {', '.join(missing)}")
    return fields


def _tests(body: Iterable[ast.stmt], prefix: str = "") -> Iterator[tuple[str, ast.FunctionDef]]:
    """``(name, function)`` of every test function, recursing into ``Test*`` classes."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            yield prefix + node.name, node
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            yield from _tests(node.body, f"{prefix}{node.name}::")


def rows_in_file(path: Path, root: Path) -> list[Row]:
    """Every reliability-marked test of one test file."""
    relative = path.relative_to(root).as_posix()
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    rows = []
    for name, function in _tests(tree.body):
        markers = [d for d in function.decorator_list if _is_reliability_marker(d)]
        if len(markers) > 1:
            raise MarkerError(f"{relative}::{name}: one reliability marker per test (split the test instead)")
        if markers:
            fields = _marker_fields(markers[0], f"{relative}::{name}")
            rows.append(Row(**fields, file=relative, test=name, line=function.lineno))
    return rows


def collect(tests_dir: Path = TESTS_DIR) -> list[Row]:
    """All marked tests under ``tests_dir``, ordered by area, then file, then position."""
    root = tests_dir.parent
    rows = [row for path in sorted(tests_dir.rglob("test_*.py")) for row in rows_in_file(path, root)]

    def order(row: Row) -> tuple:
        known = row.area in AREA_ORDER
        return (not known, AREA_ORDER.index(row.area) if known else 0, row.area, row.file, row.line)

    return sorted(rows, key=order)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render(rows: Iterable[Row]) -> str:
    """The Markdown table, one line per test, ending with a newline."""
    lines = ["| area | case | behaviour | test |", "| --- | --- | --- | --- |"]
    lines += [f"| {_cell(r.area)} | {_cell(r.case)} | {_cell(r.behaviour)} | `{r.node_id}` |" for r in rows]
    return "\n".join(lines) + "\n"


def block(rows: Iterable[Row]) -> str:
    """What belongs between the README markers (markers excluded)."""
    rows = list(rows)
    note = (f"Generated from the {len(rows)} tests marked `@pytest.mark.reliability` by `{COMMAND}`; "
            "do not edit by hand.\n\n")
    return note + render(rows)


def replace_block(text: str, new_block: str) -> str:
    """``text`` with the content between the markers replaced by ``new_block``."""
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        raise MarkerError(f"README.md needs a '{START}' line followed by a '{END}' line")
    head = text[: start + len(START)]
    return f"{head}\n{new_block}{text[end:]}"


def current_block(text: str) -> Optional[str]:
    """The README's block as it stands, or None without markers."""
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        return None
    return text[start + len(START): end].removeprefix("\n")


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.reliability_table", description=__doc__.splitlines()[0])
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--write", action="store_true", help="rewrite the Reliability block of README.md")
    action.add_argument("--check", action="store_true", help="exit 1 when the README block is stale")
    args = parser.parse_args(argv)
    expected = block(collect())
    if args.write:
        README.write_text(replace_block(README.read_text(encoding="utf-8"), expected), encoding="utf-8")
        print(f"wrote {expected.count(chr(10)) - 4} rows to {README}")
    elif args.check:
        if current_block(README.read_text(encoding="utf-8")) != expected:
            print(f"README.md's Reliability table is stale; run `{COMMAND}`", file=sys.stderr)
            return 1
    else:
        print(render(collect()), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
