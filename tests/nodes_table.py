"""The README's nodes table, generated from the nodes' own schemas.

The pack is loaded as ComfyUI loads it (against the stand-ins in ``tests/comfy_stubs`` when
ComfyUI is absent) and each node's schema becomes one row: its title, the sockets it takes
(with their types), its widgets, and what it returns::

    python -m tests.nodes_table            # print the table
    python -m tests.nodes_table --write    # rewrite the README block in place

``tests/test_nodes_table.py`` fails while the README's block differs from the schemas. Only the
text between ``<!-- nodes:start -->`` and ``<!-- nodes:end -->`` is ever touched.
"""
from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Optional

from tests.comfy_stubs import load_pack

README = Path(__file__).resolve().parents[1] / "README.md"
START, END = "<!-- nodes:start -->", "<!-- nodes:end -->"
COMMAND = "python -m tests.nodes_table --write"


def schemas() -> list:
    pack = load_pack()
    from comfy_api.latest import io

    nodes = asyncio.run(asyncio.run(pack.comfy_entrypoint()).get_node_list())
    return [(node.GET_SCHEMA(), io.WidgetInput) for node in nodes]


def _row(schema, widget_class) -> str:
    sockets = [f"{i.id} `{i.io_type}`" + (" (optional)" if i.optional else "")
               for i in schema.inputs if not isinstance(i, widget_class)]
    widgets = [i.id for i in schema.inputs if isinstance(i, widget_class)]
    outputs = [f"{o.display_name or o.id or str(o.io_type).lower()} `{o.io_type}`" for o in schema.outputs]
    takes = "; ".join(filter(None, [", ".join(sockets), widgets and f"widgets: {', '.join(widgets)}"]))
    return f"| **{schema.display_name}** | {takes or '-'} | {', '.join(outputs) or '-'} |"


def render() -> str:
    lines = ["| node | inputs | outputs |", "| --- | --- | --- |"]
    lines += [_row(schema, widget) for schema, widget in schemas()]
    return "\n".join(lines) + "\n"


def block() -> str:
    return f"Generated from the node schemas by `{COMMAND}`.\n\n" + render()


def replace_block(text: str, new_block: str) -> str:
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"README.md needs a '{START}' line followed by a '{END}' line")
    return f"{text[: start + len(START)]}\n{new_block}{text[end:]}"


def current_block(text: str) -> Optional[str]:
    start, end = text.find(START), text.find(END)
    return None if start < 0 or end < start else text[start + len(START): end].removeprefix("\n")


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.nodes_table", description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the nodes block of README.md")
    args = parser.parse_args(argv)
    if args.write:
        README.write_text(replace_block(README.read_text(encoding="utf-8"), block()), encoding="utf-8")
        print(f"wrote the nodes table to {README}")
    else:
        print(render(), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
