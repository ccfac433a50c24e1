"""The Reliability table (docs/RELIABILITY.md), generated from the tests that prove it.

Every hardening test carries ``@pytest.mark.reliability(area=..., case=..., behaviour=...)``
(directly or through a small helper returning that marker). This module asks pytest itself
which collected tests carry it -- collection only, nothing runs -- and renders them as a
Markdown table, one row per case (parametrised cases with their own markers get a row each)::

    python -m tests.reliability_table            # print the table
    python -m tests.reliability_table --write    # rewrite the block in docs/RELIABILITY.md in place
    python -m tests.reliability_table --check    # exit 1 when that block is stale
    python -m tests.reliability_table --json     # the rows, for tests/test_reliability_table.py

Only files that mention the marker are collected, so a run takes a few seconds. Only the
text between ``<!-- reliability:start -->`` and ``<!-- reliability:end -->`` is ever touched.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional

TESTS_DIR = Path(__file__).resolve().parent
REPO = TESTS_DIR.parent
TABLE_DOC = REPO / "docs" / "RELIABILITY.md"
START, END = "<!-- reliability:start -->", "<!-- reliability:end -->"
MARKER = "reliability"
FIELDS = ("area", "case", "behaviour")
AREA_ORDER = ("Images", "Audio", "Models", "Options", "Safety", "Soak and faults")
"""Areas in the order of issue 7; any other area follows, alphabetically."""
COMMAND = "python -m tests.reliability_table --write"


class MarkerError(ValueError):
    """A reliability marker the table cannot be built from."""


@dataclass(frozen=True)
class Row:
    """One marked test function: what it covers and where it lives."""

    area: str
    case: str
    behaviour: str
    test: str  # pytest node id without parameters, e.g. ``tests/test_x.py::test_y``
    line: int

    @property
    def file(self) -> str:
        return self.test.split("::")[0]


def make_row(args: tuple, kwargs: Mapping[str, Any], test: str, line: int) -> Row:
    """A row from one marker's arguments; :class:`MarkerError` names the test when they are unusable."""
    if args:
        raise MarkerError(f"{test}: pass the reliability marker's fields by keyword ({', '.join(FIELDS)})")
    unknown = sorted(set(kwargs) - set(FIELDS))
    if unknown:
        raise MarkerError(f"{test}: unknown reliability field(s) {unknown}; use {', '.join(FIELDS)}")
    missing = [name for name in FIELDS if not (isinstance(kwargs.get(name), str) and kwargs[name].strip())]
    if missing:
        raise MarkerError(f"{test}: reliability marker lacks a text for {', '.join(missing)}")
    # One table line per test whatever the source formatting.
    return Row(**{name: " ".join(kwargs[name].split()) for name in FIELDS}, test=test, line=line)


class _Collector:
    """pytest plugin: records the reliability marker of every collected test function."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str, str], Row] = {}
        self.errors: list[str] = []

    def pytest_collection_modifyitems(self, items) -> None:
        for item in items:
            marks = list(item.iter_markers(MARKER))
            if not marks:
                continue
            test = item.nodeid.split("[")[0]
            if len(marks) > 1:
                self.errors.append(f"{test}: one reliability marker per test (split the test instead)")
                continue
            try:
                row = make_row(marks[0].args, marks[0].kwargs, test, item.location[1] + 1)
                # Parametrised cases with their own markers (one per widget, say) get a line each.
                self.rows.setdefault((test, row.area, row.case), row)
            except MarkerError as error:
                self.errors.append(str(error))

    def pytest_collectreport(self, report) -> None:
        if report.failed:
            self.errors.append(f"{report.nodeid}: could not be collected:\n{report.longreprtext}")


def marked_files(tests_dir: Path = TESTS_DIR) -> list[Path]:
    """Test files that mention the marker at all (the only ones worth importing)."""
    return [p for p in sorted(tests_dir.rglob("test_*.py")) if f"{MARKER}(" in p.read_text(encoding="utf-8")]


def collect(tests_dir: Path = TESTS_DIR) -> list[Row]:
    """All marked tests under ``tests_dir``, ordered by area, then file, then position."""
    import pytest

    collector = _Collector()
    files = [str(p) for p in marked_files(tests_dir)]
    if files:
        log = io.StringIO()
        with contextlib.redirect_stdout(log):  # pytest's own listing would bury the table
            # Definition order (no pytest-randomly shuffle): parametrised rows share a line and keep it.
            code = pytest.main(["--collect-only", "-qq", "-p", "no:cacheprovider", "-p", "no:randomly",
                                "--rootdir", str(tests_dir.parent), *files], plugins=[collector])
        if collector.errors or code not in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            raise MarkerError("\n".join(collector.errors) or f"pytest collection failed ({code}):\n{log.getvalue()}")
    return order(collector.rows.values())


def order(rows: Iterable[Row]) -> list[Row]:
    def key(row: Row) -> tuple:
        known = row.area in AREA_ORDER
        return (not known, AREA_ORDER.index(row.area) if known else 0, row.area, row.file, row.line)

    return sorted(rows, key=key)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render(rows: Iterable[Row]) -> str:
    """The Markdown table, one line per case, ending with a newline."""
    lines = ["| area | case | behaviour | test |", "| --- | --- | --- | --- |"]
    lines += [f"| {_cell(r.area)} | {_cell(r.case)} | {_cell(r.behaviour)} | `{r.test}` |" for r in rows]
    return "\n".join(lines) + "\n"


def block(rows: Iterable[Row]) -> str:
    """What belongs between the markers (markers excluded)."""
    rows = list(rows)
    note = (f"Generated from the {len(rows)} cases marked `@pytest.mark.reliability` by `{COMMAND}`; "
            "do not edit by hand.\n\n")
    return note + render(rows)


def replace_block(text: str, new_block: str) -> str:
    """``text`` with the content between the markers replaced by ``new_block``."""
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        raise MarkerError(f"{TABLE_DOC.name} needs a '{START}' line followed by a '{END}' line")
    head = text[: start + len(START)]
    return f"{head}\n{new_block}{text[end:]}"


def current_block(text: str) -> Optional[str]:
    """The block as it stands, or None without markers."""
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        return None
    return text[start + len(START): end].removeprefix("\n")


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.reliability_table", description=__doc__.splitlines()[0])
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--write", action="store_true", help="rewrite the Reliability block of docs/RELIABILITY.md")
    action.add_argument("--check", action="store_true", help="exit 1 when that block is stale")
    action.add_argument("--json", action="store_true", help="print the rows as JSON (for the tests)")
    args = parser.parse_args(argv)
    rows = collect()
    expected = block(rows)
    if args.write:
        TABLE_DOC.write_text(replace_block(TABLE_DOC.read_text(encoding="utf-8"), expected), encoding="utf-8")
        print(f"wrote {len(rows)} rows to {TABLE_DOC}")
    elif args.check:
        if current_block(TABLE_DOC.read_text(encoding="utf-8")) != expected:
            print(f"{TABLE_DOC.name}'s table is stale; run `{COMMAND}`", file=sys.stderr)
            return 1
    elif args.json:
        print(json.dumps([asdict(row) for row in rows]))
    else:
        print(render(rows), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
